// rankd-bench load against a real `rankd serve` (one worker, the tiny model): closed and open
// loop, text, id and embedding items, repeated pairs through the result cache, a schedule step
// and its timeline; every call answered and counted. No speed assertions.
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "load_bench.h"
#include "tests/common/golden.h"
#include "tests/server/test_server.h"

namespace rankd::bench {
namespace {

using rankd::testing::TestServer;

class LoadTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ =
        TestServer::Start(absl::StrCat("model:\n  dir: ", rankd::testing::ModelDir("llama-cls"),
                                       "\n  threads: 1\n"
                                       "workers:\n  count: 1\n  max_inflight: 4\n"))
            .release();
    ASSERT_NE(server_, nullptr);
    ASSERT_TRUE(server_->WaitReady(1, std::chrono::seconds(60))) << server_->Log();
  }
  static void TearDownTestSuite() { delete server_; }

  static LoadOptions Options() {
    LoadOptions o;
    o.target = server_->target();
    o.duration = 1;
    o.warmup = 0.2;
    o.ni = 8;
    o.tq = 6;
    o.ti = 5;
    o.connections = 2;
    return o;
  }

  static void ExpectSane(const LoadResult& r) {
    EXPECT_GT(r.ok, 0);
    EXPECT_EQ(r.failed, 0) << nlohmann::json(r.errors).dump();
    EXPECT_GT(r.items_per_s, 0);
    EXPECT_GT(r.item_tokens_per_s, r.items_per_s * 0.99);  // at least one token per item
    EXPECT_LE(r.p50_ms, r.p99_ms);
    EXPECT_LE(r.p99_ms, r.max_ms);
    EXPECT_GT(r.mean_ms, 0);
  }

  static TestServer* server_;
};

TestServer* LoadTest::server_ = nullptr;

TEST_F(LoadTest, ClosedLoopWithTextItems) {
  LoadOptions o = Options();
  o.concurrency = 3;
  o.items = "text";
  o.item_words = 12;
  absl::StatusOr<LoadResult> r = RunLoad(o);
  ASSERT_TRUE(r.ok()) << r.status();
  ExpectSane(*r);
  // The template-free tiny tokenizer gives at least a token per word.
  EXPECT_GE(r->item_tokens_per_s, r->items_per_s * o.item_words);
  const nlohmann::json j = r->ToJson(o);
  EXPECT_EQ(j.at("mode"), "closed");
  EXPECT_EQ(j.at("requests_ok"), r->ok);
}

TEST_F(LoadTest, OpenLoopWithIdAndEmbeddingItems) {
  for (const char* items : {"ids", "embedding"}) {
    LoadOptions o = Options();
    o.rate = 20;
    o.items = items;
    o.hidden = 64;  // llama-cls
    absl::StatusOr<LoadResult> r = RunLoad(o);
    ASSERT_TRUE(r.ok()) << r.status();
    ExpectSane(*r);
    // 20/s for a second: the schedule bounds the calls started (t = 0, 0.05, ..., 1.0), however
    // fast or slow the host is. How close the count comes to it is speed: rankd-bench's business.
    EXPECT_LE(r->ok, 21) << items;
  }
}

// Half the pairs repeated, through the result cache: hits, every item answered (from a worker or
// the cache). The same trace without --cache (skip_cache) is the baseline: no hits.
TEST_F(LoadTest, RepeatedPairsHitTheResultCache) {
  LoadOptions o = Options();
  o.warmup = 0;  // every call measured
  o.duration = 1.5;
  o.concurrency = 2;
  o.repeat = 0.5;
  o.queries = 2;
  o.repeat_lag = 2;  // > concurrency: a repeat is of an answered call
  for (bool cache : {true, false}) {
    o.cache = cache;
    absl::StatusOr<LoadResult> r = RunLoad(o);
    ASSERT_TRUE(r.ok()) << r.status();
    ExpectSane(*r);
    EXPECT_EQ(r->items_served, r->ok * o.ni) << "cache " << cache;
    EXPECT_EQ(r->items_served, r->items_scored + r->items_cached) << "cache " << cache;
    EXPECT_GT(r->repeat_realized, 0) << "cache " << cache;
    if (cache) {
      EXPECT_GT(r->hit_rate, 0);
      EXPECT_GT(r->items_cached, 0);
    } else {
      EXPECT_EQ(r->hit_rate, 0);
    }
    const nlohmann::json j = r->ToJson(o);
    EXPECT_EQ(j.at("repeat_requested"), 0.5);
    EXPECT_EQ(j.at("hit_rate"), r->hit_rate);
  }
}

// A step in closed-loop concurrency: the timeline has a row per second with the schedule's value
// and every call in some row.
TEST_F(LoadTest, ScheduleStepsAndTimeline) {
  LoadOptions o = Options();
  o.warmup = 0;
  o.duration = 2;
  o.concurrency = 1;
  o.schedule = "1:3";
  absl::StatusOr<LoadResult> r = RunLoad(o);
  ASSERT_TRUE(r.ok()) << r.status();
  ExpectSane(*r);
  ASSERT_GE(r->timeline.size(), 2u);
  EXPECT_EQ(r->timeline[0].offered, 1);
  EXPECT_EQ(r->timeline[1].offered, 3);
  int64_t completed = 0, errors = 0;
  for (const TimelineRow& row : r->timeline) {
    completed += row.completed;
    errors += row.errors;
    if (row.completed > 0) {
      EXPECT_EQ(row.mean_depth, o.ni) << row.t;
    }
  }
  EXPECT_EQ(completed, r->ok);
  EXPECT_EQ(errors, r->failed);
  o.schedule = "0:2,5:1";  // past the end of the run
  EXPECT_TRUE(absl::IsInvalidArgument(RunLoad(o).status()));
}

TEST_F(LoadTest, BadOptionsAreRefused) {
  LoadOptions o = Options();
  EXPECT_TRUE(absl::IsInvalidArgument(RunLoad(o).status()));  // neither rate nor concurrency
  o.rate = 1;
  o.concurrency = 1;
  EXPECT_TRUE(absl::IsInvalidArgument(RunLoad(o).status()));  // both
  o.rate = 0;
  o.items = "embedding";
  o.hidden = 0;
  EXPECT_TRUE(absl::IsInvalidArgument(RunLoad(o).status()));
  o.items = "ids";
  o.ti = 2;  // too short to number the items with --vocab 1024
  absl::Status s = RunLoad(o).status();
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_NE(s.message().find("--ti"), absl::string_view::npos) << s;
}

}  // namespace
}  // namespace rankd::bench
