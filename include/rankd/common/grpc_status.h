// absl::Status <-> grpc::Status, for rankd's gRPC programs (the front end, the workers, the client).
// Header-only, so that rankd_common itself links no gRPC. gRPC's and absl's status codes are the
// same canonical codes with the same numbers (both follow google.rpc.Code).
#ifndef RANKD_COMMON_GRPC_STATUS_H_
#define RANKD_COMMON_GRPC_STATUS_H_

#include <string>

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace rankd {

// Code and message; a payload (a FieldError) stays behind: the edges render it themselves.
inline grpc::Status ToGrpcStatus(const absl::Status& s) {
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}
inline absl::Status FromGrpcStatus(const grpc::Status& s) {
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

// "INVALID_ARGUMENT", "UNAVAILABLE", ... (the canonical name, as logs and metrics write it).
inline std::string GrpcCodeName(grpc::StatusCode code) {
  return absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
}

}  // namespace rankd

#endif  // RANKD_COMMON_GRPC_STATUS_H_
