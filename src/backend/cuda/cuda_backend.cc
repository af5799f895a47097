#include "rankd/backend/cuda/cuda_backend.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "kernels/embedding.cuh"
#include "kernels/prefix_attention.cuh"
#include "kernels/qkv_rope.cuh"
#include "kernels/rms_norm.cuh"
#include "kernels/score_head.cuh"
#include "kernels/swiglu.cuh"
#include "rankd/backend/cpu/ops.h"
#include "rankd/backend/cuda/cuda_status.h"
#include "rankd/backend/cuda/device_arena.h"
#include "rankd/backend/cuda/gemm.h"
#include "rankd/common/logging.h"
#include "rankd/common/status.h"
#include "rankd/model/safetensors.h"
#include "rankd/model/weights.h"
#include "spdlog/spdlog.h"

namespace rankd::cuda {
namespace {

using bf16 = __nv_bfloat16;
using engine::HeadSpec;
using engine::ItemBatch;
using engine::PrefixState;
using model::ModelConfig;

constexpr size_t kGemmWorkspaceBytes = 32 << 20;

enum class Strategy { kIbpc, kMultiItem };

// The device and the stream all of a backend's work runs on. Shared with the prefixes the backend
// made, so that a prefix outliving its backend can still free its K/V in stream order.
class DeviceContext {
 public:
  static absl::StatusOr<std::shared_ptr<DeviceContext>> Create(int device) {
    RANKD_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
    cudaStream_t stream = nullptr;
    RANKD_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    return std::shared_ptr<DeviceContext>(new DeviceContext(device, stream));
  }
  ~DeviceContext() {
    cudaSetDevice(device_);
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
  }
  DeviceContext(const DeviceContext&) = delete;
  DeviceContext& operator=(const DeviceContext&) = delete;

  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }

 private:
  DeviceContext(int device, cudaStream_t stream) : device_(device), stream_(stream) {}
  int device_;
  cudaStream_t stream_;
};

// An encoded prefix. IBPC: the K/V of every layer on the device. Multi-item: the ids only (the
// prefix runs again inside each packed pass).
class CudaPrefix final : public PrefixState {
 public:
  CudaPrefix(const void* owner, std::shared_ptr<DeviceContext> ctx, std::vector<int32_t> ids)
      : owner_(owner), ctx_(std::move(ctx)), ids_(std::move(ids)) {}
  ~CudaPrefix() override {
    if (kv_ != nullptr) {
      cudaSetDevice(ctx_->device());
      cudaFreeAsync(kv_, ctx_->stream());
    }
  }

  int num_tokens() const override { return static_cast<int>(ids_.size()); }
  size_t bytes() const override { return kv_bytes_ + ids_.size() * sizeof(int32_t); }

  absl::Status AllocateKv(size_t bytes) {
    RANKD_CUDA_RETURN_IF_ERROR(
        cudaMallocAsync(reinterpret_cast<void**>(&kv_), bytes, ctx_->stream()));
    kv_bytes_ = bytes;
    return absl::OkStatus();
  }

  const void* owner() const { return owner_; }
  const std::vector<int32_t>& ids() const { return ids_; }
  bf16* kv() const { return kv_; }

