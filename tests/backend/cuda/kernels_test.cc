// Every CUDA kernel (and the cuBLASLt GEMM wrapper) against the float32 CPU reference ops of
// rankd/backend/cpu/ops.h, on fresh random inputs of odd shapes. Inputs are rounded to bf16 first,
// so the reference sees exactly the GPU's inputs; outputs are poisoned (NaN) before each launch.
// Thresholds are on ||gpu - cpu|| / ||cpu||: bf16 outputs round each element by up to 2^-9
// relative (about 1e-3 in norm), so 5e-3 for one rounding, 1e-2 for attention (probabilities
// are rounded to bf16 before P.V as well); fp32 outputs get 1e-4 (summation order only).
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "kernels/embedding.cuh"
#include "kernels/prefix_attention.cuh"
#include "kernels/qkv_rope.cuh"
#include "kernels/rms_norm.cuh"
#include "kernels/score_head.cuh"
#include "kernels/swiglu.cuh"
#include "rankd/backend/cpu/ops.h"
#include "rankd/backend/cuda/device_arena.h"
#include "rankd/backend/cuda/gemm.h"
#include "tests/backend/cuda/cuda_test_util.h"

namespace rankd::cuda {
namespace {

using bf16 = __nv_bfloat16;
using test_util::DeviceArray;
using test_util::FromBf16;
using test_util::RelNormError;
using test_util::Rng;
using test_util::ToBf16;

constexpr double kOneRounding = 5e-3;
constexpr double kAttention = 1e-2;
constexpr double kFp32 = 1e-4;

class KernelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    RANKD_SKIP_WITHOUT_GPU();
    trace_ = std::make_unique<::testing::ScopedTrace>(__FILE__, __LINE__,
                                                      "seed " + std::to_string(rng_.seed()));
  }
  void Sync() { RANKD_EXPECT_CUDA_OK(cudaDeviceSynchronize()); }

  Rng rng_;
  std::unique_ptr<::testing::ScopedTrace> trace_;
};

TEST_F(KernelTest, EmbeddingGatherWithInjectedRows) {
  for (const auto& [V, H, T, R] : {std::tuple{37, 72, 29, 5}, {1000, 1000, 7, 3}, {11, 8, 1, 1}}) {
    SCOPED_TRACE(::testing::Message() << "V=" << V << " H=" << H << " T=" << T << " R=" << R);
    const std::vector<float> table = rng_.Bf16Values(static_cast<size_t>(V) * H, 1.0f);
    const std::vector<float> rows = rng_.Floats(static_cast<size_t>(R) * H, 3.0f);
    std::vector<int32_t> tokens(T);
    for (int t = 0; t < T; ++t) {
      tokens[t] = rng_.Int(0, 3) == 0 ? -rng_.Int(1, R) : rng_.Int(0, V - 1);
    }
    tokens[0] = -R;  // at least one injected row, the last one
    std::vector<float> ref(static_cast<size_t>(T) * H);
    cpu::EmbeddingGather(tokens.data(), T, table.data(), rows.data(), H, ref.data());

    DeviceArray<int32_t> d_tokens(tokens);
    DeviceArray<bf16> d_table(ToBf16(table));
    DeviceArray<float> d_rows(rows), d_out(ref.size());
    d_out.Poison();
    RANKD_EXPECT_CUDA_OK(kernels::LaunchEmbeddingGather(d_tokens.get(), T, d_table.get(),
                                                        d_rows.get(), H, d_out.get(), nullptr));
    Sync();
    EXPECT_EQ(RelNormError(d_out.Download(), ref), 0.0);  // a copy: exact
  }
}

TEST_F(KernelTest, RmsNorm) {
  for (const auto& [rows, dim] : {std::pair{37, 72}, {5, 1000}, {3, 4097}, {1, 16}}) {
    SCOPED_TRACE(::testing::Message() << "rows=" << rows << " dim=" << dim);
    const std::vector<float> x = rng_.Floats(static_cast<size_t>(rows) * dim, 4.0f);
    const std::vector<float> w = rng_.Bf16Values(dim, 2.0f);
    const float eps = 1e-5f;
    std::vector<float> ref(x.size());
    cpu::RmsNorm(x.data(), w.data(), eps, rows, dim, ref.data());

    DeviceArray<float> d_x(x);
    DeviceArray<bf16> d_w(ToBf16(w)), d_out(x.size());
    d_out.Poison();
    RANKD_EXPECT_CUDA_OK(
        kernels::LaunchRmsNorm(d_x.get(), d_w.get(), eps, rows, dim, d_out.get(), nullptr));
    Sync();
    EXPECT_LT(RelNormError(FromBf16(d_out.Download()), ref), kOneRounding);
  }
}

