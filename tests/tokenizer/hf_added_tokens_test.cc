// The tokenizer.json added tokens alone (src/tokenizer/hf_added_tokens.h): leftmost-longest
// matching, single_word / lstrip / rstrip, raw versus normalized matching, and the load errors.
#include "hf_added_tokens.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <tuple>
#include <vector>

namespace rankd::tokenizer {
namespace {

using Segs = std::vector<std::tuple<size_t, size_t, int32_t>>;  // (begin, end, id)

const JsonFile kFile("tokenizer.json");

Json Token(int id, const std::string& content, bool special) {
  return {{"id", id}, {"content", content}, {"special", special}};
}

AddedVocabulary Vocab(const Json& tokens, const Normalizer* normalizer = nullptr) {
  auto v = AddedVocabulary::FromJson(kFile, tokens, normalizer);
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() ? *std::move(v) : *AddedVocabulary::FromJson(kFile, Json(nullptr), nullptr);
}

Segs Raw(const AddedVocabulary& v, const std::string& text) {
  std::vector<Segment> segments = {{7, 7, 7}};  // replaced, not appended to
  v.SplitRaw(text, &segments);
  Segs out;
  for (const Segment& s : segments) out.emplace_back(s.begin, s.end, s.id);
  return out;
}

Segs Normalized(const AddedVocabulary& v, const std::string& text) {
  std::vector<Segment> segments = {{7, 7, 7}};
  v.SplitNormalized(text, &segments);
  Segs out;
  for (const Segment& s : segments) out.emplace_back(s.begin, s.end, s.id);
  return out;
}

TEST(HfAddedTokensTest, LeftmostLongest) {
  const AddedVocabulary v =
      Vocab(Json::array({Token(10, "<s>", true), Token(11, "<s>x", true), Token(12, "s>", true)}));
  EXPECT_EQ(Raw(v, "a<s>xb<s>"), (Segs{{0, 1, -1}, {1, 5, 11}, {5, 6, -1}, {6, 9, 10}}));
  EXPECT_EQ(Raw(v, "s>"), (Segs{{0, 2, 12}}));
  EXPECT_EQ(Raw(v, "plain"), (Segs{{0, 5, -1}}));
  EXPECT_EQ(Raw(v, ""), (Segs{}));
  EXPECT_EQ(v.Find("<s>x"), 11);
  EXPECT_EQ(v.Find("<s>y"), std::nullopt);
  EXPECT_EQ(v.max_id(), 12);
}

TEST(HfAddedTokensTest, StripAndSingleWord) {
  Json strip = Token(20, "<m>", true);
  strip["lstrip"] = true;
  strip["rstrip"] = true;
  Json word = Token(21, "ab", true);
  word["single_word"] = true;
  const AddedVocabulary v = Vocab(Json::array({strip, word}));
  // The whitespace on both sides joins the token.
  EXPECT_EQ(Raw(v, "a  <m>  b"), (Segs{{0, 1, -1}, {1, 8, 20}, {8, 9, -1}}));
  // lstrip stops at the previous token's end.
  EXPECT_EQ(Raw(v, "<m> <m>"), (Segs{{0, 4, 20}, {4, 7, 20}}));
  // single_word: only between non-word characters (or the text's ends).
  EXPECT_EQ(Raw(v, "ab cab abc ab"), (Segs{{0, 2, 21}, {2, 11, -1}, {11, 13, 21}}));
}

TEST(HfAddedTokensTest, NormalizedTokensMatchTheirNormalizedForm) {
  auto nfkc = NormalizerFromJson(kFile, Json{{"type", "NFKC"}}, "normalizer");
  ASSERT_TRUE(nfkc.ok()) << nfkc.status();
  // Not special: normalized by default; "\xEF\xAC\x81" (U+FB01) normalizes to "fi".
  const AddedVocabulary v =
      Vocab(Json::array({Token(30, "\xEF\xAC\x81", false), Token(31, "<raw>", true)}), nfkc->get());
  EXPECT_EQ(Normalized(v, "xfiy"), (Segs{{0, 1, -1}, {1, 3, 30}, {3, 4, -1}}));
  EXPECT_EQ(Raw(v, "xfiy"), (Segs{{0, 4, -1}}));
  EXPECT_EQ(Normalized(v, "<raw>"), (Segs{{0, 5, -1}}));  // special: matched in the raw text only
  EXPECT_EQ(Raw(v, "<raw>"), (Segs{{0, 5, 31}}));
  EXPECT_EQ(v.Find("\xEF\xAC\x81"), 30);  // by its content
  // `normalized` overrides the default.
  Json raw = Token(32, "fi", false);
  raw["normalized"] = false;
  const AddedVocabulary w = Vocab(Json::array({raw}), nfkc->get());
  EXPECT_EQ(Raw(w, "fi"), (Segs{{0, 2, 32}}));
  EXPECT_EQ(Normalized(w, "fi"), (Segs{{0, 2, -1}}));
}

TEST(HfAddedTokensTest, NullIsNoTokens) {
  const AddedVocabulary v = Vocab(Json(nullptr));
  EXPECT_EQ(v.max_id(), -1);
  EXPECT_EQ(Raw(v, "<s>"), (Segs{{0, 3, -1}}));
  EXPECT_EQ(Normalized(v, "<s>"), (Segs{{0, 3, -1}}));
}

TEST(HfAddedTokensTest, Errors) {
  auto error = [](const Json& j) {
    auto v = AddedVocabulary::FromJson(kFile, j, nullptr);
    EXPECT_FALSE(v.ok());
    return v.ok() ? std::string("(ok)") : std::string(v.status().message());
  };
  EXPECT_EQ(error(Json{{"id", 1}}), "tokenizer.json: added_tokens: must be a list");
  EXPECT_EQ(error(Json::array({Token(1, "a", true), Json{{"content", "b"}}})),
            "tokenizer.json: added_tokens[1].id: must be a non-negative integer");
  EXPECT_EQ(error(Json::array({Token(-1, "a", true)})),
            "tokenizer.json: added_tokens[0].id: must be a non-negative integer");
  Json bad_flag = Token(1, "a", true);
  bad_flag["lstrip"] = "yes";
  EXPECT_EQ(error(Json::array({bad_flag})),
            "tokenizer.json: added_tokens[0].lstrip: must be true or false");
}

}  // namespace
}  // namespace rankd::tokenizer
