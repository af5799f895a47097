// Parallel loops over index ranges: ThreadPool, a fixed set of threads kept for the life of its
// owner (the CPU backend runs a loop per layer on one), and a one-off ParallelFor for callers that
// loop rarely (the tokenizer's EncodeBatch). The work per index is coarse (one sequence segment's
// attention, one item's tokenization).
#ifndef RANKD_COMMON_PARALLEL_H_
#define RANKD_COMMON_PARALLEL_H_

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace rankd {

// A pool of `num_threads` threads: the caller of ParallelFor plus num_threads - 1 workers started
// by the constructor and joined by the destructor. A pool of 1 (or less) has no workers and runs
// every loop inline.
//
// Work partition: a loop over n indices on a pool of `t` threads is cut into contiguous chunks of
// ceil(n / min(n, t)) indices (the last one may be shorter), the same cut whatever the timing; each
// chunk runs on one thread, its indices in increasing order.
//
// Threading contract: ParallelFor may be called from several threads at once (the loops share the
// workers) and from inside a loop body on the same pool (the nested loop's caller runs its chunks
// when no worker is free, so nesting cannot deadlock). `fn` must not throw: an exception leaving it
// on a worker ends the process. The destructor must not run while a ParallelFor is in flight.
class ThreadPool {
 public:
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(i) once for each i in [begin, end), on the pool's threads and the caller's; returns
  // when every call has returned.
  void ParallelFor(size_t begin, size_t end, const std::function<void(size_t)>& fn);

 private:
  // One ParallelFor call; lives on its caller's stack. Chunks are claimed in order under mu_.
  struct Loop {
    const std::function<void(size_t)>* fn;
    size_t begin, end, chunk;  // indices [begin, end) in chunks of `chunk`
    size_t num_chunks;
    size_t claimed = 0;   // chunks handed to a thread
    size_t finished = 0;  // chunks whose calls have all returned
  };
  static void RunChunk(const Loop& loop, size_t c);
  void WorkerMain();

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable work_cv_;  // a loop was queued, or stop_
  std::condition_variable done_cv_;  // some loop's last chunk finished
  std::deque<Loop*> loops_;          // loops with unclaimed chunks, oldest first (guarded by mu_)
  bool stop_ = false;                // guarded by mu_
};

// Calls fn(i) for i in [0, n) on up to `num_threads` threads (the caller's included), with the
// partition of ThreadPool. Starts and joins its threads on every call: for loops that run often,
// hold a ThreadPool instead. num_threads <= 1 runs inline. Safe to call from any thread.
void ParallelFor(size_t n, int num_threads, const std::function<void(size_t)>& fn);

}  // namespace rankd

#endif  // RANKD_COMMON_PARALLEL_H_
