// The kernel tests of the gated activations, SwiGLU and GeGLU, bf16 and fp8 (kernels/swiglu.cu)
// (kernel_test.h says how they check).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <tuple>
#include <vector>

#include "kernels/hopper_gemm.cuh"
#include "kernels/swiglu.cuh"
#include "rankd/backend/cpu/ops.h"
#include "tests/backend/cuda/kernel_test.h"

namespace rankd::cuda::kernel_test {
namespace {

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

}  // namespace
}  // namespace rankd::cuda::kernel_test
