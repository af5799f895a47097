#include "rankd/backend/cuda/cuda_backend.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
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
#include "src/backend/cuda/cuda_backend_impl.h"

namespace rankd::cuda {
namespace internal {

// ---- loading ---------------------------------------------------------------------------------

CudaBackend::OwnUse CudaBackend::OwnGemmUse() const {
  using Switch = backend::BackendOptions::CudaSwitches::OwnGemm;
  if (switches_.own_gemm == Switch::kOff) return OwnUse::kNever;
  std::string why;
  const int widths[] = {config_.hidden_size, config_.q_width(), qkv_width(),
                        config_.intermediate_size};
  if (const cudaError_t e = kernels::HopperGemmSupported(); e != cudaSuccess) {
    why = absl::StrCat(cudaGetErrorString(e),
                       " (it needs an sm_90 device and sm_90a code in this build)");
  } else if (config_.intermediate_size % kernels::kHopperGluHalf != 0) {
    why = absl::StrCat("intermediate_size ", config_.intermediate_size, " is not a multiple of ",
                       kernels::kHopperGluHalf);
  } else if (std::any_of(std::begin(widths), std::end(widths), [](int w) { return w % 8 != 0; })) {
    why = "a layer width is not a multiple of 8";
  } else if (precision_ == Precision::kFp8 &&
             std::any_of(std::begin(widths), std::end(widths), [](int w) { return w % 16 != 0; })) {
    why = "precision fp8 and a layer width is not a multiple of 16 (an e4m3 row of whole 16 bytes)";
  }
  if (why.empty()) return switches_.own_gemm == Switch::kOn ? OwnUse::kAlways : OwnUse::kTimed;
  if (switches_.own_gemm == Switch::kOn) {
    spdlog::warn("RANKD_CUDA_OWN_GEMM=1: {}; the linear layers stay on cuBLASLt", why);
  } else {
    spdlog::info("cuda backend: the linear layers run on cuBLASLt (the Hopper GEMM: {})", why);
  }
  return OwnUse::kNever;
}

cudaError_t CudaBackend::MakeOwnPlan(const LinearIn& ops, void* y, int rows, int in, int out,
                                     kernels::HopperEpilogue epilogue, const OwnVariant& variant,
                                     kernels::HopperGemmPlan* plan, bf16* norm_copy,
                                     float* norm_sumsq) const {
  cudaError_t e =
      ops.fp8 ? kernels::MakeHopperGemmPlanFp8(ops.xq.data, ops.xq.scale, ops.wq.data, ops.wq.scale,
                                               y, rows, out, in, epilogue, plan, variant.tile_n,
                                               variant.schedule, variant.cluster, XScalesOf(ops))
              : kernels::MakeHopperGemmPlan(ops.x, ops.w, y, rows, out, in, epilogue, plan,
                                            variant.tile_n, variant.schedule, variant.cluster);
  if (e == cudaSuccess && epilogue == kernels::HopperEpilogue::kStoreBf16Rope) {
    // k's heads; with the q/k norms q's too, each head normed first with this layer's weights
    // (rope_unfused_, the QkvRope launch the epilogue stands for).
    const int q = config_.q_width();
    e = kernels::SetHopperGemmRope(plan, rotations_, qk_norm_in_gemm_ ? 0 : q,
                                   q + config_.kv_width(), config_.head_dim);
    if (e == cudaSuccess && qk_norm_in_gemm_) {
      e = kernels::SetHopperGemmRopeNorm(plan, rope_unfused_.q_norm, rope_unfused_.k_norm, q,
                                         rope_unfused_.eps);
    }
  }
  if (e == cudaSuccess && (epilogue == kernels::HopperEpilogue::kSwiGluFp8 ||
                           epilogue == kernels::HopperEpilogue::kGeGluFp8)) {
    e = kernels::SetHopperGemmOutScales(plan, act_group_scale_);
  }
  if (e == cudaSuccess && ops.x_sumsq != nullptr) {
    e = kernels::SetHopperGemmNormIn(plan, ops.x_sumsq, config_.rms_norm_eps);
  }
  if (e == cudaSuccess && epilogue == kernels::HopperEpilogue::kResidualNorm) {
    e = kernels::SetHopperGemmNormOut(plan, norm_copy != nullptr ? norm_copy : normed_,
                                      norm_sumsq != nullptr ? norm_sumsq : norm_sumsq_);
  }
  if (e == cudaSuccess && variant.slices) {
    // A shape whose tiles fill the SMs asks for none: the variant does not run there.
    const int count = kernels::HopperKSlices(*plan);
    if (count <= 1 || slices_ == nullptr ||
        kernels::HopperKSliceBytes(*plan, count) > slice_partial_bytes_ ||
        kernels::HopperKSliceCounters(*plan) > slice_counters_) {
      return cudaErrorNotSupported;
    }
    char* base = static_cast<char*>(slices_->base());
    e = kernels::SetHopperGemmKSlices(plan, count, reinterpret_cast<float*>(base),
                                      reinterpret_cast<int*>(base + slice_partial_bytes_));
  }
  return e;
}

absl::Status CudaBackend::OwnGemm(const LinearIn& ops, int rows, int in, int out,
                                  kernels::HopperEpilogue epilogue, const OwnVariant& variant,
                                  void* y) {
  if (rows == 0) return absl::OkStatus();
  // Keyed by the operands' addresses, shape and variant: the same key is the same descriptors
  // (an fp8 operand's data and scales are carved together, so its data address names both).
  constexpr size_t kMaxOwnPlans = 4096;
  const OwnGemmKey key{ops.x_data(),  ops.w_data(), y,          rotations_, rows, in, out, epilogue,
                       variant.Key(), ops.x_groups, ops.x_sumsq};
  auto it = own_plans_.find(key);
  if (it == own_plans_.end()) {
    if (own_plans_.size() >= kMaxOwnPlans) own_plans_.clear();
    kernels::HopperGemmPlan plan;
    RANKD_CUDA_RETURN_IF_ERROR(MakeOwnPlan(ops, y, rows, in, out, epilogue, variant, &plan));
    it = own_plans_.emplace(key, plan).first;
  }
  RANKD_CUDA_RETURN_IF_ERROR(kernels::LaunchHopperGemm(it->second, launch_stream()));
  return absl::OkStatus();
}

absl::Status CudaBackend::CublasLinear(const LinearIn& ops, int rows, int in, int out,
                                       kernels::HopperEpilogue epilogue, void* y, bf16* wide) {
  if (ops.x_groups) {
    return absl::InternalError("group-scaled fp8 operands run on the Hopper GEMM only");
  }
  if (ops.x_sumsq != nullptr) {
    return absl::InternalError("the norm fold's GEMMs run on the Hopper GEMM only");
  }
  cudaStream_t s = ctx_->stream();
  // y [rows, out] bf16 = x . w^T, either precision.
  auto store = [&](bf16* to) {
    return ops.fp8 ? gemm_->LinearFp8(ops.xq, ops.wq, rows, in, out, to, s)
                   : gemm_->Linear(ops.x, ops.w, rows, in, out, to, s);
  };
  switch (epilogue) {
    case kernels::HopperEpilogue::kStoreBf16:
      return store(static_cast<bf16*>(y));
    case kernels::HopperEpilogue::kStoreBf16Rope: {
      RANKD_RETURN_IF_ERROR(store(static_cast<bf16*>(y)));
      kernels::QkvRopeParams r = rope_unfused_;
      r.qkv = static_cast<bf16*>(y);
      RANKD_CUDA_RETURN_IF_ERROR(kernels::LaunchQkvRope(r, launch_stream()));
      return absl::OkStatus();
    }
    case kernels::HopperEpilogue::kAccumulateF32:
      return ops.fp8
                 ? gemm_->LinearAccumulateFp8(ops.xq, ops.wq, rows, in, out, static_cast<float*>(y),
                                              s)
                 : gemm_->LinearAccumulate(ops.x, ops.w, rows, in, out, static_cast<float*>(y), s);
    case kernels::HopperEpilogue::kSwiGlu:
    case kernels::HopperEpilogue::kGeGlu:
      RANKD_RETURN_IF_ERROR(store(wide));
      RANKD_CUDA_RETURN_IF_ERROR(
          epilogue == kernels::HopperEpilogue::kGeGlu
              ? kernels::LaunchGeGlu(wide, rows, out / 2, static_cast<bf16*>(y), launch_stream(),
                                     gate_up_half_)
              : kernels::LaunchSwiGlu(wide, rows, out / 2, static_cast<bf16*>(y), launch_stream(),
                                      gate_up_half_));
      return absl::OkStatus();
    case kernels::HopperEpilogue::kSwiGluFp8:
    case kernels::HopperEpilogue::kGeGluFp8:
      return absl::InternalError("the e4m3 gated epilogues run on the Hopper GEMM only");
    case kernels::HopperEpilogue::kResidualNorm:
      return absl::InternalError("the norm fold's residual add runs on the Hopper GEMM only");
  }
  return absl::InternalError("unknown GEMM epilogue");
}

// The Hopper GEMM variants that kTimed tries on each layer shape (RANKD_CUDA_OWN_GEMM_VARIANTS):
// ping-pong on 128-row tiles (pingpong128: the first alone); with pingpong (the default) ping-pong
// on 64-row tiles too (for passes of few rows: 300 to 1,650 rows in issue 25's small shapes,
// where 128-row tiles leave SMs idle in their last wave); with all, each schedule alone and in
// clusters of 2 (W's tile multicast to both CTAs), and ping-pong 64 with K in slices (where
// kernels::HopperKSlices asks for some: tiles that fill at most half of the SMs, as the embedding
// pass's 250 rows make; in `all` until a GPU has run its tests and measured it);
// kCooperative with the tile that MakeHopperGemmPlan picks for its waves (128 or 256, the gated
// epilogues too). bench/RESULTS.md (2026-12-02, per-layer table): which schedule wins differs by
// layer and model.
constexpr struct {
  kernels::HopperSchedule schedule;
  int cluster;
  const char* name;
  bool slices = false;
} kOwnVariants[] = {
    {kernels::HopperSchedule::kPingPong, 1, "ping-pong"},
    {kernels::HopperSchedule::kPingPongShort, 1, "ping-pong 64"},
    {kernels::HopperSchedule::kPingPong, 2, "ping-pong c2"},
    {kernels::HopperSchedule::kCooperative, 1, "cooperative"},
    {kernels::HopperSchedule::kCooperative, 2, "cooperative c2"},
    {kernels::HopperSchedule::kCooperativeTall, 1, "tall"},
    {kernels::HopperSchedule::kCooperativeTall, 2, "tall c2"},
    {kernels::HopperSchedule::kPingPongShort, 1, "ping-pong 64 in K slices", true},
};
constexpr int kNumOwnVariants = sizeof(kOwnVariants) / sizeof(kOwnVariants[0]);

absl::StatusOr<std::optional<CudaBackend::OwnVariant>> CudaBackend::OwnFor(
    const LinearIn& ops, int rows, int in, int out, kernels::HopperEpilogue epilogue) {
  if (own_use_ == OwnUse::kNever || rows == 0) return std::nullopt;
  // Row-scaled e4m3 stays on cuBLASLt unless a switch lets the Hopper GEMM take it.
  if (ops.fp8 && !ops.x_groups && !ops.fast_accum && !switches_.fp8_promoted) {
    return std::nullopt;
  }
  if (own_use_ == OwnUse::kAlways) return OwnVariant{};
  const bool promoted = ops.fp8 && XScalesOf(ops) != kernels::HopperXScales::kRow;
  // No cuBLASLt twin: group-scaled X, gate_up's activation written in e4m3, the norm fold's.
  const bool own_only = ops.x_groups || epilogue == kernels::HopperEpilogue::kSwiGluFp8 ||
                        epilogue == kernels::HopperEpilogue::kGeGluFp8 ||
                        epilogue == kernels::HopperEpilogue::kResidualNorm ||
                        ops.x_sumsq != nullptr;
  // Where nothing is timed (in a capture): cuBLASLt, or with no twin the plan's default.
  const std::optional<OwnVariant> untimed =
      own_only ? std::optional<OwnVariant>(OwnVariant{}) : std::nullopt;
  const auto key = std::make_tuple(epilogue, rows, in, out, ops.fp8, ops.x_groups,
                                   ops.x_sumsq != nullptr, ops.fast_accum);
  if (auto it = own_choice_.find(key); it != own_choice_.end()) return it->second;
  cudaStream_t s = ctx_->stream();
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  RANKD_CUDA_RETURN_IF_ERROR(cudaStreamIsCapturing(s, &capture));
  if (capture != cudaStreamCaptureStatusNone) return untimed;
  // Scratch outputs (and gate_up's bf16 product for cuBLASLt; kResidualNorm's copy and sums), so
  // that the timed runs write nothing the pass reads: y [rows, out] fp32 or bf16 ([rows, out/2]
  // gated), then wide (or the copy [rows, out] bf16, then the sums [rows, out / 64] fp32).
  const bool gated =
      epilogue == kernels::HopperEpilogue::kSwiGlu || epilogue == kernels::HopperEpilogue::kGeGlu;
  const bool norm_out = epilogue == kernels::HopperEpilogue::kResidualNorm;
  auto round_up = [](size_t b) { return (b + 255) / 256 * 256; };
  const size_t y_bytes = static_cast<size_t>(rows) * out *
                         (epilogue == kernels::HopperEpilogue::kAccumulateF32 || norm_out ? 4 : 2);
  const size_t wide_offset = round_up(y_bytes);
  const size_t sumsq_offset = wide_offset + round_up(static_cast<size_t>(rows) * out * 2);
  const size_t bytes =
      gated      ? wide_offset + static_cast<size_t>(rows) * out * 2
      : norm_out ? sumsq_offset + static_cast<size_t>(rows) * (out / kernels::kHopperScaleGroup) * 4
                 : wide_offset;
  char* scratch = nullptr;
  // marks[v] .. marks[v + 1] time candidate v: the variants of kOwnVariants, then cuBLASLt.
  constexpr int kCandidates = kNumOwnVariants + 1;
  cudaEvent_t marks[kCandidates + 1] = {};
  absl::Cleanup release = [&] {
    for (cudaEvent_t e : marks) {
      if (e != nullptr) cudaEventDestroy(e);
    }
    if (scratch != nullptr) cudaFreeAsync(scratch, s);
  };
  RANKD_CUDA_RETURN_IF_ERROR(cudaMallocAsync(reinterpret_cast<void**>(&scratch), bytes, s));
  RANKD_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(scratch, 0, bytes, s));
  for (cudaEvent_t& e : marks) RANKD_CUDA_RETURN_IF_ERROR(cudaEventCreate(&e));
  bf16* wide = reinterpret_cast<bf16*>(scratch + wide_offset);
  // A variant the device or build cannot run (cudaErrorNotSupported from its plan or its first
  // launch, e.g. no cluster of 2 fits) is left out; any other error is the pass's.
  kernels::HopperGemmPlan plans[kNumOwnVariants];
  bool runs[kNumOwnVariants] = {};
  // The first variants of kOwnVariants: ping-pong (128-row tiles), ping-pong 64, then the rest.
  using OwnVariants = backend::BackendOptions::CudaSwitches::OwnVariants;
  const int variants = promoted || own_only                                    ? kNumOwnVariants
                       : switches_.own_gemm_variants == OwnVariants::kAll      ? kNumOwnVariants
                       : switches_.own_gemm_variants == OwnVariants::kPingPong ? 2
                                                                               : 1;
  for (int v = 0; v < variants; ++v) {
    // The promoted kernels: the variants they are built for (the others would only report
    // cudaErrorNotSupported).
    if (promoted && !(kOwnVariants[v].cluster == 1 &&
                      (kOwnVariants[v].schedule == kernels::HopperSchedule::kCooperative ||
                       kOwnVariants[v].schedule == kernels::HopperSchedule::kPingPongShort))) {
      continue;
    }
    cudaError_t e =
        MakeOwnPlan(ops, scratch, rows, in, out, epilogue,
                    {0, kOwnVariants[v].schedule, kOwnVariants[v].cluster, kOwnVariants[v].slices},
                    &plans[v], wide, reinterpret_cast<float*>(scratch + sumsq_offset));
    if (e == cudaSuccess) e = kernels::LaunchHopperGemm(plans[v], s);
    if (e == cudaErrorNotSupported) continue;
    RANKD_CUDA_RETURN_IF_ERROR(e);
    runs[v] = true;
  }
  auto theirs = [&] { return CublasLinear(ops, rows, in, out, epilogue, scratch, wide); };
  // One untimed run each (above; cuBLASLt tunes its algorithm on its first), then kRuns each.
  // No twin: no cuBLASLt.
  constexpr int kRuns = 5;
  if (!own_only) RANKD_RETURN_IF_ERROR(theirs());
  for (int v = 0; v < kCandidates; ++v) {
    RANKD_CUDA_RETURN_IF_ERROR(cudaEventRecord(marks[v], s));
    for (int r = 0; r < kRuns; ++r) {
      if (v == kNumOwnVariants) {
        if (!own_only) RANKD_RETURN_IF_ERROR(theirs());
      } else if (runs[v]) {
        RANKD_CUDA_RETURN_IF_ERROR(kernels::LaunchHopperGemm(plans[v], s));
      }
    }
  }
  RANKD_CUDA_RETURN_IF_ERROR(cudaEventRecord(marks[kCandidates], s));
  RANKD_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(marks[kCandidates]));
  float ms[kCandidates] = {};
  for (int v = 0; v < kCandidates; ++v) {
    RANKD_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms[v], marks[v], marks[v + 1]));
  }
  int best = kNumOwnVariants;  // cuBLASLt unless a variant is faster
  std::string times;
  for (int v = 0; v < kNumOwnVariants; ++v) {
    if (!runs[v]) continue;
    absl::StrAppend(&times, kOwnVariants[v].name, " ", absl::StrFormat("%.1f", 1e3 * ms[v] / kRuns),
                    " us, ");
    if (ms[v] < ms[best] || (own_only && best == kNumOwnVariants)) best = v;
  }
  if (own_only && best == kNumOwnVariants) {
    return absl::InternalError(absl::StrCat("no variant of the Hopper GEMM ran the ",
                                            kernels::HopperEpilogueName(epilogue), " GEMM of ",
                                            rows, " rows, ", in, " -> ", out));
  }
  std::optional<OwnVariant> choice;
  if (best < kNumOwnVariants) {
    choice = OwnVariant{plans[best].tile_n, plans[best].schedule, plans[best].cluster,
                        kOwnVariants[best].slices};
  }
  own_choice_.emplace(key, choice);
  spdlog::info(
      "cuda backend: the {}{} GEMM of {} rows, {} -> {}: Hopper GEMM {}cuBLASLt {} "
      "(epilogue included): {} for this shape",
      ops.x_groups ? "fp8 (group-scaled) "
      : promoted   ? "fp8 (promoted) "
      : ops.fp8    ? "fp8 "
                   : "",
      kernels::HopperEpilogueName(epilogue), rows, in, out, times,
      own_only ? std::string("not run")
               : absl::StrFormat("%.1f us", 1e3 * ms[kNumOwnVariants] / kRuns),
      choice ? absl::StrCat("the Hopper GEMM (", kOwnVariants[best].name, ")") : "cuBLASLt");
  return choice;
}

