// W3C Trace Context (https://www.w3.org/TR/trace-context/): the trace id of a `traceparent`
// header or gRPC metadata value, so that rankd's access log can name the caller's trace.
#ifndef RANKD_COMMON_TRACE_CONTEXT_H_
#define RANKD_COMMON_TRACE_CONTEXT_H_

#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace rankd {

// The metadata key / header name (lowercase, as gRPC and HTTP/2 carry it).
inline constexpr char kTraceparentKey[] = "traceparent";

// The 32 lowercase hex digits of the trace id in `traceparent`
// ("VERSION-TRACEID-PARENTID-FLAGS", e.g.
// "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"), or nullopt when the value is not a
// valid one: not lowercase hex of the right lengths, version "ff", an all-zero trace or parent id,
// or for version 00 anything after the flags. A version above 00 may carry more fields after the
// flags ("-..."), as the spec asks parsers to allow.
std::optional<std::string> TraceIdOf(absl::string_view traceparent);

}  // namespace rankd

#endif  // RANKD_COMMON_TRACE_CONTEXT_H_
