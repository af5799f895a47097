// rankd-bench load's trace generator: the realized repeat fraction for several fractions and seeds
// (exact once the start is made up), determinism given the seed, and that repeats are of earlier
// pairs of the same query sent more than `lag` requests before, fresh items new.
#include "load_trace.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>
#include <vector>

namespace rankd::bench {
namespace {

TraceOptions Small(double repeat, uint32_t seed) {
  TraceOptions t;
  t.repeat = repeat;
  t.queries = 8;
  t.items_per_request = 20;
  t.lag = 4;
  t.seed = seed;
  return t;
}

TEST(RepeatTraceTest, RealizedFractionIsTheRequestedOneAtEveryLengthAfterTheStart) {
  for (double f : {0.0, 0.1, 0.5, 0.75}) {
    for (uint32_t seed : {1u, 2u, 3u}) {
      absl::StatusOr<RepeatTrace> trace = RepeatTrace::Create(Small(f, seed));
      ASSERT_TRUE(trace.ok()) << trace.status();
      for (int n = 1; n <= 400; ++n) {
        trace->Next();
        const int64_t expected = std::llround(f * static_cast<double>(trace->pairs()));
        // Never ahead of the target; from request 100 on (the start made up) exactly on it.
        ASSERT_LE(trace->repeats(), expected) << "f=" << f << " seed=" << seed << " n=" << n;
        if (n >= 100) {
          ASSERT_EQ(trace->repeats(), expected) << "f=" << f << " seed=" << seed << " n=" << n;
        }
      }
      EXPECT_NEAR(static_cast<double>(trace->repeats()) / static_cast<double>(trace->pairs()), f,
                  0.5 / static_cast<double>(trace->pairs()));
    }
  }
}

TEST(RepeatTraceTest, SameSeedSameTraceOtherSeedAnother) {
  absl::StatusOr<RepeatTrace> a = RepeatTrace::Create(Small(0.5, 7));
  absl::StatusOr<RepeatTrace> b = RepeatTrace::Create(Small(0.5, 7));
  absl::StatusOr<RepeatTrace> c = RepeatTrace::Create(Small(0.5, 8));
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  bool differs = false;
  for (int n = 0; n < 200; ++n) {
    const RepeatTrace::Request ra = a->Next(), rb = b->Next(), rc = c->Next();
    ASSERT_EQ(ra.query, rb.query);
    ASSERT_EQ(ra.keys, rb.keys);
    ASSERT_EQ(ra.repeats, rb.repeats);
    differs |= ra.query != rc.query || ra.keys != rc.keys;
  }
  EXPECT_TRUE(differs);
}

TEST(RepeatTraceTest, RepeatsAreEarlierPairsOfTheSameQueryOutsideTheLag) {
  const TraceOptions t = Small(0.6, 3);
  absl::StatusOr<RepeatTrace> trace = RepeatTrace::Create(t);
  ASSERT_TRUE(trace.ok());
  std::map<uint64_t, std::pair<int, int>> first_sent;  // key -> (query, request index)
  for (int n = 0; n < 300; ++n) {
    const RepeatTrace::Request r = trace->Next();
    ASSERT_EQ(r.keys.size(), static_cast<size_t>(t.items_per_request));
    EXPECT_EQ(std::set<uint64_t>(r.keys.begin(), r.keys.end()).size(), r.keys.size())
        << "a pair twice in request " << n;
    int repeats = 0;
    for (uint64_t key : r.keys) {
      auto it = first_sent.find(key);
      if (it == first_sent.end()) {
        first_sent[key] = {r.query, n};
        continue;
      }
      ++repeats;
      EXPECT_EQ(it->second.first, r.query) << "key " << key;
      EXPECT_GT(n - it->second.second, t.lag) << "key " << key;
    }
    EXPECT_EQ(repeats, r.repeats) << "request " << n;
  }
}

TEST(RepeatTraceTest, BadOptionsNameTheFlag) {
  const std::vector<std::pair<TraceOptions, const char*>> cases = [] {
    std::vector<std::pair<TraceOptions, const char*>> c;
    TraceOptions t = Small(0.5, 1);
    for (double f : {-0.1, 1.5, std::nan("")}) {
      t.repeat = f;
      c.emplace_back(t, "--repeat");
    }
    t = Small(0.5, 1);
    t.queries = 0;
    c.emplace_back(t, "--queries");
    t = Small(0.5, 1);
    t.lag = -1;
    c.emplace_back(t, "--repeat-lag");
    return c;
  }();
  for (const auto& [options, flag] : cases) {
    absl::StatusOr<RepeatTrace> trace = RepeatTrace::Create(options);
    ASSERT_TRUE(absl::IsInvalidArgument(trace.status())) << flag;
    EXPECT_NE(trace.status().message().find(flag), absl::string_view::npos) << trace.status();
  }
}

}  // namespace
}  // namespace rankd::bench
