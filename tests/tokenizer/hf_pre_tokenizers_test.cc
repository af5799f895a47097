// The tokenizer.json pre-tokenizers alone (src/tokenizer/hf_pre_tokenizers.h): Split's behaviors,
// ByteLevel's regex / prefix space / alphabet, Sequence, and the load-time errors.
#include "hf_pre_tokenizers.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace rankd::tokenizer {
namespace {

using Words = std::vector<std::string>;

const JsonFile kFile("tokenizer.json");

Words PreTokenize(const Json& j, const std::string& text, bool* byte_level = nullptr) {
  bool seen_byte_level = false;
  auto p = PreTokenizerFromJson(kFile, j, "pre_tokenizer", &seen_byte_level);
  EXPECT_TRUE(p.ok()) << p.status();
  if (byte_level != nullptr) *byte_level = seen_byte_level;
  if (!p.ok() || *p == nullptr) return {"(no pre-tokenizer)"};
  Words words = {text};
  const absl::Status s = (*p)->Apply(&words);
  EXPECT_TRUE(s.ok()) << s;
  return words;
}

Json Split(const Json& pattern, const std::string& behavior, bool invert = false) {
  return {{"type", "Split"}, {"pattern", pattern}, {"behavior", behavior}, {"invert", invert}};
}

Json ByteLevel(bool add_prefix_space, bool use_regex) {
  return {{"type", "ByteLevel"}, {"add_prefix_space", add_prefix_space}, {"use_regex", use_regex}};
}

// The examples of HF's SplitDelimiterBehavior documentation.
TEST(HfPreTokenizersTest, SplitBehaviors) {
  const Json dash = {{"String", "-"}};
  const std::string text = "the-final--countdown";
  EXPECT_EQ(PreTokenize(Split(dash, "Removed"), text), (Words{"the", "final", "countdown"}));
  EXPECT_EQ(PreTokenize(Split(dash, "Isolated"), text),
            (Words{"the", "-", "final", "-", "-", "countdown"}));
  EXPECT_EQ(PreTokenize(Split(dash, "MergedWithPrevious"), text),
            (Words{"the-", "final-", "-", "countdown"}));
  EXPECT_EQ(PreTokenize(Split(dash, "MergedWithNext"), text),
            (Words{"the", "-final", "-", "-countdown"}));
  EXPECT_EQ(PreTokenize(Split(dash, "Contiguous"), text),
            (Words{"the", "-", "final", "--", "countdown"}));
}

TEST(HfPreTokenizersTest, SplitRegexAndInvert) {
  const Json digits = {{"Regex", "\\p{N}+"}};
  EXPECT_EQ(PreTokenize(Split(digits, "Isolated"), "ab12cd3"), (Words{"ab", "12", "cd", "3"}));
  // invert: the matches are what is kept, the text between them the delimiter.
  EXPECT_EQ(PreTokenize(Split(digits, "Removed", /*invert=*/true), "ab12cd3"), (Words{"12", "3"}));
  // A String pattern is literal text, not a regex.
  EXPECT_EQ(PreTokenize(Split(Json{{"String", "."}}, "Removed"), "a.b"), (Words{"a", "b"}));
}

TEST(HfPreTokenizersTest, ByteLevel) {
  bool byte_level = false;
  // GPT-2's regex cuts words (a space sticks to the word after it), then each byte maps to the
  // alphabet: " " -> "Ġ" (U+0120), "\n" -> "Ċ" (U+010A).
  EXPECT_EQ(PreTokenize(ByteLevel(false, true), "Hi you\n", &byte_level),
            (Words{"Hi", "\xC4\xA0you", "\xC4\x8A"}));
  EXPECT_TRUE(byte_level);
  EXPECT_EQ(PreTokenize(ByteLevel(true, true), "Hi you"), (Words{"\xC4\xA0Hi", "\xC4\xA0you"}));
  EXPECT_EQ(PreTokenize(ByteLevel(true, false), "Hi you"), (Words{"\xC4\xA0Hi\xC4\xA0you"}));
  EXPECT_EQ(PreTokenize(ByteLevel(true, false), " Hi"), (Words{"\xC4\xA0Hi"}));  // has its space
}

TEST(HfPreTokenizersTest, ByteLevelAlphabet) {
  EXPECT_EQ(ToByteLevel("az~!"), "az~!");                    // printable ASCII is itself
  EXPECT_EQ(ToByteLevel(" "), "\xC4\xA0");                   // U+0120
  EXPECT_EQ(ToByteLevel(std::string(1, '\0')), "\xC4\x80");  // U+0100, the first remapped byte
  EXPECT_EQ(ToByteLevel("\xC3\xA9"), "\xC3\x83\xC2\xA9");    // "é"'s bytes: "Ã©"
  EXPECT_EQ(ToByteLevel("\xAD"), "\xC5\x83");                // soft hyphen, not printed: U+0143
}

TEST(HfPreTokenizersTest, SequenceAppliesEachStepToEveryPiece) {
  bool byte_level = true;
  const Json split_only = {
      {"type", "Sequence"},
      {"pretokenizers", Json::array({Split(Json{{"String", ","}}, "Removed")})}};
  EXPECT_EQ(PreTokenize(split_only, "a,b c", &byte_level), (Words{"a", "b c"}));
  EXPECT_FALSE(byte_level);
  const Json then_byte_level = {
      {"type", "Sequence"},
      {"pretokenizers",
       Json::array({Split(Json{{"String", ","}}, "Removed"), ByteLevel(false, true)})}};
  EXPECT_EQ(PreTokenize(then_byte_level, "a,b c", &byte_level), (Words{"a", "b",
                                                                       "\xC4\xA0"
                                                                       "c"}));
  EXPECT_TRUE(byte_level);
}

TEST(HfPreTokenizersTest, Errors) {
  bool byte_level = false;
  auto error = [&](const Json& j) {
    auto p = PreTokenizerFromJson(kFile, j, "pre_tokenizer", &byte_level);
    EXPECT_FALSE(p.ok());
    return p.ok() ? std::string("(ok)") : std::string(p.status().message());
  };
  EXPECT_EQ(error(Json{{"type", "Whitespace"}}),
            "tokenizer.json: pre_tokenizer.type: pre-tokenizer 'Whitespace' is not supported "
            "(Split, ByteLevel, Sequence)");
  EXPECT_EQ(error(Json{{"type", "Sequence"},
                       {"pretokenizers", Json::array({Json{{"type", "Metaspace"}}})}}),
            "tokenizer.json: pre_tokenizer.pretokenizers[0].type: pre-tokenizer 'Metaspace' is "
            "not supported (Split, ByteLevel, Sequence)");
  EXPECT_EQ(error(Split(Json{{"String", "-"}}, "Sideways")),
            "tokenizer.json: pre_tokenizer.behavior: unknown behavior 'Sideways'");
  EXPECT_EQ(error(Split(Json{{"Glob", "*"}}, "Removed")),
            "tokenizer.json: pre_tokenizer.pattern: must be {\"Regex\": str} or {\"String\": str}");
}

}  // namespace
}  // namespace rankd::tokenizer
