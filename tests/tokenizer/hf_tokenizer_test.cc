// The tokenizer.json (byte-level BPE) tokenizer against Hugging Face's own ids: the golden cases of
// every tokenizer.json model in tests/data/models, and hard strings
// (tests/data/tokenizer_cases.json, made by HF tokenizers). Variants of those files (merges as
// strings, tokenizer_config.json flags) and small hand-made files pin down the pipeline's other
// options.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "rankd/tokenizer/tokenizer.h"
#include "tests/common/golden.h"

namespace rankd::tokenizer {
namespace {

using Json = nlohmann::json;
using Ids = std::vector<int32_t>;

Json ReadJson(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  Json j = Json::parse(in, nullptr, /*allow_exceptions=*/false);
  EXPECT_FALSE(j.is_discarded()) << path;
  return j;
}

std::unique_ptr<Tokenizer> Load(const std::string& dir) {
  auto tok = LoadTokenizer(dir);
  EXPECT_TRUE(tok.ok()) << tok.status();
  return tok.ok() ? *std::move(tok) : nullptr;
}

Ids Encode(const Tokenizer& tok, const std::string& text, bool special) {
  auto ids = tok.Encode(text, special);
  EXPECT_TRUE(ids.ok()) << ids.status() << " text: " << text;
  return ids.ok() ? *ids : Ids{};
}

// A fresh model directory holding `tokenizer` (and `config` as tokenizer_config.json).
std::string WriteModelDir(const Json& tokenizer, const std::optional<Json>& config = std::nullopt) {
  std::string tmpl = ::testing::TempDir() + "/hf_tok_XXXXXX";
  EXPECT_NE(mkdtemp(tmpl.data()), nullptr);
  std::ofstream(tmpl + "/tokenizer.json") << tokenizer.dump();
  if (config) std::ofstream(tmpl + "/tokenizer_config.json") << config->dump();
  return tmpl;
}

// tests/data/tokenizer_cases.json, in the data directory that ModelDir uses (RANKD_TEST_DATA_DIR,
// overridable at run time).
std::string CasesPath() {
  // ModelDir("") is "<data>/models/".
  return (std::filesystem::path(testing::ModelDir("")).parent_path().parent_path() /
          "tokenizer_cases.json")
      .string();
}

// Names of the golden models whose tokenizer is a tokenizer.json.
std::vector<std::string> TokenizerJsonModels() {
  std::vector<std::string> out;
  for (const auto& name : testing::GoldenModelNames()) {
    if (std::filesystem::exists(testing::ModelDir(name) + "/tokenizer.json")) out.push_back(name);
  }
  return out;
}

// ---- HF's ids -----------------------------------------------------------------------------------

class GoldenModelTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenModelTest, LoadsAsTokenizerJson) {
  auto tok = Load(testing::ModelDir(GetParam()));
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->kind(), "tokenizer.json");
}

// prefix ids = tok(query_template(query)) with special tokens; item ids = tok(item_template(item))
// without, exactly as golden.json has them.
TEST_P(GoldenModelTest, GoldenCaseIds) {
  const testing::Golden g = testing::LoadGolden(GetParam());
  auto tok = Load(g.model_dir);
  ASSERT_NE(tok, nullptr);
  const std::string qt = g.query_template.value_or("{query}");
  const std::string it = g.item_template.value_or("{item}");
  int items = 0;
  for (const auto& c : g.cases) {
    EXPECT_EQ(Encode(*tok, ApplyTemplate(qt, "query", c.query), true), c.prefix_ids)
        << "query: " << c.query;
    for (const auto& item : c.items) {
      EXPECT_EQ(Encode(*tok, ApplyTemplate(it, "item", item.text), false), item.ids)
          << "item: " << item.text;
      ++items;
    }
  }
  EXPECT_GT(items, 0);
}

// The hard strings of tests/data/tokenizer_cases.json (emoji, ZWJ sequences, CJK, combining marks,
// runs of spaces and newlines, digits, contractions, added tokens in the text).
TEST_P(GoldenModelTest, HardStrings) {
  const std::string path = CasesPath();
  const Json all = ReadJson(path);
  if (!all.contains(GetParam())) GTEST_SKIP() << path << " has no cases for " << GetParam();
  auto tok = Load(testing::ModelDir(GetParam()));
  ASSERT_NE(tok, nullptr);
  const Json& cases = all[GetParam()];
  ASSERT_GT(cases.size(), 0u);
  for (const Json& c : cases) {
    const std::string text = c.at("text").get<std::string>();
    EXPECT_EQ(Encode(*tok, text, true), c.at("with_special").get<Ids>()) << "text: " << text;
    EXPECT_EQ(Encode(*tok, text, false), c.at("without_special").get<Ids>()) << "text: " << text;
  }
}