TEST_F(KernelTest, SwiGlu) {
  // 176 and 3328 take the 16-byte path, 90 the scalar one.
  for (const auto& [T, I] : {std::pair{13, 176}, {7, 90}, {3, 3328}, {1, 1}}) {
    SCOPED_TRACE(::testing::Message() << "T=" << T << " I=" << I);
    const std::vector<float> gate_up = rng_.Bf16Values(static_cast<size_t>(T) * 2 * I, 6.0f);
    std::vector<float> ref(static_cast<size_t>(T) * I);
    for (int t = 0; t < T; ++t) {
      const float* g = gate_up.data() + static_cast<size_t>(t) * 2 * I;
      cpu::SwiGlu(g, g + I, I, ref.data() + static_cast<size_t>(t) * I);
    }
    DeviceArray<bf16> d_in(ToBf16(gate_up)), d_out(ref.size());
    d_out.Poison();
    RANKD_EXPECT_CUDA_OK(kernels::LaunchSwiGlu(d_in.get(), T, I, d_out.get(), nullptr));
    Sync();
    EXPECT_LT(RelNormError(FromBf16(d_out.Download()), ref), kOneRounding);
  }
}

struct QkvCase {
  int T, Nq, Nkv, D;
  bool bias, qk_norm;
  model::RopeType rope;
};

TEST_F(KernelTest, QkvBiasNormRope) {
  const QkvCase cases[] = {
      {23, 6, 2, 16, false, false, model::RopeType::kDefault},
      {9, 4, 1, 48, true, false, model::RopeType::kDefault},   // Qwen2-style biases, MQA
      {17, 3, 1, 48, false, true, model::RopeType::kDefault},  // Qwen3-style q/k norm
      {5, 8, 8, 64, true, true, model::RopeType::kLinear},
      {31, 16, 2, 128, false, false, model::RopeType::kLlama3},
      {3, 2, 1, 256, false, true, model::RopeType::kDefault},
      {2, 1, 1, 2, true, false, model::RopeType::kDefault},
  };
  for (const QkvCase& c : cases) {
    SCOPED_TRACE(::testing::Message() << "T=" << c.T << " Nq=" << c.Nq << " Nkv=" << c.Nkv << " D="
                                      << c.D << " bias=" << c.bias << " qk_norm=" << c.qk_norm);
    const int Q = c.Nq * c.D, KV = c.Nkv * c.D, W = Q + 2 * KV;
    model::RopeConfig rope;
    rope.type = c.rope;
    rope.theta = 500000.0;
    rope.factor = 8.0;
    rope.original_max_position_embeddings = 64;
    const std::vector<float> inv_freq = cpu::RopeInverseFrequencies(rope, c.D);
    const std::vector<float> qkv = rng_.Bf16Values(static_cast<size_t>(c.T) * W, 2.0f);
    const std::vector<float> bias = rng_.Bf16Values(W, 0.5f);
    const std::vector<float> q_norm = rng_.Bf16Values(c.D, 1.5f);
    const std::vector<float> k_norm = rng_.Bf16Values(c.D, 1.5f);
    std::vector<int32_t> positions(c.T);
    for (int32_t& p : positions) p = rng_.Int(0, 5000);
    const float eps = 1e-6f;

    // Reference: bias, split, per-head norm, RoPE, one op at a time.
    std::vector<float> q(static_cast<size_t>(c.T) * Q), k(static_cast<size_t>(c.T) * KV),
        v(static_cast<size_t>(c.T) * KV);
    for (int t = 0; t < c.T; ++t) {
      std::vector<float> row(qkv.begin() + static_cast<size_t>(t) * W,
                             qkv.begin() + static_cast<size_t>(t + 1) * W);
      if (c.bias) cpu::AddInPlace(row.data(), bias.data(), W);
      std::copy(row.begin(), row.begin() + Q, q.begin() + static_cast<size_t>(t) * Q);
      std::copy(row.begin() + Q, row.begin() + Q + KV, k.begin() + static_cast<size_t>(t) * KV);
      std::copy(row.begin() + Q + KV, row.end(), v.begin() + static_cast<size_t>(t) * KV);
    }
    if (c.qk_norm) {
      cpu::RmsNorm(q.data(), q_norm.data(), eps, c.T * c.Nq, c.D, q.data());
      cpu::RmsNorm(k.data(), k_norm.data(), eps, c.T * c.Nkv, c.D, k.data());
    }
    cpu::ApplyRope(q.data(), positions.data(), c.T, c.Nq, c.D, inv_freq.data());
    cpu::ApplyRope(k.data(), positions.data(), c.T, c.Nkv, c.D, inv_freq.data());

    DeviceArray<bf16> d_qkv(ToBf16(qkv)), d_bias(ToBf16(bias)), d_qn(ToBf16(q_norm)),
        d_kn(ToBf16(k_norm)), d_q(q.size()), d_k(k.size()), d_v(v.size());
    DeviceArray<int32_t> d_pos(positions);
    DeviceArray<float> d_inv(inv_freq);
    for (auto* d : {&d_q, &d_k, &d_v}) d->Poison();
    kernels::QkvRopeParams p;
    p.qkv = d_qkv.get();
    p.bias = c.bias ? d_bias.get() : nullptr;
    p.q_norm = c.qk_norm ? d_qn.get() : nullptr;
    p.k_norm = c.qk_norm ? d_kn.get() : nullptr;
    p.positions = d_pos.get();
    p.inv_freq = d_inv.get();
    p.num_tokens = c.T;
    p.num_q_heads = c.Nq;
    p.num_kv_heads = c.Nkv;
    p.head_dim = c.D;
    p.eps = eps;
    p.q = d_q.get();
    p.k = d_k.get();
    p.v = d_v.get();
    RANKD_EXPECT_CUDA_OK(kernels::LaunchQkvRope(p, nullptr));
    Sync();
    EXPECT_LT(RelNormError(FromBf16(d_q.Download()), q), kOneRounding) << "q";
    EXPECT_LT(RelNormError(FromBf16(d_k.Download()), k), kOneRounding) << "k";
    EXPECT_LT(RelNormError(FromBf16(d_v.Download()), v), kOneRounding) << "v";
  }
}

