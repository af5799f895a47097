// TraceIdOf: valid traceparent values give their trace id; every malformed shape gives none.
#include "rankd/common/trace_context.h"

#include <gtest/gtest.h>

#include <string>

namespace rankd {
namespace {

constexpr char kTrace[] = "4bf92f3577b34da6a3ce929d0e0e4736";

TEST(TraceContextTest, ValidValuesGiveTheirTraceId) {
  EXPECT_EQ(TraceIdOf("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"), kTrace);
  EXPECT_EQ(TraceIdOf("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"), kTrace);
  // A later version may append fields; parsers of version 00 read the first four.
  EXPECT_EQ(TraceIdOf("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-ever"), kTrace);
  EXPECT_EQ(TraceIdOf("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-09"), kTrace);
}

TEST(TraceContextTest, MalformedValuesGiveNone) {
  const std::string good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  for (const std::string& bad : {
           std::string(""),
           std::string("00"),
           good.substr(0, good.size() - 1),  // short flags
           good + "-",                       // version 00 with more
           good + "0",                       // one character too many
           std::string("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),  // version ff
           std::string("00-00000000000000000000000000000000-00f067aa0ba902b7-01"),  // zero trace
           std::string("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01"),  // zero parent
           std::string("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01"),  // uppercase
           std::string("00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01"),  // not hex
           std::string("00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01"),  // separators
           std::string("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0x"),
           std::string("0x-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
           std::string("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x"),
           std::string(" 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
           std::string("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\n"),
           std::string("00-4bf92f3577b34da6a3ce929d0e0e4736\0-00f067aa0ba902b7-01", 56),
       }) {
    EXPECT_EQ(TraceIdOf(bad), std::nullopt) << bad;
  }
}

}  // namespace
}  // namespace rankd
