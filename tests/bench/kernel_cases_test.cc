// rankd-bench kernels without a GPU: the launches it times on the standard workload (their rows,
// attention layouts, bytes and FLOPs, worked out by hand here) and its flags.
#include "kernel_cases.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "rankd/cli/flag_set.h"

namespace rankd::bench {
namespace {

const KernelModelShape k379m = *FindKernelModelShape("379m");
const KernelModelShape kQwen3 = *FindKernelModelShape("qwen3-0.6b");

const KernelCase& Find(const std::vector<KernelCase>& cases, Kernel k, const std::string& variant) {
  auto it = std::find_if(cases.begin(), cases.end(), [&](const KernelCase& c) {
    return c.kernel == k && c.variant == variant;
  });
  EXPECT_NE(it, cases.end()) << KernelName(k) << " " << variant;
  return *it;
}

TEST(KernelShapeTest, Presets) {
  EXPECT_EQ(k379m.q_width(), 1024);
  EXPECT_EQ(k379m.qkv_width(), 3072);
  EXPECT_FALSE(k379m.qk_norm);
  EXPECT_EQ(kQwen3.q_width(), 2048);
  EXPECT_EQ(kQwen3.kv_width(), 1024);
  EXPECT_TRUE(kQwen3.qk_norm);
  EXPECT_EQ(kQwen3.head_rows, 2);
  EXPECT_FALSE(FindKernelModelShape("7b").has_value());
}

TEST(AttentionLayoutTest, IbpcItemsOverTheCachedPrefix) {
  const AttentionLayout a = MakeAttentionLayout(AttentionPass::kIbpcItems, KernelWorkload{});
  ASSERT_EQ(a.rows(), 7500);
  EXPECT_TRUE(a.ctx_in_cache);
  ASSERT_EQ(a.runs.size(), 1u);
  EXPECT_EQ(std::tie(a.runs[0].begin, a.runs[0].end, a.runs[0].ctx_len),
            std::make_tuple(0, 7500, 50));
  EXPECT_EQ(a.seg_start[149], 0);
  EXPECT_EQ(a.seg_start[150], 150);
  EXPECT_EQ(a.seg_start[7499], 7350);
  // 50 items, token t (1-based) of an item sees the 50 prefix rows and t own rows.
  EXPECT_DOUBLE_EQ(a.keys, 50 * (150 * 50 + 150 * 151 / 2));
}

TEST(AttentionLayoutTest, MultiItemPrefixRowsThenItems) {
  const AttentionLayout a = MakeAttentionLayout(AttentionPass::kMultiItem, KernelWorkload{});
  ASSERT_EQ(a.rows(), 7550);
  EXPECT_FALSE(a.ctx_in_cache);
  ASSERT_EQ(a.runs.size(), 2u);
  EXPECT_EQ(std::tie(a.runs[0].begin, a.runs[0].end, a.runs[0].ctx_len), std::make_tuple(0, 50, 0));
  EXPECT_EQ(std::tie(a.runs[1].begin, a.runs[1].end, a.runs[1].ctx_len),
            std::make_tuple(50, 7550, 50));
  EXPECT_EQ(a.seg_start[49], 0);
  EXPECT_EQ(a.seg_start[50], 50);
  EXPECT_EQ(a.seg_start[7549], 7400);
  EXPECT_DOUBLE_EQ(a.keys, 50 * 51 / 2 + 50 * (150 * 50 + 150 * 151 / 2));
}

TEST(AttentionLayoutTest, IbpcEncodeIsOneCausalSegment) {
  const AttentionLayout a =
      MakeAttentionLayout(AttentionPass::kIbpcEncode, KernelWorkload{.tq = 7, .ti = 3, .ni = 2});
  EXPECT_EQ(a.rows(), 7);
  EXPECT_EQ(a.runs.size(), 1u);
  EXPECT_EQ(a.seg_start, std::vector<int32_t>(7, 0));
  EXPECT_DOUBLE_EQ(a.keys, 28);
}

TEST(KernelCasesTest, BytesAndFlopsOf379m) {
  const std::vector<KernelCase> cases = KernelCases(k379m, KernelWorkload{}, false);
  EXPECT_EQ(cases.size(), 44u);  // (3 of them attention with prefetch, "pf")
  // ids, bf16 table rows, fp32 output rows.
  EXPECT_DOUBLE_EQ(Find(cases, Kernel::kEmbeddingGather, "pass").bytes, 7500.0 * (4 + 2048 + 4096));
  EXPECT_DOUBLE_EQ(Find(cases, Kernel::kRmsNorm, "pass").bytes, 7500.0 * 1024 * 6 + 2048);
  EXPECT_DOUBLE_EQ(Find(cases, Kernel::kRmsNorm, "last rows").bytes, 50.0 * 1024 * 6 + 2048);
  EXPECT_DOUBLE_EQ(Find(cases, Kernel::kSwiGlu, "pass").bytes, 7500.0 * 3328 * 6);
  EXPECT_DOUBLE_EQ(Find(cases, Kernel::kRopeRotations, "pass").bytes,
                   7500.0 * 4 + 32 * 4 + 7500.0 * 32 * 8);
  // Llama: q is roped in attention, so QkvRope moves k and the rotations only.
  const KernelCase& rope = Find(cases, Kernel::kQkvRope, "pass");
  EXPECT_EQ(rope.rows, 7500);
  EXPECT_DOUBLE_EQ(rope.bytes, 7500.0 * 4 * 1024 + 7500.0 * 32 * 8);
  EXPECT_DOUBLE_EQ(Find(cases, Kernel::kQkvRope, "ibpc encode").bytes,
                   50.0 * 4 * 1024 + 50.0 * 32 * 8 + 50.0 * 6 * 1024);
  // q and out, own k and v, the 50 cached prefix rows' k and v, q's rotations, segment starts.
  const KernelCase& ibpc = Find(cases, Kernel::kPrefixAttention, "ibpc items");
  EXPECT_EQ(ibpc.rows, 7500);
  EXPECT_DOUBLE_EQ(ibpc.bytes,
                   7500.0 * 2 * (2048 + 2048) + 50.0 * 4 * 1024 + 7500.0 * 32 * 8 + 7500.0 * 4);
  EXPECT_DOUBLE_EQ(ibpc.flops, 4.0 * 64 * 16 * 50 * (150 * 50 + 150 * 151 / 2));
  const KernelCase& multi = Find(cases, Kernel::kPrefixAttention, "multi-item");
  EXPECT_EQ(multi.rows, 7550);
  EXPECT_FALSE(multi.attention_pipelined);
  // The pipelined kernel on the same work: the same bytes and FLOPs.
  const KernelCase& piped = Find(cases, Kernel::kPrefixAttention, "multi-item pipelined");
  EXPECT_TRUE(piped.attention_pipelined);
  EXPECT_EQ(std::tie(piped.rows, piped.pass), std::tie(multi.rows, multi.pass));
  EXPECT_DOUBLE_EQ(piped.bytes, multi.bytes);
  EXPECT_DOUBLE_EQ(piped.flops, multi.flops);
  EXPECT_FALSE(piped.attention_wgmma);
  EXPECT_FALSE(piped.attention_overlap);
  // Both again on wgmma (D 64), and the queue kernel with its key tiles overlapped: the same work.
  // So do the queue kernel's blocks of 2 and 3 warpgroups (D 64), serial and overlapped.
  for (const char* v :
       {"multi-item wgmma", "multi-item wgmma pipelined", "multi-item wgmma overlap",
        "multi-item wgmma wg2", "multi-item wgmma wg2 overlap", "multi-item wgmma wg3",
        "multi-item wgmma wg3 overlap"}) {
    const KernelCase& w = Find(cases, Kernel::kPrefixAttention, v);
    const std::string name(v);
    EXPECT_TRUE(w.attention_wgmma) << v;
    EXPECT_EQ(w.attention_pipelined, name.ends_with("pipelined")) << v;
    EXPECT_EQ(w.attention_overlap, name.ends_with("overlap")) << v;
    EXPECT_EQ(w.attention_warpgroups, name.find("wg3") != std::string::npos   ? 3
                                      : name.find("wg2") != std::string::npos ? 2
                                                                              : 1)
        << v;
    EXPECT_EQ(std::tie(w.rows, w.pass), std::tie(multi.rows, multi.pass)) << v;
    EXPECT_DOUBLE_EQ(w.bytes, multi.bytes) << v;
    EXPECT_DOUBLE_EQ(w.flops, multi.flops) << v;
  }
  // The one-warpgroup wgmma queue kernel at four blocks an SM (D 64), without and with the next
  // unit's loads prefetched: the same work.
  for (const char* v : {"multi-item wgmma b4", "multi-item wgmma b4 pf"}) {
    const KernelCase& b4 = Find(cases, Kernel::kPrefixAttention, v);
    EXPECT_TRUE(b4.attention_wgmma && b4.attention_four_blocks) << v;
    EXPECT_FALSE(b4.attention_pipelined || b4.attention_overlap) << v;
    EXPECT_EQ(b4.attention_prefetch, std::string(v).ends_with(" pf")) << v;
    EXPECT_EQ(b4.attention_warpgroups, 1) << v;
    EXPECT_DOUBLE_EQ(b4.bytes, multi.bytes) << v;
    EXPECT_DOUBLE_EQ(b4.flops, multi.flops) << v;
  }
  EXPECT_FALSE(multi.attention_four_blocks || multi.attention_prefetch ||
               multi.attention_three_blocks);
  EXPECT_DOUBLE_EQ(multi.bytes, 7550.0 * 2 * (2048 + 2048) + 7550.0 * 32 * 8 + 7550.0 * 4);
  EXPECT_DOUBLE_EQ(multi.flops, ibpc.flops + 4.0 * 64 * 16 * (50 * 51 / 2));
  const KernelCase& gather_x = Find(cases, Kernel::kGatherRows, "x (fp32 hidden)");
  EXPECT_EQ(gather_x.row_elems * gather_x.elem_bytes, 4096);
  EXPECT_DOUBLE_EQ(gather_x.bytes, 50.0 * (2 * 4096 + 4));
  EXPECT_DOUBLE_EQ(Find(cases, Kernel::kGatherRows, "attn (bf16 q width)").bytes,
                   50.0 * (2 * 2048 + 4));
  EXPECT_DOUBLE_EQ(Find(cases, Kernel::kScoreHead, "items").bytes,
                   50.0 * 4096 + 2048 + 2048 + 50.0 * 4);
}

TEST(KernelCasesTest, Qwen3HeadDimKernelsOnly) {
  const std::vector<KernelCase> cases = KernelCases(kQwen3, KernelWorkload{}, true);
  std::set<Kernel> kernels;
  for (const KernelCase& c : cases) kernels.insert(c.kernel);
  EXPECT_EQ(kernels,
            (std::set<Kernel>{Kernel::kRopeRotations, Kernel::kQkvRope, Kernel::kPrefixAttention}));
  // q/k norm: QkvRope ropes q too (and reads the two norm weights); attention reads no rotations.
  EXPECT_DOUBLE_EQ(Find(cases, Kernel::kQkvRope, "pass").bytes,
                   7500.0 * 4 * (2048 + 1024) + 7500.0 * 64 * 8 + 4 * 128);
  const KernelCase& ibpc = Find(cases, Kernel::kPrefixAttention, "ibpc items");
  EXPECT_DOUBLE_EQ(ibpc.bytes, 7500.0 * 2 * (2 * 2048 + 2 * 1024) + 50.0 * 4 * 1024 + 7500.0 * 4);
  // FLOPs count every q head (16), not the kv groups.
  EXPECT_DOUBLE_EQ(ibpc.flops, 4.0 * 128 * 16 * 50 * (150 * 50 + 150 * 151 / 2));
  // Heads of 128: blocks of 2 warpgroups, not 3.
  EXPECT_EQ(
      Find(cases, Kernel::kPrefixAttention, "multi-item wgmma wg2 overlap").attention_warpgroups,
      2);
  for (const KernelCase& c : cases) EXPECT_LE(c.attention_warpgroups, 2) << c.variant;
}

// 5 layers x 15 implementations (10 bf16, 5 fp8), plus the 2 grouped kernels, the 2 promoted ones,
// the 2 norm-fold ones and ping-pong 64 in K slices a layer and gate_up into e4m3 on row scales,
// x 2 token counts; X, W and
// the output once (fp32 read and written for o_proj and down, the gated product for gate_up,
// qkv+krope's rotation table too; fp8: a byte an operand element and a float a row of each, or a
// row and 64 columns of X's, gate_up's e4m3 product a byte an element); 2 M N K FLOPs.
TEST(KernelCasesTest, GemmsOfQwen3) {
  const std::vector<KernelCase> cases = GemmCases(kQwen3, {7500, 512});
  EXPECT_EQ(cases.size(), 222u);
  const KernelCase& sliced = Find(cases, Kernel::kGemm, "down+= ownpp64ks T=512");
  EXPECT_TRUE(sliced.gemm_k_slices);
  EXPECT_FALSE(sliced.gemm_fp8);
  EXPECT_EQ(sliced.gemm_schedule, GemmSchedule::kPingPongShort);
  const KernelCase& fold_down = Find(cases, Kernel::kGemm, "down+= foldpp128 T=7500");
  EXPECT_TRUE(fold_down.gemm_norm_fold);
  EXPECT_FALSE(fold_down.gemm_fp8);
  EXPECT_EQ(fold_down.gemm_schedule, GemmSchedule::kPingPong);
  // X, W, the fp32 stream read and written, its bf16 copy and sums per 64 columns.
  EXPECT_DOUBLE_EQ(fold_down.bytes, 2.0 * (7500.0 * 3072 + 1024.0 * 3072) + 8.0 * 7500 * 1024 +
                                        2.0 * 7500 * 1024 + 4.0 * 7500 * 16);
  const KernelCase& fold_qkv = Find(cases, Kernel::kGemm, "qkv fold256 T=512");
  EXPECT_EQ(fold_qkv.gemm_tile_n, 256);
  EXPECT_DOUBLE_EQ(fold_qkv.bytes,
                   2.0 * (512.0 * 1024 + 4096.0 * 1024) + 2.0 * 512 * 4096 + 4.0 * 512 * 16);
  const KernelCase& prom = Find(cases, Kernel::kGemm, "qkv f8prom128 T=7500");
  EXPECT_TRUE(prom.gemm_promoted);
  EXPECT_FALSE(prom.gemm_x_groups);
  EXPECT_FALSE(prom.gemm_fp8_out);
  EXPECT_EQ(prom.gemm_schedule, GemmSchedule::kCooperative);
  EXPECT_DOUBLE_EQ(prom.bytes,
                   7500.0 * 1024 + 4096.0 * 1024 + 4.0 * (7500 + 4096) + 2.0 * 7500 * 4096);
  EXPECT_EQ(Find(cases, Kernel::kGemm, "down+= f8prompp64 T=512").gemm_schedule,
            GemmSchedule::kPingPongShort);
  const KernelCase& grp = Find(cases, Kernel::kGemm, "gate_up+swiglu f8grp128 T=7500");
  EXPECT_TRUE(grp.gemm_x_groups);
  EXPECT_TRUE(grp.gemm_fp8_out);
  EXPECT_EQ(grp.gemm_schedule, GemmSchedule::kCooperative);
  EXPECT_DOUBLE_EQ(grp.bytes,
                   7500.0 * 1024 + 6144.0 * 1024 + 4.0 * (7500 * 16 + 6144) + 7500.0 * 3072);
  const KernelCase& down_grp = Find(cases, Kernel::kGemm, "down+= f8grppp64 T=512");
  EXPECT_TRUE(down_grp.gemm_x_groups);
  EXPECT_FALSE(down_grp.gemm_fp8_out);
  EXPECT_EQ(down_grp.gemm_schedule, GemmSchedule::kPingPongShort);
  const KernelCase& q = Find(cases, Kernel::kGemm, "gate_up+swiglu f8ownpp128q T=512");
  EXPECT_FALSE(q.gemm_x_groups);
  EXPECT_TRUE(q.gemm_fp8_out);
  for (const KernelCase& c : cases) {
    EXPECT_EQ(c.gemm_fp8, c.variant.find(" f8") != std::string::npos) << c.variant;
  }
  const KernelCase& f8 = Find(cases, Kernel::kGemm, "gate_up+swiglu f8ownpp128 T=7500");
  EXPECT_TRUE(f8.gemm_fp8);
  EXPECT_EQ(f8.gemm_schedule, GemmSchedule::kPingPong);
  EXPECT_DOUBLE_EQ(f8.bytes,
                   7500.0 * 1024 + 6144.0 * 1024 + 4.0 * (7500 + 6144) + 7500.0 * 3072 * 2);
  EXPECT_DOUBLE_EQ(f8.flops, 2.0 * 7500 * 6144 * 1024);
  const KernelCase& f8lt = Find(cases, Kernel::kGemm, "down+= f8cublaslt T=512");
  EXPECT_TRUE(f8lt.gemm_fp8);
  EXPECT_EQ(f8lt.gemm_impl, GemmImpl::kCublasLt);
  EXPECT_EQ(Find(cases, Kernel::kGemm, "qkv f8own256 T=512").gemm_tile_n, 256);
  EXPECT_FALSE(Find(cases, Kernel::kGemm, "qkv own256 T=512").gemm_fp8);
  // Qwen3's q/k norms: q and k normed and rotated.
  const KernelCase& rope = Find(cases, Kernel::kGemm, "qkv+qknorm owntallc2 T=512");
  EXPECT_EQ(rope.gemm_layer, GemmLayer::kQkvRope);
  EXPECT_EQ(rope.gemm_cluster, 2);
  EXPECT_DOUBLE_EQ(rope.bytes,
                   512.0 * 1024 * 2 + 4096.0 * 1024 * 2 + 512.0 * 4096 * 2 + 512.0 * 128 * 4);
  const KernelCase& qkv = Find(cases, Kernel::kGemm, "qkv own256 T=7500");
  EXPECT_EQ(qkv.gemm_tile_n, 256);
  EXPECT_EQ(qkv.gemm_schedule, GemmSchedule::kCooperative);
  EXPECT_EQ(Find(cases, Kernel::kGemm, "gate_up+swiglu own256 T=7500").gemm_tile_n, 256);
  const KernelCase& pp = Find(cases, Kernel::kGemm, "gate_up+swiglu ownpp128 T=7500");
  EXPECT_EQ(pp.gemm_tile_n, 128);
  EXPECT_EQ(pp.gemm_schedule, GemmSchedule::kPingPong);
  EXPECT_EQ(pp.gemm_cluster, 1);
  const KernelCase& pp2 = Find(cases, Kernel::kGemm, "gate_up+swiglu ownpp128c2 T=7500");
  EXPECT_EQ(pp2.gemm_schedule, GemmSchedule::kPingPong);
  EXPECT_EQ(pp2.gemm_cluster, 2);
  EXPECT_EQ(Find(cases, Kernel::kGemm, "down+= own256c2 T=512").gemm_cluster, 2);
  const KernelCase& short_tiles = Find(cases, Kernel::kGemm, "gate_up+swiglu ownpp64 T=512");
  EXPECT_EQ(short_tiles.gemm_schedule, GemmSchedule::kPingPongShort);
  EXPECT_EQ(std::tie(short_tiles.gemm_tile_n, short_tiles.gemm_cluster), std::make_tuple(128, 1));
  EXPECT_EQ(Find(cases, Kernel::kGemm, "down+= owntall T=512").gemm_schedule, GemmSchedule::kTall);
  EXPECT_EQ(std::tie(qkv.gemm_n, qkv.gemm_k), std::make_tuple(4096, 1024));
  EXPECT_DOUBLE_EQ(qkv.bytes, 7500.0 * 1024 * 2 + 4096.0 * 1024 * 2 + 7500.0 * 4096 * 2);
  EXPECT_DOUBLE_EQ(qkv.flops, 2.0 * 7500 * 4096 * 1024);
  const KernelCase& o = Find(cases, Kernel::kGemm, "o_proj+= cublaslt T=512");
  EXPECT_EQ(std::tie(o.rows, o.gemm_n, o.gemm_k), std::make_tuple(512, 1024, 2048));
  EXPECT_EQ(o.gemm_impl, GemmImpl::kCublasLt);
  EXPECT_DOUBLE_EQ(o.bytes, 512.0 * 2048 * 2 + 1024.0 * 2048 * 2 + 512.0 * 1024 * 8);
  const KernelCase& gu = Find(cases, Kernel::kGemm, "gate_up+swiglu own128 T=512");
  EXPECT_EQ(std::tie(gu.gemm_n, gu.gemm_k), std::make_tuple(6144, 1024));
  EXPECT_DOUBLE_EQ(gu.bytes, 512.0 * 1024 * 2 + 6144.0 * 1024 * 2 + 512.0 * 3072 * 2);
  const KernelCase& down = Find(cases, Kernel::kGemm, "down+= own128 T=7500");
  EXPECT_EQ(std::tie(down.gemm_n, down.gemm_k), std::make_tuple(1024, 3072));
}

// The options after parsing `args` as `rankd-bench kernels args...`; nullopt when parsing ends
// the command, with its exit code in *exit_code.
std::optional<KernelsBenchOptions> Parse(std::vector<std::string> args, int* exit_code) {
  args.insert(args.begin(), {"rankd-bench", "kernels"});
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  cli::FlagSet flags("usage");
  KernelsBenchOptions o;
  AddKernelsBenchFlags(flags, &o);
  if (std::optional<int> code =
          ParseCommandFlags(flags, static_cast<int>(argv.size()), argv.data(), 2, "kernels")) {
    *exit_code = *code;
    return std::nullopt;
  }
  return o;
}

TEST(KernelsBenchFlagsTest, DefaultsSelect379mAndQwen3HeadDimKernels) {
  int code = -1;
  std::optional<KernelsBenchOptions> o = Parse({}, &code);
  ASSERT_TRUE(o.has_value());
  absl::StatusOr<std::vector<KernelCase>> cases = SelectKernelCases(*o);
  ASSERT_TRUE(cases.ok()) << cases.status();
  // 379m's kernels, qwen3's head_dim kernels, then both shapes' GEMMs (GemmsOfQwen3's 111 a token
  // count, at three token counts each). Attention's rows with the next unit's loads prefetched
  // ("pf"): one a pass at D 64, two at D 128 (with and without three blocks an SM, "b3", itself a
  // row too).
  EXPECT_EQ(cases->size(), 44u + 33u + 3 * 111u + 3 * 111u);
  std::set<std::tuple<std::string, Kernel, std::string>> distinct;
  for (const KernelCase& c : *cases) distinct.insert({c.shape.name, c.kernel, c.variant});
  EXPECT_EQ(distinct.size(), cases->size());
  EXPECT_TRUE(o->flush_l2);
}

TEST(KernelsBenchFlagsTest, ShapeWorkloadAndFilter) {
  int code = -1;
  std::optional<KernelsBenchOptions> o =
      Parse({"--shape", "qwen3-0.6b", "--filter=attention", "--tq", "10", "--ti=5", "--ni", "3",
             "--iters", "7", "--no-flush-l2", "--json", "out.json"},
            &code);
  ASSERT_TRUE(o.has_value());
  EXPECT_EQ(o->iters, 7);
  EXPECT_FALSE(o->flush_l2);
  EXPECT_EQ(o->json_path, "out.json");
  absl::StatusOr<std::vector<KernelCase>> cases = SelectKernelCases(*o);
  ASSERT_TRUE(cases.ok()) << cases.status();
  // 3 passes x ((queue, pipelined) x (mma.sync, wgmma) + the overlapped wgmma kernel + the wgmma
  // queue kernel in blocks of 2 warpgroups, serial and overlapped, + the overlapped one at three
  // blocks an SM, with the next unit's loads prefetched, and both; four blocks an SM is D 64's).
  ASSERT_EQ(cases->size(), 30u);
  for (const char* v : {"multi-item wgmma overlap b3", "multi-item wgmma overlap pf",
                        "multi-item wgmma overlap b3 pf"}) {
    const KernelCase& k = Find(*cases, Kernel::kPrefixAttention, v);
    const std::string name(v);
    EXPECT_TRUE(k.attention_wgmma && k.attention_overlap) << v;
    EXPECT_FALSE(k.attention_four_blocks) << v;
    EXPECT_EQ(k.attention_three_blocks, name.find("b3") != std::string::npos) << v;
    EXPECT_EQ(k.attention_prefetch, name.ends_with(" pf")) << v;
  }
  for (const KernelCase& c : *cases) {
    EXPECT_EQ(c.kernel, Kernel::kPrefixAttention);
    EXPECT_EQ(c.shape.name, "qwen3-0.6b");
  }
  EXPECT_EQ(Find(*cases, Kernel::kPrefixAttention, "multi-item").rows, 10 + 15);
}

// --variant keeps the cases whose variant contains it, with --filter's kernel name.
TEST(KernelsBenchFlagsTest, VariantSelectsCases) {
  int code = -1;
  std::optional<KernelsBenchOptions> o =
      Parse({"--shape", "379m", "--filter", "gemm", "--variant", "qkv f8grp128 T=7500"}, &code);
  ASSERT_TRUE(o.has_value());
  absl::StatusOr<std::vector<KernelCase>> cases = SelectKernelCases(*o);
  ASSERT_TRUE(cases.ok()) << cases.status();
  ASSERT_EQ(cases->size(), 1u);
  EXPECT_EQ(cases->front().kernel, Kernel::kGemm);
  EXPECT_TRUE(cases->front().gemm_x_groups);
  EXPECT_EQ(cases->front().rows, 7500);
  o = Parse({"--shape", "379m", "--filter", "attention", "--variant", "f8grp128"}, &code);
  ASSERT_TRUE(o.has_value());
  EXPECT_TRUE(absl::IsInvalidArgument(SelectKernelCases(*o).status()));
}

// --gemm-group and --gemm-stagger reach every GEMM case (the plan's choice, -1, unless given).
TEST(KernelsBenchFlagsTest, GemmGroupAndStaggerReachEveryGemmCase) {
  for (const auto& [args, want, want_stagger] :
       {std::tuple{std::vector<std::string>{"--filter", "gemm"}, -1, -1},
        {std::vector<std::string>{"--filter", "gemm", "--gemm-group", "0"}, 0, -1},
        {std::vector<std::string>{"--filter=gemm", "--gemm-group=17", "--gemm-stagger=0"}, 17,
         0}}) {
    int code = -1;
    std::optional<KernelsBenchOptions> o = Parse(args, &code);
    ASSERT_TRUE(o.has_value());
    absl::StatusOr<std::vector<KernelCase>> cases = SelectKernelCases(*o);
    ASSERT_TRUE(cases.ok()) << cases.status();
    ASSERT_FALSE(cases->empty());
    for (const KernelCase& c : *cases) {
      EXPECT_EQ(std::tie(c.gemm_group, c.gemm_stagger), std::tie(want, want_stagger)) << c.variant;
    }
  }
}

TEST(KernelsBenchFlagsTest, RefusesWhatCannotRun) {
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"--shape", "7b"},
                                             {"--ti", "0"},
                                             {"--iters", "0"},
                                             {"--warmup", "-1"},
                                             {"--gemm-group", "-2"},
                                             {"--gemm-stagger", "-2"},
                                             {"--filter", "no_such_kernel"}}) {
    int code = -1;
    std::optional<KernelsBenchOptions> o = Parse(args, &code);
    ASSERT_TRUE(o.has_value()) << args[0];
    EXPECT_TRUE(absl::IsInvalidArgument(SelectKernelCases(*o).status())) << args[0];
  }
}

TEST(KernelsBenchFlagsTest, HelpAndBadFlagEndTheCommand) {
  int code = -1;
  EXPECT_FALSE(Parse({"--help"}, &code).has_value());
  EXPECT_EQ(code, 0);
  EXPECT_FALSE(Parse({"--no-such-flag"}, &code).has_value());
  EXPECT_EQ(code, 2);
}

}  // namespace
}  // namespace rankd::bench
