// Per-stage GPU time of the CUDA backend's forward passes (RANKD_CUDA_PROFILE=1). The backend
// marks the start of every stage (a CUDA event on its stream) together with the stage's two
// numbers of METHOD.md: the floating-point operations it must do and the fewest bytes it must
// move. The time from one mark to the next is the stage's; at the end of a pass the profiler
// synchronises and accumulates. Passes run eagerly while profiling (a captured graph has no
// events between its kernels), so the table shows the eager forward, launch gaps included.
#ifndef RANKD_BACKEND_CUDA_STAGE_PROFILER_H_
#define RANKD_BACKEND_CUDA_STAGE_PROFILER_H_

#include <cuda_runtime.h>

#include <array>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace rankd::cuda {

enum class Stage {
  kUpload,     // metadata and embedding rows, host to device
  kEmbed,      // embedding gather
  kNorm,       // RMSNorm (input and post-attention)
  kQkvGemm,    // fused q/k/v projection
  kQkvRope,    // bias, q/k norm, RoPE, split
  kAttention,  // prefix attention
  kQuantize,   // fp8 only: the attention output quantised per token (o_proj's input)
  kOProj,      // o_proj, accumulated into the residual stream
  kGateUp,     // fused gate/up projection
  kSwiGlu,     // SwiGLU
  kDown,       // down_proj, accumulated into the residual stream
  kGather,     // last-token rows gathered for the last layer
  kHead,       // final norm and score head
  kDownload,   // scores, device to host
  kCount,
};

absl::string_view StageName(Stage s);

class StageProfiler {
 public:
  // The first `skip_passes` passes of each kind are not counted (warm-up: lazy module loading,
  // cuBLASLt planning and tuning).
  static absl::StatusOr<std::unique_ptr<StageProfiler>> Create(int skip_passes);
  ~StageProfiler();
  StageProfiler(const StageProfiler&) = delete;
  StageProfiler& operator=(const StageProfiler&) = delete;

  // Starts a pass of kind `pass` ("encode", "score") on `stream`.
  void BeginPass(absl::string_view pass);
  // The stage that starts now: records an event on `stream`.
  absl::Status Mark(Stage stage, double flops, double bytes, cudaStream_t stream);
  // Records the end, waits for it and adds the pass's stage times to the totals.
  absl::Status EndPass(cudaStream_t stream);

  // One table per pass kind: per stage, calls and milliseconds per pass, GFLOP and GB per pass,
  // achieved TFLOP/s and GB/s; then the sum of the stages and the host's wall time per pass.
  std::string Table() const;

 private:
  struct Totals {
    double ms = 0, flops = 0, bytes = 0;
    long calls = 0;
  };
  struct PassTotals {
    long seen = 0;  // skipped ones included
    long passes = 0;
    double wall_ms = 0;
    std::array<Totals, static_cast<size_t>(Stage::kCount)> stages{};
  };
  struct PendingMark {
    Stage stage;
    double flops, bytes;
  };
  explicit StageProfiler(int skip_passes) : skip_passes_(skip_passes) {}

  int skip_passes_;
  std::vector<cudaEvent_t> events_;  // pool; marks_[i] uses events_[i], the end events_[size]
  std::vector<PendingMark> marks_;
  std::string pass_;
  std::chrono::steady_clock::time_point pass_start_;
  std::map<std::string, PassTotals> totals_;
};

}  // namespace rankd::cuda

#endif  // RANKD_BACKEND_CUDA_STAGE_PROFILER_H_
