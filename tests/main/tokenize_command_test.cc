// `rankd tokenize`: the line parser, and the real binary end to end (golden ids in every mode,
// bad and hostile lines answered in order, usage errors).
#include "tokenize_command.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "tests/common/golden.h"
#include "tests/main/run_rankd.h"

namespace rankd::cli {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

TEST(ParseTokenizeLineTest, StringsAndTextObjects) {
  EXPECT_EQ(*ParseTokenizeLine(R"("a job")"), "a job");
  EXPECT_EQ(*ParseTokenizeLine(R"({"text": "caf\u00e9"})"), "caf\xc3\xa9");
  const auto error = [](const std::string& line) {
    auto r = ParseTokenizeLine(line);
    EXPECT_FALSE(r.ok()) << line;
    return std::string(r.status().message());
  };
  EXPECT_EQ(error("5"), "must be a JSON string or an object {\"text\": string}");
  EXPECT_EQ(error(R"(["a"])"), "must be a JSON string or an object {\"text\": string}");
  EXPECT_EQ(error(R"({"text": 5})"), "text: required, a string");
  EXPECT_EQ(error(R"({})"), "text: required, a string");
  EXPECT_EQ(error(R"({"txt": "a"})"), "\"txt\": unknown member (the object is {\"text\": string})");
  EXPECT_EQ(error(R"("\ud800")"), "not valid JSON");  // a lone surrogate
  EXPECT_EQ(error("\"caf\xc3\""), "not valid JSON");  // raw invalid UTF-8
  EXPECT_EQ(error(R"("a" "b")"), "not valid JSON");
}

// The input file of one run: `lines`, one per line.
std::string WriteInput(const std::vector<std::string>& lines) {
  const std::string path =
      fs::temp_directory_path() / ("rankd_tok_in_" + std::to_string(::getpid()));
  std::ofstream out(path);
  for (const std::string& l : lines) out << l << "\n";
  return path;
}

std::vector<Json> Lines(const std::string& out) {
  std::istringstream in(out);
  std::vector<Json> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(Json::parse(l));
  return lines;
}

std::string ModelFlags(const rankd::testing::Golden& g) {
  // The templates as the shell passes them: single-quoted (they hold no single quote).
  EXPECT_EQ(g.query_template->find('\''), std::string::npos);
  EXPECT_EQ(g.item_template->find('\''), std::string::npos);
  return absl::StrCat(" --model ", g.model_dir, " --query-template '", *g.query_template,
                      "' --item-template '", *g.item_template, "'");
}

TEST(RankdTokenizeBinaryTest, GivesTheGoldenIdsOfQueriesAndItems) {
  const auto g = rankd::testing::LoadGolden("qwen3-reranker-tiny");
  const auto& c = g.cases[3];
  std::vector<std::string> queries = {Json(c.query).dump(), Json{{"text", c.query}}.dump()};
  const std::string in = WriteInput(queries);
  RunResult r = RunRankd("tokenize" + ModelFlags(g) + " --template query --special-tokens < " + in);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::vector<Json> out = Lines(r.out);
  ASSERT_EQ(out.size(), 2u) << r.out;
  for (const Json& line : out) EXPECT_EQ(line["ids"].get<std::vector<int32_t>>(), c.prefix_ids);
  fs::remove(in);

  std::vector<std::string> items;
  for (const auto& it : c.items) items.push_back(Json(it.text).dump());
  const std::string item_in = WriteInput(items);
  r = RunRankd("tokenize" + ModelFlags(g) + " --template item < " + item_in);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  out = Lines(r.out);
  ASSERT_EQ(out.size(), c.items.size()) << r.out;
  for (size_t i = 0; i < c.items.size(); ++i) {
    EXPECT_EQ(out[i]["ids"].get<std::vector<int32_t>>(), c.items[i].ids) << i;
  }
  fs::remove(item_in);
}

TEST(RankdTokenizeBinaryTest, NoTemplateByDefaultAndSpecialTokensOnRequest) {
  // llama-cls (sentencepiece) has a BOS: --special-tokens adds it, the default does not.
  const auto g = rankd::testing::LoadGolden("llama-cls");
  const std::string in = WriteInput({R"("a job")"});
  RunResult plain = RunRankd("tokenize --model " + g.model_dir + " < " + in);
  RunResult special = RunRankd("tokenize --model " + g.model_dir + " --special-tokens < " + in);
  fs::remove(in);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  ASSERT_EQ(special.exit_code, 0) << special.err;
  const auto a = Lines(plain.out).at(0)["ids"].get<std::vector<int32_t>>();
  const auto b = Lines(special.out).at(0)["ids"].get<std::vector<int32_t>>();
  ASSERT_EQ(b.size(), a.size() + 1);
  EXPECT_TRUE(std::equal(a.begin(), a.end(), b.begin() + 1));
}

TEST(RankdTokenizeBinaryTest, BadAndHostileLinesGetErrorsInOrderAndExit1) {
  const auto g = rankd::testing::LoadGolden("llama-cls");
  std::string huge;
  for (int i = 0; i < 200000; ++i) huge += "word ";  // 1 MB on one line
  const std::string in =
      WriteInput({R"("first")", "not json", R"("\udc00 lone")", R"(17)", R"({"text": ["a"]})", "",
                  Json(huge).dump(), R"({"text": "last"})"});
  RunResult r = RunRankd("tokenize --model " + g.model_dir + " < " + in);
  fs::remove(in);
  EXPECT_EQ(r.exit_code, 1);
  std::vector<Json> out = Lines(r.out);
  ASSERT_EQ(out.size(), 8u) << r.out;
  EXPECT_TRUE(out[0].contains("ids"));
  EXPECT_EQ(out[1]["error"], "not valid JSON");
  EXPECT_EQ(out[2]["error"], "not valid JSON");
  EXPECT_EQ(out[3]["error"], "must be a JSON string or an object {\"text\": string}");
  EXPECT_EQ(out[4]["error"], "text: required, a string");
  EXPECT_EQ(out[5]["error"], "empty line");
  ASSERT_TRUE(out[6].contains("ids"));
  EXPECT_GE(out[6]["ids"].size(), 200000u);  // at least a token per word
  EXPECT_TRUE(out[7].contains("ids"));
  EXPECT_NE(r.err.find("line 2: not valid JSON"), std::string::npos) << r.err;
}

TEST(RankdTokenizeBinaryTest, UsageErrorsExit2) {
  const auto g = rankd::testing::LoadGolden("llama-cls");
  RunResult r = RunRankd("tokenize --model " + g.model_dir + " --template item --special-tokens");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("add_special_tokens: items never get special tokens"), std::string::npos)
      << r.err;
  r = RunRankd("tokenize --model " + g.model_dir + " --template Query");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--template: template 'Query' is not one of none, query, item"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(RunRankd("tokenize < /dev/null").exit_code, 2);
  r = RunRankd("tokenize --model /nonexistent < /dev/null");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("cannot load the tokenizer"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace rankd::cli
