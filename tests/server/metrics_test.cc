#include "rankd/server/metrics.h"

#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rankd::server {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(MetricsTest, RendersTheTextExpositionFormat) {
  MetricsRegistry r;
  r.GetCounter("x_total", "Things.", {{"code", "OK"}})->Add(3);
  r.GetCounter("x_total", "Things.", {{"code", "A\"b\\c\nd"}})->Add();
  r.GetGauge("depth", "Queue depth.")->Set(2.5);
  Histogram* h = r.GetHistogram("lat_seconds", "Latency.", {0.1, 1});
  h->Observe(0.05);
  h->Observe(0.1);  // upper bounds are inclusive
  h->Observe(5);
  EXPECT_EQ(r.Render(),
            "# HELP depth Queue depth.\n"
            "# TYPE depth gauge\n"
            "depth 2.5\n"
            "# HELP lat_seconds Latency.\n"
            "# TYPE lat_seconds histogram\n"
            "lat_seconds_bucket{le=\"0.1\"} 2\n"
            "lat_seconds_bucket{le=\"1\"} 2\n"
            "lat_seconds_bucket{le=\"+Inf\"} 3\n"
            "lat_seconds_sum 5.15\n"
            "lat_seconds_count 3\n"
            "# HELP x_total Things.\n"
            "# TYPE x_total counter\n"
            "x_total{code=\"A\\\"b\\\\c\\nd\"} 1\n"
            "x_total{code=\"OK\"} 3\n");
}

TEST(MetricsTest, SameNameAndLabelsIsTheSameSeries) {
  MetricsRegistry r;
  Counter* a = r.GetCounter("c", "h", {{"k", "v"}});
  EXPECT_EQ(a, r.GetCounter("c", "h", {{"k", "v"}}));
  EXPECT_NE(a, r.GetCounter("c", "h", {{"k", "w"}}));
}

TEST(MetricsTest, ServerMetricsExportTheDocumentedSeries) {
  MetricsRegistry r;
  ServerMetrics m(&r);
  m.CountRequest(3);  // INVALID_ARGUMENT
  m.WorkerCallsInFlight(1)->Set(1);
  m.request_seconds->Observe(0.002);
  const std::string text = r.Render();
  EXPECT_THAT(text, HasSubstr("rankd_requests_total{code=\"INVALID_ARGUMENT\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("rankd_worker_calls_in_flight{worker=\"1\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("rankd_request_duration_seconds_bucket{le=\"0.0025\"} 1\n"));
  for (const char* name :
       {"rankd_queue_duration_seconds", "rankd_compute_duration_seconds", "rankd_batch_items",
        "rankd_batch_tokens", "rankd_items_scored_total", "rankd_tokens_total",
        "rankd_worker_restarts_total", "rankd_queue_depth", "rankd_workers_up", "rankd_ready"}) {
    EXPECT_THAT(text, HasSubstr(std::string("# TYPE ") + name)) << name;
  }
}

TEST(MetricsTest, CountRequestListsOnlyTheCodesSeenAndCountsEveryCall) {
  MetricsRegistry r;
  ServerMetrics m(&r);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&m, t] {
      for (int i = 0; i < 1000; ++i) m.CountRequest(i % 2 == 0 ? 0 : 3 + t % 2);
    });
  }
  for (std::thread& t : threads) t.join();
  m.CountRequest(3);
  const std::string text = r.Render();
  EXPECT_THAT(text, HasSubstr("rankd_requests_total{code=\"OK\"} 2000\n"));
  EXPECT_THAT(text, HasSubstr("rankd_requests_total{code=\"INVALID_ARGUMENT\"} 1001\n"));
  EXPECT_THAT(text, HasSubstr("rankd_requests_total{code=\"DEADLINE_EXCEEDED\"} 1000\n"));
  EXPECT_THAT(text, Not(HasSubstr("rankd_requests_total{code=\"UNAVAILABLE\"}")));
}

}  // namespace
}  // namespace rankd::server
