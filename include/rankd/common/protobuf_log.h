// protobuf's own log messages (GOOGLE_LOG: a parse that meets invalid UTF-8, say) through the
// default spdlog logger, as "protobuf: ..." lines, at most kProtobufLogsPerSecond a second. A
// library of its own (rankd_protobuf_log), so that what does not use protobuf does not link it.
#ifndef RANKD_COMMON_PROTOBUF_LOG_H_
#define RANKD_COMMON_PROTOBUF_LOG_H_

namespace rankd {

inline constexpr int kProtobufLogsPerSecond = 10;

// Installs the handler (process-wide; call after SetUpLogging).
void RouteProtobufLogs();

}  // namespace rankd

#endif  // RANKD_COMMON_PROTOBUF_LOG_H_