// EncodeBatch on several threads gives what Encode gives one by one.
TEST_P(GoldenModelTest, ParallelEncodeMatchesSequential) {
  const testing::Golden g = testing::LoadGolden(GetParam());
  auto tok = Load(g.model_dir);
  ASSERT_NE(tok, nullptr);
  std::vector<std::string> texts;
  for (int rep = 0; rep < 8; ++rep) {
    for (const auto& c : g.cases) {
      for (const auto& item : c.items) texts.push_back(item.text + std::to_string(rep));
    }
  }
  auto batch = tok->EncodeBatch(texts, false, 4);
  ASSERT_TRUE(batch.ok()) << batch.status();
  ASSERT_EQ(batch->size(), texts.size());
  for (size_t i = 0; i < texts.size(); ++i) EXPECT_EQ((*batch)[i], Encode(*tok, texts[i], false));
}

INSTANTIATE_TEST_SUITE_P(Models, GoldenModelTest, ::testing::ValuesIn(TokenizerJsonModels()));

TEST(HfTokenizerTest, GoldenModelsIncludeQwenAndLlama3) {
  const auto names = TokenizerJsonModels();
  EXPECT_NE(std::find(names.begin(), names.end(), "qwen3-reranker-tiny"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "llama3-tokjson-cls"), names.end());
}

// ---- BOS and pieces -----------------------------------------------------------------------------

TEST(HfTokenizerTest, BosComesFromThePostProcessor) {
  auto qwen = Load(testing::ModelDir("qwen3-reranker-tiny"));  // ByteLevel post-processor
  ASSERT_NE(qwen, nullptr);
  EXPECT_EQ(qwen->bos_id(), std::nullopt);
  EXPECT_EQ(Encode(*qwen, "hi", true), Encode(*qwen, "hi", false));

  auto llama = Load(testing::ModelDir("llama3-tokjson-cls"));  // TemplateProcessing
  ASSERT_NE(llama, nullptr);
  auto bos = llama->PieceToId("<|begin_of_text|>");
  ASSERT_TRUE(bos.ok()) << bos.status();
  EXPECT_EQ(llama->bos_id(), *bos);
  Ids with_bos = {*bos};
  for (int32_t id : Encode(*llama, "hi", false)) with_bos.push_back(id);
  EXPECT_EQ(Encode(*llama, "hi", true), with_bos);
}

