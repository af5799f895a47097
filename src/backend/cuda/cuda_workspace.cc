// The CUDA backend's workspace (device) and staging (pinned host) blocks and the per-pass
// metadata carved from them (cuda_backend_impl.h). Moved out of cuda_backend.cc as it was.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "rankd/backend/cuda/cuda_status.h"
#include "rankd/common/status.h"
#include "spdlog/spdlog.h"
#include "src/backend/cuda/cuda_backend_impl.h"

namespace rankd::cuda::internal {

// ---- workspace ---------------------------------------------------------------------------------
Meta CudaBackend::CarveMeta(Carver& c, int rows, int items) const {
  Meta m;
  m.tokens = c.Take<int32_t>(rows);
  m.positions = c.Take<int32_t>(rows);
  m.seg_start = c.Take<int32_t>(rows);
  m.last_rows = c.Take<int32_t>(items);
  m.contexts = c.Take<KvLayers>(items + 1);
  m.tiles = c.Take<kernels::AttentionTile>(MaxPassTiles(rows, items, group()));
  m.counts = c.Take<PassCounts>(1);
  m.unit_counters = c.Take<int32_t>(config_.num_layers);
  return m;
}

PassArrays CudaBackend::Arrays(const Meta& m, const PassShape& shape, int group) {
  return PassArrays{absl::MakeSpan(m.tokens, shape.rows), absl::MakeSpan(m.positions, shape.rows),
                    absl::MakeSpan(m.seg_start, shape.rows),
                    absl::MakeSpan(m.last_rows, shape.items),
                    absl::MakeSpan(m.tiles, MaxPassTiles(shape.rows, shape.items, group))};
}

absl::Status CudaBackend::EnsureCapacity(int tokens, int rows) {
  if (workspace_ && tokens <= cap_.tokens && rows <= cap_.rows) return absl::OkStatus();
  Capacity cap;
  // Grow what is short by at least half, so that slowly rising sizes reallocate rarely.
  cap.tokens =
      tokens <= cap_.tokens ? cap_.tokens : std::max({tokens, cap_.tokens + cap_.tokens / 2, 256});
  cap.rows = rows <= cap_.rows ? cap_.rows : std::max(rows, cap_.rows + cap_.rows / 2);
  // The old blocks may still be in use by queued work, and the graphs point into them.
  RANKD_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(ctx_->stream()));
  graphs_.Clear();
  own_plans_.clear();  // their descriptors point into the old workspace
  workspace_.reset();
  staging_.reset();

  const int64_t T = cap.tokens, H = config_.hidden_size, Q = config_.q_width(),
                I = config_.intermediate_size, D = config_.head_dim;
  Carver meta_size;
  CarveMeta(meta_size, cap.tokens, cap.tokens);
  const size_t meta_bytes = meta_size.bytes();
  auto carve_device = [&](Carver& c) {
    dev_meta_ = c.Take<char>(meta_bytes);
    rotations_ = c.Take<float2>(T * D / 2);
    x_ = c.Take<float>(T * H);
    normed_ = c.Take<bf16>(T * H);
    if (fold_norms_) norm_sumsq_ = c.Take<float>(T * (H / kernels::kHopperScaleGroup));
    wide_ = c.Take<bf16>(T * std::max<int64_t>(qkv_width(), 2 * I));
    attn_ = c.Take<bf16>(T * Q);
    act_ = c.Take<bf16>(T * I);
    if (precision_ == Precision::kFp8) {
      gemm_in_fp8_ = c.Take<__nv_fp8_e4m3>(T * std::max({H, Q, I}));
      gemm_in_scale_ = c.Take<float>(T);
      if (down_groups_) act_group_scale_ = c.Take<float>(T * (I / kernels::kHopperScaleGroup));
      if (fp8_groups_) {
        gemm_in_group_scale_ = c.Take<float>(T * (std::max(H, Q) / kernels::kHopperScaleGroup));
      }
    }
    x_last_ = c.Take<float>(T * H);
    dev_rows_ = c.Take<float>(int64_t{cap.rows} * H);
    dev_scores_ = c.Take<float>(T);
  };
  auto carve_host = [&](Carver& c) {
    host_meta_ = c.Take<char>(meta_bytes);
    host_rows_ = c.Take<float>(int64_t{cap.rows} * H);
    host_scores_ = c.Take<float>(T);
  };
  Carver measure_dev, measure_host;
  carve_device(measure_dev);
  carve_host(measure_host);
  RANKD_ASSIGN_OR_RETURN(workspace_, Arena::Create(Arena::Kind::kDevice, measure_dev.bytes()));
  RANKD_ASSIGN_OR_RETURN(staging_, Arena::Create(Arena::Kind::kPinnedHost, measure_host.bytes()));
  Carver dev = workspace_->carver(), host = staging_->carver();
  carve_device(dev);
  carve_host(host);
  // Attention writes only live rows; padding rows of its output feed o_proj, so they must hold
  // finite values: zeros now, earlier passes' outputs later.
  RANKD_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(attn_, 0, sizeof(bf16) * T * Q, ctx_->stream()));
  cap_ = cap;
  spdlog::debug(
      "cuda backend: workspace for {} tokens, {} embedding rows: {:.1f} MiB device, "
      "{:.1f} MiB pinned",
      cap.tokens, cap.rows, workspace_->capacity() / 1048576.0, staging_->capacity() / 1048576.0);
  return absl::OkStatus();
}

absl::Status CudaBackend::AcquireStaging() {
  RANKD_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(staging_free_));
  return absl::OkStatus();
}

absl::Status CudaBackend::Upload(const PassShape& shape, int num_rows) {
  cudaStream_t s = ctx_->stream();
  Carver layout;
  CarveMeta(layout, shape.rows, shape.items);
  RANKD_RETURN_IF_ERROR(
      Mark(Stage::kUpload, {0, layout.bytes() + 4.0 * num_rows * config_.hidden_size}));
  RANKD_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(dev_meta_, host_meta_, layout.bytes(), cudaMemcpyHostToDevice, s));
  if (num_rows > 0) {
    RANKD_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(
        dev_rows_, host_rows_, sizeof(float) * num_rows * static_cast<size_t>(config_.hidden_size),
        cudaMemcpyHostToDevice, s));
  }
  RANKD_CUDA_RETURN_IF_ERROR(cudaEventRecord(staging_free_, s));
  return absl::OkStatus();
}

}  // namespace rankd::cuda::internal
