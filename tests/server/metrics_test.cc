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

// A worker's running totals become increments: growth within an incarnation, a new incarnation's
// whole total (it counts from 0 again), and nothing for an older incarnation or a total that fell.
TEST(MetricsTest, CumulativeCounterAddsGrowthAcrossRestartsNeverANegativeAmount) {
  Counter c;
  CumulativeCounter feed(&c);
  feed.Update(1, 5);
  EXPECT_EQ(c.value(), 5);
  feed.Update(1, 5);
  EXPECT_EQ(c.value(), 5);
  feed.Update(1, 8);
  EXPECT_EQ(c.value(), 8);
  feed.Update(2, 2);  // restarted: counts from 0 again
  EXPECT_EQ(c.value(), 10);
  feed.Update(1, 100);  // a late reading of the old incarnation
  EXPECT_EQ(c.value(), 10);
  feed.Update(2, 1);  // a total that fell adds nothing and is the new base
  EXPECT_EQ(c.value(), 10);
  feed.Update(2, 4);
  EXPECT_EQ(c.value(), 13);
  feed.Update(5, 0);
  feed.Update(5, 1);
  EXPECT_EQ(c.value(), 14);
}

TEST(MetricsTest, WorkerPrefixCacheMetricsFollowTheWorkersReadings) {
  MetricsRegistry r;
  WorkerPrefixCacheMetrics m(&r, 3);
  m.Update(1, {.hits = 7, .misses = 2, .evictions = 1, .bytes = 4096, .entries = 2});
  m.Update(2, {.hits = 1, .misses = 1, .evictions = 0, .bytes = 512, .entries = 1});
  std::string text = r.Render();
  EXPECT_THAT(text, HasSubstr("rankd_prefix_cache_hits_total{worker=\"3\"} 8\n"));
  EXPECT_THAT(text, HasSubstr("rankd_prefix_cache_misses_total{worker=\"3\"} 3\n"));
  EXPECT_THAT(text, HasSubstr("rankd_prefix_cache_evictions_total{worker=\"3\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("rankd_prefix_cache_bytes{worker=\"3\"} 512\n"));
  EXPECT_THAT(text, HasSubstr("rankd_prefix_cache_entries{worker=\"3\"} 1\n"));
  m.Down();
  text = r.Render();
  EXPECT_THAT(text, HasSubstr("rankd_prefix_cache_bytes{worker=\"3\"} 0\n"));
  EXPECT_THAT(text, HasSubstr("rankd_prefix_cache_hits_total{worker=\"3\"} 8\n"));
}

}  // namespace
}  // namespace rankd::server
