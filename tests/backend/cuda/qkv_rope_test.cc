// The kernel tests of q/k/v bias, norm and RoPE in place, and the RoPE rotations
// (kernels/qkv_rope.cu) (kernel_test.h says how they check).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <tuple>
#include <vector>

#include "kernels/qkv_rope.cuh"
#include "rankd/backend/cpu/ops.h"
#include "rankd/model/rope.h"
#include "tests/backend/cuda/kernel_test.h"

namespace rankd::cuda::kernel_test {
namespace {

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
    // bias, and left bitwise alone without one. Likewise with no cache entry at all (kv_out null:
    // the launch leaves the v heads out without a bias).
    d_qkv.Upload(ToBf16(qkv));
    d_kv_out.Upload(std::vector<kernels::KvLayers>{kernels::KvLayers{}});
    RANKD_EXPECT_CUDA_OK(kernels::LaunchQkvRope(p, nullptr));
    Sync();
    const std::vector<float> got2 = FromBf16(d_qkv.Download());
    expect_live(
        got2, [&](int e, size_t i) { return e < Q + KV || c.bias ? got[i] : qkv[i]; },
        "no cache (v rewritten only with a bias)");
    d_qkv.Upload(ToBf16(qkv));
    p.kv_out = nullptr;
    RANKD_EXPECT_CUDA_OK(kernels::LaunchQkvRope(p, nullptr));
    Sync();
    expect_live(
        FromBf16(d_qkv.Download()), [&](int e, size_t i) { return got2[i]; },
        "no cache entry (v rewritten only with a bias)");

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

}  // namespace
}  // namespace rankd::cuda::kernel_test
