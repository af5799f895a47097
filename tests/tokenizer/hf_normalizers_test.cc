// The tokenizer.json normalizers alone (src/tokenizer/hf_normalizers.h): each type, Sequence order,
// and the load-time errors of unsupported types.
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

TEST(HfNormalizersTest, UnsupportedTypesNameTheFieldAndTheSupportedOnes) {
  auto lower = NormalizerFromJson(kFile, Json{{"type", "Lowercase"}}, "normalizer");
  ASSERT_FALSE(lower.ok());
  EXPECT_EQ(lower.status().message(),
            "tokenizer.json: normalizer.type: normalizer 'Lowercase' is not supported (NFC, NFD, "
            "NFKC, NFKD, Sequence)");
  const Json nested = {{"type", "Sequence"},
                       {"normalizers", Json::array({{{"type", "NFC"}}, {{"type", "Strip"}}})}};
  auto strip = NormalizerFromJson(kFile, nested, "normalizer");
  ASSERT_FALSE(strip.ok());
  EXPECT_EQ(strip.status().message(),
            "tokenizer.json: normalizer.normalizers[1].type: normalizer 'Strip' is not supported "
            "(NFC, NFD, NFKC, NFKD, Sequence)");
  auto no_list = NormalizerFromJson(kFile, Json{{"type", "Sequence"}}, "normalizer");
  ASSERT_FALSE(no_list.ok());
  EXPECT_EQ(no_list.status().message(), "tokenizer.json: normalizer.normalizers: must be a list");
}

}  // namespace
}  // namespace rankd::tokenizer
