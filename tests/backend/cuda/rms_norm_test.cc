// The kernel tests of RMSNorm, its fp8 variant and the fused residual add (kernels/rms_norm.cu)
// (kernel_test.h says how they check).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <tuple>
#include <vector>

#include "kernels/rms_norm.cuh"
#include "rankd/backend/cpu/ops.h"
#include "tests/backend/cuda/kernel_test.h"

namespace rankd::cuda::kernel_test {
namespace {

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

// Quantised per row and group of 64 columns (the Hopper GEMM's grouped X): the CPU norm's
// groups quantised as rows of their own ([rows, dim] is [rows dim / 64, 64]), a zero row; dims
// the registers kernel does not take are refused.
TEST_F(KernelTest, RmsNormFp8Groups) {
  for (const auto& [rows, dim] : {std::pair{37, 1024}, {17, 128}, {6, 2048}, {4, 1152}}) {
    SCOPED_TRACE(::testing::Message() << "rows=" << rows << " dim=" << dim);
    std::vector<float> x = rng_.Floats(static_cast<size_t>(rows) * dim, 4.0f);
    for (size_t i = 0; i < x.size(); ++i) {
      if (i / 64 % 3 == 2) x[i] *= 16.0f;
    }
    std::fill(x.begin(), x.begin() + dim, 0.0f);
    const std::vector<float> w = rng_.Bf16Values(dim, 2.0f);
    const float eps = 1e-5f;
    std::vector<float> ref(x.size());
    cpu::RmsNorm(x.data(), w.data(), eps, rows, dim, ref.data());
    const int groups = rows * (dim / 64);
    DeviceArray<float> d_x(x), d_scale(groups);
    DeviceArray<bf16> d_w(ToBf16(w));
    DeviceArray<fp8> d_q(x.size());
    d_q.Poison();
    d_scale.Poison();
    RANKD_EXPECT_CUDA_OK(kernels::LaunchRmsNormFp8Groups(d_x.get(), d_w.get(), 0.0f, eps, rows, dim,
                                                         d_q.get(), d_scale.get(), nullptr));
    Sync();
    const Fp8Rows got = DownloadFp8(d_q, d_scale);
    EXPECT_EQ(got.scale[0], 1.0f) << "zero row";
    ExpectFp8RowsMatch(got, ref, groups, 64);
  }
  DeviceArray<float> x(1000), s(16);
  DeviceArray<bf16> w(1000);
  DeviceArray<fp8> q(1000);
  EXPECT_EQ(kernels::LaunchRmsNormFp8Groups(x.get(), w.get(), 0.0f, 1e-5f, 1, 1000, q.get(),
                                            s.get(), nullptr),
            cudaErrorInvalidValue)
      << "dim 1000";
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

}  // namespace
}  // namespace rankd::cuda::kernel_test
