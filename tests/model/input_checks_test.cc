// The shared input checks: one message each, whichever layer calls them.
#include "rankd/model/input_checks.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace rankd::model {
namespace {

TEST(InputChecksTest, TokenIds) {
  EXPECT_TRUE(CheckTokenIds(std::vector<int32_t>{0, 9}, "ids", 10).ok());
  absl::Status s = CheckTokenIds(std::vector<int32_t>{0, 10}, "items[2].ids", 10);
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_EQ(s.message(), "items[2].ids[1]: 10 is outside [0, vocab_size=10)");
  s = CheckTokenId(-1, "head yes_no token id", 10);
  EXPECT_EQ(s.message(), "head yes_no token id: -1 is outside [0, vocab_size=10)");
}

TEST(InputChecksTest, EmbeddingValuesAreFiniteAndWithinTheBound) {
  std::vector<float> rows(8, 0.5f);
  rows[1] = -kMaxEmbeddingMagnitude;
  rows[2] = kMaxEmbeddingMagnitude;
  EXPECT_TRUE(CheckEmbeddingValues(rows, "e", 4).ok());
  rows[6] = NAN;
  EXPECT_EQ(CheckEmbeddingValues(rows, "items[0].embedding", 4).message(),
            "items[0].embedding[6]: is nan (row 1, column 2); values must be finite, of magnitude "
            "at most 10000");
  rows[6] = -INFINITY;
  EXPECT_EQ(CheckEmbeddingValues(rows, "e", 4).message(),
            "e[6]: is -inf (row 1, column 2); values must be finite, of magnitude at most 10000");
  // Finite but huge: refused (1e20 once scored exactly 0.0).
  rows[6] = 1e20f;
  EXPECT_EQ(CheckEmbeddingValues(rows, "e", 4).message(),
            "e[6]: is 1e+20 (row 1, column 2); values must be finite, of magnitude at most 10000");
  rows[6] = -10001.f;
  EXPECT_FALSE(CheckEmbeddingValues(rows, "e", 4).ok());
}

TEST(InputChecksTest, ContextLength) {
  EXPECT_TRUE(CheckContextLength(10, 22, 32, "items[0]").ok());
  EXPECT_TRUE(CheckContextLength(10, 1 << 20, 0, "items[0]").ok());  // no limit given
  EXPECT_EQ(CheckContextLength(10, 23, 32, "items[4]").message(),
            "items[4]: prefix 10 + item 23 tokens = 33 exceeds the model's "
            "max_position_embeddings=32");
}

}  // namespace
}  // namespace rankd::model
