// Tests of the profile's cost model (pass_costs.h), without a GPU: each linear layer counts
// 2 x rows x in x out FLOPs and its operands once, fp8 halves the operand bytes and adds the
// per-row scales, and the standard workload's item costs what ARCHITECTURE.md says it does.
#include "rankd/backend/cuda/pass_costs.h"

#include "gtest/gtest.h"

namespace rankd::cuda {
namespace {

// The standard workload's 379M Llama (hidden 1024, 16 heads of 64, intermediate 3328).
constexpr PassDims k379m{.hidden = 1024,
                         .q_width = 1024,
                         .kv_width = 1024,
                         .qkv_width = 3072,
                         .intermediate = 3328,
                         .head_dim = 64};

TEST(PassCostsTest, LinearLayersCountTwoFlopsAMultiplyAddAndTheirOperandsOnce) {
  const PassWork work{.rows = 7550, .items = 50};
  const PassCosts c(k379m, work, {});
  const double t = 7550, h = 1024, i = 3328;
  EXPECT_DOUBLE_EQ(c.QkvGemm().flops, 2 * t * h * 3072);
  // x and W read once, the bf16 output written once.
  EXPECT_DOUBLE_EQ(c.QkvGemm().bytes, 2 * (t * h + 3072 * h) + 2 * t * 3072);
  EXPECT_DOUBLE_EQ(c.OProj(t).flops, 2 * t * h * h);
  // The fp32 residual read and written.
  EXPECT_DOUBLE_EQ(c.OProj(t).bytes, 2 * (t * h + h * h) + 8 * t * h);
  EXPECT_DOUBLE_EQ(c.GateUp(t, false).flops, 2 * t * h * 2 * i);
  EXPECT_DOUBLE_EQ(c.Down(50).flops, 2 * 50 * i * h);
  // The fused activation writes act [t, i] instead of gate_up [t, 2i].
  EXPECT_DOUBLE_EQ(c.GateUp(t, false).bytes - c.GateUp(t, true).bytes, 2 * t * i);
}

TEST(PassCostsTest, Fp8HalvesOperandBytesAndAddsRowScales) {
  const PassWork work{.rows = 1000, .items = 10};
  const PassCosts bf16(k379m, work, {});
  const PassCosts fp8(k379m, work, {.qkv = true, .o_proj = true, .gate_up = true, .down = true});
  const double t = 1000, h = 1024, i = 3328;
  EXPECT_DOUBLE_EQ(fp8.QkvGemm().flops, bf16.QkvGemm().flops);
  EXPECT_DOUBLE_EQ(fp8.QkvGemm().bytes, (t * h + 3072 * h) + 4 * t + 4 * 3072 + 2 * t * 3072);
  EXPECT_DOUBLE_EQ(fp8.Down(t).bytes, (t * i + i * h) + 4 * t + 4 * h + 8 * t * h);
  // The norm in front of an e4m3 GEMM writes one byte an element and a scale a row.
  EXPECT_DOUBLE_EQ(bf16.Norm(t, false).bytes - fp8.Norm(t, true).bytes, t * h - 4 * t);
  // SwiGLU's output is down's input: e4m3 with down in fp8.
  EXPECT_DOUBLE_EQ(bf16.SwiGlu(t).bytes - fp8.SwiGlu(t).bytes, t * i - 4 * t);
}

TEST(PassCostsTest, TheStandardWorkloadCostsAbout106GflopAnItem) {
  // ARCHITECTURE.md: with the prefix cached, an item of Ti=150 costs about 106 GFLOP (24 layers).
  constexpr double kTi = 150, kLayers = 24;
  // Each item token attends to the 50 prefix tokens and to its own tokens up to itself.
  double attended = 0;
  for (int r = 0; r < kTi; ++r) attended += 50 + r + 1;
  const PassWork work{.rows = kTi, .items = 1, .attended = attended};  // G = 1: a row a token
  const PassCosts c(k379m, work, {});
  const double per_layer = c.QkvGemm().flops + c.Attention().flops + c.OProj(kTi).flops +
                           c.GateUp(kTi, true).flops + c.Down(kTi).flops;
  EXPECT_NEAR(kLayers * per_layer / 1e9, 106, 2);
}

TEST(PassCostsTest, AttentionCountsEveryQueryHeadOnceUnderGroupedQueryAttention) {
  // The 0.6B shape: 16 query heads of 128 over 8 kv heads (G = 2). The planner counts G rows a
  // token, so 100 tokens that see 10 keys each are attended = 2 x 1000.
  const PassDims dims{.hidden = 1024,
                      .q_width = 2048,
                      .kv_width = 1024,
                      .qkv_width = 4096,
                      .intermediate = 3072,
                      .head_dim = 128};
  const PassCosts c(dims,
                    {.rows = 100, .items = 1, .attended = 2 * 1000, .last_attended = 2 * 10}, {});
  // QK^T and PV: 2 x 2 x D FLOPs per (query head, key), 16 heads.
  EXPECT_DOUBLE_EQ(c.Attention().flops, 4.0 * 128 * 16 * 1000);
  // The last layer's: the item's last row (10 keys) alone; its q and out, every row's K and V.
  EXPECT_DOUBLE_EQ(c.AttentionLastRows().flops, 4.0 * 128 * 16 * 10);
  EXPECT_DOUBLE_EQ(c.AttentionLastRows().bytes, 2.0 * (2 * 1 * 2048 + 2 * 100 * 1024));
}

}  // namespace
}  // namespace rankd::cuda
