// The CUDA backend's class (private to src/backend/cuda), whose members are defined by stage:
// cuda_backend.cc (loading, the linear layers' GEMM choice, prefixes and score passes, creation),
// cuda_workspace.cc (the workspace, staging and the per-pass metadata), cuda_forward.cc (a pass's
// kernels, eager or captured into a graph, with the profiler's stage marks). Moved out of
// cuda_backend.cc as it was.
#ifndef RANKD_SRC_BACKEND_CUDA_CUDA_BACKEND_IMPL_H_
#define RANKD_SRC_BACKEND_CUDA_CUDA_BACKEND_IMPL_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "kernels/attention_tiles.h"
#include "kernels/hopper_gemm.cuh"
#include "kernels/kv_layers.cuh"
#include "kernels/launch.cuh"
#include "kernels/prefix_attention.cuh"
#include "kernels/qkv_rope.cuh"
#include "rankd/backend/cuda/cuda_backend.h"
#include "rankd/backend/cuda/cuda_weights.h"
#include "rankd/backend/cuda/device_arena.h"
#include "rankd/backend/cuda/gemm.h"
#include "rankd/backend/cuda/graph_cache.h"
#include "rankd/backend/cuda/pass_costs.h"
#include "rankd/backend/cuda/pass_plan.h"
#include "rankd/backend/cuda/stage_profiler.h"
#include "spdlog/spdlog.h"
#include "src/backend/cuda/device_context.h"

namespace rankd::cuda::internal {

// The counts of a pass, in device memory (part of the uploaded metadata).
struct PassCounts {
  int32_t rows = 0;   // live rows; the rest of the pass's rows are padding
  int32_t items = 0;  // N
  int32_t units = 0;  // attention work units (tiles x Nkv)
  int32_t last_units = 0;  // the last layer's (PassPlan::last_tiles x Nkv)
  KvLayers kv_out;  // encode: the prefix's cache, which RoPE fills; score: k = null (unread)
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
  kernels::AttentionTile* tiles = nullptr;  // [MaxPassTiles(Tb, Nb, G)] work lists
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
    for (const auto& [shape, own] : own_choice_) own_shapes += own.has_value();
    const std::string line = absl::StrCat(
        "cuda backend stats: ", graphs_.Summary(),
        own_use_ == OwnUse::kTimed
            ? absl::StrCat(", linear shapes timed: ", own_shapes, " on the Hopper GEMM, ",
                           own_choice_.size() - own_shapes, " on cuBLASLt")
            : "",
        ", passes with attention in blocks of warpgroups: ", wide_attention_passes_);
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
  bool fp8_group_scales() const { return fp8_groups_; }
  bool fold_norms() const { return fold_norms_; }
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
    s.k_rope_in_gemm = k_rope_in_gemm_;
    s.qk_norm_in_gemm = qk_norm_in_gemm_;
    s.fold_norms = fold_norms_;
    s.fp8_group_scales = fp8_groups_;
    s.attention_pipelined = switches_.attention_pipeline;
    s.attention_wgmma = attention_wgmma_;
    s.attention_overlap = attention_overlap_;
    s.pdl = pdl_;
    s.wide_attention_passes = wide_attention_passes_;
    return s;
  }