 private:
  const void* owner_;
  std::shared_ptr<DeviceContext> ctx_;
  std::vector<int32_t> ids_;  // [P]
  bf16* kv_ = nullptr;        // [L, 2, P, Nkv, D] bf16: per layer K then V (IBPC only)
  size_t kv_bytes_ = 0;
};

// Device weights, all bf16 except inv_freq. Shapes: H hidden, D head_dim, Q = Nq*D, KV = Nkv*D,
// I intermediate; linear weights [out, in] row-major as HF stores them.
struct LayerWeights {
  const bf16* input_norm = nullptr;  // [H]
  const bf16* wqkv = nullptr;        // [Q + 2KV, H]  q_proj, k_proj, v_proj rows stacked
  const bf16* bqkv = nullptr;        // [Q + 2KV]     null without attention_bias
  const bf16* q_norm = nullptr;      // [D]           null without qk_norm
  const bf16* k_norm = nullptr;      // [D]
  const bf16* wo = nullptr;          // [H, Q]
  const bf16* post_norm = nullptr;   // [H]
  const bf16* w_gate_up = nullptr;   // [2I, H]  gate_proj rows, then up_proj rows
  const bf16* w_down = nullptr;      // [H, I]
};

// Where a pass writes (or reads) the K/V of layer l: k + l * layer_stride, v + l * layer_stride,
// each [rows, Nkv, D] bf16.
struct KvView {
  bf16* k = nullptr;
  bf16* v = nullptr;
  size_t layer_stride = 0;  // elements; 0 when one buffer serves every layer
  bf16* layer_k(int l) const { return k ? k + l * layer_stride : nullptr; }
  bf16* layer_v(int l) const { return v ? v + l * layer_stride : nullptr; }
};

// The per-pass metadata, carved identically from the pinned host block and the device workspace
// so that one copy uploads it.
struct Meta {
  int32_t* tokens = nullptr;       // [T] vocab id, or -(r + 1) for embedding row r
  int32_t* positions = nullptr;    // [T] RoPE positions
  int32_t* seg_offsets = nullptr;  // [S + 1] attention segments over the T rows
  int32_t* seg_ctx_len = nullptr;  // [S] context rows each segment attends to first
  int32_t* last_rows = nullptr;    // [N] row of each item's last token
  int2* tiles = nullptr;           // [tiles] attention work list (segment, first query row)
};

// Capacity of a workspace, in tokens and embedding rows.
struct Capacity {
  int tokens = 0;
  int rows = 0;
};

class CudaBackend final : public engine::Backend {
 public:
  CudaBackend(ModelConfig config, HeadSpec head, Strategy strategy,
              std::shared_ptr<DeviceContext> ctx)
      : config_(std::move(config)), head_(head), strategy_(strategy), ctx_(std::move(ctx)) {}

  ~CudaBackend() override {
    // Queued work may still use the arenas that the members' destructors free.
    cudaSetDevice(ctx_->device());
    cudaStreamSynchronize(ctx_->stream());
    if (staging_free_ != nullptr) cudaEventDestroy(staging_free_);
  }

  absl::Status Load(const model::SafetensorsModel& st, int initial_tokens);

  absl::string_view name() const override { return "cuda"; }
  const ModelConfig& config() const override { return config_; }
  const HeadSpec& head() const override { return head_; }

  absl::StatusOr<std::shared_ptr<const PrefixState>> EncodePrefix(
      absl::Span<const int32_t> ids) override;
  absl::Status ScoreItems(const PrefixState& prefix, const ItemBatch& items,
                          absl::Span<float> scores) override;

  size_t weight_bytes() const { return weights_->capacity(); }

 private:
  int group() const { return config_.num_heads / config_.num_kv_heads; }
  int qkv_width() const { return config_.q_width() + 2 * config_.kv_width(); }

  Meta CarveMeta(Carver& c, const Capacity& cap) const;
  absl::Status EnsureCapacity(int tokens, int rows);
  // Waits until the previous pass's uploads have left the pinned staging block.
  absl::Status AcquireStaging();
  // Uploads the first `num_tokens` tokens' metadata (and `num_rows` embedding rows) and runs the
  // embedding gather into ws x.
  absl::Status UploadAndEmbed(int num_tokens, int num_rows);
  // Fills host meta segments/tiles from host seg_offsets; returns the tile count.
  int FillTiles(int num_segments);
  // Runs the decoder layers over x [T, H]. With `kv_only` (prefix encoding) the last layer stops
  // once its K/V are written.
  absl::Status RunLayers(int T, int num_segments, int num_tiles, const KvView& own,
                         const KvView& ctx, bool kv_only);
  absl::Status CheckItems(const ItemBatch& items, size_t num_scores) const;