TEST_F(KernelTest, ScoreHeadBothKinds) {
  for (const auto& [T, H, N, rows] :
       {std::tuple{19, 64, 7, 1}, {19, 96, 7, 2}, {40, 1000, 3, 2}, {1, 8, 1, 1}}) {
    SCOPED_TRACE(::testing::Message() << "T=" << T << " H=" << H << " N=" << N << " rows=" << rows);
    const std::vector<float> x = rng_.Floats(static_cast<size_t>(T) * H, 3.0f);
    const std::vector<float> norm = rng_.Bf16Values(H, 2.0f);
    const std::vector<float> head = rng_.Bf16Values(static_cast<size_t>(rows) * H, 1.0f);
    std::vector<int32_t> last(N);
    for (int32_t& r : last) r = rng_.Int(0, T - 1);
    const float eps = 1e-6f;
    std::vector<float> ref(N), normed(H);
    for (int i = 0; i < N; ++i) {
      cpu::RmsNorm(x.data() + static_cast<size_t>(last[i]) * H, norm.data(), eps, 1, H,
                   normed.data());
      ref[i] = cpu::Dot(head.data(), normed.data(), H);
      if (rows == 2) ref[i] -= cpu::Dot(head.data() + H, normed.data(), H);
    }
    DeviceArray<float> d_x(x), d_scores(N);
    DeviceArray<int32_t> d_last(last);
    DeviceArray<bf16> d_norm(ToBf16(norm)), d_head(ToBf16(head));
    d_scores.Poison();
    RANKD_EXPECT_CUDA_OK(kernels::LaunchScoreHead(d_x.get(), d_last.get(), N, d_norm.get(),
                                                  d_head.get(), rows, eps, H, d_scores.get(),
                                                  nullptr));
    Sync();
    EXPECT_LT(RelNormError(d_scores.Download(), ref), kFp32);
  }
}