absl::Status CudaBackend::Linear(const LinearIn& ops, int rows, int in, int out,
                                 kernels::HopperEpilogue epilogue, void* y) {
  RANKD_ASSIGN_OR_RETURN(const std::optional<OwnVariant> own, OwnFor(ops, rows, in, out, epilogue));
  return own ? OwnGemm(ops, rows, in, out, epilogue, *own, y)
             : CublasLinear(ops, rows, in, out, epilogue, y, wide_);
}

absl::Status CudaBackend::Load(const model::SafetensorsModel& st, int initial_tokens) {
  own_use_ = OwnGemmUse();
  const bool own = own_use_ != OwnUse::kNever, fp8 = precision_ == Precision::kFp8;
  fp8_groups_ = switches_.fp8_group_scales && own && fp8 && config_.hidden_size % 128 == 0 &&
                config_.hidden_size <= 2048 && config_.q_width() % kernels::kHopperScaleGroup == 0;
  // (OwnGemmUse has checked that intermediate_size is a multiple of kHopperGluHalf: whole scale
  // groups too.) gate_up's e4m3 epilogue runs on the Hopper GEMM: where its input is e4m3 with
  // row scales, with RANKD_CUDA_FP8_PROMOTED=1 (the promoted kernels) or
  // RANKD_CUDA_FP8_FAST_ACCUM naming gate_up (XScalesOf).
  static_assert(kernels::kHopperScaleGroup == kernels::kHopperGluHalf,
                "a gated tile's outputs are one scale group");
  down_groups_ = own && fp8 && switches_.fp8_linears.down &&
                 (!switches_.fp8_linears.gate_up || fp8_groups_ ||
                  switches_.fp8_fast_accum.gate_up || switches_.fp8_promoted);
  // gate_up interleaved for the Hopper GEMM's gated epilogues (bf16 out, or e4m3 with group
  // scales: down_groups_); stacked where down reads e4m3 with row scales (the fp8 activation
  // kernels quantise from the stacked layout).
  const bool gated_epilogue = own && !(fp8 && switches_.fp8_linears.down && !down_groups_);
  if (switches_.fp8_group_scales && !fp8_groups_ && precision_ == Precision::kFp8) {
    spdlog::info(
        "cuda backend: RANKD_CUDA_FP8_GROUP_SCALES=1 needs the Hopper GEMM, a hidden size that "
        "is a multiple of 128 up to 2048 and q heads of whole 64-column groups; the fp8 inputs "
        "keep a scale per row");
  }
  gate_up_half_ = gated_epilogue ? kernels::kHopperGluHalf : 0;
  static_assert(kernels::kNormFoldGroup == kernels::kHopperScaleGroup,
                "LaunchNormFoldInput's sums are the Hopper GEMM's");
  fold_norms_ = switches_.fold_norms && own && !fp8 && !config_.sandwich_norms &&
                config_.hidden_size % kernels::kHopperScaleGroup == 0;
  if (switches_.fold_norms && !fold_norms_) {
    spdlog::info(
        "cuda backend: RANKD_CUDA_FOLD_NORMS=1 needs precision bf16, the Hopper GEMM, no sandwich "
        "norms and a hidden size that is a multiple of {}; the norms run as kernels",
        kernels::kHopperScaleGroup);
  }
  RANKD_ASSIGN_OR_RETURN(
      weights_,
      UploadWeights(config_, head_, st, kGemmWorkspaceBytes, precision_, switches_.fp8_linears,
                    gated_epilogue ? GateUpLayout::kInterleaved : GateUpLayout::kStacked,
                    fold_norms_));
  RANKD_ASSIGN_OR_RETURN(gemm_, Gemm::Create(weights_.gemm_workspace, kGemmWorkspaceBytes,
                                             switches_.gemm_tune, switches_.gemm_candidates));
  if (own) {
    // The K slices' partials and counters (OwnVariant::slices): at most a unit an SM, each a
    // 128 x 128 fp32 block at most (two consumer blocks of 64 x 128).
    int sms = 0;
    RANKD_CUDA_RETURN_IF_ERROR(
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, ctx_->device()));
    slice_partial_bytes_ = static_cast<size_t>(sms) * kernels::kHopperTileM * 128 * sizeof(float);
    slice_counters_ = 2 * sms;
    RANKD_ASSIGN_OR_RETURN(
        slices_,
        Arena::Create(Arena::Kind::kDevice, slice_partial_bytes_ + sizeof(int) * slice_counters_));
    RANKD_CUDA_RETURN_IF_ERROR(
        cudaMemset(static_cast<char*>(slices_->base()) + slice_partial_bytes_, 0,
                   sizeof(int) * slice_counters_));
  }
  RANKD_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&staging_free_, cudaEventDisableTiming));
  attention_wgmma_ =
      switches_.attention_wgmma && kernels::PrefixAttentionSupportsWgmma(config_.head_dim);
  if (switches_.attention_wgmma && !attention_wgmma_) {
    spdlog::info(
        "cuda backend: attention on wgmma needs sm_90a code on an sm_90 device and heads of 64 or "
        "128 (this model's: {}); the mma.sync kernel runs",
        config_.head_dim);
  }
  pdl_ = switches_.pdl && kernels::ProgrammaticLaunchSupported();
  if (switches_.pdl && !pdl_) {
    spdlog::info(
        "cuda backend: programmatic dependent launch needs sm_90 or later; kernels launch "
        "in stream order");
  }
  // The wgmma queue kernel, the one that overlaps key tiles and runs in blocks of warpgroups.
  const bool queue = attention_wgmma_ && !switches_.attention_pipeline;
  // The overlapped key tiles: the switch, or with auto at heads of 128 (where one kernel measured
  // faster; slower at 64); on the queue kernel only.
  attention_overlap_ =
      queue &&
      (switches_.attention_overlap == backend::BackendOptions::CudaSwitches::kAttentionOverlapAuto
           ? config_.head_dim == 128
           : switches_.attention_overlap != 0);
  // Attention's blocks of warpgroups: the switch's number where the kernel takes it, else 1; auto:
  // 1 or 2 per pass (PassWarpgroups), where blocks of 2 can run at all.
  attention_warpgroups_ = 1;
  auto_warpgroups_ = false;
  const int asked = switches_.attention_warpgroups;
  if (asked == backend::BackendOptions::CudaSwitches::kAttentionWarpgroupsAuto) {
    auto_warpgroups_ = queue && config_.head_dim == 64 &&
                       kernels::PrefixAttentionSupportsWarpgroups(config_.head_dim, 2);
  } else if (asked > 1) {
    if (queue && kernels::PrefixAttentionSupportsWarpgroups(config_.head_dim, asked)) {
      attention_warpgroups_ = asked;
    } else {
      spdlog::info(
          "cuda backend: attention in blocks of {} warpgroups needs the wgmma queue kernel (not "
          "the pipelined one) and heads of 64 (or of 128 for 2; this model's: {}); blocks of one "
          "run",
          asked, config_.head_dim);
    }
  }
  // Four blocks a multiprocessor: the one-warpgroup queue kernel's at heads of 64 without overlap
  // (blocks of one warpgroup only; elsewhere the switch has nothing to act on).
  attention_four_blocks_ =
      queue && !attention_overlap_ && config_.head_dim == 64 && switches_.attention_four_blocks;
  // Three blocks a multiprocessor: the one-warpgroup queue kernel's at heads of 128 (overlapped
  // or not).
  attention_three_blocks_ = queue && config_.head_dim == 128 && switches_.attention_three_blocks;
  // The next unit's loads prefetched: the queue kernel's (mma.sync or wgmma), not the pipelined
  // one's, which issues its own.
  attention_prefetch_ = !switches_.attention_pipeline && switches_.attention_prefetch;
  // (Blocks of one warpgroup always: a score pass's last layer runs them on its one-row tiles.)
  for (int w = 1; w <= kernels::kMaxAttentionWarpgroups; ++w) {
    const bool runs = w == 1 || w == attention_warpgroups_ || (auto_warpgroups_ && w == 2);
    attention_blocks_[w] =
        runs ? kernels::PrefixAttentionBlocks(config_.head_dim, switches_.attention_pipeline,
                                              attention_wgmma_, attention_overlap_, w,
                                              w == 1 && attention_four_blocks_,
                                              w == 1 && attention_three_blocks_)
             : 0;
    if (runs && attention_blocks_[w] <= 0) {
      return absl::InternalError("cannot size the attention kernel's grid on this device");
    }
  }
  q_rope_in_attention_ = !config_.attention_bias && !config_.qk_norm && switches_.fuse_q_rope;
  const bool rope_epilogue =
      own_use_ != OwnUse::kNever && (config_.head_dim == 64 || config_.head_dim == 128);
  k_rope_in_gemm_ = q_rope_in_attention_ && switches_.fuse_k_rope && rope_epilogue;
  qk_norm_in_gemm_ =
      config_.qk_norm && !config_.attention_bias && switches_.fuse_qk_norm && rope_epilogue;
  embed_scale_ = model::Bf16ToF32(model::F32ToBf16(config_.embedding_scale()));
  if (switches_.profile) {
    RANKD_ASSIGN_OR_RETURN(profiler_, StageProfiler::Create(switches_.profile_skip));
    graphs_.Disable();  // the profile times eager passes
  }
  return EnsureCapacity(Bucket(initial_tokens), 0);
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
  const PassShape shape{PassKind::kEncode, Bucket(P), Bucket(1),
                        PassWarpgroups(static_cast<double>(P) * (P + 1) / 2, P)};
  RANKD_RETURN_IF_ERROR(EnsureCapacity(shape.rows, 0));
  RANKD_RETURN_IF_ERROR(AcquireStaging());
  if (profiler_) profiler_->BeginPass("encode");
  Carver c(host_meta_);
  const Meta m = CarveMeta(c, shape.rows, shape.items);
  PlanEncodePass(ids, group(), Arrays(m, shape, group()), &plan_,
                 AttentionTileRows(shape.attention_warpgroups));
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
  const PassShape shape{PassKind::kScore, Bucket(T), Bucket(N),
                        PassWarpgroups(size.keys, size.rows)};
  RANKD_RETURN_IF_ERROR(EnsureCapacity(shape.rows, R));
  RANKD_RETURN_IF_ERROR(AcquireStaging());
  if (profiler_) profiler_->BeginPass("score");

  Carver c(host_meta_);
  const Meta m = CarveMeta(c, shape.rows, shape.items);
  PlanScorePass(plan_groups, strategy_, group(), Arrays(m, shape, group()), &plan_,
                AttentionTileRows(shape.attention_warpgroups));
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
  *m.counts = PassCounts{T, N, plan_.tiles * config_.num_kv_heads,
                         plan_.last_tiles * config_.num_kv_heads, KvLayers{}};
  std::fill(m.unit_counters, m.unit_counters + config_.num_layers, 0);
  RANKD_RETURN_IF_ERROR(Upload(shape, R));
  RANKD_RETURN_IF_ERROR(Forward(shape, plan_.work));
  RANKD_RETURN_IF_ERROR(Mark(Stage::kDownload, {0, 4.0 * N}));
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

}  // namespace internal