  ModelConfig config_;
  HeadSpec head_;
  Strategy strategy_;
  std::shared_ptr<DeviceContext> ctx_;
  std::mutex mu_;  // one pass at a time: the workspace and staging are shared

  // Weights arena: every tensor below, inv_freq, and cuBLASLt's workspace.
  std::unique_ptr<Arena> weights_;
  const bf16* embed_ = nullptr;       // [V, H]
  std::vector<LayerWeights> layers_;  // [L]
  const bf16* final_norm_ = nullptr;  // [H]
  const bf16* head_rows_ = nullptr;   // [1 or 2, H] classifier row, or lm_head[yes], lm_head[no]
  const float* inv_freq_ = nullptr;   // [D / 2] fp32
  std::unique_ptr<Gemm> gemm_;

  // Workspace (device) and staging (pinned host), sized for `cap_`.
  Capacity cap_;
  std::unique_ptr<Arena> workspace_;
  std::unique_ptr<Arena> staging_;
  size_t meta_bytes_ = 0;
  Meta dev_meta_, host_meta_;
  float* x_ = nullptr;                  // [T, H] fp32 residual stream
  bf16* normed_ = nullptr;              // [T, H]
  bf16* wide_ = nullptr;                // [T, max(Q + 2KV, 2I)]: qkv, later gate_up
  bf16* q_ = nullptr;                   // [T, Nq, D]
  bf16* k_ = nullptr;                   // [T, Nkv, D] own-token keys
  bf16* v_ = nullptr;                   // [T, Nkv, D] own-token values
  bf16* attn_ = nullptr;                // [T, Nq, D]
  bf16* act_ = nullptr;                 // [T, I]
  float* dev_rows_ = nullptr;           // [R, H] fp32 injected embedding rows
  float* dev_scores_ = nullptr;         // [T] fp32 (N <= T)
  float* host_rows_ = nullptr;          // [R, H] fp32 pinned
  float* host_scores_ = nullptr;        // [T] fp32 pinned
  cudaEvent_t staging_free_ = nullptr;  // recorded after the last copy out of staging
};

// ---- loading ---------------------------------------------------------------------------------

// A run of elements of a checkpoint tensor, converted to bf16 on upload.
struct Piece {
  const model::TensorView* tensor;
  int64_t begin;
  int64_t count;
};

void ToBf16(const Piece& p, uint16_t* out) {
  const model::TensorView& t = *p.tensor;
  const size_t es = model::DTypeSize(t.dtype);
  const uint8_t* src = t.data + p.begin * es;
  for (int64_t i = 0; i < p.count; ++i) {
    switch (t.dtype) {
      case model::DType::kBF16:
        std::memcpy(&out[i], src + i * 2, 2);
        break;
      case model::DType::kF16: {
        uint16_t h;
        std::memcpy(&h, src + i * 2, 2);
        out[i] = model::F32ToBf16(model::F16ToF32(h));
        break;
      }
      case model::DType::kF32: {
        float f;
        std::memcpy(&f, src + i * 4, 4);
        out[i] = model::F32ToBf16(f);
        break;
      }
    }
  }
}

Piece Whole(const model::TensorView* t) { return Piece{t, 0, t->numel()}; }

absl::Status CudaBackend::Load(const model::SafetensorsModel& st, int initial_tokens) {
  RANKD_ASSIGN_OR_RETURN(model::ModelTensors t, model::BindTensors(config_, st));
  const int H = config_.hidden_size, L = config_.num_layers;

  // Every device tensor: where its pointer goes and the pieces it is made of.
  struct Upload {
    const bf16** dst;
    std::vector<Piece> pieces;
  };
  std::vector<Upload> uploads;
  uploads.push_back({&embed_, {Whole(t.embed)}});
  uploads.push_back({&final_norm_, {Whole(t.final_norm)}});
  if (head_.type == HeadSpec::Type::kClassifier) {
    uploads.push_back({&head_rows_, {Piece{t.head, int64_t{head_.index} * H, H}}});
  } else {
    uploads.push_back({&head_rows_,
                       {Piece{t.head, int64_t{head_.yes_id} * H, H},
                        Piece{t.head, int64_t{head_.no_id} * H, H}}});
  }
  layers_.resize(L);
  for (int l = 0; l < L; ++l) {
    const model::LayerTensors& s = t.layers[l];
    LayerWeights& d = layers_[l];
    uploads.push_back({&d.input_norm, {Whole(s.input_norm)}});
    uploads.push_back({&d.wqkv, {Whole(s.q_proj), Whole(s.k_proj), Whole(s.v_proj)}});
    if (config_.attention_bias) {
      uploads.push_back({&d.bqkv, {Whole(s.q_bias), Whole(s.k_bias), Whole(s.v_bias)}});
    }
    if (config_.qk_norm) {
      uploads.push_back({&d.q_norm, {Whole(s.q_norm)}});
      uploads.push_back({&d.k_norm, {Whole(s.k_norm)}});
    }
    uploads.push_back({&d.wo, {Whole(s.o_proj)}});
    uploads.push_back({&d.post_norm, {Whole(s.post_norm)}});
    uploads.push_back({&d.w_gate_up, {Whole(s.gate_proj), Whole(s.up_proj)}});
    uploads.push_back({&d.w_down, {Whole(s.down_proj)}});
  }
  const std::vector<float> inv_freq = cpu::RopeInverseFrequencies(config_.rope, config_.head_dim);

  // Lay out the arena: measure, allocate, carve again for real.
  auto carve = [&](Carver& c) {
    std::vector<bf16*> ptrs;
    for (const Upload& u : uploads) {
      int64_t n = 0;
      for (const Piece& p : u.pieces) n += p.count;
      ptrs.push_back(c.Take<bf16>(n));
    }
    return ptrs;
  };
  // cuBLASLt's workspace first: the block's start (cudaMalloc) is 256-byte aligned, as it needs.
  Carver measure;
  measure.Take<char>(kGemmWorkspaceBytes);
  carve(measure);
  measure.Take<float>(inv_freq.size());
  RANKD_ASSIGN_OR_RETURN(weights_, Arena::Create(Arena::Kind::kDevice, measure.bytes()));
  Carver c = weights_->carver();
  void* gemm_ws = c.Take<char>(kGemmWorkspaceBytes);
  std::vector<bf16*> ptrs = carve(c);
  float* inv_freq_dev = c.Take<float>(inv_freq.size());

  std::vector<uint16_t> host;  // one tensor's bf16 bits at a time
  for (size_t i = 0; i < uploads.size(); ++i) {
    int64_t n = 0;
    for (const Piece& p : uploads[i].pieces) n += p.count;
    host.resize(n);
    int64_t at = 0;
    for (const Piece& p : uploads[i].pieces) {
      ToBf16(p, host.data() + at);
      at += p.count;
    }
    RANKD_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(ptrs[i], host.data(), n * sizeof(uint16_t), cudaMemcpyHostToDevice));
    *uploads[i].dst = ptrs[i];
  }
  RANKD_CUDA_RETURN_IF_ERROR(cudaMemcpy(inv_freq_dev, inv_freq.data(),
                                        inv_freq.size() * sizeof(float), cudaMemcpyHostToDevice));
  inv_freq_ = inv_freq_dev;
  RANKD_ASSIGN_OR_RETURN(gemm_, Gemm::Create(gemm_ws, kGemmWorkspaceBytes));
  RANKD_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&staging_free_, cudaEventDisableTiming));
  return EnsureCapacity(initial_tokens, 0);
}

