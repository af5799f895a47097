// Every CUDA kernel (and the cuBLASLt GEMM wrapper) against the float32 CPU reference ops of
// rankd/backend/cpu/ops.h, on fresh random inputs of odd shapes. Inputs are rounded to bf16 first,
// so the reference sees exactly the GPU's inputs; outputs are poisoned (NaN) before each launch.
// Thresholds are on ||gpu - cpu|| / ||cpu||: bf16 outputs round each element by up to 2^-9
// relative (about 1e-3 in norm), so 5e-3 for one rounding, 1e-2 for attention (probabilities
// are rounded to bf16 before P.V as well); fp32 outputs get 1e-4 (summation order only).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>

#include "kernels/embedding.cuh"
#include "kernels/gather_rows.cuh"
#include "kernels/hopper_gemm.cuh"
#include "kernels/prefix_attention.cuh"
#include "kernels/qkv_rope.cuh"
#include "kernels/quantize_fp8.cuh"
#include "kernels/rms_norm.cuh"
#include "kernels/score_head.cuh"
#include "kernels/swiglu.cuh"
#include "rankd/backend/cpu/ops.h"
#include "rankd/backend/cuda/device_arena.h"
#include "rankd/backend/cuda/gemm.h"
#include "rankd/model/rope.h"
#include "tests/backend/cuda/cuda_test_util.h"