TEST(HfTokenizerTest, PieceToId) {
  const std::string dir = testing::ModelDir("qwen3-reranker-tiny");
  auto tok = Load(dir);
  ASSERT_NE(tok, nullptr);
  const Json vocab = ReadJson(dir + "/tokenizer.json")["model"]["vocab"];
  EXPECT_EQ(*tok->PieceToId("yes"), vocab["yes"].get<int32_t>());
  EXPECT_EQ(*tok->PieceToId("no"), vocab["no"].get<int32_t>());
  EXPECT_EQ(*tok->PieceToId("<|im_end|>"), 2);
  // Byte-level pieces are found as stored ("Ġa") and as the text they stand for (" a").
  EXPECT_EQ(*tok->PieceToId("Ġa"), vocab["Ġa"].get<int32_t>());
  EXPECT_EQ(*tok->PieceToId(" a"), vocab["Ġa"].get<int32_t>());
  EXPECT_EQ(tok->PieceToId("no-such-piece-at-all").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(tok->vocab_size(), static_cast<int>(vocab.size()));
}

TEST(HfTokenizerTest, RejectsInvalidUtf8) {
  auto tok = Load(testing::ModelDir("qwen3-reranker-tiny"));
  ASSERT_NE(tok, nullptr);
  for (const std::string bad :
       {"ab\xff", "\xc3", "\xed\xa0\x80" /* surrogate */, "\xc0\xaf" /* overlong */}) {
    auto ids = tok->Encode(bad, false);
    EXPECT_EQ(ids.status().code(), absl::StatusCode::kInvalidArgument) << ids.status();
  }
}

// ---- variants of the golden files ---------------------------------------------------------------

// All hard strings of `model`, encoded by `tok`, against HF's ids, with `expect` mapping HF's
// with_special ids for this variant.
void ExpectHardStrings(const Tokenizer& tok, const std::string& model,
                       const std::function<Ids(const Ids& without)>& with_special) {
  const Json all = ReadJson(CasesPath());
  ASSERT_TRUE(all.contains(model));
  for (const Json& c : all[model]) {
    const std::string text = c.at("text").get<std::string>();
    const Ids without = c.at("without_special").get<Ids>();
    EXPECT_EQ(Encode(tok, text, false), without) << "text: " << text;
    EXPECT_EQ(Encode(tok, text, true), with_special(without)) << "text: " << text;
  }
}

Json ModelFile(const std::string& model, const char* file) {
  return ReadJson(testing::ModelDir(model) + "/" + file);
}

TEST(HfTokenizerTest, MergesAsStringsGiveTheSameIds) {
  Json t = ModelFile("qwen3-reranker-tiny", "tokenizer.json");
  for (Json& m : t["model"]["merges"]) {
    m = m[0].get<std::string>() + " " + m[1].get<std::string>();
  }
  auto tok = Load(WriteModelDir(t, ModelFile("qwen3-reranker-tiny", "tokenizer_config.json")));
  ASSERT_NE(tok, nullptr);
  ExpectHardStrings(*tok, "qwen3-reranker-tiny", [](const Ids& ids) { return ids; });
}

// transformers 5 rebuilds the post-processor from tokenizer_config.json's add_bos_token /
// add_eos_token when either is present.
TEST(HfTokenizerTest, TokenizerConfigAddBosAndEos) {
  const Json t = ModelFile("qwen3-reranker-tiny", "tokenizer.json");
  Json config = ModelFile("qwen3-reranker-tiny", "tokenizer_config.json");
  config["bos_token"] = "<|endoftext|>";  // id 0; eos_token is <|im_end|>, id 2
  config["add_bos_token"] = true;
  auto with_bos = Load(WriteModelDir(t, config));
  ASSERT_NE(with_bos, nullptr);
  EXPECT_EQ(with_bos->bos_id(), 0);
  ExpectHardStrings(*with_bos, "qwen3-reranker-tiny", [](const Ids& ids) {
    Ids out = {0};
    out.insert(out.end(), ids.begin(), ids.end());
    return out;
  });

  config["add_bos_token"] = false;
  config["add_eos_token"] = true;
  config["eos_token"] = Json{{"content", "<|im_end|>"}, {"special", true}};
  auto with_eos = Load(WriteModelDir(t, config));
  ASSERT_NE(with_eos, nullptr);
  EXPECT_EQ(with_eos->bos_id(), std::nullopt);
  ExpectHardStrings(*with_eos, "qwen3-reranker-tiny", [](const Ids& ids) {
    Ids out = ids;
    out.push_back(2);
    return out;
  });

  // An explicit add_bos_token: false replaces Llama 3's TemplateProcessing: no BOS.
  Json llama_config = ModelFile("llama3-tokjson-cls", "tokenizer_config.json");
  llama_config["add_bos_token"] = false;
  auto no_bos =
      Load(WriteModelDir(ModelFile("llama3-tokjson-cls", "tokenizer.json"), llama_config));
  ASSERT_NE(no_bos, nullptr);
  EXPECT_EQ(no_bos->bos_id(), std::nullopt);
  ExpectHardStrings(*no_bos, "llama3-tokjson-cls", [](const Ids& ids) { return ids; });
}

// Llama 3's own files wrap the template in a Sequence after a ByteLevel post-processor.
TEST(HfTokenizerTest, SequencePostProcessor) {
  Json t = ModelFile("llama3-tokjson-cls", "tokenizer.json");
  t["post_processor"] = Json{{"type", "Sequence"},
                             {"processors", Json::array({Json{{"type", "ByteLevel"},
                                                              {"add_prefix_space", true},
                                                              {"trim_offsets", false},
                                                              {"use_regex", true}},
                                                         t["post_processor"]})}};
  auto tok = Load(WriteModelDir(t, ModelFile("llama3-tokjson-cls", "tokenizer_config.json")));
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->bos_id(), 0);
  ExpectHardStrings(*tok, "llama3-tokjson-cls", [](const Ids& ids) {
    Ids out = {0};
    out.insert(out.end(), ids.begin(), ids.end());
    return out;
  });
}

// ---- hand-made files: the options the golden files do not use -----------------------------------

