// Tokenizer::EncodeBounded on both tokenizer kinds (sentencepiece: llama-cls, tokenizer.json:
// llama3-tokjson-cls and qwen3-cls-wide): its ids are the first ids of the whole encoding, and an
// over-long text is encoded only as far as a bounded prefix (the texts the tokenizer is handed
// are recorded by a wrapper).
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "rankd/tokenizer/tokenizer.h"
#include "tests/common/golden.h"

namespace rankd::tokenizer {
namespace {

using Ids = std::vector<int32_t>;

// Forwards to a real tokenizer and records the longest text it was asked to encode.
class RecordingTokenizer final : public Tokenizer {
 public:
  explicit RecordingTokenizer(std::unique_ptr<Tokenizer> inner) : inner_(std::move(inner)) {}
  absl::StatusOr<std::vector<int32_t>> Encode(absl::string_view text,
                                              bool add_special_tokens) const override {
    longest_ = std::max(longest_, text.size());
    return inner_->Encode(text, add_special_tokens);
  }
  absl::StatusOr<int32_t> PieceToId(absl::string_view piece) const override {
    return inner_->PieceToId(piece);
  }
  int vocab_size() const override { return inner_->vocab_size(); }
  std::optional<int32_t> bos_id() const override { return inner_->bos_id(); }
  absl::string_view kind() const override { return inner_->kind(); }
  size_t longest() const { return longest_; }

 private:
  std::unique_ptr<Tokenizer> inner_;
  mutable size_t longest_ = 0;  // one test thread
};

// Words of several scripts, multi-byte UTF-8 among them, digits and punctuation.
std::string Text(size_t bytes) {
  const char* kWords[] = {"kubernetes",  "operator,", "naïve",  "café",      "日本語の", "テキスト",
                          "Ελληνικά",    "x86_64",    "v1.2.3", "it's",      "(rust)",   "  spaced",
                          "line\nbreak", "tab\tbed",  "42",     "emoji🙂", "über",     "ok."};
  std::string text;
  for (size_t i = 0; text.size() < bytes; ++i) {
    text += kWords[(i * 7) % (sizeof(kWords) / sizeof(kWords[0]))];
    text += ' ';
  }
  return text;
}

class BoundedEncodeTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    auto tok = LoadTokenizer(testing::ModelDir(GetParam()));
    ASSERT_TRUE(tok.ok()) << tok.status();
    tok_ = std::make_unique<RecordingTokenizer>(*std::move(tok));
  }
  Ids Full(const std::string& text) {
    auto ids = tok_->Encode(text, /*add_special_tokens=*/false);
    EXPECT_TRUE(ids.ok()) << ids.status();
    return ids.ok() ? *ids : Ids{};
  }
  std::unique_ptr<RecordingTokenizer> tok_;
};

TEST_P(BoundedEncodeTest, GivesTheFirstIdsOfTheWholeEncoding) {
  const std::string text = Text(200'000);
  const Ids full = Full(text);
  for (const int64_t limit : {1, 7, 100, 512, 5000}) {
    SCOPED_TRACE(limit);
    auto ids = tok_->EncodeBounded(text, limit);
    ASSERT_TRUE(ids.ok()) << ids.status();
    ASSERT_GT(static_cast<int64_t>(ids->size()), limit);
    ASSERT_LE(ids->size(), full.size());
    EXPECT_EQ(*ids, Ids(full.begin(), full.begin() + ids->size()));
  }
  // At or under the limit: all of them.
  auto all = tok_->EncodeBounded(text, static_cast<int64_t>(full.size()));
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(*all, full);
}

TEST_P(BoundedEncodeTest, StopsAfterABoundedPrefixOfAHugeText) {
  const std::string huge = Text(15'000'000);
  auto ids = tok_->EncodeBounded(huge, 512);
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_GT(ids->size(), 512u);
  // The count seen so far, not the text's millions: at most a token per byte encoded.
  EXPECT_LE(ids->size(), tok_->longest() + 1);
  // The first prefix allows 8 bytes per token; at most two doublings for this text.
  EXPECT_LE(tok_->longest(), 4 * 513u * kBoundedFirstBytesPerToken + 64);
  const std::string prefix = huge.substr(0, tok_->longest() + 1000);
  const Ids head = Full(prefix);
  EXPECT_EQ(*ids, Ids(head.begin(), head.begin() + ids->size()));
}

TEST_P(BoundedEncodeTest, TextWithoutAWordBoundaryIsEncodedWhole) {
  std::string cjk;
  while (cjk.size() < 20'000) cjk += "日本語のテキスト";
  auto ids = tok_->EncodeBounded(cjk, 16);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, Full(cjk));
}

INSTANTIATE_TEST_SUITE_P(Models, BoundedEncodeTest,
                         ::testing::Values("llama-cls", "llama3-tokjson-cls", "qwen3-cls-wide"));

TEST(NextWordCutTest, CutsBeforeASpaceThatFollowsALetterOrDigit) {
  EXPECT_EQ(NextWordCut("ab cd", 0), 2u);
  EXPECT_EQ(NextWordCut("ab cd", 3), absl::string_view::npos);
  EXPECT_EQ(NextWordCut("a,  b9 c", 0), 6u);                  // not after ',' or another space
  EXPECT_EQ(NextWordCut("é é", 0), absl::string_view::npos);  // only ASCII letters
  EXPECT_EQ(NextWordCut(" a", 0), absl::string_view::npos);
}

}  // namespace
}  // namespace rankd::tokenizer
