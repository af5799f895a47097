// `rankd score`: the line parser, and the real binary end to end.
#include "score_command.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
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

void ExpectLineError(const std::string& line, const std::string& needle) {
  auto r = ParseScoreLine(line);
  ASSERT_FALSE(r.ok()) << line;
  EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status();
}

TEST(ParseScoreLineTest, AllItemKinds) {
  auto r = ParseScoreLine(
      R"({"query": "q", "items": ["a", {"text": "b"}, {"ids": [1, 2]}, {"embedding": [[0.5, 1], [2, 3]]}],
          "apply_sigmoid": true})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->query, "q");
  ASSERT_EQ(r->items.size(), 4u);
  EXPECT_EQ(r->items[1].text, "b");
  EXPECT_EQ(r->items[2].ids, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(r->items[3].embedding, (std::vector<float>{0.5, 1, 2, 3}));
  EXPECT_TRUE(r->apply_sigmoid);
  auto ids = ParseScoreLine(R"({"query_ids": [1, 5], "items": ["x"]})");
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids->query_ids, (std::vector<int32_t>{1, 5}));
}

// The request-line parser's own cases are in tests/cli; here, what the engine adapter adds.
TEST(ParseScoreLineTest, RefusesModelAndDepthIgnoresServerOnlyFields) {
  ExpectLineError(R"({"query": "q", "items": ["a"], "model": "m"})", "model: rankd score has one");
  ExpectLineError(R"({"query": "q", "items": ["a"], "depth": 1})", "depth: rankd score scores");
  ExpectLineError(R"({"query": "q", "items": ["a"], "truncate": "TRUNCATE_END"})",
                  "truncate: rankd score refuses");
  ExpectLineError(R"({"query": "q", "items": [{"ids": [1, -2]}]})", "items[0].ids[1]");
  auto r = ParseScoreLine(
      R"({"query": "q", "items": [{"text": "a", "id": "x"}, {"tokenIds": {"ids": [3]}}],
          "requestId": "r", "priority": "PRIORITY_BATCH", "depth": 0, "skipCache": true,
          "truncate": "TRUNCATE_NONE"})");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->items.size(), 2u);
  EXPECT_EQ(r->items[0].text, "a");
  EXPECT_EQ(r->items[1].kind, engine::Item::Kind::kIds);
  EXPECT_EQ(r->items[1].ids, (std::vector<int32_t>{3}));
}

TEST(RankdScoreBinaryTest, ReproducesGoldenAndKeepsGoingPastBadLines) {
  const auto g = rankd::testing::LoadGolden("llama-cls");
  const std::string in_path =
      fs::temp_directory_path() / ("rankd_cli_in_" + std::to_string(::getpid()));
  {
    std::ofstream in(in_path);
    Json items = Json::array();
    for (const auto& it : g.cases[0].items) items.push_back(it.text);
    in << Json{{"query", g.cases[0].query}, {"items", items}}.dump() << "\n";
    in << R"({"query": "q", "items": [{"ids": [99999]}]})"
       << "\n";  // bad: out of vocab
    in << "not json\n";
    Json emb = Json::array();
    for (const auto& it : g.embedding_cases[0].items) {
      Json rows = Json::array();
      for (size_t r = 0; r < it.embedding.size() / 64; ++r) {
        rows.push_back(
            std::vector<float>(it.embedding.begin() + r * 64, it.embedding.begin() + (r + 1) * 64));
      }
      emb.push_back({{"embedding", rows}});
    }
    in << Json{{"query_ids", g.embedding_cases[0].prefix_ids}, {"items", emb}}.dump() << "\n";
  }
  auto r = RunRankd("score --model " + g.model_dir + " --input " + in_path + " --threads 1");
  fs::remove(in_path);
  EXPECT_EQ(r.exit_code, 1);  // some lines failed
  std::istringstream lines(r.out);
  std::vector<Json> out;
  for (std::string l; std::getline(lines, l);) out.push_back(Json::parse(l));
  ASSERT_EQ(out.size(), 4u) << r.out;
  ASSERT_TRUE(out[0].contains("scores"));
  for (size_t i = 0; i < g.cases[0].items.size(); ++i) {
    EXPECT_PRED2(rankd::testing::WithinF32Tolerance, out[0]["scores"][i].get<double>(),
                 g.cases[0].items[i].score);
  }
  EXPECT_NE(out[1]["error"].get<std::string>().find("items[0].ids[0]: 99999 is outside"),
            std::string::npos);
  EXPECT_EQ(out[2]["error"], "not valid JSON");
  for (size_t i = 0; i < g.embedding_cases[0].items.size(); ++i) {
    EXPECT_PRED2(rankd::testing::WithinF32Tolerance, out[3]["scores"][i].get<double>(),
                 g.embedding_cases[0].items[i].score);
  }
}

