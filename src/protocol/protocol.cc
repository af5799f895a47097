#include "rankd/protocol/protocol.h"

#include <algorithm>
#include <climits>
#include <optional>
#include <utility>

#include "rankd/common/field_error.h"
#include "rankd/common/grpc_status.h"

namespace rankd::protocol {

grpc::Status ToWorkerStatus(const absl::Status& status) {
  const std::optional<FieldError> error = GetFieldError(status);
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()),
                      error ? EncodeFieldError(*error) : "");
}

absl::Status FromWorkerStatus(const grpc::Status& status) {
  if (std::optional<FieldError> error = DecodeFieldError(status.error_details())) {
    return FieldErrorStatus(static_cast<absl::StatusCode>(status.error_code()), *std::move(error));
  }
  return FromGrpcStatus(status);
}

int TransportMessageLimit(int64_t max_message_bytes) {
  return static_cast<int>(std::min<int64_t>(INT_MAX, 2 * max_message_bytes + (1 << 20)));
}

bool TruncatesAtEnd(const rankd::v1::ScoreRequest& request, const Limits& limits) {
  return request.truncate() == rankd::v1::TRUNCATE_END || limits.truncate == Limits::Truncate::kEnd;
}

}  // namespace rankd::protocol
