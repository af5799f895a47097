// The kernel tests of the score heads (kernels/score_head.cu) (kernel_test.h says how they check).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <tuple>
#include <vector>

#include "kernels/score_head.cuh"
#include "rankd/backend/cpu/ops.h"
#include "tests/backend/cuda/kernel_test.h"

namespace rankd::cuda::kernel_test {
namespace {

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

}  // namespace
}  // namespace rankd::cuda::kernel_test
