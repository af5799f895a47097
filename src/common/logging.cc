#include "rankd/common/logging.h"

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "spdlog/sinks/stdout_sinks.h"
#include "spdlog/spdlog.h"

namespace rankd {

absl::Status SetUpLogging(absl::string_view level, LogFormat format, absl::string_view component) {
  spdlog::level::level_enum lvl = spdlog::level::from_str(std::string(level));
  if (lvl == spdlog::level::off && level != "off") {
    return absl::InvalidArgumentError(
        absl::StrCat("log level '", level, "' is not one of trace, debug, info, warn, error, off"));
  }
  auto logger = std::make_shared<spdlog::logger>(
      std::string(component), std::make_shared<spdlog::sinks::stderr_sink_mt>());
  if (format == LogFormat::kJson) {
    // One JSON object per line; the message is escaped by spdlog's %v only loosely, so callers keep
    // messages free of quotes where it matters (paths and codes are safe).
    logger->set_pattern(
        R"({"ts":"%Y-%m-%dT%H:%M:%S.%fZ","level":"%l","component":"%n","pid":%P,"msg":"%v"})",
        spdlog::pattern_time_type::utc);
  } else {
    logger->set_pattern("%Y-%m-%d %H:%M:%S.%e %^%L%$ %n[%P] %v");
  }
  logger->set_level(lvl);
  spdlog::set_default_logger(std::move(logger));
  return absl::OkStatus();
}

}  // namespace rankd
