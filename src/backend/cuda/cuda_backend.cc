#include "rankd/backend/cuda/cuda_backend.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernels/embedding.cuh"
#include "kernels/gather_rows.cuh"
#include "kernels/hopper_gemm.cuh"
#include "kernels/kv_layers.cuh"
#include "kernels/prefix_attention.cuh"
#include "kernels/qkv_rope.cuh"
#include "kernels/quantize_fp8.cuh"
#include "kernels/rms_norm.cuh"
#include "kernels/score_head.cuh"
#include "kernels/swiglu.cuh"
#include "rankd/backend/cuda/cuda_status.h"
#include "rankd/backend/cuda/cuda_weights.h"
#include "rankd/backend/cuda/device_arena.h"
#include "rankd/backend/cuda/gemm.h"
#include "rankd/backend/cuda/graph_cache.h"
#include "rankd/backend/cuda/pass_plan.h"
#include "rankd/backend/cuda/stage_profiler.h"
#include "rankd/common/logging.h"
#include "rankd/common/status.h"
#include "rankd/model/safetensors.h"
#include "spdlog/spdlog.h"

namespace rankd::cuda {
namespace {

using bf16 = __nv_bfloat16;
using backend::HeadSpec;
using backend::ItemBatch;
using backend::PrefixState;
using kernels::KvLayers;
using model::ModelConfig;

constexpr size_t kGemmWorkspaceBytes = 32 << 20;
// Where the prefix pool places its allocations: each starts on a multiple of this (measured on an
// H200, CUDA 12: allocations of 513 bytes lie 1024 apart), so a prefix holds its size rounded up.
constexpr size_t kPrefixPoolAlignment = 512;

// The device and the stream all of a backend's work runs on, the lock that serialises the
// stream's users, and the memory pool of the prefixes' K/V. Shared with the prefixes the backend
// made, so that a prefix outliving its backend can still free its K/V in stream order, and never
// while a graph is being captured on the stream (a free then would be recorded into the graph).
// Recursive: a prefix can die inside a locked call (EncodePrefix's error paths).
//
// The prefix pool is the prefixes' own, with release threshold 0: what evicted prefixes free goes
// back to the driver at the stream's next synchronisation (every score pass ends with one), so the
// device memory held for prefixes follows what the prefix cache counts. (In the device's default
// pool, freed K/V stayed reserved up to its release threshold, for whatever else allocated there.)
// The pool reserves memory in chunks (32 MiB on an H200), so what it holds exceeds what its live
// prefixes use by the free space of partly used chunks.
class DeviceContext {
 public:
  static absl::StatusOr<std::shared_ptr<DeviceContext>> Create(int device) {
    RANKD_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
    cudaStream_t stream = nullptr;
    RANKD_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    std::shared_ptr<DeviceContext> ctx(new DeviceContext(device, stream));
    cudaMemPoolProps props = {};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device;
    RANKD_CUDA_RETURN_IF_ERROR(cudaMemPoolCreate(&ctx->prefix_pool_, &props));
    uint64_t threshold = 0;
    RANKD_CUDA_RETURN_IF_ERROR(
        cudaMemPoolSetAttribute(ctx->prefix_pool_, cudaMemPoolAttrReleaseThreshold, &threshold));
    return ctx;
  }
  ~DeviceContext() {
    cudaSetDevice(device_);
    cudaStreamSynchronize(stream_);
    if (prefix_pool_ != nullptr) cudaMemPoolDestroy(prefix_pool_);
    cudaStreamDestroy(stream_);
  }
  DeviceContext(const DeviceContext&) = delete;
  DeviceContext& operator=(const DeviceContext&) = delete;

  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  cudaMemPool_t prefix_pool() const { return prefix_pool_; }
  std::recursive_mutex& mu() { return mu_; }

  // The prefix pool's attribute `attr` (bytes; 0 if it cannot be read).
  uint64_t PrefixPoolBytes(cudaMemPoolAttr attr) const {
    uint64_t value = 0;
    if (cudaMemPoolGetAttribute(prefix_pool_, attr, &value) != cudaSuccess) return 0;
    return value;
  }

 private:
  DeviceContext(int device, cudaStream_t stream) : device_(device), stream_(stream) {}
  int device_;
  cudaStream_t stream_;
  cudaMemPool_t prefix_pool_ = nullptr;
  std::recursive_mutex mu_;
};

// An encoded prefix. IBPC: the K/V of every layer on the device. Multi-item: the ids only (the
// prefix runs again inside each packed pass).
class CudaPrefix final : public PrefixState {
 public:
  CudaPrefix(const void* owner, std::shared_ptr<DeviceContext> ctx, std::vector<int32_t> ids)
      : owner_(owner), ctx_(std::move(ctx)), ids_(std::move(ids)) {}
  ~CudaPrefix() override {
    if (kv_ != nullptr) {
      std::lock_guard<std::recursive_mutex> lock(ctx_->mu());
      cudaSetDevice(ctx_->device());
      cudaFreeAsync(kv_, ctx_->stream());
    }
  }

  int num_tokens() const override { return static_cast<int>(ids_.size()); }
  // The K/V as the prefix pool places it (rounded up to its alignment), and the ids.
  size_t bytes() const override {
    const size_t kv = (kv_bytes_ + kPrefixPoolAlignment - 1) / kPrefixPoolAlignment;
    return kv * kPrefixPoolAlignment + ids_.capacity() * sizeof(int32_t);
  }

  absl::Status AllocateKv(size_t bytes) {
    RANKD_CUDA_RETURN_IF_ERROR(cudaMallocFromPoolAsync(reinterpret_cast<void**>(&kv_), bytes,
                                                       ctx_->prefix_pool(), ctx_->stream()));
    kv_bytes_ = bytes;
    return absl::OkStatus();
  }

  const void* owner() const { return owner_; }
  const std::vector<int32_t>& ids() const { return ids_; }
  bf16* kv() const { return kv_; }
  // The cache as the attention kernel reads it: [L, 2, P, Nkv, D], K then V per layer.
  KvLayers Layers(int64_t kv_width) const {
    const int64_t P = num_tokens();
    if (kv_ == nullptr) return KvLayers{};
    return KvLayers{kv_, kv_ + P * kv_width, 2 * P * kv_width, kv_width};
  }