// A byte-level BPE whose vocab is the 256-character alphabet (id = byte value, so an unmerged word
// encodes to its bytes) plus `extra` tokens from id 256 on, merged by `merges` in that order.
Json ByteAlphabetTokenizer(const std::vector<std::pair<std::string, std::string>>& merges,
                           const Json& pre_tokenizer) {
  // GPT-2's byte -> character map.
  std::vector<int> direct;
  for (int b = '!'; b <= '~'; ++b) direct.push_back(b);
  for (int b = 0xA1; b <= 0xAC; ++b) direct.push_back(b);
  for (int b = 0xAE; b <= 0xFF; ++b) direct.push_back(b);
  Json vocab = Json::object();
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool is_direct = std::find(direct.begin(), direct.end(), b) != direct.end();
    const char32_t cp = is_direct ? b : next++;
    std::string s;
    if (cp < 0x80) {
      s += static_cast<char>(cp);
    } else {
      s += static_cast<char>(0xC0 | (cp >> 6));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    }
    vocab[s] = b;
  }
  Json merge_list = Json::array();
  int id = 256;
  for (const auto& [a, b] : merges) {
    merge_list.push_back(Json::array({a, b}));
    if (!vocab.contains(a + b)) vocab[a + b] = id++;
  }
  return Json{{"version", "1.0"},
              {"added_tokens", Json::array()},
              {"normalizer", nullptr},
              {"pre_tokenizer", pre_tokenizer},
              {"post_processor", Json{{"type", "ByteLevel"}}},
              {"decoder", nullptr},
              {"model",
               {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", nullptr},
                {"continuing_subword_prefix", nullptr},
                {"end_of_word_suffix", nullptr},
                {"fuse_unk", false},
                {"byte_fallback", false},
                {"ignore_merges", false},
                {"vocab", vocab},
                {"merges", merge_list}}}};
}

Json ByteLevelStep(bool add_prefix_space, bool use_regex) {
  return Json{{"type", "ByteLevel"},
              {"add_prefix_space", add_prefix_space},
              {"trim_offsets", true},
              {"use_regex", use_regex}};
}

Json SplitThenByteLevel(const Json& pattern, const std::string& behavior, bool invert) {
  return Json{{"type", "Sequence"},
              {"pretokenizers", Json::array({Json{{"type", "Split"},
                                                  {"pattern", pattern},
                                                  {"behavior", behavior},
                                                  {"invert", invert}},
                                             ByteLevelStep(false, false)})}};
}

// Merges: "aĠ" = 256, "Ġb" = 257, "ĠĠ" = 258, "Ġa" = 259 (in rank order).
const std::vector<std::pair<std::string, std::string>> kSpaceMerges = {
    {"a", "Ġ"}, {"Ġ", "b"}, {"Ġ", "Ġ"}, {"Ġ", "a"}};

TEST(HfTokenizerTest, SplitBehaviors) {
  const Json space = Json{{"String", " "}};
  struct Case {
    std::string behavior;
    bool invert;
    std::string text;
    Ids ids;
  };
  const std::vector<Case> cases = {
      {"Isolated", false, "a b", {'a', ' ', 'b'}},
      {"Removed", false, "a b", {'a', 'b'}},
      {"MergedWithPrevious", false, "a b", {256, 'b'}},
      {"MergedWithNext", false, "a b", {'a', 257}},
      {"Contiguous", false, "a  b", {'a', 258, 'b'}},
      {"Isolated", false, "a  b", {'a', ' ', ' ', 'b'}},
      {"Removed", true, "a b", {' '}},  // invert: the text between spaces is the delimiter
  };
  for (const Case& c : cases) {
    auto tok = Load(WriteModelDir(
        ByteAlphabetTokenizer(kSpaceMerges, SplitThenByteLevel(space, c.behavior, c.invert))));
    ASSERT_NE(tok, nullptr);
    EXPECT_EQ(Encode(*tok, c.text, false), c.ids) << c.behavior << " invert=" << c.invert;
  }
}

