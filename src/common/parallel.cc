#include "rankd/common/parallel.h"

#include <algorithm>

namespace rankd {

ThreadPool::ThreadPool(int num_threads) {
  const int workers = std::max(1, num_threads) - 1;
  workers_.reserve(workers);
  for (int w = 0; w < workers; ++w) workers_.emplace_back([this] { WorkerMain(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::RunChunk(const Loop& loop, size_t c) {
  const size_t first = loop.begin + c * loop.chunk;
  const size_t last = std::min(loop.end, first + loop.chunk);
  for (size_t i = first; i < last; ++i) (*loop.fn)(i);
}

void ThreadPool::ParallelFor(size_t begin, size_t end, const std::function<void(size_t)>& fn) {
  const size_t n = end > begin ? end - begin : 0;
  const size_t threads = std::min<size_t>(n, num_threads());
  if (threads <= 1) {
    for (size_t i = begin; i < end; ++i) fn(i);
    return;
  }
  const size_t chunk = (n + threads - 1) / threads;
  Loop loop{&fn, begin, end, chunk, /*num_chunks=*/(n + chunk - 1) / chunk};
  std::unique_lock<std::mutex> lock(mu_);
  loops_.push_back(&loop);
  lock.unlock();
  work_cv_.notify_all();
  lock.lock();
  // The caller claims chunks too, until none is left; then waits for those the workers hold.
  while (loop.claimed < loop.num_chunks) {
    const size_t c = loop.claimed++;
    if (loop.claimed == loop.num_chunks)
      loops_.erase(std::find(loops_.begin(), loops_.end(), &loop));
    lock.unlock();
    RunChunk(loop, c);
    lock.lock();
    ++loop.finished;
  }
  done_cv_.wait(lock, [&] { return loop.finished == loop.num_chunks; });
}

void ThreadPool::WorkerMain() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_cv_.wait(lock, [&] { return stop_ || !loops_.empty(); });
    if (stop_) return;
    Loop& loop = *loops_.front();
    const size_t c = loop.claimed++;
    if (loop.claimed == loop.num_chunks) loops_.pop_front();
    lock.unlock();
    RunChunk(loop, c);
    lock.lock();
    // After this the caller may return and `loop` is gone.
    if (++loop.finished == loop.num_chunks) done_cv_.notify_all();
  }
}

void ParallelFor(size_t n, int num_threads, const std::function<void(size_t)>& fn) {
  ThreadPool(static_cast<int>(std::min<size_t>(n, std::max(1, num_threads)))).ParallelFor(0, n, fn);
}

}  // namespace rankd
