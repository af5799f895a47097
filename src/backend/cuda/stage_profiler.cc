#include "rankd/backend/cuda/stage_profiler.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "rankd/backend/cuda/cuda_status.h"

namespace rankd::cuda {

absl::string_view StageName(Stage s) {
  switch (s) {
    case Stage::kUpload:
      return "upload";
    case Stage::kEmbed:
      return "embed";
    case Stage::kNorm:
      return "rms_norm";
    case Stage::kQkvGemm:
      return "qkv_gemm";
    case Stage::kQkvRope:
      return "qkv_rope";
    case Stage::kAttention:
      return "attention";
    case Stage::kQuantize:
      return "quantize";
    case Stage::kOProj:
      return "o_proj";
    case Stage::kGateUp:
      return "gate_up";
    case Stage::kSwiGlu:
      return "swiglu";
    case Stage::kDown:
      return "down";
    case Stage::kGather:
      return "last_gather";
    case Stage::kHead:
      return "head";
    case Stage::kDownload:
      return "download";
    case Stage::kCount:
      break;
  }
  return "?";
}

absl::StatusOr<std::unique_ptr<StageProfiler>> StageProfiler::Create(int skip_passes) {
  return std::unique_ptr<StageProfiler>(new StageProfiler(skip_passes));
}

StageProfiler::~StageProfiler() {
  for (cudaEvent_t e : events_) cudaEventDestroy(e);
}

void StageProfiler::BeginPass(absl::string_view pass) {
  pass_ = std::string(pass);
  marks_.clear();
  pass_start_ = std::chrono::steady_clock::now();
}

absl::Status StageProfiler::Mark(Stage stage, double flops, double bytes, cudaStream_t stream) {
  // One more event than marks: the pass's end.
  while (events_.size() < marks_.size() + 2) {
    cudaEvent_t e;
    RANKD_CUDA_RETURN_IF_ERROR(cudaEventCreate(&e));
    events_.push_back(e);
  }
  RANKD_CUDA_RETURN_IF_ERROR(cudaEventRecord(events_[marks_.size()], stream));
  marks_.push_back({stage, flops, bytes});
  return absl::OkStatus();
}

absl::Status StageProfiler::EndPass(cudaStream_t stream) {
  if (marks_.empty()) return absl::OkStatus();
  cudaEvent_t end = events_[marks_.size()];
  RANKD_CUDA_RETURN_IF_ERROR(cudaEventRecord(end, stream));
  RANKD_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(end));
  PassTotals& t = totals_[pass_];
  if (++t.seen <= skip_passes_) {
    marks_.clear();
    return absl::OkStatus();
  }
  ++t.passes;
  t.wall_ms +=
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - pass_start_)
          .count();
  for (size_t i = 0; i < marks_.size(); ++i) {
    float ms = 0;
    RANKD_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, events_[i], events_[i + 1]));
    Totals& s = t.stages[static_cast<size_t>(marks_[i].stage)];
    s.ms += ms;
    s.flops += marks_[i].flops;
    s.bytes += marks_[i].bytes;
    ++s.calls;
  }
  marks_.clear();
  return absl::OkStatus();
}

std::string StageProfiler::Table() const {
  std::string out;
  for (const auto& [pass, t] : totals_) {
    if (t.passes == 0) continue;
    const double n = static_cast<double>(t.passes);
    absl::StrAppendFormat(&out, "cuda profile: %s passes: %d (after %d warm-up)\n", pass, t.passes,
                          t.seen - t.passes);
    absl::StrAppendFormat(&out, "  %-12s %7s %9s %6s %9s %8s %9s %8s\n", "stage", "calls",
                          "ms/pass", "%", "GFLOP", "GB", "TFLOP/s", "GB/s");
    double total_ms = 0;
    for (const Totals& s : t.stages) total_ms += s.ms;
    for (size_t i = 0; i < t.stages.size(); ++i) {
      const Totals& s = t.stages[i];
      if (s.calls == 0) continue;
      const double sec = s.ms / 1e3;
      absl::StrAppendFormat(&out, "  %-12s %7.0f %9.3f %5.1f%% %9.2f %8.3f %9.1f %8.0f\n",
                            StageName(static_cast<Stage>(i)), s.calls / n, s.ms / n,
                            100 * s.ms / total_ms, s.flops / n / 1e9, s.bytes / n / 1e9,
                            sec > 0 ? s.flops / sec / 1e12 : 0, sec > 0 ? s.bytes / sec / 1e9 : 0);
    }
    absl::StrAppendFormat(&out, "  %-12s %7s %9.3f   (host wall time per pass %.3f ms)\n", "sum",
                          "", total_ms / n, t.wall_ms / n);
  }
  return out;
}

}  // namespace rankd::cuda