struct AttentionCase {
  int Nq, Nkv, D, P;
  std::vector<int> lengths;
};

// IBPC layout: the context is a separate K/V buffer; every segment sees all P rows of it.
TEST_F(KernelTest, PrefixAttentionSeparateContext) {
  const AttentionCase cases[] = {
      {4, 4, 16, 6, {27, 1, 39}}, {6, 2, 16, 0, {5, 70, 1}},      // no context (prefix encoding)
      {4, 2, 32, 131, {47, 60}},  {3, 1, 48, 9, {1, 2, 3, 100}},  // MQA, head_dim 48
      {16, 16, 64, 50, {150, 3}}, {8, 1, 80, 13, {65}},
      {12, 4, 96, 64, {64, 63}},  {8, 2, 128, 77, {130, 17, 1}},
  };
  for (const AttentionCase& c : cases) {
    SCOPED_TRACE(::testing::Message() << "Nq=" << c.Nq << " Nkv=" << c.Nkv << " D=" << c.D
                                      << " P=" << c.P << " segments=" << c.lengths.size());
    const int S = static_cast<int>(c.lengths.size());
    std::vector<int32_t> offsets(S + 1, 0), ctx_len(S, c.P);
    for (int s = 0; s < S; ++s) offsets[s + 1] = offsets[s] + c.lengths[s];
    const int T = offsets[S], Q = c.Nq * c.D, KV = c.Nkv * c.D;
    const std::vector<float> q = rng_.Bf16Values(static_cast<size_t>(T) * Q, 2.0f);
    const std::vector<float> k = rng_.Bf16Values(static_cast<size_t>(T) * KV, 2.0f);
    const std::vector<float> v = rng_.Bf16Values(static_cast<size_t>(T) * KV, 1.0f);
    const std::vector<float> ck = rng_.Bf16Values(static_cast<size_t>(c.P) * KV, 2.0f);
    const std::vector<float> cv = rng_.Bf16Values(static_cast<size_t>(c.P) * KV, 1.0f);
    std::vector<float> ref(static_cast<size_t>(T) * Q);
    for (int s = 0; s < S; ++s) {
      const size_t b = offsets[s];
      cpu::PrefixAttention(q.data() + b * Q, ck.data(), cv.data(), c.P, k.data() + b * KV,
                           v.data() + b * KV, c.lengths[s], c.Nq, c.Nkv, c.D, ref.data() + b * Q);
    }
    const int group = c.Nq / c.Nkv;
    std::vector<int2> tiles(kernels::CountAttentionTiles(offsets.data(), S, group));
    const int num_tiles = kernels::FillAttentionTiles(offsets.data(), S, group, tiles.data());
    ASSERT_EQ(num_tiles, static_cast<int>(tiles.size()));

    DeviceArray<bf16> d_q(ToBf16(q)), d_k(ToBf16(k)), d_v(ToBf16(v)), d_ck(ToBf16(ck)),
        d_cv(ToBf16(cv)), d_out(ref.size());
    DeviceArray<int32_t> d_off(offsets), d_ctx(ctx_len);
    DeviceArray<int2> d_tiles(tiles);
    d_out.Poison();
    kernels::PrefixAttentionParams p;
    p.q = d_q.get();
    p.k = d_k.get();
    p.v = d_v.get();
    p.ctx_k = c.P > 0 ? d_ck.get() : nullptr;
    p.ctx_v = c.P > 0 ? d_cv.get() : nullptr;
    p.seg_offsets = d_off.get();
    p.seg_ctx_len = d_ctx.get();
    p.tiles = d_tiles.get();
    p.num_tiles = num_tiles;
    p.num_q_heads = c.Nq;
    p.num_kv_heads = c.Nkv;
    p.head_dim = c.D;
    p.out = d_out.get();
    RANKD_EXPECT_CUDA_OK(kernels::LaunchPrefixAttention(p, nullptr));
    Sync();
    EXPECT_LT(RelNormError(FromBf16(d_out.Download()), ref), kAttention);
  }
}

