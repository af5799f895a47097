// A minimal parallel-for over index ranges; the work per index is coarse (one item's tokenization,
// one attention head), so plain std::threads per call are cheap enough and keep no state.
#ifndef RANKD_COMMON_PARALLEL_H_
#define RANKD_COMMON_PARALLEL_H_

#include <cstddef>
#include <functional>

namespace rankd {

// Calls fn(i) for i in [0, n) on up to `num_threads` threads (the caller's thread included).
// Indices are split into contiguous chunks. num_threads <= 1 runs inline.
void ParallelFor(size_t n, int num_threads, const std::function<void(size_t)>& fn);

}  // namespace rankd

#endif  // RANKD_COMMON_PARALLEL_H_
