#include "rankd/server/access_log.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "rankd/common/grpc_status.h"
#include "rankd/common/logging.h"
#include "spdlog/spdlog.h"

namespace rankd::server {

void LogCall(bool access_log, const CallRecord& call, const grpc::Status& status) {
  const grpc::StatusCode code = status.error_code();
  const bool failed = code == grpc::StatusCode::INTERNAL || code == grpc::StatusCode::UNKNOWN;
  if (!failed && !access_log) return;
  constexpr size_t kMaxLogged = 256;
  const std::string trace =
      call.trace_id.empty() ? "" : absl::StrCat(" trace_id=", call.trace_id.substr(0, kMaxLogged));
  // grpc::Status::error_message() returns a copy: kept here, not viewed.
  const std::string message = status.error_message().substr(0, kMaxLogged);
  const std::string line = absl::StrCat(
      call.rpc, " request_id=", call.request_id.substr(0, kMaxLogged), trace, " ", call.unit, "=",
      call.count, " ", GrpcCodeName(code), " in ", absl::StrFormat("%.1f", 1e3 * call.seconds),
      " ms", status.ok() ? "" : ": ", status.ok() ? "" : message);
  if (failed) {
    spdlog::error("{}", line);
  } else {
    spdlog::info("{}", line);
  }
}

}  // namespace rankd::server
