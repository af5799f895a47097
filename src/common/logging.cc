#include "rankd/common/logging.h"

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "rankd/common/utf8.h"
#include "spdlog/pattern_formatter.h"
#include "spdlog/sinks/stdout_sinks.h"
#include "spdlog/spdlog.h"

namespace rankd {
namespace {

// The message (%v) escaped so that a record stays one line, and for JSON one valid string body:
//   kJson: " \ and control characters escaped as JSON does, bytes that are not UTF-8 as U+FFFD;
//   kText: control characters as \n, \r, \t or \xHH (a caller's string cannot start a new line).
class EscapedMessageFlag final : public spdlog::custom_flag_formatter {
 public:
  explicit EscapedMessageFlag(LogFormat format) : format_(format) {}

  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    const std::string escaped =
        EscapeLogMessage(absl::string_view(msg.payload.data(), msg.payload.size()), format_);
    dest.append(escaped.data(), escaped.data() + escaped.size());
  }

  std::unique_ptr<spdlog::custom_flag_formatter> clone() const override {
    return std::make_unique<EscapedMessageFlag>(format_);
  }

 private:
  const LogFormat format_;
};

}  // namespace

bool LogRateLimit::Allow(Clock::time_point now, int64_t* suppressed) {
  std::lock_guard<std::mutex> lock(mu_);
  if (now - window_start_ >= std::chrono::seconds(1)) {
    window_start_ = now;
    allowed_in_window_ = 0;
  }
  if (allowed_in_window_ >= per_second_) {
    ++suppressed_;
    return false;
  }
  ++allowed_in_window_;
  *suppressed = suppressed_;
  suppressed_ = 0;
  return true;
}

std::string EscapeLogMessage(absl::string_view message, LogFormat format) {
  std::string out;
  out.reserve(message.size());
  for (size_t i = 0; i < message.size();) {
    const unsigned char c = static_cast<unsigned char>(message[i]);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7F) {
      absl::StrAppend(&out, format == LogFormat::kJson ? "\\u00" : "\\x",
                      absl::Hex(c, absl::kZeroPad2));
    } else if (format == LogFormat::kJson && (c == '"' || c == '\\')) {
      out += '\\';
      out += static_cast<char>(c);
    } else if (format == LogFormat::kJson && c >= 0x80) {
      const size_t n = Utf8SequenceLength(message.substr(i));
      if (n == 0) {
        out += "\\ufffd";
        ++i;
        continue;
      }
      out.append(message.data() + i, n);
      i += n;
      continue;
    } else {
      out += static_cast<char>(c);
    }
    ++i;
  }
  return out;
}

std::unique_ptr<spdlog::formatter> MakeLogFormatter(LogFormat format) {
  auto formatter = std::make_unique<spdlog::pattern_formatter>(
      format == LogFormat::kJson ? spdlog::pattern_time_type::utc
                                 : spdlog::pattern_time_type::local);
  formatter->add_flag<EscapedMessageFlag>('*', format);
  if (format == LogFormat::kJson) {
    // One JSON object per line. The component (%n) is one of rankd's own fixed names.
    formatter->set_pattern(
        R"({"ts":"%Y-%m-%dT%H:%M:%S.%fZ","level":"%l","component":"%n","pid":%P,"msg":"%*"})");
  } else {
    formatter->set_pattern("%Y-%m-%d %H:%M:%S.%e %^%L%$ %n[%P] %*");
  }
  return formatter;
}

absl::Status SetUpLogging(absl::string_view level, LogFormat format, absl::string_view component) {
  spdlog::level::level_enum lvl = spdlog::level::from_str(std::string(level));
  if (lvl == spdlog::level::off && level != "off") {
    return absl::InvalidArgumentError(
        absl::StrCat("log level '", level, "' is not one of trace, debug, info, warn, error, off"));
  }
  auto logger = std::make_shared<spdlog::logger>(std::string(component),
                                                 std::make_shared<spdlog::sinks::stderr_sink_mt>());
  logger->set_formatter(MakeLogFormatter(format));
  logger->set_level(lvl);
  spdlog::set_default_logger(std::move(logger));
  return absl::OkStatus();
}

}  // namespace rankd