// Multi-item layout: segment 0 is the prefix (no context); the items' context is rows 0..P-1 of
// the same packed K/V, and no item sees another.
TEST_F(KernelTest, PrefixAttentionPackedMultiItem) {
  for (const AttentionCase& c :
       {AttentionCase{6, 2, 16, 11, {20, 1, 33}}, AttentionCase{4, 1, 64, 70, {9, 80}}}) {
    SCOPED_TRACE(::testing::Message()
                 << "Nq=" << c.Nq << " Nkv=" << c.Nkv << " D=" << c.D << " P=" << c.P);
    const int S = static_cast<int>(c.lengths.size()) + 1;
    std::vector<int32_t> offsets = {0, c.P}, ctx_len = {0};
    for (int len : c.lengths) {
      offsets.push_back(offsets.back() + len);
      ctx_len.push_back(c.P);
    }
    const int T = offsets.back(), Q = c.Nq * c.D, KV = c.Nkv * c.D;
    const std::vector<float> q = rng_.Bf16Values(static_cast<size_t>(T) * Q, 2.0f);
    const std::vector<float> k = rng_.Bf16Values(static_cast<size_t>(T) * KV, 2.0f);
    const std::vector<float> v = rng_.Bf16Values(static_cast<size_t>(T) * KV, 1.0f);
    std::vector<float> ref(static_cast<size_t>(T) * Q);
    cpu::PrefixAttention(q.data(), nullptr, nullptr, 0, k.data(), v.data(), c.P, c.Nq, c.Nkv, c.D,
                         ref.data());
    for (int s = 1; s < S; ++s) {
      const size_t b = offsets[s];
      cpu::PrefixAttention(q.data() + b * Q, k.data(), v.data(), c.P, k.data() + b * KV,
                           v.data() + b * KV, offsets[s + 1] - offsets[s], c.Nq, c.Nkv, c.D,
                           ref.data() + b * Q);
    }
    const int group = c.Nq / c.Nkv;
    std::vector<int2> tiles(kernels::CountAttentionTiles(offsets.data(), S, group));
    const int num_tiles = kernels::FillAttentionTiles(offsets.data(), S, group, tiles.data());

    DeviceArray<bf16> d_q(ToBf16(q)), d_k(ToBf16(k)), d_v(ToBf16(v)), d_out(ref.size());
    DeviceArray<int32_t> d_off(offsets), d_ctx(ctx_len);
    DeviceArray<int2> d_tiles(tiles);
    d_out.Poison();
    kernels::PrefixAttentionParams p;
    p.q = d_q.get();
    p.k = p.ctx_k = d_k.get();
    p.v = p.ctx_v = d_v.get();
    p.seg_offsets = d_off.get();
    p.seg_ctx_len = d_ctx.get();
    p.tiles = d_tiles.get();
    p.num_tiles = num_tiles;
    p.num_q_heads = c.Nq;
    p.num_kv_heads = c.Nkv;
    p.head_dim = c.D;
    p.out = d_out.get();
    RANKD_EXPECT_CUDA_OK(kernels::LaunchPrefixAttention(p, nullptr));
    Sync();
    EXPECT_LT(RelNormError(FromBf16(d_out.Download()), ref), kAttention);
  }
}

