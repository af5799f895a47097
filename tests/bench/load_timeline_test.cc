// rankd-bench load's --schedule parser (good and hostile input), the per-second timeline's
// bucketing, its CSV round trip, and plot-timeline's two SVG files.
#include "load_timeline.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace rankd::bench {
namespace {

TEST(ScheduleTest, ParsesSteps) {
  absl::StatusOr<std::vector<LoadStep>> s = ParseSchedule("0:4,40:32,100:4", true, 150);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->size(), 3u);
  EXPECT_EQ((*s)[1].at_s, 40);
  EXPECT_EQ((*s)[1].value, 32);
  s = ParseSchedule(" 2.5 : 10 , 5:0.5 ", false, 10);  // open loop: rates, spaces around
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ((*s)[0].at_s, 2.5);
  EXPECT_EQ((*s)[1].value, 0.5);
  s = ParseSchedule("", true, 10);
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s->empty());
}

TEST(ScheduleTest, RefusesHostileInputNamingTheFlag) {
  for (const char* text :
       {",",     "0:4,",  "0:4,,8:2", "4",     "0:4:5",    "a:4",     "0:b",     ":4",
        "0:",    "-1:4",  "nan:4",    "inf:4", "10:4,5:8", "5:4,5:8", "0:0",     "0:-3",
        "0:4.5", "0:nan", "0:inf",    "0:1e9", "200:4",    "150:4",   "0:4;5:8", "0x:4"}) {
    absl::StatusOr<std::vector<LoadStep>> s = ParseSchedule(text, true, 150);
    ASSERT_TRUE(absl::IsInvalidArgument(s.status())) << "'" << text << "'";
    EXPECT_NE(s.status().message().find("--schedule"), absl::string_view::npos) << s.status();
  }
  // A fractional value is a fine rate, not a fine concurrency; a rate has its own bound.
  EXPECT_TRUE(ParseSchedule("0:0.5", false, 10).ok());
  EXPECT_TRUE(absl::IsInvalidArgument(ParseSchedule("0:2e6", false, 10).status()));
}

TEST(ScheduleTest, OfferedAtIsTheLastStepStarted) {
  const std::vector<LoadStep> steps = {{5, 8}, {10, 2}};
  EXPECT_EQ(OfferedAt(steps, 3, 0), 3);  // before the first step: the base value
  EXPECT_EQ(OfferedAt(steps, 3, 5), 8);
  EXPECT_EQ(OfferedAt(steps, 3, 9.9), 8);
  EXPECT_EQ(OfferedAt(steps, 3, 100), 2);
}

TEST(CheckOfferedTest, NamesTheFlag) {
  EXPECT_TRUE(CheckOffered(4, true, "--concurrency").ok());
  absl::Status s = CheckOffered(0, true, "--concurrency");
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_NE(s.message().find("--concurrency"), absl::string_view::npos) << s;
  s = CheckOffered(-1, false, "--rate");
  EXPECT_NE(s.message().find("--rate"), absl::string_view::npos) << s;
}

std::vector<TimelineRow> SampleRows() {
  Timeline timeline;
  timeline.Add({0.1, 0.010, true, 8, 2, 8});
  timeline.Add({0.9, 0.030, true, 8, 0, 6});
  timeline.Add({2.5, 0.020, true, 4, 4, 4});
  timeline.Add({2.7, 5.0, false, 0, 0, 0});
  timeline.Add({-0.01, 0.001, false, 0, 0, 0});  // clock skew: the first second
  return timeline.Rows({{2, 16}}, 4);
}

