// The kernel tests of the row gather (kernels/gather_rows.cu) (kernel_test.h says how they check).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <tuple>
#include <vector>

#include "kernels/gather_rows.cuh"
#include "tests/backend/cuda/kernel_test.h"

namespace rankd::cuda::kernel_test {
namespace {

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

}  // namespace
}  // namespace rankd::cuda::kernel_test