TEST(HfTokenizerTest, ByteLevelRegexAndPrefixSpace) {
  auto plain = Load(WriteModelDir(ByteAlphabetTokenizer(kSpaceMerges, ByteLevelStep(false, true))));
  ASSERT_NE(plain, nullptr);
  // GPT-2's regex: "a", " b" (so "Ġb" merges, "aĠ" cannot).
  EXPECT_EQ(Encode(*plain, "a b", false), (Ids{'a', 257}));
  auto prefixed =
      Load(WriteModelDir(ByteAlphabetTokenizer(kSpaceMerges, ByteLevelStep(true, true))));
  ASSERT_NE(prefixed, nullptr);
  EXPECT_EQ(Encode(*prefixed, "a b", false), (Ids{259, 257}));
  EXPECT_EQ(Encode(*prefixed, " b", false), (Ids{257}));  // already starts with a space
  // Without the regex the text is one word: "aĠ" (rank 0) wins over "Ġb".
  auto no_regex =
      Load(WriteModelDir(ByteAlphabetTokenizer(kSpaceMerges, ByteLevelStep(false, false))));
  ASSERT_NE(no_regex, nullptr);
  EXPECT_EQ(Encode(*no_regex, "a b", false), (Ids{256, 'b'}));
}

// BPE merges the lowest rank first, leftmost on ties; ignore_merges takes a word found whole in
// the vocab as is.
TEST(HfTokenizerTest, MergeOrderAndIgnoreMerges) {
  // "bc" = 256 (rank 0), "ab" = 257 (rank 1), "abc" = "ab" + "c" = 258 (rank 2).
  Json t = ByteAlphabetTokenizer({{"b", "c"}, {"a", "b"}, {"ab", "c"}}, nullptr);
  auto tok = Load(WriteModelDir(t));
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(Encode(*tok, "abc", false), (Ids{'a', 256}));  // bc first; no (a, bc) merge
  EXPECT_EQ(Encode(*tok, "aaa", false), (Ids{'a', 'a', 'a'}));
  t["model"]["ignore_merges"] = true;
  auto ignoring = Load(WriteModelDir(t));
  ASSERT_NE(ignoring, nullptr);
  EXPECT_EQ(Encode(*ignoring, "abc", false), (Ids{258}));
  EXPECT_EQ(Encode(*ignoring, "abcb", false), (Ids{'a', 256, 'b'}));  // not in vocab: merged

  // Equal pairs: the leftmost merges first ("bbb" -> "bb" "b").
  auto bb = Load(WriteModelDir(ByteAlphabetTokenizer({{"b", "b"}}, nullptr)));
  ASSERT_NE(bb, nullptr);
  EXPECT_EQ(Encode(*bb, "bbb", false), (Ids{256, 'b'}));
  EXPECT_EQ(Encode(*bb, "bbbb", false), (Ids{256, 256}));
}

TEST(HfTokenizerTest, AddedTokenOptions) {
  Json t = ByteAlphabetTokenizer({}, ByteLevelStep(false, false));
  auto added = [](int id, const std::string& content, bool single_word, bool lstrip, bool rstrip,
                  bool normalized) {
    return Json{{"id", id},
                {"content", content},
                {"single_word", single_word},
                {"lstrip", lstrip},
                {"rstrip", rstrip},
                {"normalized", normalized},
                {"special", !normalized}};
  };
  t["normalizer"] = Json{{"type", "NFC"}};
  t["added_tokens"] = Json::array({
      added(300, "<s>", false, true, true, false), added(301, "<w>", true, false, false, false),
      added(302, "\xC3\xA9", false, false, false, true),  // "é", matched after NFC
      added(303, "<s>x", false, false, false, false),     // longer match at the same start
  });
  auto tok = Load(WriteModelDir(t));
  ASSERT_NE(tok, nullptr);
  // lstrip / rstrip take the surrounding whitespace (U+3000 included) into the token.
  EXPECT_EQ(Encode(*tok, "a <s>\t b", false), (Ids{'a', 300, 'b'}));
  EXPECT_EQ(Encode(*tok, "a\xE3\x80\x80<s>b", false), (Ids{'a', 300, 'b'}));
  // Leftmost-longest.
  EXPECT_EQ(Encode(*tok, "<s>xy", false), (Ids{303, 'y'}));
  // single_word: only between non-word characters.
  EXPECT_EQ(Encode(*tok, "a <w>.", false), (Ids{'a', ' ', 301, '.'}));
  EXPECT_EQ(Encode(*tok, "a<w>", false), (Ids{'a', '<', 'w', '>'}));
  // A normalized token matches the normalized text: "e" + U+0301 composes to "é".
  EXPECT_EQ(Encode(*tok, "e\xCC\x81!", false), (Ids{302, '!'}));
  EXPECT_EQ(*tok->PieceToId("<w>"), 301);
  EXPECT_EQ(tok->vocab_size(), 304);
}

