// The kernel tests of the embedding gather (kernels/embedding.cu) (kernel_test.h says how they
// check).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <tuple>
#include <vector>

#include "kernels/embedding.cuh"
#include "rankd/backend/cpu/ops.h"
#include "tests/backend/cuda/kernel_test.h"

namespace rankd::cuda::kernel_test {
namespace {

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

}  // namespace
}  // namespace rankd::cuda::kernel_test
