// The CUDA backend's forward pass: every kernel of a pass launched on the stream, eagerly or into
// a graph being captured (cuda_backend_impl.h), with the profiler's stage marks (Mark: the stage's
// costs are pass_costs.h's, the table stage_profiler.h's).
#include <algorithm>

#include "kernels/embedding.cuh"
#include "kernels/gather_rows.cuh"
#include "kernels/prefix_attention.cuh"
#include "kernels/qkv_rope.cuh"
#include "kernels/quantize_fp8.cuh"
#include "kernels/rms_norm.cuh"
#include "kernels/score_head.cuh"
#include "kernels/swiglu.cuh"
#include "rankd/backend/cuda/cuda_status.h"
#include "rankd/common/status.h"
#include "spdlog/spdlog.h"
#include "src/backend/cuda/cuda_backend_impl.h"

namespace rankd::cuda::internal {

// ---- graphs ------------------------------------------------------------------------------------

absl::Status CudaBackend::Forward(const PassShape& shape, const PassWork& work) {
  if (shape.attention_warpgroups > 1) ++wide_attention_passes_;
  return graphs_.Run(shape, ctx_->stream(), [&] { return RunPass(shape, work); });
}

// ---- forward -----------------------------------------------------------------------------------

absl::Status CudaBackend::RunPass(const PassShape& shape, const PassWork& work) {
  cudaStream_t s = ctx_->stream();                   // cuBLASLt's GEMMs
  const kernels::LaunchStream ks = launch_stream();  // rankd's kernels
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
  // fp8_groups_: the inputs' scales per row and group of 64 columns (gemm_in_group_scale_).
  const Fp8Matrix gemm_in{gemm_in_fp8_, fp8_groups_ ? gemm_in_group_scale_ : gemm_in_scale_};
  auto norm = [&](const float* x, const bf16* w, int rows, bool to_fp8) -> absl::Status {
    RANKD_CUDA_RETURN_IF_ERROR(
        !to_fp8       ? kernels::LaunchRmsNorm(x, w, norm_offset, eps, rows, H, normed_, ks)
        : fp8_groups_ ? kernels::LaunchRmsNormFp8Groups(x, w, norm_offset, eps, rows, H,
                                                        gemm_in_fp8_, gemm_in_group_scale_, ks)
                      : kernels::LaunchRmsNormFp8(x, w, norm_offset, eps, rows, H, gemm_in_fp8_,
                                                  gemm_in_scale_, ks));
    return absl::OkStatus();
  };
  // Which e4m3 layers may accumulate fast (RANKD_CUDA_FP8_FAST_ACCUM).
  const Fp8Linears& fast = switches_.fp8_fast_accum;
  // A layer's operands: the bf16 input x and weight w, or (in_fp8) gemm_in and the e4m3 weight,
  // accumulated fast where `fast_accum`.
  auto operands = [&](const bf16* x, const bf16* w, const Fp8Matrix& wq, bool in_fp8,
                      bool fast_accum) {
    return !in_fp8       ? LinearIn::Bf16(x, w)
           : fp8_groups_ ? LinearIn::Fp8Groups(gemm_in, wq)
                         : LinearIn::Fp8(gemm_in, wq, fast_accum);
  };
  // y [rows, out] bf16 = input . w^T; `x` is the bf16 input (unused when `in_fp8`).
  auto linear = [&](const bf16* x, const bf16* w, const Fp8Matrix& wq, int rows, int in, int out,
                    bf16* y, bool in_fp8, bool fast_accum) {
    return Linear(operands(x, w, wq, in_fp8, fast_accum), rows, in, out,
                  kernels::HopperEpilogue::kStoreBf16, y);
  };

  // The profile's two numbers of every stage (pass_costs.h).
  const PassCosts cost({H, Q, KV, W, I, D}, work, {fp8_qkv, fp8_o, fp8_gate_up, fp8_down});

  RANKD_RETURN_IF_ERROR(Mark(Stage::kEmbed, cost.Embed()));
  RANKD_CUDA_RETURN_IF_ERROR(kernels::LaunchEmbeddingGather(m.tokens, Tb, weights_.embed, dev_rows_,
                                                            H, embed_scale_, x_, ks));
  RANKD_RETURN_IF_ERROR(Mark(Stage::kQkvRope, cost.RopeTable()));
  RANKD_CUDA_RETURN_IF_ERROR(
      kernels::LaunchRopeRotations(m.positions, weights_.inv_freq, Tb, D / 2, rotations_, ks));
  // The norm fold (fold_norms_): qkv and gate_up read the stream's bf16 copy in normed_ and divide
  // their rows by the rms from norm_sumsq_; o_proj and down (but the last layer's) write both as
  // they add into the stream, and here the embeddings' stream gets its own.
  const bool fold = fold_norms_;
  if (fold) {
    RANKD_RETURN_IF_ERROR(Mark(Stage::kNorm, cost.Norm(cost.Rows(), false)));
    RANKD_CUDA_RETURN_IF_ERROR(kernels::LaunchNormFoldInput(x_, Tb, H, normed_, norm_sumsq_, ks));
  }
  // The input of qkv and gate_up: the norm's output (bf16 or e4m3), or with the fold the copy.
  auto normed_in = [&](const bf16* w, const Fp8Matrix& wq, bool in_fp8, bool fast_accum) {
    return fold ? LinearIn::Bf16Normed(normed_, w, norm_sumsq_)
                : operands(normed_, w, wq, in_fp8, fast_accum);
  };
  // The residual adds: kResidualNorm where the fold's next GEMM reads what it writes.
  const kernels::HopperEpilogue residual_add =
      fold ? kernels::HopperEpilogue::kResidualNorm : kernels::HopperEpilogue::kAccumulateF32;
  const KvLayers own{wide_ + Q, wide_ + Q + KV, 0, W};
  for (int l = 0; l < config_.num_layers; ++l) {
    const LayerWeights& w = weights_.layers[l];
    const bool last = l == config_.num_layers - 1;
    if (!fold) {
      RANKD_RETURN_IF_ERROR(Mark(Stage::kNorm, cost.Norm(cost.Rows(), fp8_qkv)));
      RANKD_RETURN_IF_ERROR(norm(x_, w.input_norm, Tb, fp8_qkv));
    }
    const LinearIn qkv_in = normed_in(w.wqkv, w.wqkv_fp8, fp8_qkv, fast.qkv);
    kernels::QkvRopeParams r;
    r.qkv = wide_;
    r.bias = w.bqkv;
    r.q_norm = w.q_norm;
    r.k_norm = w.k_norm;
    r.rotations = rotations_;
    r.num_rows = &m.counts->rows;
    // The prefix's cache that an encode pass fills; a score pass fills none, and with none (and
    // no bias) QkvRope leaves the v heads out of its launch.
    r.kv_out = encode ? &m.counts->kv_out : nullptr;
    r.layer = l;
    r.skip_q = q_rope_in_attention_;
    r.num_tokens = Tb;
    r.num_q_heads = config_.num_heads;
    r.num_kv_heads = config_.num_kv_heads;
    r.head_dim = D;
    r.eps = eps;
    RANKD_RETURN_IF_ERROR(Mark(Stage::kQkvGemm, cost.QkvGemm()));
    if ((k_rope_in_gemm_ || qk_norm_in_gemm_) && !encode) {
      // k rotated in the GEMM's epilogue (with the q/k norms: q and k normed and rotated), or,
      // where cuBLASLt is the faster, by QkvRope right after it: the profile counts either in the
      // qkv GEMM's stage.
      rope_unfused_ = r;
      RANKD_RETURN_IF_ERROR(
          Linear(qkv_in, Tb, H, W, kernels::HopperEpilogue::kStoreBf16Rope, wide_));
    } else {
      RANKD_RETURN_IF_ERROR(Linear(qkv_in, Tb, H, W, kernels::HopperEpilogue::kStoreBf16, wide_));
      RANKD_RETURN_IF_ERROR(Mark(Stage::kQkvRope, cost.QkvRope(q_rope_in_attention_, encode)));
      RANKD_CUDA_RETURN_IF_ERROR(kernels::LaunchQkvRope(r, ks));
    }
    if (encode && last) break;  // the cache holds this layer's K/V; nothing reads its output

    // The last layer (of a score pass) attends for the items' last rows alone (PassPlan::
    // last_tiles), in blocks of one warpgroup: nothing reads the other rows' output.
    const int wgs = last ? 1 : shape.attention_warpgroups;
    kernels::PrefixAttentionParams a;
    a.q = wide_;
    a.q_row_stride = W;
    a.q_rotations = q_rope_in_attention_ ? rotations_ : nullptr;
    a.own = own;
    a.contexts = m.contexts;
    a.seg_start = m.seg_start;
    a.tiles = last ? m.tiles + LastLayerTilesAt(Tb, Nb, group()) : m.tiles;
    a.num_units = last ? &m.counts->last_units : &m.counts->units;
    a.unit_counter = m.unit_counters + l;
    a.layer = l;
    a.num_q_heads = config_.num_heads;
    a.num_kv_heads = config_.num_kv_heads;
    a.head_dim = D;
    a.scale = config_.attn_scale;
    a.softcap = config_.attn_logit_softcapping;
    a.window = config_.window(l);
    a.blocks = attention_blocks_[wgs];
    a.pipelined = switches_.attention_pipeline;
    a.wgmma = attention_wgmma_;
    a.overlap = attention_overlap_;
    a.warpgroups = wgs;
    a.four_blocks = attention_four_blocks_ && a.warpgroups == 1;
    a.three_blocks = attention_three_blocks_ && a.warpgroups == 1;
    a.prefetch = attention_prefetch_;
    a.out = attn_;
    RANKD_RETURN_IF_ERROR(
        Mark(Stage::kAttention, last ? cost.AttentionLastRows() : cost.Attention()));
    RANKD_CUDA_RETURN_IF_ERROR(kernels::LaunchPrefixAttention(a, ks));

    // After the last layer's attention only the items' last rows matter: its o_proj and MLP run
    // on those rows alone, gathered into x_last_ (residual) and wide_ (attention output, free
    // until gate_up overwrites it).
    float* xr = x_;
    const bf16* ar = attn_;
    int rows = Tb;
    double live = cost.Rows();
    if (last) {
      RANKD_RETURN_IF_ERROR(Mark(Stage::kGather, cost.Gather()));
      RANKD_CUDA_RETURN_IF_ERROR(kernels::LaunchGatherRows(x_, m.last_rows, &m.counts->items, Nb,
                                                           sizeof(float) * H, x_last_, ks));
      RANKD_CUDA_RETURN_IF_ERROR(kernels::LaunchGatherRows(attn_, m.last_rows, &m.counts->items, Nb,
                                                           sizeof(bf16) * Q, wide_, ks));
      xr = x_last_;
      ar = wide_;
      rows = Nb;
      live = cost.Items();
    }
    if (fp8_o) {
      RANKD_RETURN_IF_ERROR(Mark(Stage::kQuantize, cost.QuantizeRows(live)));
      RANKD_CUDA_RETURN_IF_ERROR(
          fp8_groups_
              ? kernels::LaunchQuantizeGroupsFp8(ar, rows, Q, gemm_in_fp8_, gemm_in_group_scale_,
                                                 ks)
              : kernels::LaunchQuantizeRowsFp8(ar, rows, Q, gemm_in_fp8_, gemm_in_scale_, ks));
    }
    RANKD_RETURN_IF_ERROR(Mark(Stage::kOProj, cost.OProj(live)));
    // Sandwich norms (Gemma 2): the sublayer output goes to normed_ (free after its GEMM read it),
    // and its norm is what the residual adds.
    if (config_.sandwich_norms) {
      RANKD_RETURN_IF_ERROR(linear(ar, w.wo, w.wo_fp8, rows, Q, H, normed_, fp8_o, fast.o_proj));
      RANKD_CUDA_RETURN_IF_ERROR(
          kernels::LaunchRmsNormAdd(normed_, w.attn_out_norm, norm_offset, eps, rows, H, xr, ks));
    } else {
      RANKD_RETURN_IF_ERROR(
          Linear(operands(ar, w.wo, w.wo_fp8, fp8_o, fast.o_proj), rows, Q, H, residual_add, xr));
    }
    if (!fold) {
      RANKD_RETURN_IF_ERROR(Mark(Stage::kNorm, cost.Norm(live, fp8_gate_up)));
      RANKD_RETURN_IF_ERROR(norm(xr, w.post_norm, rows, fp8_gate_up));
    }
    const bool gelu = config_.activation == model::Activation::kGeluTanh;
    const LinearIn gate_up = normed_in(w.w_gate_up, w.w_gate_up_fp8, fp8_gate_up, fast.gate_up);
    // down's input: act_ in bf16, gemm_in (e4m3 with row scales, the fp8 activation kernel's),
    // or, down_groups_, act_ as e4m3 with group scales (gate_up's epilogue's).
    auto* act_fp8 = reinterpret_cast<__nv_fp8_e4m3*>(act_);
    const LinearIn down =
        down_groups_ ? LinearIn::Fp8Groups(Fp8Matrix{act_fp8, act_group_scale_}, w.w_down_fp8)
                     : operands(act_, w.w_down, w.w_down_fp8, fp8_down, fast.down);
    if (down_groups_) {
      // down in e4m3 on the Hopper GEMM: gate_up's epilogue quantises the activation per group of
      // kHopperScaleGroup columns into act_ (as e4m3; gemm_in_fp8_ may be gate_up's input), and
      // down promotes each group's product with its scale. gate_up's variant: the Hopper GEMM's
      // timed choice (OwnFor; cuBLASLt has no e4m3 gated epilogue to time against).
      const kernels::HopperEpilogue gated_fp8 =
          gelu ? kernels::HopperEpilogue::kGeGluFp8 : kernels::HopperEpilogue::kSwiGluFp8;
      RANKD_ASSIGN_OR_RETURN(const std::optional<OwnVariant> gate_up_variant,
                             OwnFor(gate_up, rows, H, 2 * I, gated_fp8));
      if (!gate_up_variant) {
        return absl::InternalError("gate_up's e4m3 gated epilogue has no Hopper GEMM variant");
      }
      RANKD_RETURN_IF_ERROR(Mark(Stage::kGateUp, cost.GateUp(live, true)));
      RANKD_RETURN_IF_ERROR(OwnGemm(gate_up, rows, H, 2 * I, gated_fp8, *gate_up_variant, act_fp8));
    } else {
      const kernels::HopperEpilogue gated =
          gelu ? kernels::HopperEpilogue::kGeGlu : kernels::HopperEpilogue::kSwiGlu;
      // The gated epilogue writes bf16 here: not where down reads e4m3 with row scales (the fp8
      // activation kernel quantises gate_up's product then, from the stacked layout).
      std::optional<OwnVariant> own_gate_up;
      if (!fp8_down) {
        RANKD_ASSIGN_OR_RETURN(own_gate_up, OwnFor(gate_up, rows, H, 2 * I, gated));
      }
      // The Hopper GEMM's gated epilogue writes act_ from its accumulators: gate and up never
      // reach memory, and there is no activation kernel (its stage's time is gate_up's).
      RANKD_RETURN_IF_ERROR(Mark(Stage::kGateUp, cost.GateUp(live, own_gate_up.has_value())));
      if (own_gate_up) {
        RANKD_RETURN_IF_ERROR(OwnGemm(gate_up, rows, H, 2 * I, gated, *own_gate_up, act_));
      } else if (fold) {
        return absl::InternalError("the norm fold's gate_up has no Hopper GEMM variant");
      } else {
        RANKD_RETURN_IF_ERROR(
            fp8_gate_up ? gemm_->LinearFp8(gemm_in, w.w_gate_up_fp8, rows, H, 2 * I, wide_, s)
                        : gemm_->Linear(normed_, w.w_gate_up, rows, H, 2 * I, wide_, s));
        RANKD_RETURN_IF_ERROR(Mark(Stage::kSwiGlu, cost.SwiGlu(live)));
        RANKD_CUDA_RETURN_IF_ERROR(
            fp8_down
                ? (gelu
                       ? kernels::LaunchGeGluFp8(wide_, rows, I, gemm_in_fp8_, gemm_in_scale_, ks)
                       : kernels::LaunchSwiGluFp8(wide_, rows, I, gemm_in_fp8_, gemm_in_scale_, ks))
                : (gelu ? kernels::LaunchGeGlu(wide_, rows, I, act_, ks, gate_up_half_)
                        : kernels::LaunchSwiGlu(wide_, rows, I, act_, ks, gate_up_half_)));
      }
    }
    RANKD_RETURN_IF_ERROR(Mark(Stage::kDown, cost.Down(live)));
    if (config_.sandwich_norms) {
      RANKD_RETURN_IF_ERROR(Linear(down, rows, I, H, kernels::HopperEpilogue::kStoreBf16, normed_));
      RANKD_CUDA_RETURN_IF_ERROR(
          kernels::LaunchRmsNormAdd(normed_, w.mlp_out_norm, norm_offset, eps, rows, H, xr, ks));
    } else {
      // The last layer's stream goes to the head's final norm, a kernel of its own.
      RANKD_RETURN_IF_ERROR(Linear(
          down, rows, I, H, last ? kernels::HopperEpilogue::kAccumulateF32 : residual_add, xr));
    }
  }
  if (encode) return absl::OkStatus();
  RANKD_RETURN_IF_ERROR(Mark(Stage::kHead, cost.Head()));
  RANKD_CUDA_RETURN_IF_ERROR(kernels::LaunchScoreHead(
      x_last_, nullptr, &m.counts->items, Nb, weights_.final_norm, norm_offset, weights_.head_rows,
      static_cast<int>(head_.HeadRows().size()),
      config_.head_kind == model::HeadKind::kCausalLm ? config_.final_logit_softcapping : 0.0f, eps,
      H, dev_scores_, ks));
  return absl::OkStatus();
}

}  // namespace rankd::cuda::internal