TEST_F(KernelTest, UnsupportedShapesAreRejected) {
  kernels::PrefixAttentionParams p;
  p.num_tiles = 1;
  p.num_q_heads = 4;
  p.num_kv_heads = 4;
  p.head_dim = 40;
  EXPECT_EQ(kernels::LaunchPrefixAttention(p, nullptr), cudaErrorInvalidValue);
  p.head_dim = 64;
  p.num_kv_heads = 3;  // 4 query heads do not group over 3
  EXPECT_EQ(kernels::LaunchPrefixAttention(p, nullptr), cudaErrorInvalidValue);
  kernels::QkvRopeParams r;
  r.num_tokens = 1;
  r.num_q_heads = r.num_kv_heads = 1;
  r.head_dim = 258;
  EXPECT_EQ(kernels::LaunchQkvRope(r, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(kernels::LaunchScoreHead(nullptr, nullptr, 1, nullptr, nullptr, 3, 1e-6f, 8, nullptr,
                                     nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

// Operands straight from cudaMalloc (256-byte aligned) and, as arena buffers can be, 128 bytes
// past such an address.
TEST_F(KernelTest, GemmBf16OutputAndFp32Accumulate) {
  DeviceArray<char> workspace(32 << 20);
  auto gemm = Gemm::Create(workspace.get(), workspace.size());
  ASSERT_TRUE(gemm.ok()) << gemm.status();
  for (const auto& [T, in, out] :
       {std::tuple{1, 72, 200}, {37, 72, 200}, {300, 1000, 333}, {7, 64, 1}}) {
    for (const int shift : {0, 128}) {
      SCOPED_TRACE(::testing::Message() << "T=" << T << " in=" << in << " out=" << out
                                        << " operands 256-aligned + " << shift << " bytes");
      const std::vector<float> x = rng_.Bf16Values(static_cast<size_t>(T) * in, 1.0f);
      const std::vector<float> w = rng_.Bf16Values(static_cast<size_t>(out) * in, 0.2f);
      const std::vector<float> y0 = rng_.Floats(static_cast<size_t>(T) * out, 1.0f);
      std::vector<float> ref(static_cast<size_t>(T) * out);
      cpu::Linear(x.data(), w.data(), nullptr, T, in, out, ref.data());

      // Each operand sits `shift` bytes into its allocation.
      auto shifted = [&](auto host) {
        using E = typename decltype(host)::value_type;
        host.insert(host.begin(), shift / sizeof(E), E{});
        return host;
      };
      DeviceArray<bf16> d_x(shifted(ToBf16(x))), d_w(shifted(ToBf16(w))),
          d_y(ref.size() + shift / sizeof(bf16));
      bf16* y = d_y.get() + shift / sizeof(bf16);
      d_y.Poison();
      const absl::Status s1 =
          (*gemm)->Linear(d_x.get() + shift / sizeof(bf16), d_w.get() + shift / sizeof(bf16), T, in,
                          out, y, nullptr);
      ASSERT_TRUE(s1.ok()) << s1;
      Sync();
      std::vector<bf16> got(ref.size());
      RANKD_EXPECT_CUDA_OK(
          cudaMemcpy(got.data(), y, got.size() * sizeof(bf16), cudaMemcpyDeviceToHost));
      EXPECT_LT(RelNormError(FromBf16(got), ref), kOneRounding) << "bf16 output";

      DeviceArray<float> d_acc(shifted(y0));
      float* acc = d_acc.get() + shift / sizeof(float);
      const absl::Status s2 =
          (*gemm)->LinearAccumulate(d_x.get() + shift / sizeof(bf16),
                                    d_w.get() + shift / sizeof(bf16), T, in, out, acc, nullptr);
      ASSERT_TRUE(s2.ok()) << s2;
      Sync();
      std::vector<float> got_acc(ref.size());
      RANKD_EXPECT_CUDA_OK(
          cudaMemcpy(got_acc.data(), acc, got_acc.size() * sizeof(float), cudaMemcpyDeviceToHost));
      std::vector<float> ref_acc = y0;
      cpu::AddInPlace(ref_acc.data(), ref.data(), static_cast<int64_t>(ref.size()));
      EXPECT_LT(RelNormError(got_acc, ref_acc), kFp32) << "fp32 accumulate";
    }
  }
  // A misaligned operand is refused, not handed to cuBLASLt.
  DeviceArray<bf16> a(64), b(64);
  EXPECT_EQ((*gemm)->Linear(a.get() + 1, b.get(), 1, 8, 8, b.get(), nullptr).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(KernelTest, ArenaBuffersAreAligned) {
  auto layout = [](Carver& c) {
    std::vector<uintptr_t> p;
    for (int i = 0; i < 5; ++i) p.push_back(reinterpret_cast<uintptr_t>(c.Take<char>(i * 70 + 1)));
    p.push_back(reinterpret_cast<uintptr_t>(c.Take<float>(3)));
    return p;
  };
  Carver measure;
  layout(measure);
  EXPECT_EQ(measure.bytes(), 10 * kArenaAlignment);  // 1, 1, 2, 2, 3 and 1 blocks of 128
  auto arena = Arena::Create(Arena::Kind::kDevice, measure.bytes());
  ASSERT_TRUE(arena.ok()) << arena.status();
  Carver c = (*arena)->carver();
  for (uintptr_t p : layout(c)) EXPECT_EQ(p % kArenaAlignment, 0u);
  EXPECT_EQ(c.bytes(), measure.bytes());
  EXPECT_LE(c.bytes(), (*arena)->capacity());
}

}  // namespace
}  // namespace rankd::cuda
