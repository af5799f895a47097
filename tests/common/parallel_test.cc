// Tests of ThreadPool and the one-off ParallelFor (rankd/common/parallel.h): coverage of every
// index, the documented partition, reuse of the same threads, nested and concurrent loops.
#include "rankd/common/parallel.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

namespace rankd {
namespace {

// Runs pool.ParallelFor(begin, end) and checks that each index in the range ran exactly once.
void ExpectEachIndexOnce(ThreadPool& pool, size_t begin, size_t end) {
  std::vector<std::atomic<int>> hits(end);
  pool.ParallelFor(begin, end, [&](size_t i) { hits[i]++; });
  for (size_t i = 0; i < end; ++i) {
    ASSERT_EQ(hits[i].load(), i >= begin ? 1 : 0)
        << "index " << i << " of [" << begin << ", " << end << ") on " << pool.num_threads();
  }
}

TEST(ThreadPoolTest, NumThreadsCountsTheCaller) {
  EXPECT_EQ(ThreadPool(0).num_threads(), 1);
  EXPECT_EQ(ThreadPool(1).num_threads(), 1);
  EXPECT_EQ(ThreadPool(4).num_threads(), 4);
}

TEST(ThreadPoolTest, RunsEveryIndexOnce) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    for (size_t begin : {0u, 5u}) {
      for (size_t n : {1u, 2u, 3u, 7u, 8u, 9u, 1000u}) ExpectEachIndexOnce(pool, begin, begin + n);
    }
  }
}

TEST(ThreadPoolTest, EmptyRangeCallsNothing) {
  for (int threads : {1, 4}) {
    ThreadPool pool(threads);
    std::atomic<int> calls{0};
    pool.ParallelFor(0, 0, [&](size_t) { calls++; });
    pool.ParallelFor(7, 7, [&](size_t) { calls++; });
    EXPECT_EQ(calls.load(), 0);
  }
}

TEST(ThreadPoolTest, PoolOfOneRunsInlineInOrder) {
  ThreadPool pool(1);
  std::vector<size_t> order;
  const std::thread::id caller = std::this_thread::get_id();
  bool all_on_caller = true;
  pool.ParallelFor(3, 9, [&](size_t i) {
    order.push_back(i);  // unsynchronized: only safe because it runs inline
    all_on_caller = all_on_caller && std::this_thread::get_id() == caller;
  });
  EXPECT_EQ(order, (std::vector<size_t>{3, 4, 5, 6, 7, 8}));
  EXPECT_TRUE(all_on_caller);
}

// The partition the header documents (what keeps the CPU backend's sums the same from run to
// run): chunks of ceil(n / min(n, t)) indices, each on one thread, in increasing order.
TEST(ThreadPoolTest, ChunksAreContiguousAndEachOnOneThread) {
  for (int threads : {2, 3, 4}) {
    ThreadPool pool(threads);
    for (size_t n : {2u, 5u, 10u, 101u}) {
      std::vector<std::thread::id> thread_of(n);
      std::vector<int> stamp(n);
      std::atomic<int> clock{0};
      pool.ParallelFor(0, n, [&](size_t i) {
        thread_of[i] = std::this_thread::get_id();
        stamp[i] = clock++;
      });
      const size_t used = std::min<size_t>(n, threads);
      const size_t chunk = (n + used - 1) / used;
      for (size_t i = 1; i < n; ++i) {
        if (i % chunk == 0) continue;  // a new chunk starts
        EXPECT_EQ(thread_of[i], thread_of[i - 1]) << "n " << n << " index " << i;
        EXPECT_LT(stamp[i - 1], stamp[i]) << "n " << n << " index " << i;
      }
    }
  }
}

TEST(ThreadPoolTest, ManyMoreIndicesThanThreads) {
  ThreadPool pool(3);
  std::atomic<int64_t> sum{0};
  const size_t n = 200000;
  pool.ParallelFor(0, n, [&](size_t i) { sum += static_cast<int64_t>(i); });
  EXPECT_EQ(sum.load(), static_cast<int64_t>(n) * (n - 1) / 2);
}

// Many calls on one pool run on the same few threads: the workers persist between calls. (Counted
// through a thread_local flag, since the id of a joined thread may be given to a new one.)
TEST(ThreadPoolTest, ReusesItsThreadsAcrossCalls) {
  ThreadPool pool(4);
  std::atomic<int> threads_seen{0};
  for (int call = 0; call < 2000; ++call) {
    std::vector<std::atomic<int>> hits(8);
    pool.ParallelFor(0, hits.size(), [&](size_t i) {
      hits[i]++;
      thread_local bool seen = false;
      if (!seen) {
        seen = true;
        threads_seen++;
      }
    });
    for (size_t i = 0; i < hits.size(); ++i) ASSERT_EQ(hits[i].load(), 1) << "call " << call;
  }
  EXPECT_LE(threads_seen.load(), 4);
}

TEST(ThreadPoolTest, NestedLoopsOnTheSamePool) {
  for (int threads : {1, 2, 4}) {
    ThreadPool pool(threads);
    const size_t outer = 6, inner = 50;
    std::vector<std::atomic<int>> hits(outer * inner);
    pool.ParallelFor(0, outer, [&](size_t o) {
      pool.ParallelFor(0, inner, [&](size_t i) { hits[o * inner + i]++; });
    });
    for (size_t k = 0; k < hits.size(); ++k) ASSERT_EQ(hits[k].load(), 1) << k << " " << threads;
  }
}

TEST(ThreadPoolTest, ConcurrentCallersShareThePool) {
  ThreadPool pool(3);
  std::vector<std::thread> callers;
  std::atomic<int> bad{0};
  for (int c = 0; c < 4; ++c) {
    callers.emplace_back([&pool, &bad, c] {
      for (int call = 0; call < 300; ++call) {
        const size_t n = 1 + (call + c) % 17;
        std::vector<std::atomic<int>> hits(n);
        pool.ParallelFor(0, n, [&](size_t i) { hits[i]++; });
        for (size_t i = 0; i < n; ++i) bad += hits[i].load() != 1;
      }
    });
  }
  for (std::thread& t : callers) t.join();
  EXPECT_EQ(bad.load(), 0);
}

TEST(ParallelForTest, VisitsEveryIndexOnce) {
  for (int threads : {0, 1, 2, 7}) {
    for (size_t n : {0u, 1u, 5u, 1000u}) {
      std::vector<std::atomic<int>> hits(n);
      ParallelFor(n, threads, [&](size_t i) { hits[i]++; });
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << n << " " << threads;
    }
  }
}

}  // namespace
}  // namespace rankd
