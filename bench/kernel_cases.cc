#include "kernel_cases.h"

#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "rankd/common/status.h"

namespace rankd::bench {

std::optional<KernelModelShape> FindKernelModelShape(std::string_view name) {
  if (name == "379m") return KernelModelShape{"379m", 1024, 16, 16, 64, 3328, 32000, false, 1};
  if (name == "qwen3-0.6b") {
    return KernelModelShape{"qwen3-0.6b", 1024, 16, 8, 128, 3072, 151669, true, 2};
  }
  return std::nullopt;
}

const char* KernelName(Kernel k) {
  switch (k) {
    case Kernel::kEmbeddingGather:
      return "embedding_gather";
    case Kernel::kRopeRotations:
      return "rope_rotations";
    case Kernel::kRmsNorm:
      return "rms_norm";
    case Kernel::kQkvRope:
      return "qkv_rope";
    case Kernel::kPrefixAttention:
      return "prefix_attention";
    case Kernel::kGatherRows:
      return "gather_rows";
    case Kernel::kSwiGlu:
      return "swiglu";
    case Kernel::kScoreHead:
      return "score_head";
    case Kernel::kGemm:
      return "gemm";
  }
  return "?";
}

const char* GemmLayerName(GemmLayer l) {
  switch (l) {
    case GemmLayer::kQkv:
      return "qkv";
    case GemmLayer::kOProj:
      return "o_proj+=";
    case GemmLayer::kGateUp:
      return "gate_up+swiglu";
    case GemmLayer::kDown:
      return "down+=";
    case GemmLayer::kQkvRope:
      return "qkv+krope";
  }
  return "?";
}

const char* GemmImplName(GemmImpl i) { return i == GemmImpl::kOwn ? "own" : "cublaslt"; }

const char* AttentionPassName(AttentionPass p) {
  switch (p) {
    case AttentionPass::kIbpcItems:
      return "ibpc items";
    case AttentionPass::kMultiItem:
      return "multi-item";
    case AttentionPass::kIbpcEncode:
      return "ibpc encode";
  }
  return "?";
}

int PassRows(const KernelWorkload& w) { return w.ni * w.ti; }

AttentionLayout MakeAttentionLayout(AttentionPass pass, const KernelWorkload& w) {
  AttentionLayout a;
  // A segment of n rows after `ctx` context rows: row t sees ctx + t + 1 keys.
  auto add_segment = [&a](int n, int ctx) {
    const int begin = a.rows();
    a.seg_start.insert(a.seg_start.end(), n, begin);
    a.keys += static_cast<double>(n) * ctx + static_cast<double>(n) * (n + 1) / 2;
  };
  if (pass == AttentionPass::kIbpcEncode) {
    add_segment(w.tq, 0);
    a.runs.push_back({0, w.tq, 0});
    return a;
  }
  if (pass == AttentionPass::kMultiItem) {
    add_segment(w.tq, 0);
    a.runs.push_back({0, w.tq, 0});
  }
  a.ctx_in_cache = pass == AttentionPass::kIbpcItems;
  const int items_begin = a.rows();
  for (int i = 0; i < w.ni; ++i) add_segment(w.ti, w.tq);
  a.runs.push_back({items_begin, a.rows(), w.tq});
  return a;
}

namespace {

// Without a q/k norm (or biases) the backend ropes q in attention (QkvRope skips it).
bool QRopeInAttention(const KernelModelShape& s) { return !s.qk_norm; }

}  // namespace

std::vector<KernelCase> KernelCases(const KernelModelShape& s, const KernelWorkload& w,
                                    bool head_dim_only) {
  const double H = s.hidden, Q = s.q_width(), KV = s.kv_width(), D = s.head_dim, I = s.intermediate,
               T = PassRows(w), N = w.ni;
  std::vector<KernelCase> cases;
  auto add = [&](Kernel k, std::string variant, int rows, double bytes, double flops) {
    KernelCase c;
    c.kernel = k;
    c.shape = s;
    c.variant = std::move(variant);
    c.rows = rows;
    c.bytes = bytes;
    c.flops = flops;
    cases.push_back(std::move(c));
    return &cases.back();
  };
  // ids, the table's rows (bf16), the fp32 residual rows.
  if (!head_dim_only) add(Kernel::kEmbeddingGather, "pass", T, T * (4 + 2 * H + 4 * H), 0);
  // positions, inverse frequencies, a (cos, sin) float2 per row and pair.
  add(Kernel::kRopeRotations, "pass", T, T * 4 + D / 2 * 4 + T * D / 2 * 8, 0);
  // fp32 rows in, bf16 rows out, the weight.
  auto norm_bytes = [&](double rows) { return rows * H * (4 + 2) + 2 * H; };
  if (!head_dim_only) add(Kernel::kRmsNorm, "pass", T, norm_bytes(T), 0);
  // In place: q (unless attention ropes it) and k read and written, the rotations read; the
  // q/k norm weights; on encode also v read and k, v written to the cache.
  const bool skip_q = QRopeInAttention(s);
  auto rope_bytes = [&](double rows, bool encode) {
    return rows * 4 * ((skip_q ? 0 : Q) + KV) + rows * D / 2 * 8 + (s.qk_norm ? 4 * D : 0) +
           (encode ? rows * 6 * KV : 0);
  };
  add(Kernel::kQkvRope, "pass", T, rope_bytes(T, false), 0);
  add(Kernel::kQkvRope, "ibpc encode", w.tq, rope_bytes(w.tq, true), 0)->pass =
      AttentionPass::kIbpcEncode;
  // q read and the output written (bf16), own k and v read once, the prefix cache's k and v, the
  // q rotations when attention ropes q, the segment starts. FLOPs: QK^T and PV, 2 D each per
  // (row, q head, key).
  for (AttentionPass pass :
       {AttentionPass::kIbpcItems, AttentionPass::kMultiItem, AttentionPass::kIbpcEncode}) {
    const AttentionLayout a = MakeAttentionLayout(pass, w);
    const double rows = a.rows(), ctx = a.ctx_in_cache ? w.tq : 0;
    const double bytes =
        rows * 2 * (2 * Q + 2 * KV) + ctx * 2 * 2 * KV + (skip_q ? rows * D / 2 * 8 : 0) + rows * 4;
    // The queue kernel, then the pipelined one (RANKD_CUDA_ATTENTION_PIPELINE) on the same work;
    // at D 64 and 128 both again on wgmma (RANKD_CUDA_ATTENTION_WGMMA; skipped off sm_90a), the
    // queue kernel on wgmma with its key tiles overlapped (RANKD_CUDA_ATTENTION_OVERLAP), and
    // the queue kernel on wgmma in blocks of 2 and (D 64) 3 warpgroups, serial and overlapped
    // (RANKD_CUDA_ATTENTION_WARPGROUPS); then, at D 64, the one-warpgroup queue kernel on wgmma
    // at four blocks a multiprocessor ("b4": RANKD_CUDA_ATTENTION_FOUR_BLOCKS, the backend's
    // default; the rows above run three); then the backend's default kernel of the head (D 64:
    // b4, D 128: overlapped) with the next unit's loads prefetched ("pf":
    // RANKD_CUDA_ATTENTION_PREFETCH), and at D 128 the overlapped kernel at three blocks a
    // multiprocessor ("b3": RANKD_CUDA_ATTENTION_THREE_BLOCKS; the rows above run two), alone and
    // with the prefetch.
    for (const bool wgmma : {false, true}) {
      if (wgmma && D != 64 && D != 128) continue;
      for (const int variant : {0, 1, 2}) {  // queue, pipelined, overlapped
        if (variant == 2 && !wgmma) continue;
        for (const int wgs : {1, 2, 3}) {
          if (wgs > 1 && (!wgmma || variant == 1 || (wgs == 3 && D != 64))) continue;
          KernelCase* c = add(Kernel::kPrefixAttention,
                              absl::StrCat(AttentionPassName(pass), wgmma ? " wgmma" : "",
                                           wgs > 1 ? absl::StrCat(" wg", wgs) : "",
                                           variant == 1   ? " pipelined"
                                           : variant == 2 ? " overlap"
                                                          : ""),
                              a.rows(), bytes, 4 * D * s.q_heads * a.keys);
          c->pass = pass;
          c->attention_pipelined = variant == 1;
          c->attention_wgmma = wgmma;
          c->attention_overlap = variant == 2;
          c->attention_warpgroups = wgs;
        }
      }
      if (!wgmma) continue;
      for (const auto& [dense, prefetch] :
           {std::pair{true, false}, std::pair{false, true}, std::pair{true, true}}) {
        // D 64: b4, b4 pf (its b4 is dense); D 128: overlap b3, overlap pf, overlap b3 pf.
        if (D == 64 && !dense) continue;
        KernelCase* c = add(Kernel::kPrefixAttention,
                            absl::StrCat(AttentionPassName(pass), " wgmma",
                                         D == 64 ? " b4" : (dense ? " overlap b3" : " overlap"),
                                         prefetch ? " pf" : ""),
                            a.rows(), bytes, 4 * D * s.q_heads * a.keys);
        c->pass = pass;
        c->attention_wgmma = true;
        c->attention_four_blocks = D == 64;
        c->attention_three_blocks = D == 128 && dense;
        c->attention_overlap = D != 64;
        c->attention_prefetch = prefetch;
      }
    }
  }
  if (head_dim_only) return cases;
  // The last layer: the items' last rows (fp32 residual, bf16 attention output) gathered, each
  // read and written once, and the row indices.
  for (const auto& [variant, elems, elem_bytes] :
       {std::tuple{"x (fp32 hidden)", s.hidden, 4}, {"attn (bf16 q width)", s.q_width(), 2}}) {
    KernelCase* c = add(Kernel::kGatherRows, variant, N, N * (2.0 * elems * elem_bytes + 4), 0);
    c->row_elems = elems;
    c->elem_bytes = elem_bytes;
  }
  add(Kernel::kRmsNorm, "last rows", N, norm_bytes(N), 0);
  // gate and up read, the product written (bf16).
  add(Kernel::kSwiGlu, "pass", T, T * I * 2 * 3, 0);
  add(Kernel::kSwiGlu, "last rows", N, N * I * 2 * 3, 0);
  // fp32 rows, the final norm and head rows (bf16), one fp32 score per item.
  add(Kernel::kScoreHead, "items", N, N * H * 4 + 2 * H + s.head_rows * 2 * H + N * 4, 0);
  return cases;
}

std::vector<KernelCase> GemmCases(const KernelModelShape& s, const std::vector<int>& rows) {
  std::vector<KernelCase> cases;
  for (const int M : rows) {
    for (const auto& [layer, n, k] : {std::tuple{GemmLayer::kQkv, s.qkv_width(), s.hidden},
                                      {GemmLayer::kOProj, s.hidden, s.q_width()},
                                      {GemmLayer::kGateUp, 2 * s.intermediate, s.hidden},
                                      {GemmLayer::kDown, s.hidden, s.intermediate},
                                      {GemmLayer::kQkvRope, s.qkv_width(), s.hidden}}) {
      // qkv+krope also reads the rows' (cos, sin) table once: [M, head_dim / 2] fp32 pairs.
      const double out_bytes = layer == GemmLayer::kGateUp    ? 2.0 * M * n / 2
                               : layer == GemmLayer::kQkv     ? 2.0 * M * n
                               : layer == GemmLayer::kQkvRope ? 2.0 * M * n + 4.0 * M * s.head_dim
                                                              : 8.0 * M * n;
      // A case of this layer at M rows: "<layer> [f8]<impl><name> T=<M>", 2 M N K FLOPs (bytes:
      // the caller's).
      auto add = [&](const char* impl_name, const char* name, GemmImpl impl, int tile_n,
                     GemmSchedule schedule, int cluster, bool fp8) -> KernelCase& {
        KernelCase& c = cases.emplace_back();
        c.kernel = Kernel::kGemm;
        c.shape = s;
        // A shape with q/k norms: qkv with q and k normed and rotated.
        c.variant = absl::StrCat(
            layer == GemmLayer::kQkvRope && s.qk_norm ? "qkv+qknorm" : GemmLayerName(layer), " ",
            fp8 ? "f8" : "", impl_name, name, " T=", M);
        c.rows = M;
        c.gemm_layer = layer;
        c.gemm_impl = impl;
        c.gemm_tile_n = tile_n;
        c.gemm_schedule = schedule;
        c.gemm_cluster = cluster;
        c.gemm_n = n;
        c.gemm_k = k;
        c.gemm_fp8 = fp8;
        c.flops = 2.0 * M * n * k;
        return c;
      };
      // own: ping-pong (128 x 128 tiles), cooperative at 128 x 128, 128 x 256 and 256 x 128,
      // alone and in clusters of 2 CTAs ("c2": W's tile multicast to both); ping-pong on 64 x 128
      // tiles alone.
      for (const auto& [fp8, impl, tile_n, schedule, cluster, name] :
           {std::tuple{false, GemmImpl::kOwn, 128, GemmSchedule::kPingPong, 1, "pp128"},
            {false, GemmImpl::kOwn, 128, GemmSchedule::kPingPongShort, 1, "pp64"},
            {false, GemmImpl::kOwn, 128, GemmSchedule::kPingPong, 2, "pp128c2"},
            {false, GemmImpl::kOwn, 128, GemmSchedule::kCooperative, 1, "128"},
            {false, GemmImpl::kOwn, 128, GemmSchedule::kCooperative, 2, "128c2"},
            {false, GemmImpl::kOwn, 256, GemmSchedule::kCooperative, 1, "256"},
            {false, GemmImpl::kOwn, 256, GemmSchedule::kCooperative, 2, "256c2"},
            {false, GemmImpl::kOwn, 128, GemmSchedule::kTall, 1, "tall"},
            {false, GemmImpl::kOwn, 128, GemmSchedule::kTall, 2, "tallc2"},
            {false, GemmImpl::kCublasLt, 0, GemmSchedule::kCooperative, 1, ""},
            {true, GemmImpl::kOwn, 128, GemmSchedule::kPingPong, 1, "pp128"},
            {true, GemmImpl::kOwn, 128, GemmSchedule::kPingPongShort, 1, "pp64"},
            {true, GemmImpl::kOwn, 128, GemmSchedule::kCooperative, 1, "128"},
            {true, GemmImpl::kOwn, 256, GemmSchedule::kCooperative, 1, "256"},
            {true, GemmImpl::kCublasLt, 0, GemmSchedule::kCooperative, 1, ""}}) {
        KernelCase& c = add(GemmImplName(impl), name, impl, tile_n, schedule, cluster, fp8);
        // fp8: a byte an operand element, and their scales.
        const double in_bytes = fp8 ? 1.0 : 2.0;
        c.bytes = in_bytes * (1.0 * M * k + 1.0 * n * k) + (fp8 ? 4.0 * (M + n) : 0.0) + out_bytes;
      }
      // The grouped kernels (X's scales per 64 columns; gate_up's output in e4m3 with its group
      // scales: half the bytes), and gate_up into e4m3 on row-scaled X (ping-pong 128).
      const double f8_out_bytes = layer == GemmLayer::kGateUp ? out_bytes / 2 : out_bytes;
      for (const auto& [groups, schedule, name] :
           {std::tuple{true, GemmSchedule::kCooperative, "grp128"},
            {true, GemmSchedule::kPingPongShort, "grppp64"},
            {false, GemmSchedule::kPingPong, "pp128q"}}) {
        if (!groups && layer != GemmLayer::kGateUp) continue;
        KernelCase& c = add(groups ? "" : GemmImplName(GemmImpl::kOwn), name, GemmImpl::kOwn, 128,
                            schedule, 1, true);
        c.gemm_x_groups = groups;
        c.gemm_fp8_out = layer == GemmLayer::kGateUp;
        c.bytes = 1.0 * M * k + 1.0 * n * k + 4.0 * (M * (groups ? k / 64 : 1) + n) + f8_out_bytes;
      }
      // The norm fold on bf16 (ping-pong 128, cooperative 256): o_proj and down write the copy
      // ([M, n] bf16) and the sums ([M, n / 64] fp32) too; qkv and gate_up read X's sums.
      const bool residual = layer == GemmLayer::kOProj || layer == GemmLayer::kDown;
      for (const auto& [tile_n, schedule, name] :
           {std::tuple{128, GemmSchedule::kPingPong, "foldpp128"},
            {256, GemmSchedule::kCooperative, "fold256"}}) {
        KernelCase& c = add("", name, GemmImpl::kOwn, tile_n, schedule, 1, false);
        c.gemm_norm_fold = true;
        c.bytes = 2.0 * (1.0 * M * k + 1.0 * n * k) + out_bytes +
                  (residual ? 2.0 * M * n + 4.0 * M * (n / 64) : 4.0 * M * (k / 64));
      }
      // bf16 ping-pong 64 with K in slices (where the shape's tiles leave half of the SMs idle).
      {
        KernelCase& c = add(GemmImplName(GemmImpl::kOwn), "pp64ks", GemmImpl::kOwn, 128,
                            GemmSchedule::kPingPongShort, 1, false);
        c.gemm_k_slices = true;
        c.bytes = 2.0 * (1.0 * M * k + 1.0 * n * k) + out_bytes;
      }
      // Row-scaled X on the promoted kernels, each layer's own epilogue (gate_up's into bf16).
      for (const auto& [schedule, name] : {std::pair{GemmSchedule::kCooperative, "prom128"},
                                           {GemmSchedule::kPingPongShort, "prompp64"}}) {
        KernelCase& c = add("", name, GemmImpl::kOwn, 128, schedule, 1, true);
        c.gemm_promoted = true;
        c.bytes = 1.0 * M * k + 1.0 * n * k + 4.0 * (M + n) + out_bytes;
      }
    }
  }
  return cases;
}

void AddKernelsBenchFlags(cli::FlagSet& flags, KernelsBenchOptions* o) {
  flags.String("shape", &o->shape,
               "379m, qwen3-0.6b, or both (379m, plus qwen3-0.6b for the kernels that depend "
               "on head_dim and the GEMMs)");
  flags.String("filter", &o->filter, "only kernels whose name contains this");
  flags.String("variant", &o->variant,
               "only cases whose variant contains this (e.g. 'qkv f8grp128', 'T=7500'; for one "
               "launch under a profiler)");
  flags.Int("tq", &o->workload.tq, "prefix tokens");
  flags.Int("ti", &o->workload.ti, "tokens per item");
  flags.Int("ni", &o->workload.ni, "items per request");
  flags.Int("warmup", &o->warmup, "untimed launches first");
  flags.Int("iters", &o->iters, "timed launches (the median is reported)");
  flags.Int("device", &o->device, "CUDA device");
  flags.Int("seed", &o->seed, "random seed of the inputs");
  flags.Bool("flush-l2", &o->flush_l2, "overwrite L2 before each timed launch (cold inputs)");
  flags.Double("peak-tflops", &o->peak_tflops, "bf16 peak of the device, for the fraction");
  flags.Int("gemm-group", &o->gemm_group,
            "the own GEMMs' raster group in row tiles (0: row tiles fastest over the whole "
            "output; -1: each plan's choice, as the engine runs it)");
  flags.Int("gemm-stagger", &o->gemm_stagger,
            "K blocks that the own cooperative GEMMs' second consumer starts behind the first "
            "(0: in step; -1: each plan's choice, as the engine runs it)");
  flags.String("json", &o->json_path, "also write the results as JSON to this file");
}

absl::StatusOr<std::vector<KernelCase>> SelectKernelCases(const KernelsBenchOptions& o) {
  RANKD_RETURN_IF_ERROR(cli::CheckFlagsAtLeast(
      {{"tq", o.workload.tq}, {"ti", o.workload.ti}, {"ni", o.workload.ni}, {"iters", o.iters}},
      1));
  RANKD_RETURN_IF_ERROR(cli::CheckFlagsAtLeast({{"warmup", o.warmup}}, 0));
  RANKD_RETURN_IF_ERROR(
      cli::CheckFlagsAtLeast({{"gemm-group", o.gemm_group}, {"gemm-stagger", o.gemm_stagger}}, -1));
  std::vector<KernelCase> cases;
  const std::vector<int> gemm_rows = {PassRows(o.workload), kGemmSmallRows, kGemmEmbeddingRows};
  auto append = [&cases](std::vector<KernelCase> more) {
    for (KernelCase& c : more) cases.push_back(std::move(c));
  };
  if (o.shape == "both") {
    const KernelModelShape llama = *FindKernelModelShape("379m");
    const KernelModelShape qwen = *FindKernelModelShape("qwen3-0.6b");
    append(KernelCases(llama, o.workload, false));
    append(KernelCases(qwen, o.workload, true));
    append(GemmCases(llama, gemm_rows));
    append(GemmCases(qwen, gemm_rows));
  } else if (std::optional<KernelModelShape> s = FindKernelModelShape(o.shape)) {
    append(KernelCases(*s, o.workload, false));
    append(GemmCases(*s, gemm_rows));
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--shape must be 379m, qwen3-0.6b or both (got '", o.shape, "')"));
  }
  std::erase_if(cases, [&](const KernelCase& c) {
    return std::string_view(KernelName(c.kernel)).find(o.filter) == std::string_view::npos ||
           std::string_view(c.variant).find(o.variant) == std::string_view::npos;
  });
  if (cases.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--filter '", o.filter, "' and --variant '", o.variant, "' match no kernel"));
  }
  for (KernelCase& c : cases) {
    c.gemm_group = o.gemm_group;
    c.gemm_stagger = o.gemm_stagger;
  }
  return cases;
}

std::string DescribeCase(const KernelCase& c) {
  const KernelModelShape& s = c.shape;
  const std::string rows = absl::StrCat("rows=", c.rows);
  switch (c.kernel) {
    case Kernel::kEmbeddingGather:
      return absl::StrCat(rows, " H=", s.hidden, " V=", s.vocab);
    case Kernel::kRopeRotations:
      return absl::StrCat(rows, " pairs=", s.head_dim / 2);
    case Kernel::kRmsNorm:
      return absl::StrCat(rows, " H=", s.hidden);
    case Kernel::kQkvRope:
      return absl::StrCat(rows, " heads=", s.q_heads, ":", s.kv_heads, " D=", s.head_dim,
                          QRopeInAttention(s) ? " k only" : " q/k norm",
                          c.pass == AttentionPass::kIbpcEncode ? " +cache" : "");
    case Kernel::kPrefixAttention:
      return absl::StrCat(rows, " heads=", s.q_heads, ":", s.kv_heads, " D=", s.head_dim,
                          QRopeInAttention(s) ? " q rope" : "");
    case Kernel::kGatherRows:
      return absl::StrCat(rows, " row=", c.row_elems * c.elem_bytes, "B");
    case Kernel::kSwiGlu:
      return absl::StrCat(rows, " I=", s.intermediate);
    case Kernel::kScoreHead:
      return absl::StrCat(rows, " H=", s.hidden, " head_rows=", s.head_rows);
    case Kernel::kGemm:
      return absl::StrCat(rows, " N=", c.gemm_n, " K=", c.gemm_k,
                          c.gemm_impl == GemmImpl::kOwn && c.gemm_group >= 0
                              ? absl::StrCat(" group=", c.gemm_group)
                              : "",
                          c.gemm_impl == GemmImpl::kOwn && c.gemm_stagger >= 0
                              ? absl::StrCat(" stagger=", c.gemm_stagger)
                              : "");
  }
  return rows;
}

}  // namespace rankd::bench
