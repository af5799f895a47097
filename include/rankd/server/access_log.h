// The access log line of one answered call, the same for every RPC and transport (Score,
// ScoreStream, Tokenize, the HTTP routes), and the error line of INTERNAL / UNKNOWN answers, which
// is written whether or not the access log is on.
#ifndef RANKD_SERVER_ACCESS_LOG_H_
#define RANKD_SERVER_ACCESS_LOG_H_

#include <string>

#include "absl/strings/string_view.h"
#include "grpcpp/support/status.h"

namespace rankd::server {

// What one log line says of a call: "RPC request_id=ID[ trace_id=T] UNIT=COUNT CODE in X ms[:
// MESSAGE]". The caller's strings are cut to 256 bytes (the formatter escapes what they hold).
struct CallRecord {
  absl::string_view rpc;         // "Score", "POST /v1/rerank"
  absl::string_view request_id;  // the caller's
  absl::string_view trace_id;    // TraceIdOf the caller's traceparent, "" when none
  absl::string_view unit;        // what `count` counts: "items", "texts"
  int count = 0;
  double seconds = 0;
};
void LogCall(bool access_log, const CallRecord& call, const grpc::Status& status);

}  // namespace rankd::server

#endif  // RANKD_SERVER_ACCESS_LOG_H_