// ---- workspace ---------------------------------------------------------------------------------

Meta CudaBackend::CarveMeta(Carver& c, const Capacity& cap) const {
  const int segments = cap.tokens + 1;  // at most one per item plus the prefix
  // Segment s needs ceil(len_s * G / 64) tiles, and sum(len_s) <= tokens.
  const int tiles = cap.tokens * group() / kernels::kAttentionTileRows + segments + 1;
  Meta m;
  m.tokens = c.Take<int32_t>(cap.tokens);
  m.positions = c.Take<int32_t>(cap.tokens);
  m.seg_offsets = c.Take<int32_t>(segments + 1);
  m.seg_ctx_len = c.Take<int32_t>(segments);
  m.last_rows = c.Take<int32_t>(cap.tokens);
  m.tiles = c.Take<int2>(tiles);
  return m;
}

absl::Status CudaBackend::EnsureCapacity(int tokens, int rows) {
  if (workspace_ && tokens <= cap_.tokens && rows <= cap_.rows) return absl::OkStatus();
  Capacity cap;
  // Grow what is short by at least half, so that slowly rising sizes reallocate rarely.
  cap.tokens =
      tokens <= cap_.tokens ? cap_.tokens : std::max({tokens, cap_.tokens + cap_.tokens / 2, 256});
  cap.rows = rows <= cap_.rows ? cap_.rows : std::max(rows, cap_.rows + cap_.rows / 2);
  // The old blocks may still be in use by queued work.
  RANKD_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(ctx_->stream()));
  workspace_.reset();
  staging_.reset();

  const int64_t T = cap.tokens, H = config_.hidden_size, Q = config_.q_width(),
                KV = config_.kv_width(), I = config_.intermediate_size;
  auto carve_device = [&](Carver& c) {
    dev_meta_ = CarveMeta(c, cap);
    meta_bytes_ = c.bytes();
    x_ = c.Take<float>(T * H);
    normed_ = c.Take<bf16>(T * H);
    wide_ = c.Take<bf16>(T * std::max<int64_t>(qkv_width(), 2 * I));
    q_ = c.Take<bf16>(T * Q);
    k_ = c.Take<bf16>(T * KV);
    v_ = c.Take<bf16>(T * KV);
    attn_ = c.Take<bf16>(T * Q);
    act_ = c.Take<bf16>(T * I);
    dev_rows_ = c.Take<float>(int64_t{cap.rows} * H);
    dev_scores_ = c.Take<float>(T);
  };
  auto carve_host = [&](Carver& c) {
    host_meta_ = CarveMeta(c, cap);
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

int CudaBackend::FillTiles(int num_segments) {
  return kernels::FillAttentionTiles(host_meta_.seg_offsets, num_segments, group(),
                                     host_meta_.tiles);
}

absl::Status CudaBackend::UploadAndEmbed(int num_tokens, int num_rows) {
  cudaStream_t s = ctx_->stream();
  RANKD_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(dev_meta_.tokens, host_meta_.tokens, meta_bytes_, cudaMemcpyHostToDevice, s));
  if (num_rows > 0) {
    RANKD_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(
        dev_rows_, host_rows_, sizeof(float) * num_rows * static_cast<size_t>(config_.hidden_size),
        cudaMemcpyHostToDevice, s));
  }
  RANKD_CUDA_RETURN_IF_ERROR(cudaEventRecord(staging_free_, s));
  RANKD_CUDA_RETURN_IF_ERROR(kernels::LaunchEmbeddingGather(dev_meta_.tokens, num_tokens, embed_,
                                                            dev_rows_, config_.hidden_size, x_, s));
  return absl::OkStatus();
}