 private:
  const void* owner_;
  std::shared_ptr<DeviceContext> ctx_;
  std::vector<int32_t> ids_;  // [P]
  bf16* kv_ = nullptr;        // [L, 2, P, Nkv, D] bf16: per layer K then V (IBPC only)
  size_t kv_bytes_ = 0;
};

// The counts of a pass, in device memory (part of the uploaded metadata).
struct PassCounts {
  int32_t rows = 0;   // live rows; the rest of the pass's rows are padding
  int32_t items = 0;  // N
  int32_t units = 0;  // attention work units (tiles x Nkv)
  int32_t unused = 0;
  KvLayers kv_out;  // encode: the prefix's cache, which RoPE fills; score: k = null
};

// The per-pass metadata, uploaded in one copy. Carved identically from the pinned staging block
// and the device workspace for the pass's shape, so its device addresses depend on the shape alone
// (a graph captured for the shape stays valid as long as the workspace does).
struct Meta {
  int32_t* tokens = nullptr;     // [Tb] vocab id, or -(r + 1) for embedding row r; 0: padding
  int32_t* positions = nullptr;  // [Tb] RoPE positions
  int32_t* seg_start = nullptr;  // [Tb] first row of each row's segment
  int32_t* last_rows = nullptr;  // [Nb] row of each item's last token
  KvLayers* contexts = nullptr;  // [Nb + 1] context K/V of each run
  kernels::AttentionTile* tiles = nullptr;  // [MaxPassTiles(Tb, Nb, G)] work list
  PassCounts* counts = nullptr;             // [1]
  int32_t* unit_counters = nullptr;  // [L] attention work queues, one per layer, zero at upload
};

class CudaBackend final : public backend::Backend {
 public:
  CudaBackend(ModelConfig config, HeadSpec head, Strategy strategy, Precision precision,
              std::shared_ptr<DeviceContext> ctx, bool graphs,
              backend::BackendOptions::CudaSwitches switches)
      : config_(std::move(config)),
        head_(head),
        strategy_(strategy),
        precision_(precision),
        switches_(switches),
        ctx_(std::move(ctx)),
        graphs_(graphs) {}

  ~CudaBackend() override {
    // Queued work may still use the arenas that the members' destructors free.
    cudaSetDevice(ctx_->device());
    cudaStreamSynchronize(ctx_->stream());
    graphs_.Clear();
    if (staging_free_ != nullptr) cudaEventDestroy(staging_free_);
    int own_shapes = 0;
    for (const auto& [shape, own] : own_faster_) own_shapes += own;
    const std::string line = absl::StrCat(
        "cuda backend stats: ", graphs_.Summary(),
        own_use_ == OwnUse::kTimed
            ? absl::StrCat(", linear shapes timed: ", own_shapes, " on the Hopper GEMM, ",
                           own_faster_.size() - own_shapes, " on cuBLASLt")
            : "");
    spdlog::info("{}", line);
    if (switches_.stats || profiler_) std::fprintf(stderr, "%s\n", line.c_str());
    if (profiler_) std::fputs(profiler_->Table().c_str(), stderr);
  }

  absl::Status Load(const model::SafetensorsModel& st, int initial_tokens);

  absl::string_view name() const override { return backend::kCudaBackend; }
  const ModelConfig& config() const override { return config_; }
  const HeadSpec& head() const override { return head_; }

  absl::StatusOr<std::shared_ptr<const PrefixState>> EncodePrefix(
      absl::Span<const int32_t> ids) override;
  absl::Status ScoreItems(const PrefixState& prefix, const ItemBatch& items,
                          absl::Span<float> scores) override;
  absl::Status ScoreGroups(absl::Span<const ScoreGroup> groups) override;

  size_t weight_bytes() const { return weights_.arena->capacity(); }
  bool own_gemm() const { return own_use_ != OwnUse::kNever; }
  CudaBackendStats Stats() {
    std::lock_guard<std::recursive_mutex> lock(ctx_->mu());
    const GraphStats& stats = graphs_.stats();
    CudaBackendStats s;
    s.graphs_enabled = graphs_.enabled();
    s.eager_passes = stats.eager_passes;
    s.graph_replays = stats.graph_replays;
    s.graph_captures = stats.graph_captures;
    s.graph_fallbacks = stats.graph_fallbacks;
    s.graphs_cached = static_cast<int64_t>(graphs_.size());
    s.prefix_pool_used_bytes = ctx_->PrefixPoolBytes(cudaMemPoolAttrUsedMemCurrent);
    s.prefix_pool_reserved_bytes = ctx_->PrefixPoolBytes(cudaMemPoolAttrReservedMemCurrent);
    s.own_gemm = own_gemm();
    return s;
  }

 private:
  int group() const { return config_.num_heads / config_.num_kv_heads; }
  int qkv_width() const { return config_.q_width() + 2 * config_.kv_width(); }

  Meta CarveMeta(Carver& c, int rows, int items) const;
  // The planner's view of a pass's host metadata.
  static PassArrays Arrays(const Meta& m, const PassShape& shape, int group);
  absl::Status EnsureCapacity(int tokens, int rows);
  // Waits until the previous pass's uploads have left the pinned staging block.
  absl::Status AcquireStaging();
  // Uploads the metadata of `shape` (and `num_rows` embedding rows).
  absl::Status Upload(const PassShape& shape, int num_rows);
  // Runs a pass: replays its graph, or runs it eagerly (and captures it for next time).
  absl::Status Forward(const PassShape& shape, const PassWork& work);
  // Launches every kernel of a pass on the stream (eagerly, or into a graph being captured).
  absl::Status RunPass(const PassShape& shape, const PassWork& work);
  absl::StatusOr<const CudaPrefix*> CheckPrefix(const PrefixState* prefix) const;
  // How RANKD_CUDA_OWN_GEMM (switches_.own_gemm) applies here: kNever where the device, the
  // build or the model does not take the Hopper GEMM (said in the log when it was asked for).
  enum class OwnUse { kNever, kAlways, kTimed };
  OwnUse OwnGemmUse() const;
  // y = x [rows, in] . w [out, in]^T through kernels/hopper_gemm with `epilogue`.
  absl::Status OwnGemm(const bf16* x, const bf16* w, int rows, int in, int out,
                       kernels::HopperEpilogue epilogue, void* y);
  // The same layer's work on cuBLASLt: the GEMM, and for the gated epilogues the activation
  // kernel after it (gate_up [rows, out] in `wide`, in the weights' gate_up layout; y [rows,
  // out/2]).
  absl::Status CublasLinear(const bf16* x, const bf16* w, int rows, int in, int out,
                            kernels::HopperEpilogue epilogue, void* y, bf16* wide);
  // Whether the layer shape runs on the Hopper GEMM (own_use_). kTimed: the first time the shape
  // runs outside graph capture, both run on scratch outputs and the faster is kept; during a
  // capture, a shape not timed yet takes cuBLASLt.
  absl::StatusOr<bool> OwnFor(const bf16* x, const bf16* w, int rows, int in, int out,
                              kernels::HopperEpilogue epilogue);
  // y = x . w^T with `epilogue` (kStoreBf16, kAccumulateF32) on the GEMM OwnFor picks.
  absl::Status Linear(const bf16* x, const bf16* w, int rows, int in, int out,
                      kernels::HopperEpilogue epilogue, void* y);
  // Profiling (RANKD_CUDA_PROFILE=1): the stage that starts now, with its FLOPs and bytes.
  absl::Status Mark(Stage stage, double flops, double bytes) {
    return profiler_ ? profiler_->Mark(stage, flops, bytes, ctx_->stream()) : absl::OkStatus();
  }

