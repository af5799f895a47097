// The tokenizer.json normalizers alone (src/tokenizer/hf_normalizers.h): each type, Sequence order,
// and the load-time errors of unsupported types. Expectations follow HF tokenizers' normalizers.
#include "hf_normalizers.h"

#include <gtest/gtest.h>

#include <string>

namespace rankd::tokenizer {
namespace {

const JsonFile kFile("tokenizer.json");

std::string Normalize(const Json& j, const std::string& text) {
  auto n = NormalizerFromJson(kFile, j, "normalizer");
  EXPECT_TRUE(n.ok()) << n.status();
  if (!n.ok() || *n == nullptr) return "(no normalizer)";
  auto out = (*n)->Normalize(text);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? *out : "(error)";
}

TEST(HfNormalizersTest, NullIsNoNormalizer) {
  auto n = NormalizerFromJson(kFile, Json(nullptr), "normalizer");
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, nullptr);
}

TEST(HfNormalizersTest, UnicodeForms) {
  const std::string decomposed = "e\xCC\x81";   // "e" + U+0301
  const std::string composed = "\xC3\xA9";      // U+00E9
  const std::string ligature = "\xEF\xAC\x81";  // U+FB01 "fi"
  EXPECT_EQ(Normalize(Json{{"type", "NFC"}}, decomposed + ligature), composed + ligature);
  EXPECT_EQ(Normalize(Json{{"type", "NFD"}}, composed), decomposed);
  EXPECT_EQ(Normalize(Json{{"type", "NFKC"}}, decomposed + ligature), composed + "fi");
  EXPECT_EQ(Normalize(Json{{"type", "NFKD"}}, composed + ligature), decomposed + "fi");
}

TEST(HfNormalizersTest, SequenceRunsItsPartsInOrder) {
  const std::string composed = "\xC3\xA9";
  const Json nfd_then_nfc = {{"type", "Sequence"},
                             {"normalizers", Json::array({{{"type", "NFD"}}, {{"type", "NFC"}}})}};
  const Json nfc_then_nfd = {{"type", "Sequence"},
                             {"normalizers", Json::array({{{"type", "NFC"}}, {{"type", "NFD"}}})}};
  EXPECT_EQ(Normalize(nfd_then_nfc, composed), composed);
  EXPECT_EQ(Normalize(nfc_then_nfd, composed), "e\xCC\x81");
  // Null parts are skipped; an empty Sequence leaves the text as is.
  EXPECT_EQ(
      Normalize(Json{{"type", "Sequence"}, {"normalizers", Json::array({nullptr})}}, composed),
      composed);
}

const std::string kMeta = "\xE2\x96\x81";  // U+2581 "▁"

TEST(HfNormalizersTest, PrependLeavesEmptyTextEmpty) {
  const Json prepend = {{"type", "Prepend"}, {"prepend", kMeta}};
  EXPECT_EQ(Normalize(prepend, "Hey"), kMeta + "Hey");
  EXPECT_EQ(Normalize(prepend, " Hey"), kMeta + " Hey");  // unconditionally
  EXPECT_EQ(Normalize(prepend, ""), "");
}

TEST(HfNormalizersTest, ReplaceStringAndRegex) {
  const Json spaces = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kMeta}};
  EXPECT_EQ(Normalize(spaces, " a  b "), kMeta + "a" + kMeta + kMeta + "b" + kMeta);
  // A String pattern is literal; matches do not overlap, leftmost first.
  const Json dots = {{"type", "Replace"}, {"pattern", {{"String", ".."}}}, {"content", "!"}};
  EXPECT_EQ(Normalize(dots, "a...b"), "a!.b");
  const Json runs = {{"type", "Replace"}, {"pattern", {{"Regex", " {2,}"}}}, {"content", " "}};
  EXPECT_EQ(Normalize(runs, "a   b c  d"), "a b c d");
  const Json drop = {{"type", "Replace"}, {"pattern", {{"Regex", "\\p{Mn}"}}}, {"content", ""}};
  EXPECT_EQ(Normalize(drop, "e\xCC\x81t\xC3\xA9"), "et\xC3\xA9");  // U+0301 goes, é stays
}