TEST(HfTokenizerTest, UnknownCharactersAndByteFallback) {
  // A vocab without the alphabet: "a" = 0, "<unk>" = 1, "<0xC3>" = 2, "<0xA9>" = 3.
  Json t = ByteAlphabetTokenizer({}, nullptr);
  t["model"]["vocab"] = Json{{"a", 0}, {"<unk>", 1}, {"<0xC3>", 2}, {"<0xA9>", 3}};
  t["model"]["unk_token"] = "<unk>";
  auto unk = Load(WriteModelDir(t));
  ASSERT_NE(unk, nullptr);
  EXPECT_EQ(Encode(*unk, "axya", false), (Ids{0, 1, 1, 0}));
  t["model"]["fuse_unk"] = true;
  auto fused = Load(WriteModelDir(t));
  ASSERT_NE(fused, nullptr);
  EXPECT_EQ(Encode(*fused, "axya", false), (Ids{0, 1, 0}));
  t["model"]["byte_fallback"] = true;
  auto bytes = Load(WriteModelDir(t));
  ASSERT_NE(bytes, nullptr);
  EXPECT_EQ(Encode(*bytes, "a\xC3\xA9x", false), (Ids{0, 2, 3, 1}));
}

// ---- sentencepiece-style tokenizer.json (Llama 2, Gemma)
// -------------------------------------------

const std::string kMeta = "\xE2\x96\x81";  // U+2581 "▁"

// A small Llama 2-style file: <unk> = 0, <s> = 1, </s> = 2, <0x00>..<0xFF> = 3..258, then "▁" =
// 259, "a" = 260, "b" = 261, "▁a" = 262, "ab" = 263, "▁ab" = 264, "▁b" = 265; merges in rank order
// (▁ a), (a b), (▁a b), (▁ b); normalizer Prepend("▁") + Replace(" ", "▁"), byte fallback, <s>
// added to the text by the post-processor.
Json SentencePieceStyle() {
  Json vocab = Json{{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  for (int b = 0; b < 256; ++b) {
    static constexpr char kHex[] = "0123456789ABCDEF";
    vocab[std::string("<0x") + kHex[b >> 4] + kHex[b & 15] + ">"] = 3 + b;
  }
  int id = 259;
  for (const std::string& t : {kMeta, std::string("a"), std::string("b"), kMeta + "a",
                               std::string("ab"), kMeta + "ab", kMeta + "b"}) {
    vocab[t] = id++;
  }
  auto special = [](int id, const std::string& content) {
    return Json{{"id", id},        {"content", content},  {"single_word", false}, {"lstrip", false},
                {"rstrip", false}, {"normalized", false}, {"special", true}};
  };
  return Json{
      {"version", "1.0"},
      {"added_tokens", Json::array({special(0, "<unk>"), special(1, "<s>"), special(2, "</s>")})},
      {"normalizer",
       {{"type", "Sequence"},
        {"normalizers",
         Json::array(
             {{{"type", "Prepend"}, {"prepend", kMeta}},
              {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kMeta}}})}}},
      {"pre_tokenizer", nullptr},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", Json::array({{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                                {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
        {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}}},
      {"decoder", nullptr},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", "<unk>"},
        {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr},
        {"fuse_unk", true},
        {"byte_fallback", true},
        {"vocab", vocab},
        {"merges", Json::array({kMeta + " a", "a b", kMeta + "a b", kMeta + " b"})}}}};
}

constexpr int32_t kMetaId = 259, kA = 260, kB = 261, kMetaA = 262, kAB = 263, kMetaAB = 264;
constexpr int32_t kC3 = 3 + 0xC3, kA9 = 3 + 0xA9;  // "é"'s bytes

TEST(HfTokenizerTest, SentencePieceStyleAsTheFileSays) {
  auto tok = Load(WriteModelDir(SentencePieceStyle()));
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(Encode(*tok, "ab ab", false), (Ids{kMetaAB, kMetaAB}));
  EXPECT_EQ(Encode(*tok, "ab ab", true), (Ids{1, kMetaAB, kMetaAB}));
  // Prepend adds a "▁" even before a space: "▁▁ab".
  EXPECT_EQ(Encode(*tok, " ab", false), (Ids{kMetaId, kMetaAB}));
  // Byte fallback: "é" is not in the vocab, its bytes are.
  EXPECT_EQ(Encode(*tok, "\xC3\xA9", false), (Ids{kMetaId, kC3, kA9}));
  // Each piece between added tokens is normalized alone, so each gets its "▁".
  EXPECT_EQ(Encode(*tok, "ab<s>ab", false), (Ids{kMetaAB, 1, kMetaAB}));
  EXPECT_EQ(Encode(*tok, "", false), (Ids{}));
  EXPECT_EQ(Encode(*tok, "", true), (Ids{1}));
}