  ModelConfig config_;
  HeadSpec head_;
  Strategy strategy_;
  Precision precision_;
  const backend::BackendOptions::CudaSwitches switches_;  // read once by the program (RANKD_CUDA_*)
  std::shared_ptr<DeviceContext> ctx_;  // its mutex: one pass at a time, workspace and staging
  GraphCache graphs_;                   // captured passes, valid with this workspace

  CudaWeights weights_;
  std::unique_ptr<Gemm> gemm_;
  // The pass being planned: its runs, requests and counts. Reused from pass to pass (under
  // ctx_->mu()).
  PassPlan plan_;
  int attention_blocks_ = 0;  // persistent grid of the attention kernel
  // RoPE of q happens as attention loads q (no bias, no q/k norm: the QkvRope kernel then reads
  // and writes only k, and v when a cache is filled). RANKD_CUDA_FUSE_Q_ROPE=0 turns it off.
  bool q_rope_in_attention_ = false;
  // What token embeddings are multiplied by: the model's embedding scale rounded to bf16, as HF's
  // bf16 Gemma rounds it (1 for the others).
  float embed_scale_ = 1.0f;

  // Workspace (device) and staging (pinned host), sized for `cap_` (Tc tokens, Rc embedding
  // rows). The metadata regions are carved per pass shape from their bases.
  struct Capacity {
    int tokens = 0;
    int rows = 0;
  } cap_;
  std::unique_ptr<Arena> workspace_;
  std::unique_ptr<Arena> staging_;
  char* dev_meta_ = nullptr;     // metadata region, MetaBytes(Tc) bytes
  char* host_meta_ = nullptr;    // its pinned twin
  float2* rotations_ = nullptr;  // [Tc, D/2] fp32 (cos, sin) of each row's RoPE angles
  float* x_ = nullptr;           // [Tc, H] fp32 residual stream
  bf16* normed_ = nullptr;       // [Tc, H]
  bf16* wide_ = nullptr;         // [Tc, max(Q + 2KV, 2I)]: qkv (roped in place), later gate_up
  bf16* attn_ = nullptr;         // [Tc, Q] attention output
  bf16* act_ = nullptr;          // [Tc, I]
  // Precision fp8: the input of the GEMM about to run, in e4m3, and its per-row scales (written
  // by the input and post norms, the attention output's quantiser and the gated activation).
  __nv_fp8_e4m3* gemm_in_fp8_ = nullptr;  // [Tc, max(H, Q, I)]
  float* gemm_in_scale_ = nullptr;        // [Tc]
  float* x_last_ = nullptr;       // [Tc, H] fp32 the items' last rows in the last layer (compact)
  float* dev_rows_ = nullptr;     // [Rc, H] fp32 injected embedding rows
  float* dev_scores_ = nullptr;   // [Tc] fp32 (N <= T)
  float* host_rows_ = nullptr;    // [Rc, H] fp32 pinned
  float* host_scores_ = nullptr;  // [Tc] fp32 pinned
  cudaEvent_t staging_free_ = nullptr;  // recorded after the last copy out of staging

  std::unique_ptr<StageProfiler> profiler_;  // null unless switches_.profile

