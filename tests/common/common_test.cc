#include <gtest/gtest.h>

#include "rankd/common/status.h"

namespace rankd {
namespace {

absl::StatusOr<int> Half(int x) {
  if (x % 2) return absl::InvalidArgumentError("odd");
  return x / 2;
}

absl::StatusOr<int> Quarter(int x) {
  RANKD_ASSIGN_OR_RETURN(int h, Half(x));
  RANKD_ASSIGN_OR_RETURN(int q, Half(h));
  return q;
}

absl::Status CheckEven(int x) {
  RANKD_RETURN_IF_ERROR(Half(x).status());
  return absl::OkStatus();
}

TEST(StatusMacrosTest, PropagateErrorsAndValues) {
  EXPECT_EQ(*Quarter(8), 2);
  EXPECT_EQ(Quarter(6).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(CheckEven(2).ok());
  EXPECT_FALSE(CheckEven(3).ok());
  EXPECT_EQ(Annotate(absl::NotFoundError("x"), "file.json").message(), "file.json: x");
  EXPECT_TRUE(Annotate(absl::OkStatus(), "file.json").ok());
}

}  // namespace
}  // namespace rankd
