// The tokenizer.json BPE model alone (src/tokenizer/hf_bpe.h) on tiny vocabularies: merge order,
// the model options, the load-time errors; and the word cache in front of it.
#include "hf_bpe.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

namespace rankd::tokenizer {
namespace {

using Ids = std::vector<int32_t>;

const JsonFile kFile("tokenizer.json");

// "a" 0, "b" 1, "c" 2, "ab" 3, "bc" 4, "abc" 5, "<unk>" 6, "<0x78>" 7 ("x"'s byte).
Json Model(const Json& merges) {
  return {{"type", "BPE"},
          {"vocab",
           {{"a", 0},
            {"b", 1},
            {"c", 2},
            {"ab", 3},
            {"bc", 4},
            {"abc", 5},
            {"<unk>", 6},
            {"<0x78>", 7}}},
          {"merges", merges}};
}

Ids Tokenize(const Json& model, const std::string& word) {
  auto m = BpeModel::FromJson(kFile, model);
  EXPECT_TRUE(m.ok()) << m.status();
  if (!m.ok()) return {-1};
  Ids ids = {99};  // Tokenize appends
  m->Tokenize(word, &ids);
  ids.erase(ids.begin());
  return ids;
}

std::string Error(const Json& model) {
  auto m = BpeModel::FromJson(kFile, model);
  EXPECT_FALSE(m.ok());
  return m.ok() ? "(ok)" : std::string(m.status().message());
}

TEST(HfBpeTest, LowestRankMergesFirst) {
  const Json ab_first = Model(
      Json::array({Json::array({"a", "b"}), Json::array({"ab", "c"}), Json::array({"b", "c"})}));
  EXPECT_EQ(Tokenize(ab_first, "abc"), (Ids{5}));
  EXPECT_EQ(Tokenize(ab_first, "cab"), (Ids{2, 3}));
  EXPECT_EQ(Tokenize(ab_first, "bc"), (Ids{4}));
  // With (b, c) ranked first, "abc" stops at "a" "bc": there is no (a, bc) merge.
  const Json bc_first = Model(Json::array({"b c", "a b", "ab c"}));  // the older "a b" form
  EXPECT_EQ(Tokenize(bc_first, "abc"), (Ids{0, 4}));
  EXPECT_EQ(Tokenize(bc_first, ""), (Ids{}));
}

TEST(HfBpeTest, EqualPairsMergeLeftmostFirst) {
  Json m = Model(Json::array({Json::array({"a", "a"})}));
  m["vocab"]["aa"] = 8;
  EXPECT_EQ(Tokenize(m, "aaa"), (Ids{8, 0}));
  EXPECT_EQ(Tokenize(m, "aaaa"), (Ids{8, 8}));
}

TEST(HfBpeTest, IgnoreMergesTakesAWholeVocabWord) {
  Json m = Model(Json::array({Json::array({"b", "c"})}));
  EXPECT_EQ(Tokenize(m, "abc"), (Ids{0, 4}));
  m["ignore_merges"] = true;
  EXPECT_EQ(Tokenize(m, "abc"), (Ids{5}));
  EXPECT_EQ(Tokenize(m, "abcb"), (Ids{0, 4, 1}));  // not in the vocab: merged
}

TEST(HfBpeTest, UnknownCharacters) {
  Json m = Model(Json::array());
  EXPECT_EQ(Tokenize(m, "axya"), (Ids{0, 0}));  // no unk_token: dropped, as HF does
  m["unk_token"] = "<unk>";
  EXPECT_EQ(Tokenize(m, "axya"), (Ids{0, 6, 6, 0}));
  m["fuse_unk"] = true;
  EXPECT_EQ(Tokenize(m, "axya"), (Ids{0, 6, 0}));
  m["byte_fallback"] = true;  // "x" has its byte token, "y" has none
  EXPECT_EQ(Tokenize(m, "axya"), (Ids{0, 7, 6, 0}));
}

TEST(HfBpeTest, ContinuingSubwordPrefixAndEndOfWordSuffix) {
  const Json prefixed = {{"type", "BPE"},
                         {"vocab", {{"a", 0}, {"##b", 1}, {"ab", 2}, {"b", 3}}},
                         {"merges", Json::array({Json::array({"a", "##b"})})},
                         {"continuing_subword_prefix", "##"}};
  EXPECT_EQ(Tokenize(prefixed, "ab"), (Ids{2}));
  EXPECT_EQ(Tokenize(prefixed, "ba"), (Ids{3}));  // "##a" is not in the vocab: dropped
  const Json suffixed = {{"type", "BPE"},
                         {"vocab", {{"a", 0}, {"b</w>", 1}, {"ab</w>", 2}}},
                         {"merges", Json::array({Json::array({"a", "b</w>"})})},
                         {"end_of_word_suffix", "</w>"}};
  EXPECT_EQ(Tokenize(suffixed, "ab"), (Ids{2}));
}

TEST(HfBpeTest, FindAndMaxId) {
  auto m = BpeModel::FromJson(kFile, Model(Json::array()));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->Find("abc"), 5);
  EXPECT_EQ(m->Find("abcd"), std::nullopt);
  EXPECT_EQ(m->max_id(), 7);
}

TEST(HfBpeTest, Errors) {
  Json word_piece = Model(Json::array());
  word_piece["type"] = "WordPiece";
  EXPECT_EQ(Error(word_piece),
            "tokenizer.json: model.type: model 'WordPiece' is not supported (BPE)");
  Json dropout = Model(Json::array());
  dropout["dropout"] = 0.1;
  EXPECT_EQ(Error(dropout),
            "tokenizer.json: model.dropout: BPE dropout is not supported (must be null)");
  EXPECT_EQ(Error(Model(Json::array({Json::array({"a", "z"})}))),
            "tokenizer.json: model.merges[0]: 'z' is not in model.vocab");
  EXPECT_EQ(Error(Model(Json::array({Json::array({"c", "a"})}))),
            "tokenizer.json: model.merges[0]: merged token 'ca' is not in model.vocab");
  EXPECT_EQ(Error(Model(Json::array({"a b c"}))),
            "tokenizer.json: model.merges[0]: 'a b c' is not two tokens separated by one space");
  Json unk = Model(Json::array());
  unk["unk_token"] = "<UNK>";
  EXPECT_EQ(Error(unk), "tokenizer.json: model.unk_token: '<UNK>' is not in model.vocab");
}

TEST(HfBpeTest, WordCache) {
  WordCache cache;
  Ids out = {1};
  EXPECT_FALSE(cache.Lookup("word", &out));
  const Ids ids = {4, 5, 6};
  cache.Insert("word", ids.data(), ids.size());
  EXPECT_TRUE(cache.Lookup("word", &out));
  EXPECT_EQ(out, (Ids{1, 4, 5, 6}));  // appended
  EXPECT_FALSE(cache.Lookup("words", &out));
  const std::string long_word(WordCache::kMaxWordBytes + 1, 'a');
  cache.Insert(long_word, ids.data(), ids.size());
  EXPECT_FALSE(cache.Lookup(long_word, &out));  // too long to be cached
}

// Lookups on many threads see either nothing (not cached yet, or evicted) or the inserted ids.
TEST(HfBpeTest, WordCacheFromManyThreads) {
  WordCache cache;
  std::vector<std::thread> threads;
  std::vector<int> wrong(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&cache, &wrong, t] {
      for (int i = 0; i < 20000; ++i) {
        const int w = (i * 7 + t) % 5000;
        const std::string word = "w" + std::to_string(w);
        const Ids ids = {w, w + 1};
        Ids out;
        if (cache.Lookup(word, &out)) {
          if (out != ids) ++wrong[t];
        } else {
          cache.Insert(word, ids.data(), ids.size());
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong, (std::vector<int>{0, 0, 0, 0}));
}

}  // namespace
}  // namespace rankd::tokenizer