  // Where the Hopper GEMM may run (OwnGemmUse), gate_up's weight is interleaved for its gated
  // epilogue (and cuBLASLt's gate_up output then too: the activation kernel reads it so). The
  // plans of the operands met so far (their TMA descriptors) and, kTimed, the choice per layer
  // shape (epilogue, rows, in, out: true when the Hopper GEMM was faster), under ctx_->mu().
  OwnUse own_use_ = OwnUse::kNever;
  int gate_up_half_ = 0;  // LaunchSwiGlu's `half` for the weights' layout (0: stacked)
  std::map<std::tuple<kernels::HopperEpilogue, int, int, int>, bool> own_faster_;
  using OwnGemmKey =
      std::tuple<const void*, const void*, const void*, int, int, int, kernels::HopperEpilogue>;
  std::map<OwnGemmKey, kernels::HopperGemmPlan> own_plans_;
};

// ---- loading ---------------------------------------------------------------------------------

CudaBackend::OwnUse CudaBackend::OwnGemmUse() const {
  using Switch = backend::BackendOptions::CudaSwitches::OwnGemm;
  if (switches_.own_gemm == Switch::kOff) return OwnUse::kNever;
  std::string why;
  const int widths[] = {config_.hidden_size, config_.q_width(), qkv_width(),
                        config_.intermediate_size};
  if (precision_ != Precision::kBf16) {
    why = "precision is not bf16";
  } else if (const cudaError_t e = kernels::HopperGemmSupported(); e != cudaSuccess) {
    why = absl::StrCat(cudaGetErrorString(e),
                       " (it needs an sm_90 device and sm_90a code in this build)");
  } else if (config_.intermediate_size % kernels::kHopperGluHalf != 0) {
    why = absl::StrCat("intermediate_size ", config_.intermediate_size, " is not a multiple of ",
                       kernels::kHopperGluHalf);
  } else if (std::any_of(std::begin(widths), std::end(widths), [](int w) { return w % 8 != 0; })) {
    why = "a layer width is not a multiple of 8";
  }
  if (why.empty()) return switches_.own_gemm == Switch::kOn ? OwnUse::kAlways : OwnUse::kTimed;
  if (switches_.own_gemm == Switch::kOn) {
    spdlog::warn("RANKD_CUDA_OWN_GEMM=1: {}; the linear layers stay on cuBLASLt", why);
  } else {
    spdlog::info("cuda backend: the linear layers run on cuBLASLt (the Hopper GEMM: {})", why);
  }
  return OwnUse::kNever;
}

absl::Status CudaBackend::OwnGemm(const bf16* x, const bf16* w, int rows, int in, int out,
                                  kernels::HopperEpilogue epilogue, void* y) {
  if (rows == 0) return absl::OkStatus();
  // Keyed by the operands' addresses and shape: the same key is the same descriptors.
  constexpr size_t kMaxOwnPlans = 4096;
  const OwnGemmKey key{x, w, y, rows, in, out, epilogue};
  auto it = own_plans_.find(key);
  if (it == own_plans_.end()) {
    if (own_plans_.size() >= kMaxOwnPlans) own_plans_.clear();
    kernels::HopperGemmPlan plan;
    RANKD_CUDA_RETURN_IF_ERROR(
        kernels::MakeHopperGemmPlan(x, w, y, rows, out, in, epilogue, &plan));
    it = own_plans_.emplace(key, plan).first;
  }
  RANKD_CUDA_RETURN_IF_ERROR(kernels::LaunchHopperGemm(it->second, ctx_->stream()));
  return absl::OkStatus();
}

absl::Status CudaBackend::CublasLinear(const bf16* x, const bf16* w, int rows, int in, int out,
                                       kernels::HopperEpilogue epilogue, void* y, bf16* wide) {
  cudaStream_t s = ctx_->stream();
  switch (epilogue) {
    case kernels::HopperEpilogue::kStoreBf16:
      return gemm_->Linear(x, w, rows, in, out, static_cast<bf16*>(y), s);
    case kernels::HopperEpilogue::kAccumulateF32:
      return gemm_->LinearAccumulate(x, w, rows, in, out, static_cast<float*>(y), s);
    case kernels::HopperEpilogue::kSwiGlu:
    case kernels::HopperEpilogue::kGeGlu:
      RANKD_RETURN_IF_ERROR(gemm_->Linear(x, w, rows, in, out, wide, s));
      RANKD_CUDA_RETURN_IF_ERROR(
          epilogue == kernels::HopperEpilogue::kGeGlu
              ? kernels::LaunchGeGlu(wide, rows, out / 2, static_cast<bf16*>(y), s, gate_up_half_)
              : kernels::LaunchSwiGlu(wide, rows, out / 2, static_cast<bf16*>(y), s,
                                      gate_up_half_));
      return absl::OkStatus();
  }
  return absl::InternalError("unknown GEMM epilogue");
}

absl::StatusOr<bool> CudaBackend::OwnFor(const bf16* x, const bf16* w, int rows, int in, int out,
                                         kernels::HopperEpilogue epilogue) {
  if (own_use_ != OwnUse::kTimed || rows == 0) return own_use_ == OwnUse::kAlways;
  const auto key = std::make_tuple(epilogue, rows, in, out);
  if (auto it = own_faster_.find(key); it != own_faster_.end()) return it->second;
  cudaStream_t s = ctx_->stream();
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  RANKD_CUDA_RETURN_IF_ERROR(cudaStreamIsCapturing(s, &capture));
  if (capture != cudaStreamCaptureStatusNone) return false;
  // Scratch outputs (and gate_up's bf16 product for cuBLASLt), so that the timed runs write
  // nothing the pass reads: y [rows, out] fp32 or bf16 ([rows, out/2] gated), then wide.
  const bool gated = epilogue == kernels::HopperEpilogue::kSwiGlu ||
                     epilogue == kernels::HopperEpilogue::kGeGlu;
  const size_t y_bytes = static_cast<size_t>(rows) * out *
                         (epilogue == kernels::HopperEpilogue::kAccumulateF32 ? 4 : 2);
  const size_t wide_offset = (y_bytes + 255) / 256 * 256;
  const size_t bytes = wide_offset + (gated ? static_cast<size_t>(rows) * out * 2 : 0);
  char* scratch = nullptr;
  cudaEvent_t marks[3] = {};
  absl::Cleanup release = [&] {
    for (cudaEvent_t e : marks) {
      if (e != nullptr) cudaEventDestroy(e);
    }
    if (scratch != nullptr) cudaFreeAsync(scratch, s);
  };
  RANKD_CUDA_RETURN_IF_ERROR(cudaMallocAsync(reinterpret_cast<void**>(&scratch), bytes, s));
  RANKD_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(scratch, 0, bytes, s));
  for (cudaEvent_t& e : marks) RANKD_CUDA_RETURN_IF_ERROR(cudaEventCreate(&e));
  kernels::HopperGemmPlan plan;
  RANKD_CUDA_RETURN_IF_ERROR(
      kernels::MakeHopperGemmPlan(x, w, scratch, rows, out, in, epilogue, &plan));
  bf16* wide = reinterpret_cast<bf16*>(scratch + wide_offset);
  auto own = [&]() -> absl::Status {
    RANKD_CUDA_RETURN_IF_ERROR(kernels::LaunchHopperGemm(plan, s));
    return absl::OkStatus();
  };
  auto theirs = [&] { return CublasLinear(x, w, rows, in, out, epilogue, scratch, wide); };
  // One untimed run each (cuBLASLt tunes its algorithm on its first), then kRuns each.
  constexpr int kRuns = 5;
  RANKD_RETURN_IF_ERROR(own());
  RANKD_RETURN_IF_ERROR(theirs());
  RANKD_CUDA_RETURN_IF_ERROR(cudaEventRecord(marks[0], s));
  for (int r = 0; r < kRuns; ++r) RANKD_RETURN_IF_ERROR(own());
  RANKD_CUDA_RETURN_IF_ERROR(cudaEventRecord(marks[1], s));
  for (int r = 0; r < kRuns; ++r) RANKD_RETURN_IF_ERROR(theirs());
  RANKD_CUDA_RETURN_IF_ERROR(cudaEventRecord(marks[2], s));
  RANKD_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(marks[2]));
  float own_ms = 0, theirs_ms = 0;
  RANKD_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&own_ms, marks[0], marks[1]));
  RANKD_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&theirs_ms, marks[1], marks[2]));
  const bool faster = own_ms < theirs_ms;
  own_faster_.emplace(key, faster);
  spdlog::info(
      "cuda backend: the {} GEMM of {} rows, {} -> {}: Hopper GEMM {:.1f} us, cuBLASLt {:.1f} us "
      "(epilogue included): {} for this shape",
      kernels::HopperEpilogueName(epilogue), rows, in, out, 1e3 * own_ms / kRuns,
      1e3 * theirs_ms / kRuns, faster ? "the Hopper GEMM" : "cuBLASLt");
  return faster;
}

absl::Status CudaBackend::Linear(const bf16* x, const bf16* w, int rows, int in, int out,
                                 kernels::HopperEpilogue epilogue, void* y) {
  RANKD_ASSIGN_OR_RETURN(const bool own, OwnFor(x, w, rows, in, out, epilogue));
  return own ? OwnGemm(x, w, rows, in, out, epilogue, y)
             : CublasLinear(x, w, rows, in, out, epilogue, y, wide_);
}