// transformers 5's LlamaTokenizer keeps the vocab and merges only: no normalizer, Metaspace with
// prepend_scheme "always" (legacy), "first" (legacy false) or "never" (add_prefix_space false).
TEST(HfTokenizerTest, LlamaTokenizerClassBuildsItsOwnPipeline) {
  const Json file = SentencePieceStyle();
  Json config = {{"tokenizer_class", "LlamaTokenizer"},
                 {"legacy", true},
                 {"add_bos_token", true},
                 {"bos_token", "<s>"}};
  auto legacy = Load(WriteModelDir(file, config));
  ASSERT_NE(legacy, nullptr);
  EXPECT_EQ(Encode(*legacy, "ab ab", false), (Ids{kMetaAB, kMetaAB}));
  EXPECT_EQ(Encode(*legacy, " ab", false), (Ids{kMetaAB}));  // starts with "▁": none added
  EXPECT_EQ(Encode(*legacy, "ab<s>ab", false), (Ids{kMetaAB, 1, kMetaAB}));
  EXPECT_EQ(Encode(*legacy, "<s>ab", true), (Ids{1, 1, kMetaAB}));

  config["legacy"] = false;
  auto first = Load(WriteModelDir(file, config));
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(Encode(*first, "ab<s>ab", false), (Ids{kMetaAB, 1, kAB}));
  EXPECT_EQ(Encode(*first, "<s>ab", false), (Ids{1, kAB}));
  EXPECT_EQ(Encode(*first, "ab ab", true), (Ids{1, kMetaAB, kMetaAB}));
  config.erase("legacy");  // LlamaTokenizer's default: legacy=False
  auto by_default = Load(WriteModelDir(file, config));
  ASSERT_NE(by_default, nullptr);
  EXPECT_EQ(Encode(*by_default, "<s>ab", false), (Ids{1, kAB}));

  config["add_prefix_space"] = false;
  auto never = Load(WriteModelDir(file, config));
  ASSERT_NE(never, nullptr);
  EXPECT_EQ(Encode(*never, "ab ab", false), (Ids{kAB, kMetaAB}));
  EXPECT_EQ(Encode(*never, "ba", false), (Ids{kB, kA}));
}

// transformers 5's GemmaTokenizer: Replace(" ", "▁"), no "▁" prepended, byte fallback and fused
// unknowns whatever the file says.
TEST(HfTokenizerTest, GemmaTokenizerClassBuildsItsOwnPipeline) {
  Json file = SentencePieceStyle();
  file["model"]["byte_fallback"] = false;
  file["model"]["fuse_unk"] = false;
  auto as_file = Load(WriteModelDir(file));
  ASSERT_NE(as_file, nullptr);
  EXPECT_EQ(Encode(*as_file, "\xC3\xA9\xC3\xA9", false), (Ids{kMetaId, 0, 0}));
  auto gemma = Load(WriteModelDir(file, Json{{"tokenizer_class", "GemmaTokenizer"}}));
  ASSERT_NE(gemma, nullptr);
  // "ab▁ab" is one word (the Split on " " finds none left): (▁ a) first, then (a b), then (▁a b).
  EXPECT_EQ(Encode(*gemma, "ab ab", false), (Ids{kAB, kMetaAB}));
  EXPECT_EQ(Encode(*gemma, " a", false), (Ids{kMetaA}));
  EXPECT_EQ(Encode(*gemma, "\xC3\xA9\xC3\xA9", false), (Ids{kC3, kA9, kC3, kA9}));
  // Its mask token, in the vocab only, becomes an added token matched in the text.
  file["model"]["vocab"]["<mask>"] = 266;
  auto with_mask = Load(WriteModelDir(file, Json{{"tokenizer_class", "GemmaTokenizer"}}));
  ASSERT_NE(with_mask, nullptr);
  EXPECT_EQ(Encode(*with_mask, "a<mask>", false), (Ids{kA, 266}));
  auto as_file_mask = Load(WriteModelDir(file));
  ASSERT_NE(as_file_mask, nullptr);
  EXPECT_EQ(Encode(*as_file_mask, "<mask>", false).size(), 7u);  // "▁", then one id a character
  file["model"]["vocab"].erase("<0xC3>");  // no fallback for "é" now: one fused <unk>
  auto fused = Load(WriteModelDir(file, Json{{"tokenizer_class", "GemmaTokenizer"}}));
  ASSERT_NE(fused, nullptr);
  EXPECT_EQ(Encode(*fused,
                   "a\xC3\xA9\xC3\xA9"
                   "b",
                   false),
            (Ids{kA, 0, kB}));
}

