// Log lines stay one line each, and JSON log lines are valid JSON, whatever the message holds;
// the rate limit of floods; protobuf's messages go through the logger.
#include "rankd/common/logging.h"

#include <gtest/gtest.h>

#include <string>

#include "google/protobuf/stubs/logging.h"
#include "nlohmann/json.hpp"
#include "rankd/common/protobuf_log.h"

namespace rankd {
namespace {

std::string Format(LogFormat format, const std::string& message) {
  auto formatter = MakeLogFormatter(format);
  spdlog::details::log_msg msg("rankd-test", spdlog::level::info,
                               spdlog::string_view_t(message.data(), message.size()));
  spdlog::memory_buf_t out;
  formatter->format(msg, out);
  return std::string(out.data(), out.size());
}

const std::string kNasty[] = {
    "plain",
    "a \"quoted\" word and a back\\slash",
    "two\nlines\r\nand a\ttab",
    std::string("nul \0 inside", 12),
    "bell \x07 escape \x1b[31m del \x7f",
    "caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80",  // valid UTF-8
    "bad \xff byte, lone \x80, cut \xe6\x97, overlong \xc0\xaf, surrogate \xed\xa0\x80",
    "{\"msg\":\"forged\"}\n{\"level\":\"error\"",
};

TEST(LoggingTest, JsonLinesAreValidJsonForAnyMessage) {
  for (const std::string& m : kNasty) {
    const std::string line = Format(LogFormat::kJson, m);
    ASSERT_FALSE(line.empty());
    EXPECT_EQ(line.back(), '\n');
    EXPECT_EQ(line.find('\n'), line.size() - 1) << line;
    nlohmann::json j;
    ASSERT_NO_THROW(j = nlohmann::json::parse(line)) << line;
    EXPECT_EQ(j.at("level"), "info");
    EXPECT_EQ(j.at("component"), "rankd-test");
    const std::string msg = j.at("msg").get<std::string>();
    if (m.find('\xff') == std::string::npos) {
      EXPECT_EQ(msg, m);  // valid UTF-8 comes back unchanged
    } else {
      EXPECT_NE(msg.find("bad \xef\xbf\xbd byte"), std::string::npos) << msg;  // U+FFFD
    }
  }
}

TEST(LoggingTest, TextLinesStayOneLine) {
  const std::string line = Format(LogFormat::kText, kNasty[2]);
  EXPECT_EQ(line.find('\n'), line.size() - 1) << line;
  EXPECT_NE(line.find("two\\nlines\\r\\nand a\\ttab"), std::string::npos) << line;
  EXPECT_NE(Format(LogFormat::kText, kNasty[4]).find("bell \\x07 escape \\x1b[31m"),
            std::string::npos);
  // Quotes and UTF-8 are left alone in text.
  EXPECT_NE(Format(LogFormat::kText, kNasty[1]).find(kNasty[1]), std::string::npos);
  EXPECT_NE(Format(LogFormat::kText, kNasty[5]).find(kNasty[5]), std::string::npos);
}

TEST(LogRateLimitTest, LetsPerSecondThroughAndCountsTheRestIntoTheNextOneLetThrough) {
  LogRateLimit limit(2);
  const LogRateLimit::Clock::time_point t0{};
  const auto t = [&](int ms) { return t0 + std::chrono::milliseconds(ms); };
  int64_t suppressed = -1;
  ASSERT_TRUE(limit.Allow(t(1000), &suppressed));
  EXPECT_EQ(suppressed, 0);
  EXPECT_TRUE(limit.Allow(t(1100), &suppressed));
  EXPECT_FALSE(limit.Allow(t(1200), &suppressed));
  EXPECT_FALSE(limit.Allow(t(1999), &suppressed));
  // A new second: the first event reports the two that were not logged.
  ASSERT_TRUE(limit.Allow(t(2000), &suppressed));
  EXPECT_EQ(suppressed, 2);
  ASSERT_TRUE(limit.Allow(t(2001), &suppressed));
  EXPECT_EQ(suppressed, 0);
}

TEST(LoggingTest, ProtobufMessagesGoThroughTheLoggerNotStraightToStderr) {
  ASSERT_TRUE(SetUpLogging("info", LogFormat::kJson, "rankd-test").ok());
  RouteProtobufLogs();
  ::testing::internal::CaptureStderr();
  GOOGLE_LOG(ERROR) << "a protobuf complaint";
  const std::string out = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(out.find("[libprotobuf"), std::string::npos) << out;
  nlohmann::json j;
  ASSERT_NO_THROW(j = nlohmann::json::parse(out)) << out;
  EXPECT_EQ(j.at("level"), "error");
  EXPECT_EQ(j.at("msg"), "protobuf: a protobuf complaint");
}

}  // namespace
}  // namespace rankd