absl::Status CudaBackend::Load(const model::SafetensorsModel& st, int initial_tokens) {
  own_use_ = OwnGemmUse();
  gate_up_half_ = own_use_ == OwnUse::kNever ? 0 : kernels::kHopperGluHalf;
  RANKD_ASSIGN_OR_RETURN(
      weights_,
      UploadWeights(config_, head_, st, kGemmWorkspaceBytes, precision_, switches_.fp8_linears,
                    own_use_ != OwnUse::kNever ? GateUpLayout::kInterleaved : GateUpLayout::kStacked));
  RANKD_ASSIGN_OR_RETURN(gemm_, Gemm::Create(weights_.gemm_workspace, kGemmWorkspaceBytes,
                                             switches_.gemm_tune, switches_.gemm_candidates));
  RANKD_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&staging_free_, cudaEventDisableTiming));
  attention_blocks_ = kernels::PrefixAttentionBlocks(config_.head_dim);
  q_rope_in_attention_ = !config_.attention_bias && !config_.qk_norm && switches_.fuse_q_rope;
  embed_scale_ = model::Bf16ToF32(model::F32ToBf16(config_.embedding_scale()));
  if (attention_blocks_ <= 0) {
    return absl::InternalError("cannot size the attention kernel's grid on this device");
  }
  if (switches_.profile) {
    RANKD_ASSIGN_OR_RETURN(profiler_, StageProfiler::Create(switches_.profile_skip));
    graphs_.Disable();  // the profile times eager passes
  }
  return EnsureCapacity(Bucket(initial_tokens), 0);
}

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
    wide_ = c.Take<bf16>(T * std::max<int64_t>(qkv_width(), 2 * I));
    attn_ = c.Take<bf16>(T * Q);
    act_ = c.Take<bf16>(T * I);
    if (precision_ == Precision::kFp8) {
      gemm_in_fp8_ = c.Take<__nv_fp8_e4m3>(T * std::max({H, Q, I}));
      gemm_in_scale_ = c.Take<float>(T);
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
      Mark(Stage::kUpload, 0, layout.bytes() + 4.0 * num_rows * config_.hidden_size));
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

// ---- graphs ------------------------------------------------------------------------------------

absl::Status CudaBackend::Forward(const PassShape& shape, const PassWork& work) {
  return graphs_.Run(shape, ctx_->stream(), [&] { return RunPass(shape, work); });
}

// ---- forward -----------------------------------------------------------------------------------

