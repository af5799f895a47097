// The kernel tests of the row quantiser to e4m3 (kernels/quantize_fp8.cu) (kernel_test.h says how
// they check).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <tuple>
#include <vector>

#include "kernels/quantize_fp8.cuh"
#include "rankd/backend/cpu/ops.h"
#include "tests/backend/cuda/kernel_test.h"

namespace rankd::cuda::kernel_test {
namespace {

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

// Per row and group of 64 columns: every code and scale as the host quantising each group as a
// row of its own ([rows, cols] is [rows cols / 64, 64]); groups 16x apart, row 0 zero. Columns
// that are not whole groups are refused.
TEST_F(KernelTest, QuantizeGroupsFp8) {
  constexpr int G = kernels::kFp8Group;
  for (const auto& [rows, cols] : {std::pair{37, 1024}, {3, 3328}, {1, 64}, {300, 192}, {0, 128}}) {
    SCOPED_TRACE(::testing::Message() << "rows=" << rows << " cols=" << cols);
    std::vector<float> x = rng_.Bf16Values(static_cast<size_t>(rows) * cols, 3.0f);
    for (size_t i = 0; i < x.size(); ++i) {
      if (i / G % 3 == 1) x[i] *= 16.0f;
    }
    std::fill(x.begin(), x.begin() + std::min<size_t>(cols, x.size()), 0.0f);
    const int groups = rows * (cols / G);
    DeviceArray<bf16> d_x(ToBf16(x));
    DeviceArray<fp8> d_q(std::max<size_t>(x.size(), 1));
    DeviceArray<float> d_scale(std::max(groups, 1));
    d_q.Poison();
    d_scale.Poison();
    RANKD_EXPECT_CUDA_OK(
        kernels::LaunchQuantizeGroupsFp8(d_x.get(), rows, cols, d_q.get(), d_scale.get(), nullptr));
    Sync();
    if (rows == 0) continue;
    const Fp8Rows got = DownloadFp8(d_q, d_scale);
    const Fp8Rows want = test_util::QuantizeRows(x, groups, G);
    EXPECT_EQ(got.scale, want.scale);
    EXPECT_EQ(got.q, want.q);
  }
  DeviceArray<bf16> x(128);
  DeviceArray<fp8> q(128);
  DeviceArray<float> s(2);
  EXPECT_EQ(kernels::LaunchQuantizeGroupsFp8(x.get(), 1, 96, q.get(), s.get(), nullptr),
            cudaErrorInvalidValue)
      << "96 columns: not whole groups";
}

}  // namespace
}  // namespace rankd::cuda::kernel_test
