// The protocol's rules of the wire, as the front end and the workers both apply them.
#include "rankd/protocol/protocol.h"

#include <gtest/gtest.h>

#include "rankd/common/field_error.h"

namespace rankd::protocol {
namespace {

TEST(WorkerStatusTest, AFieldErrorCrossesTheWorkerService) {
  const absl::Status s = InvalidItemField(2, ".text", "at least 9 tokens", "max_item_tokens");
  const grpc::Status wire = ToWorkerStatus(s);
  EXPECT_EQ(wire.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(wire.error_message(), "items[2].text: at least 9 tokens");
  const absl::Status back = FromWorkerStatus(wire);
  EXPECT_EQ(back.message(), s.message());
  EXPECT_EQ(GetFieldError(back), GetFieldError(s));
}

TEST(WorkerStatusTest, OtherErrorsCrossAsCodeAndMessage) {
  const grpc::Status wire = ToWorkerStatus(absl::UnavailableError("the worker is stopping"));
  EXPECT_EQ(wire.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_TRUE(wire.error_details().empty());
  const absl::Status back = FromWorkerStatus(wire);
  EXPECT_EQ(back, absl::UnavailableError("the worker is stopping"));
  EXPECT_FALSE(GetFieldError(back).has_value());
}

TEST(TruncatesAtEndTest, TheRequestOrTheLimitsAskForIt) {
  rankd::v1::ScoreRequest request;
  Limits limits;
  EXPECT_FALSE(TruncatesAtEnd(request, limits));
  request.set_truncate(rankd::v1::TRUNCATE_END);
  EXPECT_TRUE(TruncatesAtEnd(request, limits));
  request.set_truncate(rankd::v1::TRUNCATE_NONE);
  limits.truncate = Limits::Truncate::kEnd;
  EXPECT_TRUE(TruncatesAtEnd(request, limits));
}

}  // namespace
}  // namespace rankd::protocol