absl::Status CudaBackend::RunPass(const PassShape& shape, const PassWork& work) {
  cudaStream_t s = ctx_->stream();
  const int H = config_.hidden_size, Q = config_.q_width(), KV = config_.kv_width(),
            I = config_.intermediate_size, W = qkv_width(), D = config_.head_dim;
  const float eps = config_.rms_norm_eps;
  const float norm_offset = config_.norm_unit_offset ? 1.0f : 0.0f;  // Gemma: (1 + w)
  const bool encode = shape.kind == PassKind::kEncode;
  Carver c(dev_meta_);
  const Meta m = CarveMeta(c, shape.rows, shape.items);
  const int Tb = shape.rows, Nb = shape.items;

  // The linear layers: bf16, or with precision fp8 those that Fp8Linears names (their inputs'
  // producers, the norms in front of qkv and gate_up, the attention output's quantiser and the
  // gated activation, then write gemm_in_fp8_ and its row scales, which the GEMMs read instead of
  // the bf16 input).
  const bool fp8 = precision_ == Precision::kFp8;
  const Fp8Linears& f8 = switches_.fp8_linears;
  const bool fp8_qkv = fp8 && f8.qkv, fp8_o = fp8 && f8.o_proj, fp8_gate_up = fp8 && f8.gate_up,
             fp8_down = fp8 && f8.down;
  const Fp8Matrix gemm_in{gemm_in_fp8_, gemm_in_scale_};
  auto norm = [&](const float* x, const bf16* w, int rows, bool to_fp8) -> absl::Status {
    RANKD_CUDA_RETURN_IF_ERROR(
        to_fp8 ? kernels::LaunchRmsNormFp8(x, w, norm_offset, eps, rows, H, gemm_in_fp8_,
                                           gemm_in_scale_, s)
               : kernels::LaunchRmsNorm(x, w, norm_offset, eps, rows, H, normed_, s));
    return absl::OkStatus();
  };
  // y [rows, out] bf16 = input . w^T; `x` is the bf16 input (unused when `in_fp8`).
  auto linear = [&](const bf16* x, const bf16* w, const Fp8Matrix& wq, int rows, int in, int out,
                    bf16* y, bool in_fp8) {
    if (in_fp8) return gemm_->LinearFp8(gemm_in, wq, rows, in, out, y, s);
    return Linear(x, w, rows, in, out, kernels::HopperEpilogue::kStoreBf16, y);
  };
  // y [rows, out] fp32 += input . w^T.
  auto linear_add = [&](const bf16* x, const bf16* w, const Fp8Matrix& wq, int rows, int in,
                        int out, float* y, bool in_fp8) {
    if (in_fp8) return gemm_->LinearAccumulateFp8(gemm_in, wq, rows, in, out, y, s);
    return Linear(x, w, rows, in, out, kernels::HopperEpilogue::kAccumulateF32, y);
  };

  // The two numbers of every stage (for the profile): FLOPs, and the fewest bytes moved, for the
  // live rows (the padding rows' work shows up as lower efficiency). `e` is the bytes of a GEMM
  // operand element (weights and inputs), `sc` those of its per-row scales, by the GEMM's
  // precision.
  const double t = work.rows, n = work.items, h = H, q = Q, i = I, w3 = W, kv = KV;
  auto e = [](bool in_fp8) { return in_fp8 ? 1.0 : 2.0; };
  auto sc = [](double rows, bool in_fp8) { return in_fp8 ? 4 * rows : 0.0; };
  auto norm_flops = [&](double rows) { return 4 * rows * h; };
  auto norm_bytes = [&](double rows, bool to_fp8) {
    return rows * h * (4 + e(to_fp8)) + 2 * h + sc(rows, to_fp8);
  };

  RANKD_RETURN_IF_ERROR(Mark(Stage::kEmbed, 0, 6 * t * h));
  RANKD_CUDA_RETURN_IF_ERROR(kernels::LaunchEmbeddingGather(m.tokens, Tb, weights_.embed, dev_rows_,
                                                            H, embed_scale_, x_, s));
  RANKD_RETURN_IF_ERROR(Mark(Stage::kQkvRope, 0, t * (4 + D * 4.0)));
  RANKD_CUDA_RETURN_IF_ERROR(
      kernels::LaunchRopeRotations(m.positions, weights_.inv_freq, Tb, D / 2, rotations_, s));
  const KvLayers own{wide_ + Q, wide_ + Q + KV, 0, W};
  for (int l = 0; l < config_.num_layers; ++l) {
    const LayerWeights& w = weights_.layers[l];
    const bool last = l == config_.num_layers - 1;
    RANKD_RETURN_IF_ERROR(Mark(Stage::kNorm, norm_flops(t), norm_bytes(t, fp8_qkv)));
    RANKD_RETURN_IF_ERROR(norm(x_, w.input_norm, Tb, fp8_qkv));
    RANKD_RETURN_IF_ERROR(
        Mark(Stage::kQkvGemm, 2 * t * h * w3,
             e(fp8_qkv) * (t * h + w3 * h) + sc(t, fp8_qkv) + sc(w3, fp8_qkv) + 2 * t * w3));
    RANKD_RETURN_IF_ERROR(linear(normed_, w.wqkv, w.wqkv_fp8, Tb, H, W, wide_, fp8_qkv));
    kernels::QkvRopeParams r;
    r.qkv = wide_;
    r.bias = w.bqkv;
    r.q_norm = w.q_norm;
    r.k_norm = w.k_norm;
    r.rotations = rotations_;
    r.num_rows = &m.counts->rows;
    r.kv_out = &m.counts->kv_out;
    r.layer = l;
    r.skip_q = q_rope_in_attention_;
    r.num_tokens = Tb;
    r.num_q_heads = config_.num_heads;
    r.num_kv_heads = config_.num_kv_heads;
    r.head_dim = D;
    r.eps = eps;
    RANKD_RETURN_IF_ERROR(
        Mark(Stage::kQkvRope, 0,
             4 * t * ((q_rope_in_attention_ ? 0 : q) + kv) + (encode ? 4 * t * kv : 0)));
    RANKD_CUDA_RETURN_IF_ERROR(kernels::LaunchQkvRope(r, s));
    if (encode && last) break;  // the cache holds this layer's K/V; nothing reads its output

    kernels::PrefixAttentionParams a;
    a.q = wide_;
    a.q_row_stride = W;
    a.q_rotations = q_rope_in_attention_ ? rotations_ : nullptr;
    a.own = own;
    a.contexts = m.contexts;
    a.seg_start = m.seg_start;
    a.tiles = m.tiles;
    a.num_units = &m.counts->units;
    a.unit_counter = m.unit_counters + l;
    a.layer = l;
    a.num_q_heads = config_.num_heads;
    a.num_kv_heads = config_.num_kv_heads;
    a.head_dim = D;
    a.scale = config_.attn_scale;
    a.softcap = config_.attn_logit_softcapping;
    a.window = config_.window(l);
    a.blocks = attention_blocks_;
    a.out = attn_;
    RANKD_RETURN_IF_ERROR(Mark(Stage::kAttention, 4 * q * work.attended,
                               2 * (2 * t * q + 2 * t * kv + 2 * work.ctx_rows * kv)));
    RANKD_CUDA_RETURN_IF_ERROR(kernels::LaunchPrefixAttention(a, s));

    // After the last layer's attention only the items' last rows matter: its o_proj and MLP run
    // on those rows alone, gathered into x_last_ (residual) and wide_ (attention output, free
    // until gate_up overwrites it).
    float* xr = x_;
    const bf16* ar = attn_;
    int rows = Tb;
    double live = t;
    if (last) {
      RANKD_RETURN_IF_ERROR(Mark(Stage::kGather, 0, 2 * n * (4 * h + 2 * q)));
      RANKD_CUDA_RETURN_IF_ERROR(kernels::LaunchGatherRows(x_, m.last_rows, &m.counts->items, Nb,
                                                           sizeof(float) * H, x_last_, s));
      RANKD_CUDA_RETURN_IF_ERROR(kernels::LaunchGatherRows(attn_, m.last_rows, &m.counts->items, Nb,
                                                           sizeof(bf16) * Q, wide_, s));
      xr = x_last_;
      ar = wide_;
      rows = Nb;
      live = n;
    }
    if (fp8_o) {
      RANKD_RETURN_IF_ERROR(Mark(Stage::kQuantize, 0, live * q * 3 + sc(live, true)));
      RANKD_CUDA_RETURN_IF_ERROR(
          kernels::LaunchQuantizeRowsFp8(ar, rows, Q, gemm_in_fp8_, gemm_in_scale_, s));
    }
    RANKD_RETURN_IF_ERROR(
        Mark(Stage::kOProj, 2 * live * q * h,
             e(fp8_o) * (live * q + q * h) + sc(live, fp8_o) + sc(h, fp8_o) + 8 * live * h));
    // Sandwich norms (Gemma 2): the sublayer output goes to normed_ (free after its GEMM read it),
    // and its norm is what the residual adds.
    if (config_.sandwich_norms) {
      RANKD_RETURN_IF_ERROR(linear(ar, w.wo, w.wo_fp8, rows, Q, H, normed_, fp8_o));
      RANKD_CUDA_RETURN_IF_ERROR(
          kernels::LaunchRmsNormAdd(normed_, w.attn_out_norm, norm_offset, eps, rows, H, xr, s));
    } else {
      RANKD_RETURN_IF_ERROR(linear_add(ar, w.wo, w.wo_fp8, rows, Q, H, xr, fp8_o));
    }
    RANKD_RETURN_IF_ERROR(Mark(Stage::kNorm, norm_flops(live), norm_bytes(live, fp8_gate_up)));
    RANKD_RETURN_IF_ERROR(norm(xr, w.post_norm, rows, fp8_gate_up));
    const bool gelu = config_.activation == model::Activation::kGeluTanh;
    const kernels::HopperEpilogue gated =
        gelu ? kernels::HopperEpilogue::kGeGlu : kernels::HopperEpilogue::kSwiGlu;
    bool own_gate_up = false;
    if (!fp8_gate_up && !fp8_down) {
      RANKD_ASSIGN_OR_RETURN(own_gate_up, OwnFor(normed_, w.w_gate_up, rows, H, 2 * I, gated));
    }
    // The Hopper GEMM's gated epilogue writes act_ from its accumulators: gate and up never reach
    // memory, and there is no activation kernel (its stage's time is gate_up's).
    RANKD_RETURN_IF_ERROR(Mark(Stage::kGateUp, 4 * live * h * i,
                               e(fp8_gate_up) * (live * h + 2 * i * h) + sc(live, fp8_gate_up) +
                                   sc(2 * i, fp8_gate_up) + (own_gate_up ? 2 : 4) * live * i));
    if (own_gate_up) {
      RANKD_RETURN_IF_ERROR(OwnGemm(normed_, w.w_gate_up, rows, H, 2 * I, gated, act_));
    } else {
      RANKD_RETURN_IF_ERROR(
          fp8_gate_up ? gemm_->LinearFp8(gemm_in, w.w_gate_up_fp8, rows, H, 2 * I, wide_, s)
                      : gemm_->Linear(normed_, w.w_gate_up, rows, H, 2 * I, wide_, s));
      RANKD_RETURN_IF_ERROR(
          Mark(Stage::kSwiGlu, 0, (4 + e(fp8_down)) * live * i + sc(live, fp8_down)));
      RANKD_CUDA_RETURN_IF_ERROR(
          fp8_down
              ? (gelu ? kernels::LaunchGeGluFp8(wide_, rows, I, gemm_in_fp8_, gemm_in_scale_, s)
                      : kernels::LaunchSwiGluFp8(wide_, rows, I, gemm_in_fp8_, gemm_in_scale_, s))
              : (gelu ? kernels::LaunchGeGlu(wide_, rows, I, act_, s, gate_up_half_)
                      : kernels::LaunchSwiGlu(wide_, rows, I, act_, s, gate_up_half_)));
    }
    RANKD_RETURN_IF_ERROR(Mark(
        Stage::kDown, 2 * live * i * h,
        e(fp8_down) * (live * i + i * h) + sc(live, fp8_down) + sc(h, fp8_down) + 8 * live * h));
    if (config_.sandwich_norms) {
      RANKD_RETURN_IF_ERROR(linear(act_, w.w_down, w.w_down_fp8, rows, I, H, normed_, fp8_down));
      RANKD_CUDA_RETURN_IF_ERROR(
          kernels::LaunchRmsNormAdd(normed_, w.mlp_out_norm, norm_offset, eps, rows, H, xr, s));
    } else {
      RANKD_RETURN_IF_ERROR(linear_add(act_, w.w_down, w.w_down_fp8, rows, I, H, xr, fp8_down));
    }
  }
  if (encode) return absl::OkStatus();
  RANKD_RETURN_IF_ERROR(Mark(Stage::kHead, 4 * n * h, 4 * n * h));
  RANKD_CUDA_RETURN_IF_ERROR(kernels::LaunchScoreHead(
      x_last_, nullptr, &m.counts->items, Nb, weights_.final_norm, norm_offset, weights_.head_rows,
      static_cast<int>(head_.HeadRows().size()),
      config_.head_kind == model::HeadKind::kCausalLm ? config_.final_logit_softcapping : 0.0f, eps,
      H, dev_scores_, s));
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const PrefixState>> CudaBackend::EncodePrefix(
    absl::Span<const int32_t> ids) {
  RANKD_RETURN_IF_ERROR(backend::ValidatePrefixIds(config_, ids));
  auto prefix =
      std::make_shared<CudaPrefix>(this, ctx_, std::vector<int32_t>(ids.begin(), ids.end()));
  const int P = static_cast<int>(ids.size());
  if (strategy_ == Strategy::kMultiItem || P == 0) return prefix;

  std::lock_guard<std::recursive_mutex> lock(ctx_->mu());
  RANKD_CUDA_RETURN_IF_ERROR(cudaSetDevice(ctx_->device()));
  const int64_t L = config_.num_layers, KV = config_.kv_width();
  RANKD_RETURN_IF_ERROR(prefix->AllocateKv(sizeof(bf16) * L * 2 * P * KV));
  const PassShape shape{PassKind::kEncode, Bucket(P), Bucket(1)};
  RANKD_RETURN_IF_ERROR(EnsureCapacity(shape.rows, 0));
  RANKD_RETURN_IF_ERROR(AcquireStaging());
  if (profiler_) profiler_->BeginPass("encode");
  Carver c(host_meta_);
  const Meta m = CarveMeta(c, shape.rows, shape.items);
  PlanEncodePass(ids, group(), Arrays(m, shape, group()), &plan_);
  *m.counts = PassCounts{P, 0, plan_.tiles * config_.num_kv_heads, 0, prefix->Layers(KV)};
  std::fill(m.unit_counters, m.unit_counters + L, 0);
  RANKD_RETURN_IF_ERROR(Upload(shape, 0));
  RANKD_RETURN_IF_ERROR(Forward(shape, plan_.work));
  if (profiler_) RANKD_RETURN_IF_ERROR(profiler_->EndPass(ctx_->stream()));
  return std::shared_ptr<const PrefixState>(std::move(prefix));
}

absl::StatusOr<const CudaPrefix*> CudaBackend::CheckPrefix(const PrefixState* prefix_base) const {
  const auto* prefix = dynamic_cast<const CudaPrefix*>(prefix_base);
  if (prefix == nullptr || prefix->owner() != this) {
    return absl::InvalidArgumentError("prefix was not made by this cuda backend");
  }
  return prefix;
}

absl::Status CudaBackend::ScoreItems(const PrefixState& prefix, const ItemBatch& items,
                                     absl::Span<float> scores) {
  const ScoreGroup group{&prefix, &items, scores};
  return ScoreGroups(absl::MakeConstSpan(&group, 1));
}

// One packed pass over every group's items (multi-item: with each group's prefix in front of
// its items). Rows of group g: [prefix_g (multi-item)] [item 0] [item 1] ...; its items attend to
// its own prefix only, through the attention runs' context table.
absl::Status CudaBackend::ScoreGroups(absl::Span<const ScoreGroup> groups) {
  std::vector<const CudaPrefix*> prefixes;
  std::vector<PlanGroup> plan_groups;
  const int H = config_.hidden_size;
  for (const ScoreGroup& g : groups) {
    if (g.prefix == nullptr || g.items == nullptr) {
      return absl::InvalidArgumentError("ScoreGroups: a group has no prefix or no items");
    }
    RANKD_ASSIGN_OR_RETURN(const CudaPrefix* prefix, CheckPrefix(g.prefix));
    RANKD_RETURN_IF_ERROR(backend::ValidateItemBatch(config_, *g.items, g.scores.size()));
    prefixes.push_back(prefix);
    plan_groups.push_back(PlanGroup{prefix->ids(), g.items->tokens, g.items->offsets,
                                    static_cast<int>(g.items->embeddings.size() / H)});
  }
  const ScoreSize size = MeasureScorePass(plan_groups, strategy_);
  if (size.items == 0) return absl::OkStatus();
  if (size.rows > (1 << 30) / H) {
    return absl::InvalidArgumentError(absl::StrCat("a batch of ", size.rows, " rows is too large"));
  }
  const int T = static_cast<int>(size.rows), N = static_cast<int>(size.items),
            R = static_cast<int>(size.embedding_rows);

  std::lock_guard<std::recursive_mutex> lock(ctx_->mu());
  RANKD_CUDA_RETURN_IF_ERROR(cudaSetDevice(ctx_->device()));
  cudaStream_t s = ctx_->stream();
  const PassShape shape{PassKind::kScore, Bucket(T), Bucket(N)};
  RANKD_RETURN_IF_ERROR(EnsureCapacity(shape.rows, R));
  RANKD_RETURN_IF_ERROR(AcquireStaging());
  if (profiler_) profiler_->BeginPass("score");

  Carver c(host_meta_);
  const Meta m = CarveMeta(c, shape.rows, shape.items);
  PlanScorePass(plan_groups, strategy_, group(), Arrays(m, shape, group()), &plan_);
  // Each placed request's context (multi-item: its prefix's rows of the qkv buffer; IBPC: its
  // prefix's cache) and embedding rows.
  const int64_t Q = config_.q_width(), KV = config_.kv_width(), W = qkv_width();
  for (size_t ctx = 0; ctx < plan_.groups.size(); ++ctx) {
    const PlacedGroup& placed = plan_.groups[ctx];
    const int64_t begin = placed.first_row;
    m.contexts[ctx] = strategy_ == Strategy::kMultiItem
                          ? KvLayers{wide_ + Q + begin * W, wide_ + Q + KV + begin * W, 0, W}
                          : prefixes[placed.group]->Layers(KV);
    const std::vector<float>& rows = groups[placed.group].items->embeddings;
    std::copy(rows.begin(), rows.end(), host_rows_ + int64_t{placed.embedding_row} * H);
  }
  *m.counts = PassCounts{T, N, plan_.tiles * config_.num_kv_heads, 0, KvLayers{}};
  std::fill(m.unit_counters, m.unit_counters + config_.num_layers, 0);
  RANKD_RETURN_IF_ERROR(Upload(shape, R));
  RANKD_RETURN_IF_ERROR(Forward(shape, plan_.work));
  RANKD_RETURN_IF_ERROR(Mark(Stage::kDownload, 0, 4.0 * N));
  RANKD_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(host_scores_, dev_scores_, sizeof(float) * N, cudaMemcpyDeviceToHost, s));
  if (profiler_) RANKD_RETURN_IF_ERROR(profiler_->EndPass(s));
  // The one synchronisation of a pass: the scores are read here.
  RANKD_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s));
  const float* out = host_scores_;
  for (const ScoreGroup& g : groups) {
    std::copy(out, out + g.scores.size(), g.scores.begin());
    out += g.scores.size();
  }
  return absl::OkStatus();
}

