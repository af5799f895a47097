// Nearest-rank percentile of latency samples, shared by the engine and load benchmarks.
#ifndef RANKD_BENCH_PERCENTILE_H_
#define RANKD_BENCH_PERCENTILE_H_

#include <algorithm>
#include <vector>

namespace rankd::bench {

// The q-quantile (0..1) of `v` by nearest rank; 0 for no samples. Takes a copy to sort.
inline double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * (v.size() - 1) + 0.5))];
}

}  // namespace rankd::bench

#endif  // RANKD_BENCH_PERCENTILE_H_
