// What the CUDA kernel tests share (tests/backend/cuda/*_test.cc of each kernel, one
// cuda_kernels_test binary): every kernel against the float32 CPU reference ops of
// rankd/backend/cpu/ops.h, on fresh random inputs of odd shapes. Inputs are rounded to bf16 first,
// so the reference sees exactly the GPU's inputs; outputs are poisoned (NaN) before each launch.
// Thresholds are on ||gpu - cpu|| / ||cpu||: bf16 outputs round each element by up to 2^-9
// relative (about 1e-3 in norm), so 5e-3 for one rounding, 1e-2 for attention (probabilities
// are rounded to bf16 before P.V as well); fp32 outputs get 1e-4 (summation order only).
#ifndef RANKD_TESTS_BACKEND_CUDA_KERNEL_TEST_H_
#define RANKD_TESTS_BACKEND_CUDA_KERNEL_TEST_H_

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tests/backend/cuda/cuda_test_util.h"

namespace rankd::cuda::kernel_test {

using bf16 = __nv_bfloat16;
using fp8 = __nv_fp8_e4m3;
using test_util::DeviceArray;
using test_util::ExpectFp8RowsMatch;
using test_util::Fp8Rows;
using test_util::FromBf16;
using test_util::RelNormError;
using test_util::Rng;
using test_util::ToBf16;

inline constexpr double kOneRounding = 5e-3;
inline constexpr double kAttention = 1e-2;
inline constexpr double kFp32 = 1e-4;

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

// A kernel's fp8 output (codes and per-row scales) from the device.
inline Fp8Rows DownloadFp8(const DeviceArray<fp8>& q, const DeviceArray<float>& scale) {
  Fp8Rows out{std::vector<uint8_t>(q.size()), scale.Download()};
  EXPECT_EQ(cudaMemcpy(out.q.data(), q.get(), q.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  return out;
}

}  // namespace rankd::cuda::kernel_test

#endif  // RANKD_TESTS_BACKEND_CUDA_KERNEL_TEST_H_