// RANKD_CUDA_OWN_GEMM's value for `o`.
const char* OwnGemmName(backend::BackendOptions::CudaSwitches::OwnGemm o) {
  using OwnGemm = backend::BackendOptions::CudaSwitches::OwnGemm;
  return o == OwnGemm::kAuto ? "auto" : o == OwnGemm::kOn ? "1" : "0";
}

absl::StatusOr<Precision> ParsePrecision(absl::string_view s) {
  if (s == backend::kPrecisionBf16) return Precision::kBf16;
  if (s == backend::kPrecisionFp8) return Precision::kFp8;
  return absl::InvalidArgumentError(absl::StrCat("cuda precision '", s, "' is unknown (",
                                                 absl::StrJoin(backend::kPrecisions, ", "), ")"));
}

// "qkv,o_proj,gate_up,down", the layers that take e4m3 (RANKD_CUDA_FP8_LINEARS' form); "none".
std::string Fp8LinearsName(const Fp8Linears& f) {
  std::vector<std::string> names;
  for (auto [on, name] : {std::pair{f.qkv, "qkv"}, std::pair{f.o_proj, "o_proj"},
                          std::pair{f.gate_up, "gate_up"}, std::pair{f.down, "down"}}) {
    if (on) names.push_back(name);
  }
  return names.empty() ? "none" : absl::StrJoin(names, ",");
}