// --jobs N scores N lines together: the same output lines, in input order, bad lines answered in
// their place; --progress forces the progress line (stderr is not a terminal here), and the
// summary comes either way.
TEST(RankdScoreBinaryTest, JobsKeepTheOutputAndProgressAndSummaryGoToStderr) {
  const auto g = rankd::testing::LoadGolden("llama-cls");
  const std::string in_path =
      fs::temp_directory_path() / ("rankd_cli_jobs_" + std::to_string(::getpid()));
  int64_t items = 0;
  {
    std::ofstream in(in_path);
    for (size_t c = 0; c < g.cases.size(); ++c) {
      Json texts = Json::array();
      for (const auto& it : g.cases[c].items) texts.push_back(it.text);
      items += static_cast<int64_t>(texts.size());
      in << Json{{"query", g.cases[c].query}, {"items", texts}}.dump() << "\n";
      if (c == 1) in << "not json\n";
      if (c == 2) in << "\n";
    }
  }
  const std::string model = " --model " + g.model_dir + " --input " + in_path + " --threads 1";
  RunResult one = RunRankd("score" + model + " --jobs 1 --no-progress");
  RunResult four = RunRankd("score" + model + " --jobs 4 --progress");
  fs::remove(in_path);
  EXPECT_EQ(one.exit_code, 1);
  EXPECT_EQ(four.exit_code, 1);
  auto parse_lines = [](const std::string& text) {
    std::vector<Json> lines;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) lines.push_back(Json::parse(line));
    return lines;
  };
  const std::vector<Json> a = parse_lines(one.out), b = parse_lines(four.out);
  ASSERT_EQ(a.size(), g.cases.size() + 2);
  ASSERT_EQ(b.size(), a.size());
  size_t c = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    if (i == 2 || i == 4) {  // the bad lines, in their place
      EXPECT_EQ(b[i], a[i]);
      EXPECT_TRUE(b[i].contains("error")) << b[i];
      continue;
    }
    ASSERT_TRUE(b[i].contains("scores")) << b[i];
    ASSERT_EQ(b[i]["scores"].size(), g.cases[c].items.size());
    for (size_t j = 0; j < g.cases[c].items.size(); ++j) {
      EXPECT_PRED2(rankd::testing::WithinF32Tolerance, b[i]["scores"][j].get<double>(),
                   g.cases[c].items[j].score);
    }
    ++c;
  }
  const std::string summary =
      absl::StrCat("done: ", a.size(), " lines, ", items, " items, 2 errors");
  EXPECT_NE(one.err.find(summary), std::string::npos) << one.err;
  EXPECT_NE(four.err.find(summary), std::string::npos) << four.err;
  EXPECT_EQ(one.err.find("ETA"), std::string::npos) << one.err;
  EXPECT_NE(four.err.find(absl::StrCat("100% ", a.size(), " lines, ", items, " items, ")),
            std::string::npos)
      << four.err;
  EXPECT_NE(four.err.find("items/s, 2 failed, ETA 0s"), std::string::npos) << four.err;
  EXPECT_EQ(RunRankd("score" + model + " --jobs 0").exit_code, 2);
  EXPECT_EQ(RunRankd("score" + model + " --jobs 257").exit_code, 2);
}

// Items' ids come back beside their scores, in order ("" for an item without one), as the
// server echoes them; a line without any id keeps the plain {"scores"} line.
TEST(RankdScoreBinaryTest, KeepsTheItemsIds) {
  const auto g = rankd::testing::LoadGolden("llama-cls");
  const std::string in_path =
      fs::temp_directory_path() / ("rankd_cli_ids_" + std::to_string(::getpid()));
  {
    std::ofstream in(in_path);
    in << R"({"query": "q", "items": [{"text": "a", "id": "first"}, "b", {"ids": [5], "id": "x\u00e9"}]})"
       << "\n";
    in << R"({"query": "q", "items": ["a", "b"]})"
       << "\n";
  }
  auto r = RunRankd("score --model " + g.model_dir + " --input " + in_path + " --threads 1");
  fs::remove(in_path);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::istringstream lines(r.out);
  std::vector<Json> out;
  for (std::string l; std::getline(lines, l);) out.push_back(Json::parse(l));
  ASSERT_EQ(out.size(), 2u) << r.out;
  EXPECT_EQ(out[0]["ids"], Json::array({"first", "", "x\u00e9"})) << r.out;
  EXPECT_EQ(out[0]["scores"].size(), 3u);
  EXPECT_FALSE(out[1].contains("ids")) << r.out;
  EXPECT_EQ(out[1]["scores"].size(), 2u);
}

TEST(RankdScoreBinaryTest, FlagErrors) {
  EXPECT_EQ(RunRankd("score --modle x").exit_code, 2);
  EXPECT_EQ(RunRankd("score").exit_code, 2);  // --model is required
  EXPECT_EQ(RunRankd("score --help").exit_code, 0);
  EXPECT_EQ(RunRankd("frobnicate").exit_code, 2);
  const std::string model = rankd::testing::ModelDir("llama-cls");
  EXPECT_EQ(RunRankd("score --model " + model + " --head yes_no:4,5 --input /dev/null").exit_code,
            1);
  EXPECT_EQ(RunRankd("score --model " + model + " --backend tpu --input /dev/null").exit_code, 1);
  EXPECT_EQ(RunRankd("score --model " + model + " --input /dev/null").exit_code, 0);
}

}  // namespace
}  // namespace rankd::cli