// ---- forward -----------------------------------------------------------------------------------

absl::Status CudaBackend::RunLayers(int T, int num_segments, int num_tiles, const KvView& own,
                                    const KvView& ctx, bool kv_only) {
  cudaStream_t s = ctx_->stream();
  const int H = config_.hidden_size, Q = config_.q_width(), I = config_.intermediate_size;
  const float eps = config_.rms_norm_eps;
  for (int l = 0; l < config_.num_layers; ++l) {
    const LayerWeights& w = layers_[l];
    RANKD_CUDA_RETURN_IF_ERROR(kernels::LaunchRmsNorm(x_, w.input_norm, eps, T, H, normed_, s));
    RANKD_RETURN_IF_ERROR(gemm_->Linear(normed_, w.wqkv, T, H, qkv_width(), wide_, s));
    kernels::QkvRopeParams r;
    r.qkv = wide_;
    r.bias = w.bqkv;
    r.q_norm = w.q_norm;
    r.k_norm = w.k_norm;
    r.positions = dev_meta_.positions;
    r.inv_freq = inv_freq_;
    r.num_tokens = T;
    r.num_q_heads = config_.num_heads;
    r.num_kv_heads = config_.num_kv_heads;
    r.head_dim = config_.head_dim;
    r.eps = eps;
    r.q = q_;
    r.k = own.layer_k(l);
    r.v = own.layer_v(l);
    RANKD_CUDA_RETURN_IF_ERROR(kernels::LaunchQkvRope(r, s));
    if (kv_only && l == config_.num_layers - 1) break;  // nothing reads this layer's output

    kernels::PrefixAttentionParams a;
    a.q = q_;
    a.k = own.layer_k(l);
    a.v = own.layer_v(l);
    a.ctx_k = ctx.layer_k(l);
    a.ctx_v = ctx.layer_v(l);
    a.seg_offsets = dev_meta_.seg_offsets;
    a.seg_ctx_len = dev_meta_.seg_ctx_len;
    a.tiles = dev_meta_.tiles;
    a.num_tiles = num_tiles;
    a.num_q_heads = config_.num_heads;
    a.num_kv_heads = config_.num_kv_heads;
    a.head_dim = config_.head_dim;
    a.out = attn_;
    RANKD_CUDA_RETURN_IF_ERROR(kernels::LaunchPrefixAttention(a, s));
    RANKD_RETURN_IF_ERROR(gemm_->LinearAccumulate(attn_, w.wo, T, Q, H, x_, s));

    RANKD_CUDA_RETURN_IF_ERROR(kernels::LaunchRmsNorm(x_, w.post_norm, eps, T, H, normed_, s));
    RANKD_RETURN_IF_ERROR(gemm_->Linear(normed_, w.w_gate_up, T, H, 2 * I, wide_, s));
    RANKD_CUDA_RETURN_IF_ERROR(kernels::LaunchSwiGlu(wide_, T, I, act_, s));
    RANKD_RETURN_IF_ERROR(gemm_->LinearAccumulate(act_, w.w_down, T, I, H, x_, s));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const PrefixState>> CudaBackend::EncodePrefix(
    absl::Span<const int32_t> ids) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= config_.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("prefix token ", i, " = ", ids[i],
                                                     " is outside the vocabulary [0, ",
                                                     config_.vocab_size, ")"));
    }
  }
  auto prefix =
      std::make_shared<CudaPrefix>(this, ctx_, std::vector<int32_t>(ids.begin(), ids.end()));
  const int P = static_cast<int>(ids.size());
  if (strategy_ == Strategy::kMultiItem || P == 0) return prefix;

  std::lock_guard<std::mutex> lock(mu_);
  RANKD_CUDA_RETURN_IF_ERROR(cudaSetDevice(ctx_->device()));
  const int64_t L = config_.num_layers, KV = config_.kv_width();
  RANKD_RETURN_IF_ERROR(prefix->AllocateKv(sizeof(bf16) * L * 2 * P * KV));
  RANKD_RETURN_IF_ERROR(EnsureCapacity(P, 0));
  RANKD_RETURN_IF_ERROR(AcquireStaging());
  std::copy(ids.begin(), ids.end(), host_meta_.tokens);
  for (int t = 0; t < P; ++t) host_meta_.positions[t] = t;
  host_meta_.seg_offsets[0] = 0;
  host_meta_.seg_offsets[1] = P;
  host_meta_.seg_ctx_len[0] = 0;
  const int num_tiles = FillTiles(1);
  RANKD_RETURN_IF_ERROR(UploadAndEmbed(P, 0));
  const KvView own{prefix->kv(), prefix->kv() + P * KV, static_cast<size_t>(2 * P * KV)};
  RANKD_RETURN_IF_ERROR(RunLayers(P, 1, num_tiles, own, KvView{}, /*kv_only=*/true));
  return std::shared_ptr<const PrefixState>(std::move(prefix));
}

