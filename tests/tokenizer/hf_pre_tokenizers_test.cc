// The tokenizer.json pre-tokenizers alone (src/tokenizer/hf_pre_tokenizers.h): Split's behaviors,
// Metaspace's prepend schemes and split, ByteLevel's regex / prefix space / alphabet, Sequence, and
// the load-time errors.
#include "hf_pre_tokenizers.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace rankd::tokenizer {
namespace {

using Words = std::vector<std::string>;

const JsonFile kFile("tokenizer.json");

// `at_origin`: the text starts the text given to Encode. *at_origin_after (when not null) gets
// whether the first word still does.
Words PreTokenize(const Json& j, const std::string& text, bool* byte_level = nullptr,
                  bool at_origin = true, bool* at_origin_after = nullptr) {
  bool seen_byte_level = false;
  auto p = PreTokenizerFromJson(kFile, j, "pre_tokenizer", &seen_byte_level);
  EXPECT_TRUE(p.ok()) << p.status();
  if (byte_level != nullptr) *byte_level = seen_byte_level;
  if (!p.ok() || *p == nullptr) return {"(no pre-tokenizer)"};
  Words words = {text};
  const absl::Status s = (*p)->Apply(&words, &at_origin);
  EXPECT_TRUE(s.ok()) << s;
  if (at_origin_after != nullptr) *at_origin_after = at_origin;
  return words;
}

Json Split(const Json& pattern, const std::string& behavior, bool invert = false) {
  return {{"type", "Split"}, {"pattern", pattern}, {"behavior", behavior}, {"invert", invert}};
}

Json Metaspace(const std::string& scheme, bool split) {
  return {{"type", "Metaspace"},
          {"replacement", "\xE2\x96\x81"},
          {"prepend_scheme", scheme},
          {"split", split}};
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

// Where the first word starts after a Split: Removed drops a leading delimiter, the others keep it.
TEST(HfPreTokenizersTest, SplitTellsWhetherTheFirstWordStillStartsTheText) {
  bool at_origin = false;
  EXPECT_EQ(PreTokenize(Split(Json{{"String", "-"}}, "Removed"), "-a", nullptr, true, &at_origin),
            (Words{"a"}));
  EXPECT_FALSE(at_origin);
  EXPECT_EQ(PreTokenize(Split(Json{{"String", "-"}}, "Isolated"), "-a", nullptr, true, &at_origin),
            (Words{"-", "a"}));
  EXPECT_TRUE(at_origin);
  PreTokenize(Split(Json{{"String", "-"}}, "Isolated"), "-a", nullptr, false, &at_origin);
  EXPECT_FALSE(at_origin);  // never set again once clear
}

// HF's pre_tokenizers::metaspace: " " -> "▁" first, then "▁" is prepended unless the piece starts
// with it; split cuts before each "▁" (MergedWithNext).
TEST(HfPreTokenizersTest, MetaspacePrependSchemes) {
  const std::string m = "\xE2\x96\x81";  // U+2581
  EXPECT_EQ(PreTokenize(Metaspace("always", false), "Hey you"), (Words{m + "Hey" + m + "you"}));
  EXPECT_EQ(PreTokenize(Metaspace("always", false), " Hey"), (Words{m + "Hey"}));  // has one
  EXPECT_EQ(PreTokenize(Metaspace("always", false), m + "Hey"), (Words{m + "Hey"}));
  EXPECT_EQ(PreTokenize(Metaspace("always", false), "  Hey"), (Words{m + m + "Hey"}));
  // "always" prepends to a piece in the middle of the text too; "first" only at its start.
  EXPECT_EQ(PreTokenize(Metaspace("always", false), "Hey", nullptr, false), (Words{m + "Hey"}));
  EXPECT_EQ(PreTokenize(Metaspace("first", false), "Hey", nullptr, true), (Words{m + "Hey"}));
  EXPECT_EQ(PreTokenize(Metaspace("first", false), "Hey", nullptr, false), (Words{"Hey"}));
  EXPECT_EQ(PreTokenize(Metaspace("never", false), "Hey you"), (Words{"Hey" + m + "you"}));
  // The older form: add_prefix_space false is "never"; without either field, "always".
  const Json old_never = {
      {"type", "Metaspace"}, {"replacement", m}, {"add_prefix_space", false}, {"split", false}};
  EXPECT_EQ(PreTokenize(old_never, "Hey"), (Words{"Hey"}));
  const Json bare = {{"type", "Metaspace"}, {"replacement", m}, {"split", false}};
  EXPECT_EQ(PreTokenize(bare, "Hey"), (Words{m + "Hey"}));
}

TEST(HfPreTokenizersTest, MetaspaceSplit) {
  const std::string m = "\xE2\x96\x81";
  EXPECT_EQ(PreTokenize(Metaspace("always", true), "Hey  friend"),
            (Words{m + "Hey", m, m + "friend"}));
  EXPECT_EQ(PreTokenize(Metaspace("never", true), "Hey friend "), (Words{"Hey", m + "friend", m}));
  // split defaults to true.
  const Json bare = {{"type", "Metaspace"}, {"replacement", m}};
  EXPECT_EQ(PreTokenize(bare, "a b"), (Words{m + "a", m + "b"}));
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
            "(Split, Metaspace, ByteLevel, Sequence)");
  EXPECT_EQ(error(Json{{"type", "Sequence"},
                       {"pretokenizers", Json::array({Json{{"type", "WhitespaceSplit"}}})}}),
            "tokenizer.json: pre_tokenizer.pretokenizers[0].type: pre-tokenizer 'WhitespaceSplit' "
            "is not supported (Split, Metaspace, ByteLevel, Sequence)");
  EXPECT_EQ(error(Json{{"type", "Metaspace"}, {"replacement", "ab"}}),
            "tokenizer.json: pre_tokenizer.replacement: must be one character");
  EXPECT_EQ(error(Json{{"type", "Metaspace"}, {"replacement", "_"}, {"prepend_scheme", "some"}}),
            "tokenizer.json: pre_tokenizer.prepend_scheme: unknown scheme 'some' (always, first, "
            "never)");
  EXPECT_EQ(error(Split(Json{{"String", "-"}}, "Sideways")),
            "tokenizer.json: pre_tokenizer.behavior: unknown behavior 'Sideways'");
  EXPECT_EQ(error(Split(Json{{"Glob", "*"}}, "Removed")),
            "tokenizer.json: pre_tokenizer.pattern: must be {\"Regex\": str} or {\"String\": str}");
}

}  // namespace
}  // namespace rankd::tokenizer
