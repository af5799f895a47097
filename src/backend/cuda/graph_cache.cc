#include "rankd/backend/cuda/graph_cache.h"

#include "absl/strings/str_cat.h"
#include "rankd/backend/cuda/cuda_status.h"
#include "rankd/common/status.h"
#include "spdlog/spdlog.h"

namespace rankd::cuda {

absl::Status GraphCache::Run(const PassShape& shape, cudaStream_t stream,
                             absl::FunctionRef<absl::Status()> launch) {
  if (enabled_) {
    if (auto it = graphs_.find(shape); it != graphs_.end()) {
      RANKD_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(it->second, stream));
      ++stats_.graph_replays;
      return absl::OkStatus();
    }
  }
  RANKD_RETURN_IF_ERROR(launch());
  ++stats_.eager_passes;
  if (enabled_ && !failed_shapes_.count(shape)) Capture(shape, stream, launch);
  return absl::OkStatus();
}

void GraphCache::Capture(const PassShape& shape, cudaStream_t stream,
                         absl::FunctionRef<absl::Status()> launch) {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  absl::Status st = [&]() -> absl::Status {
    RANKD_CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    const absl::Status run = launch();
    // End the capture whatever happened, so that the stream leaves capture mode.
    const cudaError_t end = cudaStreamEndCapture(stream, &graph);
    RANKD_RETURN_IF_ERROR(run);
    RANKD_CUDA_RETURN_IF_ERROR(end);
    RANKD_CUDA_RETURN_IF_ERROR(cudaGraphInstantiate(&exec, graph, 0));
    return absl::OkStatus();
  }();
  if (graph != nullptr) cudaGraphDestroy(graph);
  if (!st.ok()) {
    // Capture errors invalidate the capture, not the context; clear the error state and stay
    // eager for this shape.
    (void)cudaGetLastError();
    ++stats_.graph_fallbacks;
    failed_shapes_.insert(shape);
    spdlog::warn("cuda backend: capturing the {} pass of {} rows failed, it runs eagerly: {}",
                 shape.kind == PassKind::kEncode ? "encode" : "score", shape.rows, st.ToString());
    return;
  }
  if (graphs_.size() >= kMaxGraphs) Clear();
  graphs_.emplace(shape, exec);
  ++stats_.graph_captures;
}

void GraphCache::Clear() {
  for (auto& [shape, exec] : graphs_) cudaGraphExecDestroy(exec);
  graphs_.clear();
}

std::string GraphCache::Summary() const {
  return absl::StrCat("graphs ", enabled_ ? "on" : "off", ", eager passes ", stats_.eager_passes,
                      ", graph replays ", stats_.graph_replays, ", graphs captured ",
                      stats_.graph_captures, ", capture fallbacks ", stats_.graph_fallbacks);
}

}  // namespace rankd::cuda