TEST(TimelineTest, BucketsCallsByTheSecondTheyCompleted) {
  const std::vector<TimelineRow> rows = SampleRows();
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].t, 0);
  EXPECT_EQ(rows[0].offered, 4);
  EXPECT_EQ(rows[0].completed, 2);
  EXPECT_EQ(rows[0].errors, 1);
  EXPECT_EQ(rows[0].items_per_s, 16);
  EXPECT_DOUBLE_EQ(rows[0].p50_ms, 30);  // nearest rank of {10, 30}
  EXPECT_DOUBLE_EQ(rows[0].p99_ms, 30);
  EXPECT_DOUBLE_EQ(rows[0].mean_depth, 7);
  EXPECT_DOUBLE_EQ(rows[0].hit_rate, 2.0 / 16);
  // A second without calls is a row with nothing measured.
  EXPECT_EQ(rows[1].completed, 0);
  EXPECT_EQ(rows[1].items_per_s, 0);
  EXPECT_TRUE(std::isnan(rows[1].p99_ms));
  EXPECT_TRUE(std::isnan(rows[1].mean_depth));
  EXPECT_TRUE(std::isnan(rows[1].hit_rate));
  EXPECT_EQ(rows[2].offered, 16);
  EXPECT_EQ(rows[2].completed, 1);
  EXPECT_EQ(rows[2].errors, 1);
  EXPECT_DOUBLE_EQ(rows[2].p99_ms, 20);
  EXPECT_DOUBLE_EQ(rows[2].hit_rate, 1);
}

TEST(TimelineTest, CsvRoundTrips) {
  const std::vector<TimelineRow> rows = SampleRows();
  const std::string csv = TimelineCsv(rows);
  EXPECT_EQ(csv.substr(0, csv.find('\n')),
            "t,offered,completed,errors,items_per_s,p50_ms,p99_ms,mean_depth,hit_rate");
  absl::StatusOr<std::vector<TimelineRow>> back = ParseTimelineCsv(csv);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->size(), rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ((*back)[i].t, rows[i].t);
    EXPECT_EQ((*back)[i].completed, rows[i].completed);
    EXPECT_EQ((*back)[i].errors, rows[i].errors);
    EXPECT_DOUBLE_EQ((*back)[i].offered, rows[i].offered);
    EXPECT_DOUBLE_EQ((*back)[i].items_per_s, rows[i].items_per_s);
    for (auto field : {&TimelineRow::p50_ms, &TimelineRow::p99_ms, &TimelineRow::mean_depth,
                       &TimelineRow::hit_rate}) {
      if (std::isnan(rows[i].*field)) {
        EXPECT_TRUE(std::isnan((*back)[i].*field)) << i;
      } else {
        EXPECT_NEAR((*back)[i].*field, rows[i].*field, 1e-5 * std::abs(rows[i].*field)) << i;
      }
    }
  }
  EXPECT_FALSE(ParseTimelineCsv("").ok());
  EXPECT_FALSE(ParseTimelineCsv("t,offered\n0,1\n").ok());           // columns missing
  EXPECT_FALSE(ParseTimelineCsv(csv + "1,2,3\n").ok());              // short line
  EXPECT_FALSE(ParseTimelineCsv(csv + "x,1,1,0,1,1,1,1,1\n").ok());  // not a number
}

TEST(PlotTimelineTest, WritesP99AndDepthPlots) {
  const std::string dir = ::testing::TempDir() + "/plot_timeline";
  std::filesystem::create_directories(dir);
  const std::string csv_path = dir + "/timeline.csv";
  std::ofstream(csv_path) << TimelineCsv(SampleRows());
  std::vector<std::string> args = {"rankd-bench", "plot-timeline",   "--timeline",
                                   csv_path,      "--target-p99-ms", "25",
                                   "--out",       dir + "/t"};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  ASSERT_EQ(RunPlotTimeline(static_cast<int>(argv.size()), argv.data(), 2), 0);
  auto read = [](const std::string& path) {
    std::stringstream s;
    s << std::ifstream(path).rdbuf();
    return s.str();
  };
  const std::string p99 = read(dir + "/t_p99.svg"), depth = read(dir + "/t_depth.svg");
  EXPECT_NE(p99.find("<svg"), std::string::npos);
  EXPECT_NE(p99.find("target 25 ms"), std::string::npos);
  EXPECT_NE(depth.find("mean depth"), std::string::npos);
  args[3] = dir + "/missing.csv";
  argv[3] = args[3].data();
  EXPECT_EQ(RunPlotTimeline(static_cast<int>(argv.size()), argv.data(), 2), 1);
}

}  // namespace
}  // namespace rankd::bench