namespace {

using internal::CudaBackend;
using internal::DeviceContext;
using model::ModelConfig;

// RANKD_CUDA_OWN_GEMM's value for `o`.
const char* OwnGemmName(backend::BackendOptions::CudaSwitches::OwnGemm o) {
  using OwnGemm = backend::BackendOptions::CudaSwitches::OwnGemm;
  return o == OwnGemm::kAuto ? "auto" : o == OwnGemm::kOn ? "1" : "0";
}

// RANKD_CUDA_OWN_GEMM_VARIANTS's value for `v`.
const char* OwnVariantsName(backend::BackendOptions::CudaSwitches::OwnVariants v) {
  using OwnVariants = backend::BackendOptions::CudaSwitches::OwnVariants;
  return v == OwnVariants::kAll ? "all" : v == OwnVariants::kPingPong ? "pingpong" : "pingpong128";
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
      "fuse_q_rope {}, fuse_k_rope {}, attention_pipeline {}, attention_wgmma {}, "
      "attention_overlap {}, attention_warpgroups {}, attention_four_blocks {}, "
      "attention_three_blocks {}, attention_prefetch {}, own_gemm {} ({}, variants {}){}",
      config.Summary(), prop.name, options.device, options.strategy, options.precision,
      head.ToString(), graphs ? "on" : "off", backend->weight_bytes() / 1048576.0, sw.stats,
      sw.profile, sw.profile_skip, sw.gemm_tune, sw.gemm_candidates, sw.fuse_q_rope, sw.fuse_k_rope,
      sw.attention_pipeline, sw.attention_wgmma,
      sw.attention_overlap == backend::BackendOptions::CudaSwitches::kAttentionOverlapAuto
          ? std::string("auto")
          : std::to_string(sw.attention_overlap),
      sw.attention_warpgroups == backend::BackendOptions::CudaSwitches::kAttentionWarpgroupsAuto
          ? std::string("auto")
          : std::to_string(sw.attention_warpgroups),
      sw.attention_four_blocks, sw.attention_three_blocks, sw.attention_prefetch,
      OwnGemmName(sw.own_gemm), backend->own_gemm() ? "may run" : "not in use",
      OwnVariantsName(sw.own_gemm_variants),
      precision == Precision::kFp8
          ? absl::StrCat(
                ", fp8 linears ", Fp8LinearsName(sw.fp8_linears), ", fp8 input scales ",
                backend->fp8_group_scales() ? "per 64 columns" : "per row",
                Fp8LinearsName(sw.fp8_fast_accum) != "none"
                    ? absl::StrCat(", fp8 fast accumulation on ", Fp8LinearsName(sw.fp8_fast_accum),
                                   sw.fp8_promoted ? ", the others promoted" : "")
                : sw.fp8_promoted ? ", fp8 promoted on the Hopper GEMM"
                                  : "")
      : backend->fold_norms() ? ", norms folded into qkv and gate_up"
                              : "");
  return backend;
}

std::optional<CudaBackendStats> GetCudaBackendStats(backend::Backend& backend) {
  auto* cuda = dynamic_cast<CudaBackend*>(&backend);
  if (cuda == nullptr) return std::nullopt;
  return cuda->Stats();
}

}  // namespace rankd::cuda
