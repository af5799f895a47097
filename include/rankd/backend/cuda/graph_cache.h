// The CUDA backend's captured passes: one CUDA graph per pass shape, captured after the shape's
// first (eager) pass and replayed for every later pass of that shape. A shape whose capture or
// instantiation fails stays eager from then on and is counted; past kMaxGraphs the cache starts
// over.
#ifndef RANKD_BACKEND_CUDA_GRAPH_CACHE_H_
#define RANKD_BACKEND_CUDA_GRAPH_CACHE_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "rankd/backend/cuda/pass_plan.h"

namespace rankd::cuda {

// What the cache did, for logs and tests.
struct GraphStats {
  int64_t eager_passes = 0;
  int64_t graph_replays = 0;
  int64_t graph_captures = 0;
  int64_t graph_fallbacks = 0;  // captures or instantiations that failed (then run eagerly)
};

// Not thread-safe: its backend calls it under the lock of the stream it runs passes on.
class GraphCache {
 public:
  // Captured graphs kept at once (one per pass shape).
  static constexpr size_t kMaxGraphs = 64;

  explicit GraphCache(bool enabled) : enabled_(enabled) {}
  ~GraphCache() { Clear(); }
  GraphCache(const GraphCache&) = delete;
  GraphCache& operator=(const GraphCache&) = delete;

  // Runs a pass of `shape` on `stream`: replays its graph, or calls `launch` (which enqueues every
  // kernel of the pass on `stream`) eagerly and then, unless disabled or the shape failed before,
  // once more under capture for the next passes. The first pass of a shape runs eagerly so that
  // cuBLASLt plans (and their tuning) and lazily loaded kernels are made outside any capture.
  absl::Status Run(const PassShape& shape, cudaStream_t stream,
                   absl::FunctionRef<absl::Status()> launch);
  // Destroys every graph (they point into buffers about to be freed).
  void Clear();
  // Runs every pass eagerly from now on (the profile times eager passes).
  void Disable() { enabled_ = false; }

  bool enabled() const { return enabled_; }
  size_t size() const { return graphs_.size(); }
  const GraphStats& stats() const { return stats_; }
  // "graphs on, eager passes E, graph replays R, graphs captured C, capture fallbacks F".
  std::string Summary() const;

 private:
  void Capture(const PassShape& shape, cudaStream_t stream,
               absl::FunctionRef<absl::Status()> launch);

  bool enabled_;
  std::map<PassShape, cudaGraphExec_t> graphs_;  // captured passes
  std::set<PassShape> failed_shapes_;            // shapes whose capture failed: eager from now on
  GraphStats stats_;
};

}  // namespace rankd::cuda

#endif  // RANKD_BACKEND_CUDA_GRAPH_CACHE_H_
