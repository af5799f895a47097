#include "rankd/common/parallel.h"

#include <algorithm>
#include <thread>
#include <vector>

namespace rankd {

void ParallelFor(size_t n, int num_threads, const std::function<void(size_t)>& fn) {
  const size_t workers = std::min<size_t>(n, std::max(1, num_threads));
  if (workers <= 1) {
    for (size_t i = 0; i < n; ++i) fn(i);
    return;
  }
  const size_t chunk = (n + workers - 1) / workers;
  auto run = [&](size_t begin) {
    const size_t end = std::min(n, begin + chunk);
    for (size_t i = begin; i < end; ++i) fn(i);
  };
  std::vector<std::thread> threads;
  threads.reserve(workers - 1);
  for (size_t w = 1; w < workers; ++w) threads.emplace_back(run, w * chunk);
  run(0);
  for (auto& t : threads) t.join();
}

}  // namespace rankd
