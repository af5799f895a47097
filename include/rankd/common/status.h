// rankd/common: what every module uses: Status helpers (this header), gRPC status conversion
// (grpc_status.h, for the gRPC programs only), logging (logging.h), ThreadPool and ParallelFor
// (parallel.h), UTF-8 checks (utf8.h).
//
// Status helpers shared by every module: the RETURN_IF_ERROR / ASSIGN_OR_RETURN macros that this
// abseil (20220623) lacks, and a few constructors that put the file and field into the message.
#ifndef RANKD_COMMON_STATUS_H_
#define RANKD_COMMON_STATUS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

// Evaluates `expr` (an absl::Status); returns it from the enclosing function if not OK.
#define RANKD_RETURN_IF_ERROR(expr)                 \
  do {                                              \
    ::absl::Status _rankd_status = (expr);          \
    if (!_rankd_status.ok()) return _rankd_status;  \
  } while (0)

#define RANKD_STATUS_CONCAT_INNER_(a, b) a##b
#define RANKD_STATUS_CONCAT_(a, b) RANKD_STATUS_CONCAT_INNER_(a, b)

// `RANKD_ASSIGN_OR_RETURN(auto x, FnReturningStatusOr());` binds the value or returns the error.
#define RANKD_ASSIGN_OR_RETURN(lhs, expr) \
  RANKD_ASSIGN_OR_RETURN_IMPL_(RANKD_STATUS_CONCAT_(_rankd_statusor_, __LINE__), lhs, expr)
#define RANKD_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                                 \
  if (!statusor.ok()) return std::move(statusor).status(); \
  lhs = std::move(statusor).value()

namespace rankd {

// Prepends `context: ` to a non-OK status's message, keeping its code.
absl::Status Annotate(const absl::Status& status, absl::string_view context);

}  // namespace rankd

#endif  // RANKD_COMMON_STATUS_H_