 private:
  int group() const { return config_.num_heads / config_.num_kv_heads; }
  // A pass's attention blocks of warpgroups (PassShape::attention_warpgroups): the switch's
  // number, or with RANKD_CUDA_ATTENTION_WARPGROUPS=auto AutoAttentionWarpgroups' choice for
  // rows that attend to `keys` keys in all. The tile rows its work list is planned in.
  int PassWarpgroups(double keys, int64_t rows) const {
    return auto_warpgroups_ ? AutoAttentionWarpgroups(keys, rows, true) : attention_warpgroups_;
  }
  static int AttentionTileRows(int warpgroups) { return kernels::kAttentionTileRows * warpgroups; }
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
  // A configuration of the Hopper GEMM (HopperGemmPlan's choices): tile_n 0 and kAuto, cluster 0
  // leave them to MakeHopperGemmPlan.
  struct OwnVariant {
    int tile_n = 0;
    kernels::HopperSchedule schedule = kernels::HopperSchedule::kAuto;
    int cluster = 0;
    // K in the slices kernels::HopperKSlices asks for (it asks for some: the shape's tiles leave
    // half of the SMs idle), their partials in slices_.
    bool slices = false;
    auto Key() const {
      return std::make_tuple(tile_n, static_cast<int>(schedule), cluster, slices);
    }
  };
  // One linear layer's operands: x [rows, in] and w [out, in] in bf16, or (fp8) in e4m3 with
  // their row scales (x: gemm_in_fp8_, which the layer's input producer wrote), or x's scales per
  // row and group of kHopperScaleGroup columns (x_groups: down's input when down_groups_; the
  // Hopper GEMM only).
  // fold_norms_: a bf16 x that is the stream's copy, its rows divided by their rms from x_sumsq
  // (the Hopper GEMM's HopperNorm input side; no cuBLASLt twin).
  struct LinearIn {
    const bf16* x = nullptr;
    const bf16* w = nullptr;
    Fp8Matrix xq, wq;
    bool fp8 = false;
    bool x_groups = false;
    const float* x_sumsq = nullptr;
    // Row-scaled e4m3 whose layer RANKD_CUDA_FP8_FAST_ACCUM names: the Hopper GEMM may take it
    // unpromoted (XScalesOf).
    bool fast_accum = false;
    static LinearIn Bf16(const bf16* x, const bf16* w) { return {x, w, {}, {}, false, false}; }
    static LinearIn Bf16Normed(const bf16* x, const bf16* w, const float* x_sumsq) {
      return {x, w, {}, {}, false, false, x_sumsq};
    }
    static LinearIn Fp8(Fp8Matrix xq, Fp8Matrix wq, bool fast_accum) {
      return {nullptr, nullptr, xq, wq, true, false, nullptr, fast_accum};
    }
    static LinearIn Fp8Groups(Fp8Matrix xq, Fp8Matrix wq) {
      return {nullptr, nullptr, xq, wq, true, true};
    }
    // The operands' addresses, whichever precision: what keys a plan.
    const void* x_data() const { return fp8 ? static_cast<const void*>(xq.data) : x; }
    const void* w_data() const { return fp8 ? static_cast<const void*>(wq.data) : w; }
  };
  // How the Hopper GEMM takes these operands' X scales: kGroup for x_groups; e4m3 with row scales
  // on the promoted kernels (kRowPromoted) unless the layer accumulates fast (ops.fast_accum:
  // kRow, the faster schedules, no promotion); kRow (unused) for bf16. (Row-scaled e4m3 reaches
  // the Hopper GEMM only where it accumulates fast or with RANKD_CUDA_FP8_PROMOTED=1: OwnFor.)
  static kernels::HopperXScales XScalesOf(const LinearIn& ops) {
    if (ops.x_groups) return kernels::HopperXScales::kGroup;
    return ops.fp8 && !ops.fast_accum ? kernels::HopperXScales::kRowPromoted
                                      : kernels::HopperXScales::kRow;
  }
  // The Hopper GEMM's plan for these operands as `variant` (kStoreBf16Rope: the k heads of
  // rotations_; kSwiGluFp8/kGeGluFp8: the group scales into act_group_scale_; x_sumsq: the rows'
  // rms; kResidualNorm: the stream's copy and sums into norm_copy and norm_sumsq, normed_ and
  // norm_sumsq_ unless given).
  cudaError_t MakeOwnPlan(const LinearIn& ops, void* y, int rows, int in, int out,
                          kernels::HopperEpilogue epilogue, const OwnVariant& variant,
                          kernels::HopperGemmPlan* plan, bf16* norm_copy = nullptr,
                          float* norm_sumsq = nullptr) const;
  // y = x [rows, in] . w [out, in]^T through kernels/hopper_gemm with `epilogue`, as `variant`.
  absl::Status OwnGemm(const LinearIn& ops, int rows, int in, int out,
                       kernels::HopperEpilogue epilogue, const OwnVariant& variant, void* y);
  // The same layer's work on cuBLASLt: the GEMM, and for the gated epilogues the activation
  // kernel after it (gate_up [rows, out] in `wide`, in the weights' gate_up layout; y [rows,
  // out/2]), for kStoreBf16Rope the QkvRope kernel.
  absl::Status CublasLinear(const LinearIn& ops, int rows, int in, int out,
                            kernels::HopperEpilogue epilogue, void* y, bf16* wide);
  // The Hopper GEMM variant the layer shape runs on, or none for cuBLASLt (own_use_). kAlways: the
  // plan's defaults. kTimed: the first time the shape runs outside graph capture, every variant of
  // kOwnVariants and cuBLASLt run on scratch outputs and the fastest is kept; during a capture, a
  // shape not timed yet takes cuBLASLt. bf16 and fp8 operands are timed apart. The promoted
  // kernels (XScalesOf: group-scaled X, and row-scaled X unless fast accumulation) are timed on
  // the schedules they are built for (cooperative 128, ping-pong 64). Group-scaled operands
  // (x_groups), the e4m3 gated epilogues and the norm fold's GEMMs (x_sumsq, kResidualNorm) have
  // no cuBLASLt twin: the Hopper GEMM's variants are timed against each other, and the plan's
  // default runs until they are.
  absl::StatusOr<std::optional<OwnVariant>> OwnFor(const LinearIn& ops, int rows, int in, int out,
                                                   kernels::HopperEpilogue epilogue);
  // y = x . w^T with `epilogue` on the GEMM OwnFor picks.
  absl::Status Linear(const LinearIn& ops, int rows, int in, int out,
                      kernels::HopperEpilogue epilogue, void* y);
  // The stream that the pass's own kernels launch on: with PDL where RANKD_CUDA_PDL=1
  // (kernels/launch.cuh). cuBLASLt, copies and the GEMM timing use ctx_->stream() as it is.
  kernels::LaunchStream launch_stream() const { return {ctx_->stream(), pdl_}; }
  // Profiling (RANKD_CUDA_PROFILE=1): the stage that starts now, with its FLOPs and bytes
  // (pass_costs.h).
  absl::Status Mark(Stage stage, const StageCost& cost) {
    return profiler_ ? profiler_->Mark(stage, cost.flops, cost.bytes, ctx_->stream())
                     : absl::OkStatus();
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
  // The Hopper GEMM's K slices (OwnVariant::slices): partials for as many 128 x 128 fp32 blocks
  // as the device has SMs (HopperKSlices never asks for more units than that), then a counter a
  // consumer block, zero between launches. Where the Hopper GEMM may run.
  std::unique_ptr<Arena> slices_;
  size_t slice_partial_bytes_ = 0;
  int slice_counters_ = 0;
  // The pass being planned: its runs, requests and counts. Reused from pass to pass (under
  // ctx_->mu()).
  PassPlan plan_;
  // The attention kernel's persistent grid in blocks of w warpgroups ([w]; 0 where w never runs).
  int attention_blocks_[kernels::kMaxAttentionWarpgroups + 1] = {};
  bool attention_wgmma_ = false;  // attention on wgmma (switch on, device and heads take it)
  // Its key tiles overlapped (the switch; auto: heads of 128), where the queue kernel runs.
  bool attention_overlap_ = false;
  bool attention_four_blocks_ = false;  // a.four_blocks for blocks of one warpgroup
  bool attention_three_blocks_ = false;  // a.three_blocks for blocks of one warpgroup
  bool attention_prefetch_ = false;      // a.prefetch: the switch, where the queue kernel runs
  int attention_warpgroups_ = 1;  // attention's warpgroups a block (the switch, where it runs)
  bool auto_warpgroups_ = false;  // RANKD_CUDA_ATTENTION_WARPGROUPS=auto, where 2 can run
  int64_t wide_attention_passes_ = 0;  // CudaBackendStats::wide_attention_passes
  bool pdl_ = false;  // the pass's kernels launch with PDL (switch on, the device takes it)
  // RoPE of q happens as attention loads q (no bias, no q/k norm: the QkvRope kernel then reads
  // and writes only k, and v when a cache is filled). RANKD_CUDA_FUSE_Q_ROPE=0 turns it off.
  bool q_rope_in_attention_ = false;
  // RoPE of k happens in the qkv GEMM's epilogue (kStoreBf16Rope) where the Hopper GEMM may run,
  // q is rotated in attention, the head is 64 or 128 wide and the pass fills no cache: the QkvRope
  // kernel then does not run (or runs inside CublasLinear, where cuBLASLt is the faster).
  // RANKD_CUDA_FUSE_K_ROPE=0 turns it off.
  bool k_rope_in_gemm_ = false;
  // The q/k norms and RoPE of q and k happen in the qkv GEMM's epilogue (kStoreBf16Rope with its
  // head norm, the layer's weights from rope_unfused_) for models with q/k norms and no bias,
  // where the Hopper GEMM may run, the head is 64 or 128 wide and the pass fills no cache:
  // RANKD_CUDA_FUSE_QK_NORM=1. Attention then reads q rotated, as after QkvRope.
  bool qk_norm_in_gemm_ = false;
  // Precision fp8 with down in e4m3 where the Hopper GEMM may run: gate_up's gated epilogue
  // quantises the activation per row and group of kHopperScaleGroup columns (kSwiGluFp8 /
  // kGeGluFp8, into act_ as e4m3 and act_group_scale_), and down multiplies each group with its
  // scale (HopperXScales::kGroup): finer than a scale per row, and neither cuBLASLt's gate_up nor
  // an activation kernel. Both on the Hopper GEMM (no cuBLASLt twin to time against); gate_up
  // with its input's scales as XScalesOf says.
  bool down_groups_ = false;
  // RANKD_CUDA_FP8_GROUP_SCALES=1 where it applies (precision fp8, the Hopper GEMM may run, the
  // hidden size a multiple of 128 for the norm's registers kernel): every e4m3 layer's input
  // quantised per row and group of kHopperScaleGroup columns into gemm_in_fp8_ and
  // gemm_in_group_scale_, and those layers on the Hopper GEMM's grouped kernels alone.
  bool fp8_groups_ = false;
  // RANKD_CUDA_FOLD_NORMS=1 where it applies (precision bf16, the Hopper GEMM may run, no sandwich
  // norms, the hidden size a multiple of 64): qkv and gate_up take normed_ as the stream's bf16
  // copy with norm_sumsq_, their weights folded (UploadWeights); o_proj and down (but the last
  // layer's) add into the stream with kResidualNorm, which writes both; layer 0's come from
  // LaunchNormFoldInput. No norm kernel in the layers.
  bool fold_norms_ = false;
  // The QkvRope launch that kStoreBf16Rope stands for (its qkv set to the output), for the layer
  // being run: what CublasLinear runs after cuBLASLt's GEMM for that epilogue.
  kernels::QkvRopeParams rope_unfused_;
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
  bf16* normed_ = nullptr;       // [Tc, H] (fold_norms_: the stream's bf16 copy)
  float* norm_sumsq_ = nullptr;  // [Tc, H / 64] the stream's sums of squares (fold_norms_)
  bf16* wide_ = nullptr;         // [Tc, max(Q + 2KV, 2I)]: qkv (roped in place), later gate_up
  bf16* attn_ = nullptr;         // [Tc, Q] attention output
  bf16* act_ = nullptr;          // [Tc, I]
  // Precision fp8: the input of the GEMM about to run, in e4m3, and its per-row scales (written
  // by the input and post norms, the attention output's quantiser and the gated activation).
  __nv_fp8_e4m3* gemm_in_fp8_ = nullptr;  // [Tc, max(H, Q, I)]
  float* gemm_in_scale_ = nullptr;        // [Tc]
  float* act_group_scale_ = nullptr;      // [Tc, I / kHopperScaleGroup] (down_groups_)
  float* gemm_in_group_scale_ = nullptr;  // [Tc, max(H, Q) / kHopperScaleGroup] (fp8_groups_)
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
  // shape (epilogue, rows, in, out, fp8 operands, group-scaled, norm-folded, fast accumulation:
  // the variant where the Hopper GEMM was faster, else none), under ctx_->mu().
  OwnUse own_use_ = OwnUse::kNever;
  int gate_up_half_ = 0;  // LaunchSwiGlu's `half` for the weights' layout (0: stacked)
  std::map<std::tuple<kernels::HopperEpilogue, int, int, int, bool, bool, bool, bool>,
           std::optional<OwnVariant>>
      own_choice_;
  using OwnGemmKey =
      std::tuple<const void*, const void*, const void*, const void*, int, int, int,
                 kernels::HopperEpilogue, std::tuple<int, int, int, bool>, bool, const void*>;
  std::map<OwnGemmKey, kernels::HopperGemmPlan> own_plans_;
};

}  // namespace rankd::cuda::internal

#endif  // RANKD_SRC_BACKEND_CUDA_CUDA_BACKEND_IMPL_H_