absl::Status CudaBackend::CheckItems(const ItemBatch& items, size_t num_scores) const {
  const int N = items.num_items(), H = config_.hidden_size;
  if (num_scores != static_cast<size_t>(N)) {
    return absl::InvalidArgumentError(
        absl::StrCat("scores has ", num_scores, " slots for ", N, " items"));
  }
  if (items.offsets.empty() || items.offsets[0] != 0 ||
      items.offsets.back() != items.num_tokens()) {
    return absl::InvalidArgumentError("item offsets do not cover the tokens");
  }
  for (int i = 0; i < N; ++i) {
    if (items.item_length(i) <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("item ", i, " has no tokens"));
    }
  }
  if (items.embeddings.size() % H != 0) {
    return absl::InvalidArgumentError(absl::StrCat("embeddings hold ", items.embeddings.size(),
                                                   " values, not a multiple of hidden_size ", H));
  }
  const int64_t rows = static_cast<int64_t>(items.embeddings.size()) / H;
  for (int32_t tok : items.tokens) {
    if (tok >= config_.vocab_size || (tok < 0 && -static_cast<int64_t>(tok) > rows)) {
      return absl::InvalidArgumentError(absl::StrCat("token ", tok, " is out of range (vocab ",
                                                     config_.vocab_size, ", ", rows,
                                                     " embedding rows)"));
    }
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::ScoreItems(const PrefixState& prefix_base, const ItemBatch& items,
                                     absl::Span<float> scores) {
  const auto* prefix = dynamic_cast<const CudaPrefix*>(&prefix_base);
  if (prefix == nullptr || prefix->owner() != this) {
    return absl::InvalidArgumentError("prefix was not made by this cuda backend");
  }
  RANKD_RETURN_IF_ERROR(CheckItems(items, scores.size()));
  const int N = items.num_items();
  if (N == 0) return absl::OkStatus();

  std::lock_guard<std::mutex> lock(mu_);
  RANKD_CUDA_RETURN_IF_ERROR(cudaSetDevice(ctx_->device()));
  cudaStream_t s = ctx_->stream();
  const int H = config_.hidden_size;
  const int P = prefix->num_tokens();
  const int R = static_cast<int>(items.embeddings.size() / H);
  // Multi-item packs the prefix in front of the items, as segment 0.
  const int lead = strategy_ == Strategy::kMultiItem ? P : 0;
  const int T = lead + items.num_tokens();
  RANKD_RETURN_IF_ERROR(EnsureCapacity(T, R));
  RANKD_RETURN_IF_ERROR(AcquireStaging());

  Meta& m = host_meta_;
  std::copy(prefix->ids().begin(), prefix->ids().begin() + lead, m.tokens);
  std::copy(items.tokens.begin(), items.tokens.end(), m.tokens + lead);
  for (int t = 0; t < lead; ++t) m.positions[t] = t;
  int num_segments = 0;
  m.seg_offsets[0] = 0;
  if (lead > 0) {
    m.seg_offsets[++num_segments] = lead;
    m.seg_ctx_len[0] = 0;
  }
  for (int i = 0; i < N; ++i) {
    const int begin = lead + items.offsets[i], end = lead + items.offsets[i + 1];
    for (int t = begin; t < end; ++t) m.positions[t] = P + (t - begin);
    m.seg_ctx_len[num_segments] = P;
    m.seg_offsets[++num_segments] = end;
    m.last_rows[i] = end - 1;
  }
  const int num_tiles = FillTiles(num_segments);
  if (R > 0) std::copy(items.embeddings.begin(), items.embeddings.end(), host_rows_);
  RANKD_RETURN_IF_ERROR(UploadAndEmbed(T, R));

  const KvView own{k_, v_, 0};
  KvView ctx = own;  // multi-item: the prefix rows of the same buffers
  if (strategy_ == Strategy::kIbpc) {
    const int64_t KV = config_.kv_width();
    ctx = KvView{prefix->kv(), prefix->kv() ? prefix->kv() + P * KV : nullptr,
                 static_cast<size_t>(2 * P * KV)};
  }
  RANKD_RETURN_IF_ERROR(RunLayers(T, num_segments, num_tiles, own, ctx, /*kv_only=*/false));

  RANKD_CUDA_RETURN_IF_ERROR(kernels::LaunchScoreHead(
      x_, dev_meta_.last_rows, N, final_norm_, head_rows_,
      head_.type == HeadSpec::Type::kClassifier ? 1 : 2, config_.rms_norm_eps, H, dev_scores_, s));
  RANKD_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(host_scores_, dev_scores_, sizeof(float) * N, cudaMemcpyDeviceToHost, s));
  // The one synchronisation of a pass: the scores are read here.
  RANKD_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s));
  std::copy(host_scores_, host_scores_ + N, scores.begin());
  return absl::OkStatus();
}

