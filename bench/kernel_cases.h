// rankd-bench kernels, the part that needs no GPU: the model shapes, the launches of each CUDA
// kernel in a pass of the standard workload (laid out as src/backend/cuda/cuda_backend.cc lays
// them out), the linear layers' GEMMs (kernels/hopper_gemm vs cuBLASLt), the bytes and FLOPs of
// each launch, and the command's flags.
#ifndef RANKD_BENCH_KERNEL_CASES_H_
#define RANKD_BENCH_KERNEL_CASES_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "rankd/cli/flag_set.h"

namespace rankd::bench {

// What the kernels see of a model (the number of layers does not change a launch).
struct KernelModelShape {
  std::string name;
  int hidden = 0, q_heads = 0, kv_heads = 0, head_dim = 0, intermediate = 0, vocab = 0;
  bool qk_norm = false;  // per-head q/k RMSNorm (Qwen3): QkvRope ropes q, not attention
  int head_rows = 1;     // score head rows: 1 classifier, 2 yes/no
  int q_width() const { return q_heads * head_dim; }
  int kv_width() const { return kv_heads * head_dim; }
  int qkv_width() const { return q_width() + 2 * kv_width(); }
};

// "379m" (ARCHITECTURE.md's standard workload model, a Llama classifier) and "qwen3-0.6b"
// (Qwen3-Reranker-0.6B); nullopt for any other name.
std::optional<KernelModelShape> FindKernelModelShape(std::string_view name);

// One request of the workload: a prefix of tq tokens and ni items of ti tokens.
struct KernelWorkload {
  int tq = 50, ti = 150, ni = 50;
};

enum class Kernel {
  kEmbeddingGather,
  kRopeRotations,
  kRmsNorm,
  kQkvRope,
  kPrefixAttention,
  kGatherRows,
  kSwiGlu,
  kScoreHead,
  kGemm,
};

// The kernel's launcher without "Launch", in snake case ("prefix_attention").
const char* KernelName(Kernel k);

// The passes whose attention launch differs: IBPC's items pass (items over a cached prefix),
// multi-item's pass (the prefix's rows, then its items over those rows) and IBPC's prefix encode.
enum class AttentionPass { kIbpcItems, kMultiItem, kIbpcEncode };

const char* AttentionPassName(AttentionPass p);

// The rows of one attention launch, as the CUDA backend lays them out for one request.
struct AttentionLayout {
  // Rows [begin, end) attending first to ctx_len context rows: the prefix cache (IBPC items) or
  // the pass's own rows 0..ctx_len (multi-item's items).
  struct Run {
    int begin = 0, end = 0, ctx_len = 0;
  };
  std::vector<int32_t> seg_start;  // [rows] first row of each row's segment
  std::vector<Run> runs;
  bool ctx_in_cache = false;  // the context is a prefix cache (IBPC items), not own rows
  double keys = 0;            // sum over rows of the keys each row attends to (per q head)
  int rows() const { return static_cast<int>(seg_start.size()); }
};

AttentionLayout MakeAttentionLayout(AttentionPass pass, const KernelWorkload& w);

// The linear layers, each with its fused epilogue: qkv (bf16 out), o_proj and down (accumulated
// into the fp32 residual), gate_up with SwiGLU (cuBLASLt: gate_up bf16, then kernels/swiglu.cu).
// kQkvRope: qkv with its k heads rotated (RoPE; "qkv+krope"), or on a shape with q/k norms q's
// and k's heads normed and rotated ("qkv+qknorm"), fused into the own kernel's epilogue
// (kStoreBf16Rope, with its head norm) or, after cuBLASLt, by kernels/qkv_rope.cu as the
// unfused pass does.
enum class GemmLayer { kQkv, kOProj, kGateUp, kDown, kQkvRope };
// kernels/hopper_gemm (own, at a given tile N) or cuBLASLt through rankd::cuda::Gemm, tuned.
enum class GemmImpl { kOwn, kCublasLt };
// The own kernel's schedule (kernels/hopper_gemm.cuh's HopperSchedule, which this header, built
// without CUDA too, does not include): kTall is kCooperativeTall; kPingPongShort (64-row tiles)
// has the same name there.
enum class GemmSchedule { kCooperative, kPingPong, kTall, kPingPongShort };

const char* GemmLayerName(GemmLayer l);
const char* GemmImplName(GemmImpl i);

// One launch to time: a kernel at a shape, with the bytes it must move at least (every input read
// once, every output written once) and the FLOPs it does (0 where it does next to none).
struct KernelCase {
  Kernel kernel = Kernel::kRmsNorm;
  KernelModelShape shape;
  std::string variant;  // which launch of the pass ("items rows", "last rows", ...)
  int rows = 0;         // rows of the launch: tokens (or items for gather/score head)
  int row_elems = 0;    // gather_rows: elements per row (fp32 hidden, or bf16 q width)
  int elem_bytes = 0;   // gather_rows: 4 or 2
  AttentionPass pass = AttentionPass::kIbpcItems;  // prefix_attention, qkv_rope (encode: kv_out)
  bool attention_pipelined = false;                // prefix_attention: the pipelined kernel
  bool attention_wgmma = false;                    // prefix_attention: on wgmma
  bool attention_overlap = false;                  // prefix_attention: wgmma, key tiles overlapped
  bool attention_four_blocks = false;  // prefix_attention: wgmma, one warpgroup, 4 blocks an SM
  bool attention_three_blocks = false;  // prefix_attention: wgmma, one warpgroup, D 128, 3 an SM
  bool attention_prefetch = false;      // prefix_attention: the next unit's loads prefetched
  int attention_warpgroups = 1;                    // prefix_attention: wgmma queue kernel's
                                                   // warpgroups a block
  GemmLayer gemm_layer = GemmLayer::kQkv;          // gemm: the layer, its [N, K] weight
  GemmImpl gemm_impl = GemmImpl::kOwn;
  int gemm_n = 0, gemm_k = 0;
  int gemm_tile_n = 0;                                      // own: 128 or 256
  GemmSchedule gemm_schedule = GemmSchedule::kCooperative;  // own
  int gemm_cluster = 1;  // own: CTAs a cluster, 1 or 2 (W's tile multicast to both)
  int gemm_group = -1;   // own: HopperGemmPlan::group; -1: the plan's own choice
  int gemm_stagger = -1;  // own: HopperGemmPlan::stagger; -1: the plan's own choice
  bool gemm_fp8 = false;  // e4m3 X and W with row scales (both implementations), bf16 otherwise
  // own, fp8: X's scales per row and 64 columns (HopperXScales::kGroup); gate_up's activation
  // written in e4m3 with group scales (kSwiGluFp8: down's input when down is e4m3).
  bool gemm_x_groups = false;
  bool gemm_fp8_out = false;
  // own, fp8: X's scales per row on the promoted kernels (HopperXScales::kRowPromoted).
  bool gemm_promoted = false;
  // own, bf16: the RMSNorm fold (kernels/hopper_gemm.cuh, HopperNorm): o_proj and down with
  // kResidualNorm (the stream's bf16 copy and sums of squares written too), qkv and gate_up
  // dividing their rows by the rms from X's sums of squares.
  bool gemm_norm_fold = false;
  // own, bf16: K in the slices kernels::HopperKSlices asks for (skipped where it asks for none).
  bool gemm_k_slices = false;
  double bytes = 0, flops = 0;
};

// The pass's rows: every item token of one request (IBPC; multi-item adds the tq prefix rows).
int PassRows(const KernelWorkload& w);

// Every kernel's launches in a pass of `w` at shape `s`; with head_dim_only, only those of the
// kernels whose code depends on head_dim (rope rotations, qkv_rope, prefix attention).
std::vector<KernelCase> KernelCases(const KernelModelShape& s, const KernelWorkload& w,
                                    bool head_dim_only);

// The GEMMs of every linear layer at shape `s` at each of `rows` tokens: own with tile N 128 and
// (not gated) 256, and cuBLASLt; then in fp8 ("f8own", "f8cublaslt": e4m3 X and W with row
// scales, cuBLASLt's gate_up followed by the bf16 SwiGLU kernel, its qkv by QkvRope), the own
// kernel on its fp8 schedules (ping-pong 128 and 64, cooperative 128 and 256); then the own
// kernel with X's scales per 64 columns ("f8grp128", "f8grppp64": the grouped kernels, gate_up
// into e4m3), gate_up into e4m3 with row-scaled X ("f8own pp128q"), and row-scaled X on the
// promoted kernels ("f8prom128", "f8prompp64": each K block's product added into fp32).
// Bytes: X, W and the output once (fp32 read and written for the accumulating layers; the gated
// product only for gate_up, the fused minimum, for either implementation); FLOPs 2 M N K.
std::vector<KernelCase> GemmCases(const KernelModelShape& s, const std::vector<int>& rows);

// The token counts of the GEMM cases: the pass's rows, kGemmSmallRows and kGemmEmbeddingRows (the
// pass of 250 embedding items over a 50-token query: issue 25's embedding shape).
inline constexpr int kGemmSmallRows = 512;
inline constexpr int kGemmEmbeddingRows = 300;

struct KernelsBenchOptions {
  std::string shape = "both";  // 379m, qwen3-0.6b, or both: 379m + qwen3-0.6b's head_dim kernels
                               // and GEMMs
  std::string filter;          // only cases whose kernel name contains this
  std::string variant;         // and whose variant contains this ("qkv f8grp128 T=7500")
  KernelWorkload workload;
  int warmup = 5, iters = 50;
  int device = 0, seed = 1;
  bool flush_l2 = true;  // write a buffer larger than L2 before each timed launch
  double peak_tflops = 790;
  // The own GEMMs' raster group (HopperGemmPlan::group) for every GEMM case; -1: each plan's own.
  int gemm_group = -1;
  // The own cooperative GEMMs' consumer stagger (HopperGemmPlan::stagger); -1: each plan's own.
  int gemm_stagger = -1;
  std::string json_path;
};

void AddKernelsBenchFlags(cli::FlagSet& flags, KernelsBenchOptions* o);

// The cases `o` selects; InvalidArgument naming the flag for an unknown shape, a workload below 1
// token, iters below 1, warmup, gemm-group or gemm-stagger below their least (0, -1, -1), or a
// filter and variant that select nothing.
absl::StatusOr<std::vector<KernelCase>> SelectKernelCases(const KernelsBenchOptions& o);

// The launch shape in words, for the table ("T=7500 H=1024").
std::string DescribeCase(const KernelCase& c);

}  // namespace rankd::bench

#endif  // RANKD_BENCH_KERNEL_CASES_H_
