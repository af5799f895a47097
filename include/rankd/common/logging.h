// Logging set-up: spdlog to stderr, as text or as JSON lines.
#ifndef RANKD_COMMON_LOGGING_H_
#define RANKD_COMMON_LOGGING_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "spdlog/formatter.h"
#include "spdlog/spdlog.h"

// Debian's abseil has its own string_view type (not std::string_view): teach fmt to print it, so
// that spdlog::info("{}", status.message()) works.
template <>
struct fmt::formatter<absl::string_view> : fmt::formatter<fmt::string_view> {
  template <typename Context>
  auto format(absl::string_view s, Context& ctx) const {
    return fmt::formatter<fmt::string_view>::format(fmt::string_view(s.data(), s.size()), ctx);
  }
};

namespace rankd {

enum class LogFormat { kText, kJson };

// A log message made safe for one line of `format`: for kJson the body of a valid JSON string
// (quotes, backslashes and control characters escaped, bytes that are not UTF-8 replaced by
// U+FFFD); for kText control characters escaped (\n, \xHH), so no message starts a new line.
std::string EscapeLogMessage(absl::string_view message, LogFormat format);

// The formatter of SetUpLogging: text lines, or one JSON object per line (UTC timestamps); the
// message goes through EscapeLogMessage either way.
std::unique_ptr<spdlog::formatter> MakeLogFormatter(LogFormat format);

// Configures the default spdlog logger. `level` is one of trace, debug, info, warn, error, off.
// (Programs that link protobuf also route its messages there: rankd/common/protobuf_log.h.)
absl::Status SetUpLogging(absl::string_view level, LogFormat format, absl::string_view component);

// Lets at most `per_second` events a second be logged and counts the others, so that a flood of
// bad calls cannot flood the log. Threads: Allow may be called from any thread (a short lock).
class LogRateLimit {
 public:
  using Clock = std::chrono::steady_clock;
  explicit LogRateLimit(int per_second) : per_second_(per_second) {}

  // Whether the event at `now` may be logged; when it may, *suppressed is the number of events
  // that were not since the last one that was.
  bool Allow(Clock::time_point now, int64_t* suppressed);

 private:
  const int per_second_;
  std::mutex mu_;
  Clock::time_point window_start_;  // the current one-second window
  int allowed_in_window_ = 0;
  int64_t suppressed_ = 0;
};

}  // namespace rankd

#endif  // RANKD_COMMON_LOGGING_H_