absl::StatusOr<Strategy> ParseStrategy(absl::string_view s) {
  if (s == "ibpc") return Strategy::kIbpc;
  if (s == "multi-item") return Strategy::kMultiItem;
  return absl::InvalidArgumentError(
      absl::StrCat("cuda strategy '", s, "' is unknown (ibpc, multi-item)"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<engine::Backend>> CreateCudaBackend(
    const engine::BackendOptions& options, const std::string& model_dir,
    const engine::HeadSpec& head) {
  RANKD_ASSIGN_OR_RETURN(Strategy strategy, ParseStrategy(options.strategy));
  int devices = 0;
  const cudaError_t err = cudaGetDeviceCount(&devices);
  if (err != cudaSuccess || devices == 0) {
    return absl::UnavailableError(
        absl::StrCat("backend 'cuda': no CUDA device is available (",
                     err != cudaSuccess ? cudaGetErrorString(err) : "0 devices", ")"));
  }
  if (options.device < 0 || options.device >= devices) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda device ", options.device, " does not exist (", devices, " devices)"));
  }
  RANKD_ASSIGN_OR_RETURN(auto config, model::ModelConfig::FromHfDir(model_dir));
  RANKD_RETURN_IF_ERROR(engine::ValidateHead(config, head));
  if (!kernels::PrefixAttentionSupportsHeadDim(config.head_dim)) {
    return absl::UnimplementedError(
        absl::StrCat(model_dir, ": head_dim ", config.head_dim,
                     " is not supported by the CUDA attention kernel (multiples of 16 up to 128)"));
  }
  RANKD_ASSIGN_OR_RETURN(auto st, model::SafetensorsModel::OpenDir(model_dir));
  RANKD_ASSIGN_OR_RETURN(auto ctx, DeviceContext::Create(options.device));
  auto backend = std::make_unique<CudaBackend>(config, head, strategy, std::move(ctx));
  RANKD_RETURN_IF_ERROR(
      Annotate(backend->Load(*st, std::max(1, options.max_batch_tokens)), model_dir));
  cudaDeviceProp prop;
  RANKD_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, options.device));
  spdlog::info("cuda backend: {} on {} (device {}), strategy {}, head {}, {:.1f} MiB of weights",
               config.Summary(), prop.name, options.device, options.strategy, head.ToString(),
               backend->weight_bytes() / 1048576.0);
  return backend;
}

}  // namespace rankd::cuda