TEST(HfNormalizersTest, Sentencepiece) {
  // Llama 2's: Prepend("▁") then Replace(" ", "▁").
  const Json llama2 = {
      {"type", "Sequence"},
      {"normalizers",
       Json::array({{{"type", "Prepend"}, {"prepend", kMeta}},
                    {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kMeta}}})}};
  EXPECT_EQ(Normalize(llama2, "Hi you"), kMeta + "Hi" + kMeta + "you");
  EXPECT_EQ(Normalize(llama2, " Hi"), kMeta + kMeta + "Hi");
}

TEST(HfNormalizersTest, StripUnicodeWhiteSpace) {
  // U+3000 ideographic space and U+00A0 are White_Space; U+200B (zero width space) is not.
  const std::string text = "\xE3\x80\x80 \tab c\xC2\xA0\n";
  EXPECT_EQ(Normalize(Json{{"type", "Strip"}, {"strip_left", true}, {"strip_right", true}}, text),
            "ab c");
  EXPECT_EQ(Normalize(Json{{"type", "Strip"}, {"strip_left", true}, {"strip_right", false}}, text),
            "ab c\xC2\xA0\n");
  EXPECT_EQ(Normalize(Json{{"type", "Strip"}, {"strip_left", false}, {"strip_right", true}}, text),
            "\xE3\x80\x80 \tab c");
  EXPECT_EQ(Normalize(Json{{"type", "Strip"}}, "\xE2\x80\x8B x \xE2\x80\x8B"),
            "\xE2\x80\x8B x \xE2\x80\x8B");
  EXPECT_EQ(Normalize(Json{{"type", "Strip"}}, " \t "), "");
}

TEST(HfNormalizersTest, LowercaseEachCharacterAlone) {
  const Json lower = {{"type", "Lowercase"}};
  EXPECT_EQ(Normalize(lower, "ABC xyz 1"), "abc xyz 1");
  EXPECT_EQ(Normalize(lower, "\xC3\x89T\xC3\x89"), "\xC3\xA9t\xC3\xA9");  // ÉTÉ -> été
  // Rust's char::to_lowercase: "Σ" is "σ" even at a word's end (no final-sigma rule), and "İ"
  // (U+0130) becomes "i" + U+0307.
  EXPECT_EQ(Normalize(lower, "\xCE\xA3\xCE\xA3"), "\xCF\x83\xCF\x83");
  EXPECT_EQ(Normalize(lower, "\xC4\xB0"), "i\xCC\x87");
  EXPECT_EQ(Normalize(lower, "\xF0\x90\x90\x80"), "\xF0\x90\x90\xA8");  // Deseret U+10400
}

TEST(HfNormalizersTest, UnsupportedTypesNameTheFieldAndTheSupportedOnes) {
  auto bert = NormalizerFromJson(kFile, Json{{"type", "BertNormalizer"}}, "normalizer");
  ASSERT_FALSE(bert.ok());
  EXPECT_EQ(bert.status().message(),
            "tokenizer.json: normalizer.type: normalizer 'BertNormalizer' is not supported (NFC, "
            "NFD, NFKC, NFKD, Prepend, Replace, Strip, Lowercase, Sequence)");
  const Json nested = {
      {"type", "Sequence"},
      {"normalizers", Json::array({{{"type", "NFC"}}, {{"type", "Precompiled"}}})}};
  auto precompiled = NormalizerFromJson(kFile, nested, "normalizer");
  ASSERT_FALSE(precompiled.ok());
  EXPECT_EQ(precompiled.status().message(),
            "tokenizer.json: normalizer.normalizers[1].type: normalizer 'Precompiled' is not "
            "supported (NFC, NFD, NFKC, NFKD, Prepend, Replace, Strip, Lowercase, Sequence)");
  auto bad_pattern = NormalizerFromJson(
      kFile, Json{{"type", "Replace"}, {"pattern", " "}, {"content", "_"}}, "normalizer");
  ASSERT_FALSE(bad_pattern.ok());
  EXPECT_EQ(bad_pattern.status().message(),
            "tokenizer.json: normalizer.pattern: must be {\"Regex\": str} or {\"String\": str}");
  auto no_list = NormalizerFromJson(kFile, Json{{"type", "Sequence"}}, "normalizer");
  ASSERT_FALSE(no_list.ok());
  EXPECT_EQ(no_list.status().message(), "tokenizer.json: normalizer.normalizers: must be a list");
}

}  // namespace
}  // namespace rankd::tokenizer
