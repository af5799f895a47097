#include "rankd/common/protobuf_log.h"

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "google/protobuf/stubs/logging.h"
#include "rankd/common/logging.h"
#include "spdlog/spdlog.h"

namespace rankd {
namespace {

// protobuf's log handler: its messages as the default logger's, rate-limited.
void LogProtobufMessage(google::protobuf::LogLevel level, const char* /*filename*/, int /*line*/,
                        const std::string& message) {
  static LogRateLimit limit(kProtobufLogsPerSecond);
  int64_t suppressed = 0;
  if (!limit.Allow(LogRateLimit::Clock::now(), &suppressed)) return;
  spdlog::level::level_enum lvl = spdlog::level::info;
  switch (level) {
    case google::protobuf::LOGLEVEL_INFO:
      lvl = spdlog::level::info;
      break;
    case google::protobuf::LOGLEVEL_WARNING:
      lvl = spdlog::level::warn;
      break;
    case google::protobuf::LOGLEVEL_ERROR:
      lvl = spdlog::level::err;
      break;
    case google::protobuf::LOGLEVEL_FATAL:
      lvl = spdlog::level::critical;
      break;
  }
  spdlog::log(lvl, "protobuf: {}{}", message,
              suppressed > 0 ? absl::StrCat(" (", suppressed, " more not logged)") : "");
}

}  // namespace

void RouteProtobufLogs() { google::protobuf::SetLogHandler(&LogProtobufMessage); }

}  // namespace rankd