namespace rankd::cuda {
namespace {

using bf16 = __nv_bfloat16;
using fp8 = __nv_fp8_e4m3;
using test_util::DeviceArray;
using test_util::ExpectFp8RowsMatch;
using test_util::Fp8Rows;
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

// Scale 1 copies; Gemma's scale (bf16 sqrt(hidden)) rounds each table product to bf16, rows as
// given.
TEST_F(KernelTest, EmbeddingGatherWithInjectedRows) {
  for (const auto& [V, H, T, R, scale] : {std::tuple{37, 72, 29, 5, 1.0f},
                                          {1000, 1000, 7, 3, 1.0f},
                                          {11, 8, 1, 1, 1.0f},
                                          {37, 72, 29, 5, FromBf16(ToBf16(std::sqrt(72.0f)))},
                                          {300, 2304, 9, 2, 48.0f}}) {
    SCOPED_TRACE(::testing::Message()
                 << "V=" << V << " H=" << H << " T=" << T << " R=" << R << " scale=" << scale);
    const std::vector<float> table = rng_.Bf16Values(static_cast<size_t>(V) * H, 1.0f);
    const std::vector<float> rows = rng_.Floats(static_cast<size_t>(R) * H, 3.0f);
    std::vector<int32_t> tokens(T);
    for (int t = 0; t < T; ++t) {
      tokens[t] = rng_.Int(0, 3) == 0 ? -rng_.Int(1, R) : rng_.Int(0, V - 1);
    }
    tokens[0] = -R;  // at least one injected row, the last one
    std::vector<float> ref(static_cast<size_t>(T) * H);
    cpu::EmbeddingGather(tokens.data(), T, table.data(), rows.data(), H, ref.data());
    for (int t = 0; t < T; ++t) {
      if (tokens[t] < 0) continue;
      std::vector<float> row(ref.begin() + static_cast<size_t>(t) * H,
                             ref.begin() + static_cast<size_t>(t + 1) * H);
      for (float& v : row) v *= scale;
      row = FromBf16(ToBf16(row));
      std::copy(row.begin(), row.end(), ref.begin() + static_cast<size_t>(t) * H);
    }

    DeviceArray<int32_t> d_tokens(tokens);
    DeviceArray<bf16> d_table(ToBf16(table));
    DeviceArray<float> d_rows(rows), d_out(ref.size());
    d_out.Poison();
    RANKD_EXPECT_CUDA_OK(kernels::LaunchEmbeddingGather(
        d_tokens.get(), T, d_table.get(), d_rows.get(), H, scale, d_out.get(), nullptr));
    Sync();
    EXPECT_EQ(RelNormError(d_out.Download(), ref), 0.0);  // a copy, or one rounding: exact
  }
}

TEST_F(KernelTest, RmsNorm) {
  // Multiples of 128 up to 2048 keep the row in registers (1, 8, 9 and 16 float4s a lane here);
  // 4096, 72, 1000, 4097 and 16 take the strided path.
  for (const auto& [rows, dim] : {std::pair{37, 72},
                                  {5, 1000},
                                  {3, 4097},
                                  {1, 16},
                                  {19, 1024},
                                  {3, 128},
                                  {2, 4096},
                                  {6, 2048},
                                  {4, 1152}}) {
    for (const float offset : {0.0f, 1.0f}) {  // Gemma's (1 + w)
      SCOPED_TRACE(::testing::Message()
                   << "rows=" << rows << " dim=" << dim << " offset=" << offset);
      const std::vector<float> x = rng_.Floats(static_cast<size_t>(rows) * dim, 4.0f);
      const std::vector<float> w = rng_.Bf16Values(dim, offset > 0 ? 0.3f : 2.0f);
      std::vector<float> w_eff = w;
      for (float& v : w_eff) v += offset;  // exact in fp32
      const float eps = 1e-5f;
      std::vector<float> ref(x.size());
      cpu::RmsNorm(x.data(), w_eff.data(), eps, rows, dim, ref.data());

      DeviceArray<float> d_x(x);
      DeviceArray<bf16> d_w(ToBf16(w)), d_out(x.size());
      d_out.Poison();
      RANKD_EXPECT_CUDA_OK(kernels::LaunchRmsNorm(d_x.get(), d_w.get(), offset, eps, rows, dim,
                                                  d_out.get(), nullptr));
      Sync();
      EXPECT_LT(RelNormError(FromBf16(d_out.Download()), ref), kOneRounding);
    }
  }
}

// A kernel's fp8 output (codes and per-row scales) from the device.
Fp8Rows DownloadFp8(const DeviceArray<fp8>& q, const DeviceArray<float>& scale) {
  Fp8Rows out{std::vector<uint8_t>(q.size()), scale.Download()};
  EXPECT_EQ(cudaMemcpy(out.q.data(), q.get(), q.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  return out;
}

// The fp8 variant: the same fp32 norm, quantised per row. Row 0 is zero (as padding rows can be):
// scale 1, codes 0.
TEST_F(KernelTest, RmsNormFp8) {
  for (const auto& [rows, dim] : {std::pair{37, 72},
                                  {5, 1000},
                                  {3, 4097},
                                  {19, 1024},
                                  {17, 128},
                                  {2, 4096},
                                  {6, 2048},
                                  {4, 1152}}) {
    for (const float offset : {0.0f, 1.0f}) {
      SCOPED_TRACE(::testing::Message()
                   << "rows=" << rows << " dim=" << dim << " offset=" << offset);
      std::vector<float> x = rng_.Floats(static_cast<size_t>(rows) * dim, 4.0f);
      std::fill(x.begin(), x.begin() + dim, 0.0f);
      const std::vector<float> w = rng_.Bf16Values(dim, offset > 0 ? 0.3f : 2.0f);
      std::vector<float> w_eff = w;
      for (float& v : w_eff) v += offset;
      const float eps = 1e-5f;
      std::vector<float> ref(x.size());
      cpu::RmsNorm(x.data(), w_eff.data(), eps, rows, dim, ref.data());

      DeviceArray<float> d_x(x), d_scale(rows);
      DeviceArray<bf16> d_w(ToBf16(w));
      DeviceArray<fp8> d_q(x.size());
      d_q.Poison();
      d_scale.Poison();
      RANKD_EXPECT_CUDA_OK(kernels::LaunchRmsNormFp8(d_x.get(), d_w.get(), offset, eps, rows, dim,
                                                     d_q.get(), d_scale.get(), nullptr));
      Sync();
      const Fp8Rows got = DownloadFp8(d_q, d_scale);
      EXPECT_EQ(got.scale[0], 1.0f) << "zero row";
      ExpectFp8RowsMatch(got, ref, rows, dim);
    }
  }
}

// Gemma 2's sandwich norms: x += bf16(RMSNorm(y) * (offset + w)).
TEST_F(KernelTest, RmsNormAdd) {
  for (const auto& [rows, dim] : {std::pair{37, 72}, {5, 1000}, {1, 16}, {19, 2304}}) {
    for (const float offset : {0.0f, 1.0f}) {
      SCOPED_TRACE(::testing::Message()
                   << "rows=" << rows << " dim=" << dim << " offset=" << offset);
      const std::vector<float> y = rng_.Bf16Values(static_cast<size_t>(rows) * dim, 4.0f);
      const std::vector<float> x = rng_.Floats(y.size(), 3.0f);
      const std::vector<float> w = rng_.Bf16Values(dim, 0.5f);
      std::vector<float> w_eff = w;
      for (float& v : w_eff) v += offset;
      const float eps = 1e-6f;
      std::vector<float> ref(y.size());
      cpu::RmsNorm(y.data(), w_eff.data(), eps, rows, dim, ref.data());
      ref = FromBf16(ToBf16(ref));
      for (size_t i = 0; i < ref.size(); ++i) ref[i] += x[i];

      DeviceArray<float> d_x(x);
      DeviceArray<bf16> d_y(ToBf16(y)), d_w(ToBf16(w));
      RANKD_EXPECT_CUDA_OK(kernels::LaunchRmsNormAdd(d_y.get(), d_w.get(), offset, eps, rows, dim,
                                                     d_x.get(), nullptr));
      Sync();
      EXPECT_LT(RelNormError(d_x.Download(), ref), kOneRounding);
    }
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

// The interleaved gate_up of kernels/hopper_gemm (column r holds the stacked column
// GateUpSourceRow(r, I)) with half = kHopperGluHalf gives the stacked layout's outputs, both
// activations, on the 16-byte path (I = 192, 3328) and the scalar one (a misaligned output).
TEST_F(KernelTest, GatedActivationsOfTheInterleavedLayout) {
  constexpr int kHalf = kernels::kHopperGluHalf;
  for (const bool gelu : {false, true}) {
    for (const auto& [T, I, offset] : {std::tuple{5, 192, 0}, {3, 3328, 0}, {2, 128, 1}}) {
      SCOPED_TRACE(::testing::Message() << (gelu ? "GeGLU" : "SwiGLU") << " T=" << T << " I=" << I
                                        << " output offset " << offset);
      const std::vector<float> stacked = rng_.Bf16Values(static_cast<size_t>(T) * 2 * I, 6.0f);
      std::vector<float> interleaved(stacked.size()), ref(static_cast<size_t>(T) * I);
      for (int t = 0; t < T; ++t) {
        const float* g = stacked.data() + static_cast<size_t>(t) * 2 * I;
        for (int r = 0; r < 2 * I; ++r) {
          interleaved[static_cast<size_t>(t) * 2 * I + r] = g[kernels::GateUpSourceRow(r, I)];
        }
        (gelu ? cpu::GeGlu : cpu::SwiGlu)(g, g + I, I, ref.data() + static_cast<size_t>(t) * I);
      }
      DeviceArray<bf16> d_in(ToBf16(interleaved)), d_out(ref.size() + offset);
      d_out.Poison();
      bf16* out = d_out.get() + offset;
      RANKD_EXPECT_CUDA_OK(gelu ? kernels::LaunchGeGlu(d_in.get(), T, I, out, nullptr, kHalf)
                                : kernels::LaunchSwiGlu(d_in.get(), T, I, out, nullptr, kHalf));
      Sync();
      std::vector<float> got = FromBf16(d_out.Download());
      got.erase(got.begin(), got.begin() + offset);
      EXPECT_LT(RelNormError(got, ref), kOneRounding);
    }
  }
  bf16* none = nullptr;
  EXPECT_EQ(kernels::LaunchSwiGlu(none, 1, 100, none, nullptr, kHalf), cudaErrorInvalidValue)
      << "I not a multiple of the span";
}

TEST_F(KernelTest, GeGlu) {
  for (const auto& [T, I] : {std::pair{13, 176}, {7, 90}, {3, 16384}, {1, 1}}) {
    SCOPED_TRACE(::testing::Message() << "T=" << T << " I=" << I);
    const std::vector<float> gate_up = rng_.Bf16Values(static_cast<size_t>(T) * 2 * I, 6.0f);
    std::vector<float> ref(static_cast<size_t>(T) * I);
    for (int t = 0; t < T; ++t) {
      const float* g = gate_up.data() + static_cast<size_t>(t) * 2 * I;
      cpu::GeGlu(g, g + I, I, ref.data() + static_cast<size_t>(t) * I);
    }
    DeviceArray<bf16> d_in(ToBf16(gate_up)), d_out(ref.size());
    d_out.Poison();
    RANKD_EXPECT_CUDA_OK(kernels::LaunchGeGlu(d_in.get(), T, I, d_out.get(), nullptr));
    Sync();
    EXPECT_LT(RelNormError(FromBf16(d_out.Download()), ref), kOneRounding);
  }
}

// SwiGLU and GeGLU quantised per token; row 0 is zero (scale 1). From registers (I a multiple of
// 8 up to 16384): 176 (one 8-column chunk a thread or none), 3328 (two, the second for some
// threads), 6144 (four), 12288 (eight); 16392 the two-pass 16-byte kernel; 1100, 90 and 1 the
// scalar one.
TEST_F(KernelTest, GatedActivationsFp8) {
  for (const bool gelu : {false, true}) {
    for (const auto& [T, I] : {std::pair{13, 176}, {7, 90}, {3, 3328}, {2, 6144}, {2, 12288},
                               {2, 16392}, {17, 1100}, {1, 1}}) {
      SCOPED_TRACE(::testing::Message() << (gelu ? "GeGLU" : "SwiGLU") << " T=" << T << " I=" << I);
      std::vector<float> gate_up = rng_.Bf16Values(static_cast<size_t>(T) * 2 * I, 6.0f);
      std::fill(gate_up.begin(), gate_up.begin() + 2 * I, 0.0f);
      std::vector<float> ref(static_cast<size_t>(T) * I);
      for (int t = 0; t < T; ++t) {
        const float* g = gate_up.data() + static_cast<size_t>(t) * 2 * I;
        float* r = ref.data() + static_cast<size_t>(t) * I;
        gelu ? cpu::GeGlu(g, g + I, I, r) : cpu::SwiGlu(g, g + I, I, r);
      }
      DeviceArray<bf16> d_in(ToBf16(gate_up));
      DeviceArray<fp8> d_q(ref.size());
      DeviceArray<float> d_scale(T);
      d_q.Poison();
      d_scale.Poison();
      RANKD_EXPECT_CUDA_OK(
          gelu ? kernels::LaunchGeGluFp8(d_in.get(), T, I, d_q.get(), d_scale.get(), nullptr)
               : kernels::LaunchSwiGluFp8(d_in.get(), T, I, d_q.get(), d_scale.get(), nullptr));
      Sync();
      const Fp8Rows got = DownloadFp8(d_q, d_scale);
      EXPECT_EQ(got.scale[0], 1.0f) << "zero row";
      ExpectFp8RowsMatch(got, ref, T, I);
    }
  }
}

// The row quantiser (attention output, weights at load): bf16 in, so the host quantises exactly
// the kernel's inputs and every code and scale must match. Row 0 is zero (scale 1).
TEST_F(KernelTest, QuantizeRowsFp8) {
  for (const auto& [rows, cols] :
       {std::pair{37, 1000}, {17, 1100}, {3, 3328}, {2, 1024}, {5, 90}, {1, 1}, {300, 72}}) {
    SCOPED_TRACE(::testing::Message() << "rows=" << rows << " cols=" << cols);
    std::vector<float> x = rng_.Bf16Values(static_cast<size_t>(rows) * cols, 3.0f);
    std::fill(x.begin(), x.begin() + cols, 0.0f);
    DeviceArray<bf16> d_x(ToBf16(x));
    DeviceArray<fp8> d_q(x.size());
    DeviceArray<float> d_scale(rows);
    d_q.Poison();
    d_scale.Poison();
    RANKD_EXPECT_CUDA_OK(
        kernels::LaunchQuantizeRowsFp8(d_x.get(), rows, cols, d_q.get(), d_scale.get(), nullptr));
    Sync();
    const Fp8Rows got = DownloadFp8(d_q, d_scale);
    const Fp8Rows want = test_util::QuantizeRows(x, rows, cols);
    EXPECT_EQ(got.scale, want.scale);
    size_t differ = 0, first = 0;
    for (size_t i = 0; i < got.q.size(); ++i) {
      if (got.q[i] != want.q[i] && differ++ == 0) first = i;
    }
    EXPECT_EQ(differ, 0u) << "codes differ, first at row " << first / cols << " col "
                          << first % cols << ": got 0x" << std::hex << int{got.q[first]}
                          << ", want 0x" << int{want.q[first]} << std::dec << " (x = " << x[first]
                          << ", scale " << want.scale[first / cols] << ")";
    ExpectFp8RowsMatch(got, x, rows, cols);
  }
}

struct QkvCase {
  int T, Nq, Nkv, D;
  bool bias, qk_norm;
  model::RopeType rope;
};

// In place on the fused buffer, rows past the live count untouched; k and v of the live rows also
// into layer 1 of a two-layer cache.
TEST_F(KernelTest, QkvBiasNormRopeInPlace) {
  const QkvCase cases[] = {
      {23, 6, 2, 16, false, false, model::RopeType::kDefault},
      {9, 4, 1, 48, true, false, model::RopeType::kDefault},   // Qwen2-style biases, MQA
      {17, 3, 1, 48, false, true, model::RopeType::kDefault},  // Qwen3-style q/k norm
      {5, 8, 8, 64, true, true, model::RopeType::kLinear},
      {31, 16, 2, 128, false, false, model::RopeType::kLlama3},
      {3, 2, 1, 256, false, true, model::RopeType::kDefault},
      {2, 1, 1, 16, true, false, model::RopeType::kDefault},
  };
  for (const QkvCase& c : cases) {
    SCOPED_TRACE(::testing::Message() << "T=" << c.T << " Nq=" << c.Nq << " Nkv=" << c.Nkv << " D="
                                      << c.D << " bias=" << c.bias << " qk_norm=" << c.qk_norm);
    const int Q = c.Nq * c.D, KV = c.Nkv * c.D, W = Q + 2 * KV;
    const int live = c.T > 2 ? c.T - 2 : c.T;
    model::RopeConfig rope;
    rope.type = c.rope;
    rope.theta = 500000.0;
    rope.factor = 8.0;
    rope.original_max_position_embeddings = 64;
    const std::vector<float> inv_freq = model::RopeInverseFrequencies(rope, c.D);
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
        d_kn(ToBf16(k_norm)), d_cache(static_cast<size_t>(2) * 2 * c.T * KV);
    DeviceArray<int32_t> d_pos(positions), d_live(std::vector<int32_t>{live});
    DeviceArray<float> d_inv(inv_freq);
    DeviceArray<float2> d_rot(static_cast<size_t>(c.T) * c.D / 2);
    d_cache.Poison();
    d_rot.Poison();
    kernels::KvLayers cache;
    cache.k = d_cache.get();
    cache.v = d_cache.get() + static_cast<size_t>(c.T) * KV;
    cache.layer_stride = static_cast<int64_t>(2) * c.T * KV;
    cache.row_stride = KV;
    DeviceArray<kernels::KvLayers> d_kv_out(std::vector<kernels::KvLayers>{cache});
    RANKD_EXPECT_CUDA_OK(
        kernels::LaunchRopeRotations(d_pos.get(), d_inv.get(), c.T, c.D / 2, d_rot.get(), nullptr));
    kernels::QkvRopeParams p;
    p.qkv = d_qkv.get();
    p.bias = c.bias ? d_bias.get() : nullptr;
    p.q_norm = c.qk_norm ? d_qn.get() : nullptr;
    p.k_norm = c.qk_norm ? d_kn.get() : nullptr;
    p.rotations = d_rot.get();
    p.num_rows = d_live.get();
    p.kv_out = d_kv_out.get();
    p.layer = 1;
    p.num_tokens = c.T;
    p.num_q_heads = c.Nq;
    p.num_kv_heads = c.Nkv;
    p.head_dim = c.D;
    p.eps = eps;
    RANKD_EXPECT_CUDA_OK(kernels::LaunchQkvRope(p, nullptr));
    Sync();
    const std::vector<float> got = FromBf16(d_qkv.Download());
    const std::vector<float> got_cache = FromBf16(d_cache.Download());
    std::vector<float> gq, gk, gv, rq, rk, rv, ck, cv;
    for (int t = 0; t < live; ++t) {
      const float* row = got.data() + static_cast<size_t>(t) * W;
      gq.insert(gq.end(), row, row + Q);
      gk.insert(gk.end(), row + Q, row + Q + KV);
      gv.insert(gv.end(), row + Q + KV, row + W);
      rq.insert(rq.end(), q.begin() + static_cast<size_t>(t) * Q, q.begin() + (t + 1) * Q);
      rk.insert(rk.end(), k.begin() + static_cast<size_t>(t) * KV, k.begin() + (t + 1) * KV);
      rv.insert(rv.end(), v.begin() + static_cast<size_t>(t) * KV, v.begin() + (t + 1) * KV);
      const float* kc = got_cache.data() + cache.layer_stride + static_cast<size_t>(t) * KV;
      ck.insert(ck.end(), kc, kc + KV);
      cv.insert(cv.end(), kc + static_cast<size_t>(c.T) * KV,
                kc + static_cast<size_t>(c.T) * KV + KV);
    }
    EXPECT_LT(RelNormError(gq, rq), kOneRounding) << "q";
    EXPECT_LT(RelNormError(gk, rk), kOneRounding) << "k";
    EXPECT_LT(RelNormError(gv, rv), kOneRounding) << "v";
    EXPECT_EQ(ck, gk) << "cached k = roped k";
    EXPECT_EQ(cv, gv) << "cached v = v";
    for (size_t e = static_cast<size_t>(live) * W; e < got.size(); ++e) {
      ASSERT_EQ(got[e], qkv[e]) << "row " << e / W << " is past the live rows";
    }

    // Every live row's every column of `now` against want(column, index), bit for bit.
    auto expect_live = [&](const std::vector<float>& now, auto want, const char* what) {
      for (int t = 0; t < live; ++t) {
        for (int e = 0; e < W; ++e) {
          const size_t i = static_cast<size_t>(t) * W + e;
          ASSERT_EQ(now[i], want(e, i)) << "row " << t << " column " << e << ", " << what;
        }
      }
    };

    // A score pass: no cache to fill (null k). Same q and k; v heads are rewritten only with a
    // bias, and left bitwise alone without one.
    d_qkv.Upload(ToBf16(qkv));
    d_kv_out.Upload(std::vector<kernels::KvLayers>{kernels::KvLayers{}});
    RANKD_EXPECT_CUDA_OK(kernels::LaunchQkvRope(p, nullptr));
    Sync();
    const std::vector<float> got2 = FromBf16(d_qkv.Download());
    expect_live(
        got2, [&](int e, size_t i) { return e < Q + KV || c.bias ? got[i] : qkv[i]; },
        "no cache (v rewritten only with a bias)");

    // skip_q (attention rotates q): the q columns are left bitwise alone, k is rotated to the
    // same bits, v as before; refused with a bias or a q/k norm.
    d_qkv.Upload(ToBf16(qkv));
    p.skip_q = true;
    if (c.bias || c.qk_norm) {
      EXPECT_EQ(kernels::LaunchQkvRope(p, nullptr), cudaErrorInvalidValue);
      continue;
    }
    RANKD_EXPECT_CUDA_OK(kernels::LaunchQkvRope(p, nullptr));
    Sync();
    expect_live(
        FromBf16(d_qkv.Download()), [&](int e, size_t i) { return e < Q ? qkv[i] : got2[i]; },
        "skip_q");
  }
}

TEST_F(KernelTest, RopeRotations) {
  const int T = 37, half = 40;
  std::vector<int32_t> positions(T);
  for (int32_t& p : positions) p = rng_.Int(0, 100000);
  const std::vector<float> inv_freq = rng_.Floats(half, 1.0f);
  DeviceArray<int32_t> d_pos(positions);
  DeviceArray<float> d_inv(inv_freq);
  DeviceArray<float2> d_rot(static_cast<size_t>(T) * half);
  d_rot.Poison();
  RANKD_EXPECT_CUDA_OK(
      kernels::LaunchRopeRotations(d_pos.get(), d_inv.get(), T, half, d_rot.get(), nullptr));
  Sync();
  const std::vector<float2> got = d_rot.Download();
  double worst = 0;
  for (int t = 0; t < T; ++t) {
    for (int i = 0; i < half; ++i) {
      const double angle = static_cast<double>(static_cast<float>(positions[t]) * inv_freq[i]);
      const float2 r = got[static_cast<size_t>(t) * half + i];
      worst = std::max({worst, std::abs(r.x - std::cos(angle)), std::abs(r.y - std::sin(angle))});
    }
  }
  EXPECT_LT(worst, 1e-5);
}

// One row (classifier, logit) or two (yes_no); plain, or Gemma 2's (1 + w) final norm and final
// soft-cap (on each logit before the difference).
TEST_F(KernelTest, ScoreHeadBothKinds) {
  struct Gemma {
    float offset, softcap;
  };
  for (const auto& [T, H, N, rows] :
       {std::tuple{19, 64, 7, 1}, {19, 96, 7, 2}, {40, 1000, 3, 2}, {1, 8, 1, 1}}) {
    for (const auto& [direct, gemma] : {std::pair{false, Gemma{0, 0}},
                                        {true, Gemma{0, 0}},
                                        {false, Gemma{1, 8}},
                                        {true, Gemma{1, 0.5f}}}) {
      SCOPED_TRACE(::testing::Message() << "T=" << T << " H=" << H << " N=" << N << " rows=" << rows
                                        << " direct=" << direct << " offset=" << gemma.offset
                                        << " softcap=" << gemma.softcap);
      const std::vector<float> x = rng_.Floats(static_cast<size_t>(T) * H, 3.0f);
      const std::vector<float> norm = rng_.Bf16Values(H, 2.0f);
      std::vector<float> norm_eff = norm;
      for (float& v : norm_eff) v += gemma.offset;
      const std::vector<float> head = rng_.Bf16Values(static_cast<size_t>(rows) * H, 1.0f);
      std::vector<int32_t> last(N + 3);  // 3 slots past the live items
      for (int i = 0; i < N + 3; ++i) last[i] = direct ? i : rng_.Int(0, T - 1);
      const float eps = 1e-6f;
      std::vector<float> ref(N), normed(H);
      for (int i = 0; i < N; ++i) {
        cpu::RmsNorm(x.data() + static_cast<size_t>(last[i]) * H, norm_eff.data(), eps, 1, H,
                     normed.data());
        ref[i] = cpu::SoftCap(cpu::Dot(head.data(), normed.data(), H), gemma.softcap);
        if (rows == 2) {
          ref[i] -= cpu::SoftCap(cpu::Dot(head.data() + H, normed.data(), H), gemma.softcap);
        }
      }
      DeviceArray<float> d_x(x), d_scores(N + 3);
      DeviceArray<int32_t> d_last(last), d_n(std::vector<int32_t>{N});
      DeviceArray<bf16> d_norm(ToBf16(norm)), d_head(ToBf16(head));
      d_scores.Poison();
      RANKD_EXPECT_CUDA_OK(kernels::LaunchScoreHead(
          d_x.get(), direct ? nullptr : d_last.get(), d_n.get(), N + 3, d_norm.get(), gemma.offset,
          d_head.get(), rows, gemma.softcap, eps, H, d_scores.get(), nullptr));
      Sync();
      std::vector<float> got = d_scores.Download();
      for (int i = N; i < N + 3; ++i) EXPECT_TRUE(std::isnan(got[i])) << "slot " << i << " written";
      got.resize(N);
      EXPECT_LT(RelNormError(got, ref), kFp32);
    }
  }
}

TEST_F(KernelTest, GatherRows) {
  const int rows = 29, width = 36;  // 144-byte rows of floats
  const std::vector<float> in = rng_.Floats(static_cast<size_t>(rows) * width, 2.0f);
  std::vector<int32_t> index(11);
  for (int32_t& r : index) r = rng_.Int(0, rows - 1);
  const int live = 8;
  DeviceArray<float> d_in(in), d_out(index.size() * width);
  DeviceArray<int32_t> d_index(index), d_live(std::vector<int32_t>{live});
  d_out.Poison();
  RANKD_EXPECT_CUDA_OK(kernels::LaunchGatherRows(d_in.get(), d_index.get(), d_live.get(),
                                                 static_cast<int>(index.size()),
                                                 width * sizeof(float), d_out.get(), nullptr));
  Sync();
  const std::vector<float> got = d_out.Download();
  for (size_t i = 0; i < index.size(); ++i) {
    for (int j = 0; j < width; ++j) {
      const float want = static_cast<int>(i) < live ? in[index[i] * width + j] : 0.0f;
      ASSERT_EQ(got[i * width + j], want) << "row " << i << " col " << j;
    }
  }
  EXPECT_EQ(kernels::LaunchGatherRows(d_in.get(), d_index.get(), d_live.get(), 1, 12, d_out.get(),
                                      nullptr),
            cudaErrorInvalidValue);
}

// A batch for the attention kernel: runs of segments, each run attending to a context that is
// either a separate prefix cache (IBPC) or the own rows of an earlier run (multi-item). q/k/v live
// in one fused [T, Q + 2KV] buffer, as the backend keeps them; caches hold 2 layers and the
// kernel runs layer 1.
struct AttentionCase {
  int Nq, Nkv, D;
  std::vector<int> cache_rows;         // P of each separate cache
  std::vector<int> ctx;                // per run: -1 none, c >= 0 cache c, -2 - r own run r
  std::vector<std::vector<int>> lens;  // per run: segment lengths
  int blocks = 0;                      // 0: the resident grid
  bool rope = false;  // q and k get RoPE first; q also as attention loads it (q_rotations),
                      // which must give the same bits as QkvRope's rotation
  float scale = 0;    // softmax scale; 0: 1/sqrt(D)
  float softcap = 0;  // Gemma 2's attention logit soft-capping; 0: off
  int window = 0;     // sliding window; 0: off
};

void CheckAttention(const AttentionCase& c, Rng& rng) {
  constexpr int kLayers = 2, kLayer = 1;
  const int Q = c.Nq * c.D, KV = c.Nkv * c.D, W = Q + 2 * KV, G = c.Nq / c.Nkv;
  const cpu::AttentionScoring scoring{c.scale > 0 ? c.scale : 1.0f / std::sqrt(float(c.D)),
                                      c.softcap, c.window};
  std::vector<kernels::AttentionRun> runs;
  std::vector<int32_t> seg_start;
  int T = 0;
  for (size_t r = 0; r < c.lens.size(); ++r) {
    kernels::AttentionRun run;
    run.begin = T;
    for (int len : c.lens[r]) {
      for (int t = 0; t < len; ++t) seg_start.push_back(T);
      T += len;
    }
    run.end = T;
    runs.push_back(run);
  }
  std::vector<float> wide = rng.Bf16Values(static_cast<size_t>(T) * W, 2.0f);
  DeviceArray<bf16> d_wide(ToBf16(wide)), d_raw_q(ToBf16(wide));
  DeviceArray<float2> d_rot(static_cast<size_t>(T) * c.D / 2);
  if (c.rope) {
    // d_wide: q and k rotated by QkvRope; d_raw_q: only k (skip_q), q left for attention.
    std::vector<int32_t> positions(T);
    for (int32_t& pos : positions) pos = rng.Int(0, 5000);
    DeviceArray<int32_t> d_pos(positions), d_live(std::vector<int32_t>{T});
    DeviceArray<float> d_inv(model::RopeInverseFrequencies(model::RopeConfig{}, c.D));
    RANKD_EXPECT_CUDA_OK(
        kernels::LaunchRopeRotations(d_pos.get(), d_inv.get(), T, c.D / 2, d_rot.get(), nullptr));
    kernels::QkvRopeParams r;
    r.rotations = d_rot.get();
    r.num_rows = d_live.get();
    r.num_tokens = T;
    r.num_q_heads = c.Nq;
    r.num_kv_heads = c.Nkv;
    r.head_dim = c.D;
    r.qkv = d_wide.get();
    RANKD_EXPECT_CUDA_OK(kernels::LaunchQkvRope(r, nullptr));
    r.qkv = d_raw_q.get();
    r.skip_q = true;
    RANKD_EXPECT_CUDA_OK(kernels::LaunchQkvRope(r, nullptr));
    RANKD_EXPECT_CUDA_OK(cudaDeviceSynchronize());
    wide = FromBf16(d_wide.Download());  // the reference sees the rotated q and k
  }
  std::vector<std::vector<float>> caches;
  std::vector<std::unique_ptr<DeviceArray<bf16>>> d_caches;
  for (int P : c.cache_rows) {
    caches.push_back(rng.Bf16Values(static_cast<size_t>(kLayers) * 2 * P * KV, 1.5f));
    d_caches.push_back(std::make_unique<DeviceArray<bf16>>(ToBf16(caches.back())));
  }
  const kernels::KvLayers own{d_wide.get() + Q, d_wide.get() + Q + KV, 0, W};
  // Contexts: one table entry per run that has one.
  std::vector<kernels::KvLayers> contexts;
  std::vector<std::vector<float>> ctx_k(runs.size()), ctx_v(runs.size());
  for (size_t r = 0; r < runs.size(); ++r) {
    const int src = c.ctx[r];
    if (src == -1) continue;
    kernels::KvLayers kv;
    if (src >= 0) {
      const int P = c.cache_rows[src];
      const int64_t layer = static_cast<int64_t>(2) * P * KV;
      bf16* base = d_caches[src]->get();
      kv = {base, base + static_cast<int64_t>(P) * KV, layer, KV};
      runs[r].ctx_len = P;
      const auto& h = caches[src];
      ctx_k[r].assign(h.begin() + kLayer * layer, h.begin() + kLayer * layer + P * KV);
      ctx_v[r].assign(h.begin() + kLayer * layer + P * KV, h.begin() + (kLayer + 1) * layer);
    } else {
      const auto& o = runs[-2 - src];
      kv = {own.k + static_cast<int64_t>(o.begin) * W, own.v + static_cast<int64_t>(o.begin) * W, 0,
            W};
      runs[r].ctx_len = o.end - o.begin;
      for (int t = o.begin; t < o.end; ++t) {
        const float* row = wide.data() + static_cast<size_t>(t) * W;
        ctx_k[r].insert(ctx_k[r].end(), row + Q, row + Q + KV);
        ctx_v[r].insert(ctx_v[r].end(), row + Q + KV, row + W);
      }
    }
    runs[r].ctx = static_cast<int32_t>(contexts.size());
    contexts.push_back(kv);
  }
  // Reference, segment by segment.
  std::vector<float> ref(static_cast<size_t>(T) * Q);
  for (size_t r = 0; r < runs.size(); ++r) {
    int begin = runs[r].begin;
    for (int len : c.lens[r]) {
      std::vector<float> q, k, v, out(static_cast<size_t>(len) * Q);
      for (int t = begin; t < begin + len; ++t) {
        const float* row = wide.data() + static_cast<size_t>(t) * W;
        q.insert(q.end(), row, row + Q);
        k.insert(k.end(), row + Q, row + Q + KV);
        v.insert(v.end(), row + Q + KV, row + W);
      }
      cpu::PrefixAttention(q.data(), ctx_k[r].data(), ctx_v[r].data(), runs[r].ctx_len, k.data(),
                           v.data(), len, c.Nq, c.Nkv, c.D, scoring, out.data());
      std::copy(out.begin(), out.end(), ref.begin() + static_cast<size_t>(begin) * Q);
      begin += len;
    }
  }
  std::vector<kernels::AttentionTile> tiles(
      kernels::MaxAttentionTiles(T, static_cast<int>(runs.size()), G));
  const int num_tiles = kernels::FillAttentionTiles(runs.data(), static_cast<int>(runs.size()),
                                                    seg_start.data(), G, tiles.data());
  tiles.resize(num_tiles);
  int tile_rows = 0;
  for (int i = 0; i < num_tiles; ++i) {
    const kernels::AttentionTile& t = tiles[i];
    if (i > 0) {
      ASSERT_GE(tiles[i - 1].num_keys, t.num_keys) << "tiles are not in decreasing cost order";
    }
    // The precomputed keys: the context, then own rows from the first token's segment start to
    // the last token.
    const int first = t.begin + t.row0 / G;
    const int last = t.begin + (std::min(t.rows, t.row0 + kernels::kAttentionTileRows) - 1) / G;
    ASSERT_EQ(t.own_lo, seg_start[first]);
    ASSERT_EQ(t.num_keys, t.ctx_len + last - seg_start[first] + 1);
    tile_rows += std::min(kernels::kAttentionTileRows, t.rows - t.row0);
  }
  ASSERT_EQ(tile_rows, T * G) << "every query row in exactly one tile";
  DeviceArray<kernels::KvLayers> d_ctx(contexts.empty() ? std::vector<kernels::KvLayers>(1)
                                                        : contexts);
  DeviceArray<int32_t> d_seg(seg_start), d_units(std::vector<int32_t>{num_tiles * c.Nkv}),
      d_counter(std::vector<int32_t>{0});
  DeviceArray<kernels::AttentionTile> d_tiles(tiles);
  DeviceArray<bf16> d_out(ref.size());
  d_out.Poison();
  kernels::PrefixAttentionParams p;
  p.q = d_wide.get();
  p.q_row_stride = W;
  p.own = own;
  p.contexts = d_ctx.get();
  p.seg_start = d_seg.get();
  p.tiles = d_tiles.get();
  p.num_units = d_units.get();
  p.unit_counter = d_counter.get();
  p.layer = kLayer;
  p.num_q_heads = c.Nq;
  p.num_kv_heads = c.Nkv;
  p.head_dim = c.D;
  p.scale = scoring.scale;
  p.softcap = scoring.softcap;
  p.window = scoring.window;
  p.blocks = c.blocks > 0 ? c.blocks : kernels::PrefixAttentionBlocks(c.D);
  p.out = d_out.get();
  ASSERT_GT(p.blocks, 0);
  RANKD_EXPECT_CUDA_OK(kernels::LaunchPrefixAttention(p, nullptr));
  RANKD_EXPECT_CUDA_OK(cudaDeviceSynchronize());
  const std::vector<float> got = FromBf16(d_out.Download());
  EXPECT_LT(RelNormError(got, ref), kAttention);
  if (c.rope) {
    // Unrotated q, rotated as it is loaded: the same bits as attention over QkvRope's q. (k and v
    // of d_raw_q equal d_wide's bit for bit, so K/V keep coming from d_wide.)
    p.q = d_raw_q.get();
    p.q_rotations = d_rot.get();
    d_counter.Upload(std::vector<int32_t>{0});
    d_out.Poison();
    RANKD_EXPECT_CUDA_OK(kernels::LaunchPrefixAttention(p, nullptr));
    RANKD_EXPECT_CUDA_OK(cudaDeviceSynchronize());
    EXPECT_EQ(FromBf16(d_out.Download()), got) << "q rotated in attention";
  }
}

// IBPC: every run's context is a separate prefix cache (several requests, each its own prefix).
TEST_F(KernelTest, PrefixAttentionSeparateContexts) {
  const AttentionCase cases[] = {
      {4, 4, 16, {6}, {0}, {{27, 1, 39}}},
      {6, 2, 16, {}, {-1}, {{5, 70, 1}}},  // no context (prefix encoding)
      {4, 2, 32, {131}, {0}, {{47, 60}}},
      {3, 1, 48, {9}, {0}, {{1, 2, 3, 100}}},  // MQA, head_dim 48
      {16, 16, 64, {50, 17, 3}, {0, 1, 2}, {{150, 3}, {1, 1, 1, 90}, {64}}},
      {8, 1, 80, {13}, {0}, {{65}}},
      {12, 4, 96, {64, 1}, {1, 0}, {{64, 63}, {2}}},
      {8, 2, 128, {77}, {0}, {{130, 17, 1}}},
  };
  for (const AttentionCase& c : cases) {
    SCOPED_TRACE(::testing::Message()
                 << "Nq=" << c.Nq << " Nkv=" << c.Nkv << " D=" << c.D << " runs=" << c.lens.size());
    CheckAttention(c, rng_);
  }
}

// Multi-item: per request a run for its prefix (no context), then a run of its items over the
// prefix's own rows; no item sees another, nor another request.
TEST_F(KernelTest, PrefixAttentionPackedMultiItem) {
  const AttentionCase cases[] = {
      {6, 2, 16, {}, {-1, -2}, {{11}, {20, 1, 33}}},
      {4, 1, 64, {}, {-1, -2, -1, -4}, {{70}, {9, 80}, {5}, {1, 1, 2}}},
  };
  for (const AttentionCase& c : cases) {
    SCOPED_TRACE(::testing::Message() << "Nq=" << c.Nq << " Nkv=" << c.Nkv << " D=" << c.D);
    CheckAttention(c, rng_);
  }
}

// RoPE of q as attention loads it equals QkvRope's, bit for bit, for every head_dim and grouping.
TEST_F(KernelTest, PrefixAttentionRotatesQ) {
  const AttentionCase cases[] = {
      {4, 4, 16, {6}, {0}, {{27, 1, 39}}, 0, true},
      {4, 2, 32, {}, {-1, -2}, {{31}, {20, 1, 33}}, 0, true},
      {3, 1, 48, {9}, {0}, {{1, 2, 3, 100}}, 0, true},
      {16, 16, 64, {}, {-1, -2}, {{50}, {150, 150, 3}}, 0, true},
      {8, 1, 80, {13}, {0}, {{65}}, 0, true},
      {12, 4, 96, {64}, {0}, {{64, 63}}, 0, true},
      {6, 2, 112, {}, {-1}, {{40, 7}}, 0, true},
      {8, 2, 128, {77}, {0}, {{130, 17, 1}}, 0, true},
  };
  for (const AttentionCase& c : cases) {
    SCOPED_TRACE(::testing::Message() << "Nq=" << c.Nq << " Nkv=" << c.Nkv << " D=" << c.D);
    CheckAttention(c, rng_);
  }
}

// Hundreds of one-token items (embedding items) share tiles; a tiny grid drains the whole queue.
TEST_F(KernelTest, PrefixAttentionOneTokenItemsAndSmallGrids) {
  AttentionCase c{16, 16, 64, {50}, {0}, {std::vector<int>(250, 1)}};
  CheckAttention(c, rng_);
  for (const int blocks : {1, 3}) {
    SCOPED_TRACE(::testing::Message() << "blocks=" << blocks);
    AttentionCase small{8, 2, 64, {21}, {0}, {{1, 40, 1, 1, 77, 2}}, blocks};
    CheckAttention(small, rng_);
  }
}

// Gemma 2 / Mistral: soft-capped scores with query_pre_attn_scalar's scale, and sliding windows
// narrower than the context and the segments (keys of the prefix cache, of the multi-item
// prefix's rows and of the item itself fall out of the window), in both strategies' layouts.
TEST_F(KernelTest, PrefixAttentionSoftCapScaleAndSlidingWindow) {
  struct Variant {
    float scale, softcap;
    int window;
  };
  const AttentionCase layouts[] = {
      {4, 2, 32, {131}, {0}, {{47, 60, 1}}},                            // IBPC, one cache
      {4, 2, 32, {40, 3}, {0, 1}, {{70, 2}, {25}}},                     // IBPC, two requests
      {4, 1, 16, {}, {-1}, {{100, 1, 30}}},                             // prefix encoding
      {6, 2, 64, {}, {-1, -2}, {{70}, {9, 80, 1}}},                     // multi-item
      {4, 2, 32, {}, {-1, -2, -1, -4}, {{23}, {30, 2}, {5}, {64, 1}}},  // multi-item, two requests
      {8, 8, 128, {77}, {0}, {std::vector<int>(90, 1)}},                // one-token items
  };
  const Variant variants[] = {
      {1.0f / std::sqrt(24.0f), 4.0f, 24},  // gemma2-tiny's layer 0
      {1.0f / std::sqrt(24.0f), 4.0f, 0},   // its full-attention layer
      {0, 0, 20},                           // Mistral: window alone
      {0, 0, 1},                            // each token sees itself only
      {0, 50.0f, 5000},                     // a window wider than everything
  };
  for (const AttentionCase& layout : layouts) {
    for (const Variant& v : variants) {
      AttentionCase c = layout;
      c.scale = v.scale;
      c.softcap = v.softcap;
      c.window = v.window;
      SCOPED_TRACE(::testing::Message()
                   << "Nq=" << c.Nq << " Nkv=" << c.Nkv << " D=" << c.D << " runs=" << c.lens.size()
                   << " softcap=" << c.softcap << " window=" << c.window);
      CheckAttention(c, rng_);
    }
  }
  AttentionCase roped{4, 2, 32, {}, {-1, -2}, {{31}, {20, 1, 33}}, 0, true};
  roped.softcap = 4.0f;
  roped.window = 8;
  CheckAttention(roped, rng_);
}

TEST_F(KernelTest, UnsupportedShapesAreRejected) {
  kernels::PrefixAttentionParams p;
  p.scale = 0.125f;
  p.blocks = 1;
  p.num_q_heads = 4;
  p.num_kv_heads = 4;
  p.head_dim = 40;
  EXPECT_EQ(kernels::LaunchPrefixAttention(p, nullptr), cudaErrorInvalidValue);
  p.head_dim = 64;
  p.num_kv_heads = 3;  // 4 query heads do not group over 3
  EXPECT_EQ(kernels::LaunchPrefixAttention(p, nullptr), cudaErrorInvalidValue);
  p.num_kv_heads = 4;
  p.blocks = 0;
  EXPECT_EQ(kernels::LaunchPrefixAttention(p, nullptr), cudaErrorInvalidValue);
  p.blocks = 1;
  p.scale = 0;  // the scale is the caller's to give
  EXPECT_EQ(kernels::LaunchPrefixAttention(p, nullptr), cudaErrorInvalidValue);
  p.scale = 0.125f;
  p.window = -1;
  EXPECT_EQ(kernels::LaunchPrefixAttention(p, nullptr), cudaErrorInvalidValue);
  kernels::QkvRopeParams r;
  r.num_tokens = 1;
  r.num_q_heads = r.num_kv_heads = 1;
  for (const int d : {258, 40, 2}) {
    r.head_dim = d;
    EXPECT_EQ(kernels::LaunchQkvRope(r, nullptr), cudaErrorInvalidValue) << "head_dim " << d;
  }
  EXPECT_EQ(kernels::LaunchScoreHead(nullptr, nullptr, nullptr, 1, nullptr, 0.0f, nullptr, 3, 0.0f,
                                     1e-6f, 8, nullptr, nullptr),
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

// Random e4m3 codes (no NaN) and positive scales around `scale`: an fp8 matrix as the kernels
// write them.
Fp8Rows RandomFp8(Rng& rng, int rows, int cols, float scale) {
  Fp8Rows m{std::vector<uint8_t>(static_cast<size_t>(rows) * cols), std::vector<float>(rows)};
  for (uint8_t& q : m.q) {
    do q = static_cast<uint8_t>(rng.Int(0, 255));
    while ((q & 0x7f) == 0x7f);
  }
  for (float& s : m.scale) s = scale * (0.5f + rng.Int(0, 1000) / 1000.0f);
  return m;
}

struct DeviceFp8 {
  explicit DeviceFp8(const Fp8Rows& m) : q(m.q.size()), scale(m.scale) {
    EXPECT_EQ(cudaMemcpy(q.get(), m.q.data(), m.q.size(), cudaMemcpyHostToDevice), cudaSuccess);
  }
  Fp8Matrix get() const { return Fp8Matrix{q.get(), scale.get()}; }
  DeviceArray<fp8> q;
  DeviceArray<float> scale;
};

// The worst element of got vs ref, for failure messages.
std::string WorstElement(const std::vector<float>& got, const std::vector<float>& ref, int cols) {
  size_t worst = 0;
  double err = -1;
  for (size_t i = 0; i < got.size(); ++i) {
    const double e = std::isfinite(got[i]) ? std::abs(got[i] - ref[i]) : INFINITY;
    if (e > err) {
      err = e;
      worst = i;
    }
  }
  return (::testing::Message() << "worst at row " << worst / cols << " col " << worst % cols
                               << ": got " << got[worst] << ", ref " << ref[worst] << " (|err| "
                               << err << ")")
      .GetString();
}

// The fp8 GEMM against the CPU GEMM on the dequantised operands: the same numbers, only the
// summation differs (Hopper's fp8 MMA adds with fewer than fp32's bits between cuBLASLt's fp32
// promotions, hence 1e-3 rather than kFp32 for the fp32 output; bf16 output: one rounding).
// in and out multiples of 16, as cuBLASLt's fp8 kernels need (every model's widths are).
TEST_F(KernelTest, GemmFp8MatchesCpuOnDequantisedOperands) {
  constexpr double kFp8Accumulate = 1e-3;
  DeviceArray<char> workspace(32 << 20);
  auto gemm = Gemm::Create(workspace.get(), workspace.size());
  ASSERT_TRUE(gemm.ok()) << gemm.status();
  for (const auto& [T, in, out] : {std::tuple{1, 64, 16},
                                   {37, 1024, 1104},
                                   {13, 1008, 96},
                                   {300, 3328, 1024},
                                   {129, 1024, 3328},
                                   {7, 64, 176}}) {
    SCOPED_TRACE(::testing::Message() << "T=" << T << " in=" << in << " out=" << out);
    const Fp8Rows x = RandomFp8(rng_, T, in, 0.01f), w = RandomFp8(rng_, out, in, 0.002f);
    const std::vector<float> xd = test_util::Dequantize(x, in), wd = test_util::Dequantize(w, in);
    const std::vector<float> y0 = rng_.Floats(static_cast<size_t>(T) * out, 1.0f);
    std::vector<float> ref(static_cast<size_t>(T) * out);
    cpu::Linear(xd.data(), wd.data(), nullptr, T, in, out, ref.data());
    const DeviceFp8 d_x(x), d_w(w);

    DeviceArray<bf16> d_y(ref.size());
    d_y.Poison();
    const absl::Status s1 =
        (*gemm)->LinearFp8(d_x.get(), d_w.get(), T, in, out, d_y.get(), nullptr);
    ASSERT_TRUE(s1.ok()) << s1;
    Sync();
    const std::vector<float> got = FromBf16(d_y.Download());
    EXPECT_LT(RelNormError(got, ref), kOneRounding)
        << "bf16 output; " << WorstElement(got, ref, out);

    DeviceArray<float> d_acc(y0);
    const absl::Status s2 =
        (*gemm)->LinearAccumulateFp8(d_x.get(), d_w.get(), T, in, out, d_acc.get(), nullptr);
    ASSERT_TRUE(s2.ok()) << s2;
    Sync();
    std::vector<float> ref_acc = y0;
    cpu::AddInPlace(ref_acc.data(), ref.data(), static_cast<int64_t>(ref.size()));
    const std::vector<float> got_acc = d_acc.Download();
    EXPECT_LT(RelNormError(got_acc, ref_acc), kFp8Accumulate)
        << "fp32 accumulate; " << WorstElement(got_acc, ref_acc, out);
  }
  // An fp8 operand without scales is refused.
  DeviceArray<fp8> q(64 * 64);
  DeviceArray<bf16> y(64 * 64);
  EXPECT_EQ((*gemm)
                ->LinearFp8(Fp8Matrix{q.get(), nullptr}, Fp8Matrix{q.get(), nullptr}, 64, 64, 64,
                            y.get(), nullptr)
                .code(),
            absl::StatusCode::kInvalidArgument);
}

// The whole fp8 recipe on bf16 operands (x per token, w per output channel, both by the row
// quantiser) against the bf16 GEMM: e4m3's 3 mantissa bits round each operand by about 2.5% (RMS,
// relative), so the products differ by about 3.5%; bound 6%.
TEST_F(KernelTest, GemmFp8CloseToBf16Gemm) {
  constexpr double kFp8VsBf16 = 6e-2;
  DeviceArray<char> workspace(32 << 20);
  auto gemm = Gemm::Create(workspace.get(), workspace.size());
  ASSERT_TRUE(gemm.ok()) << gemm.status();
  for (const auto& [T, in, out] :
       {std::tuple{37, 1024, 1104}, {300, 3328, 1024}, {15, 1024, 6656}}) {
    SCOPED_TRACE(::testing::Message() << "T=" << T << " in=" << in << " out=" << out);
    const std::vector<float> x = rng_.Bf16Values(static_cast<size_t>(T) * in, 2.0f);
    const std::vector<float> w = rng_.Bf16Values(static_cast<size_t>(out) * in, 0.05f);
    DeviceArray<bf16> d_x(ToBf16(x)), d_w(ToBf16(w)), d_ref(static_cast<size_t>(T) * out),
        d_y(static_cast<size_t>(T) * out);
    DeviceArray<fp8> d_xq(x.size()), d_wq(w.size());
    DeviceArray<float> d_xs(T), d_ws(out);
    RANKD_EXPECT_CUDA_OK(
        kernels::LaunchQuantizeRowsFp8(d_x.get(), T, in, d_xq.get(), d_xs.get(), nullptr));
    RANKD_EXPECT_CUDA_OK(
        kernels::LaunchQuantizeRowsFp8(d_w.get(), out, in, d_wq.get(), d_ws.get(), nullptr));
    ASSERT_TRUE((*gemm)->Linear(d_x.get(), d_w.get(), T, in, out, d_ref.get(), nullptr).ok());
    d_y.Poison();
    const absl::Status s =
        (*gemm)->LinearFp8(Fp8Matrix{d_xq.get(), d_xs.get()}, Fp8Matrix{d_wq.get(), d_ws.get()}, T,
                           in, out, d_y.get(), nullptr);
    ASSERT_TRUE(s.ok()) << s;
    Sync();
    const std::vector<float> got = FromBf16(d_y.Download()), ref = FromBf16(d_ref.Download());
    const double err = RelNormError(got, ref);
    EXPECT_LT(err, kFp8VsBf16) << WorstElement(got, ref, out);
    std::printf("[stats] fp8 vs bf16 GEMM T=%d in=%d out=%d: rel_norm_err=%.4f\n", T, in, out, err);
  }
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