// What the fp8 path needs of the device and the model: e4m3 tensor cores (sm_89 and newer), and
// widths cuBLASLt's fp8 GEMMs take (multiples of 16).
absl::Status CheckFp8(const cudaDeviceProp& prop, int device, const ModelConfig& config) {
  if (prop.major * 10 + prop.minor < 89) {
    return absl::FailedPreconditionError(
        absl::StrCat("cuda precision fp8 needs a device of compute capability 8.9 or newer (Ada, "
                     "Hopper); device ",
                     device, " (", prop.name, ") is ", prop.major, ".", prop.minor));
  }
  for (const auto& [name, width] : {std::pair{"hidden_size", config.hidden_size},
                                    {"num_attention_heads * head_dim", config.q_width()},
                                    {"intermediate_size", config.intermediate_size}}) {
    if (width % 16 != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("cuda precision fp8 needs ", name, " to be a multiple of 16 (it is ", width,
                       "): cuBLASLt's fp8 GEMMs take no other widths"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Strategy> ParseStrategy(absl::string_view s) {
  if (s == backend::kStrategyIbpc) return Strategy::kIbpc;
  if (s == backend::kStrategyMultiItem) return Strategy::kMultiItem;
  return absl::InvalidArgumentError(absl::StrCat("cuda strategy '", s, "' is unknown (",
                                                 absl::StrJoin(backend::kStrategies, ", "), ")"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<backend::Backend>> CreateCudaBackend(
    const backend::BackendOptions& options, const std::string& model_dir,
    const backend::HeadSpec& head) {
  RANKD_ASSIGN_OR_RETURN(Strategy strategy, ParseStrategy(options.strategy));
  RANKD_ASSIGN_OR_RETURN(Precision precision, ParsePrecision(options.precision));
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
  RANKD_RETURN_IF_ERROR(backend::ValidateHead(config, head));
  if (!kernels::PrefixAttentionSupportsHeadDim(config.head_dim)) {
    return absl::UnimplementedError(
        absl::StrCat(model_dir, ": head_dim ", config.head_dim,
                     " is not supported by the CUDA attention kernel (multiples of 16 up to 128)"));
  }
  cudaDeviceProp prop;
  RANKD_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, options.device));
  if (precision == Precision::kFp8) {
    RANKD_RETURN_IF_ERROR(Annotate(CheckFp8(prop, options.device, config), model_dir));
  }
  RANKD_ASSIGN_OR_RETURN(auto st, model::SafetensorsModel::OpenDir(model_dir));
  RANKD_ASSIGN_OR_RETURN(auto ctx, DeviceContext::Create(options.device));
  const bool graphs = options.cuda_graphs;
  auto backend = std::make_unique<CudaBackend>(config, head, strategy, precision, std::move(ctx),
                                               graphs, options.cuda);
  RANKD_RETURN_IF_ERROR(
      Annotate(backend->Load(*st, std::max(1, options.max_batch_tokens)), model_dir));
  const backend::BackendOptions::CudaSwitches& sw = options.cuda;
  spdlog::info(
      "cuda backend: {} on {} (device {}), strategy {}, precision {}, head {}, graphs {}, {:.1f} "
      "MiB of weights; switches: stats {}, profile {} (skip {}), gemm_tune {}, gemm_candidates {}, "
      "fuse_q_rope {}, own_gemm {} ({}){}",
      config.Summary(), prop.name, options.device, options.strategy, options.precision,
      head.ToString(), graphs ? "on" : "off", backend->weight_bytes() / 1048576.0, sw.stats,
      sw.profile, sw.profile_skip, sw.gemm_tune, sw.gemm_candidates, sw.fuse_q_rope,
      OwnGemmName(sw.own_gemm), backend->own_gemm() ? "may run" : "not in use",
      precision == Precision::kFp8 ? absl::StrCat(", fp8 linears ", Fp8LinearsName(sw.fp8_linears))
                                   : "");
  return backend;
}

std::optional<CudaBackendStats> GetCudaBackendStats(backend::Backend& backend) {
  auto* cuda = dynamic_cast<CudaBackend*>(&backend);
  if (cuda == nullptr) return std::nullopt;
  return cuda->Stats();
}

}  // namespace rankd::cuda