// A Metaspace pre-tokenizer in the file (what transformers 5 saves for a Llama tokenizer).
TEST(HfTokenizerTest, MetaspaceInTheFile) {
  Json file = SentencePieceStyle();
  file["normalizer"] = nullptr;
  file["pre_tokenizer"] = {
      {"type", "Metaspace"}, {"replacement", kMeta}, {"prepend_scheme", "first"}, {"split", false}};
  auto tok = Load(WriteModelDir(file));
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(Encode(*tok, "ab ab", false), (Ids{kMetaAB, kMetaAB}));
  EXPECT_EQ(Encode(*tok, "ab<s>ab", false), (Ids{kMetaAB, 1, kAB}));
  file["pre_tokenizer"]["split"] = true;  // words "▁ab", "▁", "▁ab": no merge across them
  auto split = Load(WriteModelDir(file));
  ASSERT_NE(split, nullptr);
  EXPECT_EQ(Encode(*split, "ab  ab", false), (Ids{kMetaAB, kMetaId, kMetaAB}));
}

TEST(HfTokenizerTest, ErrorsNameTheFileAndField) {
  const Json base = ModelFile("qwen3-reranker-tiny", "tokenizer.json");
  struct Case {
    std::function<void(Json&)> edit;
    std::string field;
  };
  const std::vector<Case> cases = {
      {[](Json& t) {
         t["normalizer"] = Json{{"type", "BertNormalizer"}};
       },
       "normalizer.type"},
      {[](Json& t) { t["pre_tokenizer"]["pretokenizers"][0]["type"] = "Whitespace"; },
       "pre_tokenizer.pretokenizers[0].type"},
      {[](Json& t) {
         t["pre_tokenizer"]["pretokenizers"][0]["pattern"] = Json{{"Regex", "("}};
       },
       "pre_tokenizer.pretokenizers[0].pattern"},
      {[](Json& t) { t["model"]["type"] = "WordPiece"; }, "model.type"},
      {[](Json& t) {
         t["model"]["merges"][3] = Json::array({"i", "zzz-not-there"});
       },
       "model.merges[3]"},
      // model.vocab and model.merges are read apart from the Json tree: their bad entries too.
      {[](Json& t) { t["model"]["vocab"]["zzz-new"] = "7"; }, "model.vocab[\"zzz-new\"]"},
      {[](Json& t) { t["model"]["vocab"]["zzz-new"] = Json::array({7}); },
       "model.vocab[\"zzz-new\"]"},
      {[](Json& t) { t["model"]["vocab"]["zzz-new"] = -7; }, "model.vocab[\"zzz-new\"]"},
      {[](Json& t) { t["model"]["merges"][2] = 12; }, "model.merges[2]"},
      {[](Json& t) {
         t["model"]["merges"][2] = Json::array({"i", "n", "g"});
       },
       "model.merges[2]"},
      {[](Json& t) {
         t["model"]["merges"][2] = Json::array({"i", Json::object()});
       },
       "model.merges[2]"},
      {[](Json& t) { t["model"]["merges"] = Json::object(); }, "model.merges"},
      {[](Json& t) { t["model"].erase("vocab"); }, "model.vocab"},
      {[](Json& t) {
         t["post_processor"] = Json{{"type", "BertProcessing"}};
       },
       "post_processor.type"},
      {[](Json& t) { t["added_tokens"][1].erase("id"); }, "added_tokens[1].id"},
  };
  for (const Case& c : cases) {
    Json t = base;
    c.edit(t);
    const std::string dir = WriteModelDir(t);
    auto tok = LoadTokenizer(dir);
    ASSERT_FALSE(tok.ok()) << c.field;
    EXPECT_EQ(tok.status().code(), absl::StatusCode::kInvalidArgument) << tok.status();
    EXPECT_NE(tok.status().message().find(dir + "/tokenizer.json: " + c.field), std::string::npos)
        << tok.status();
  }
}

}  // namespace
}  // namespace rankd::tokenizer
