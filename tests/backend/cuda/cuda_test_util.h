// Helpers for the GPU tests: device detection (tests skip without a device), device buffers,
// bf16 rounding, poisoning and the relative-norm error of METHOD.md.
#ifndef RANKD_TESTS_BACKEND_CUDA_CUDA_TEST_UTIL_H_
#define RANKD_TESTS_BACKEND_CUDA_CUDA_TEST_UTIL_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "rankd/model/safetensors.h"

namespace rankd::cuda::test_util {

inline bool HasCudaDevice() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

#define RANKD_SKIP_WITHOUT_GPU() \
  if (!::rankd::cuda::test_util::HasCudaDevice()) GTEST_SKIP() << "no CUDA device"

#define RANKD_EXPECT_CUDA_OK(expr)                                         \
  do {                                                                     \
    const cudaError_t _e = (expr);                                         \
    ASSERT_EQ(_e, cudaSuccess) << #expr << ": " << cudaGetErrorString(_e); \
  } while (0)

// A device array of T, freed on destruction. Poison() fills it with 0xff bytes: NaN as fp32 and as
// bf16, so an element a kernel forgets to write fails the comparison.
template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t n) : n_(n) {
    EXPECT_EQ(cudaMalloc(&p_, std::max<size_t>(1, n) * sizeof(T)), cudaSuccess);
  }
  explicit DeviceArray(const std::vector<T>& host) : DeviceArray(host.size()) { Upload(host); }
  ~DeviceArray() { cudaFree(p_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  T* get() const { return p_; }
  size_t size() const { return n_; }
  void Upload(const std::vector<T>& host) {
    EXPECT_EQ(host.size(), n_);
    EXPECT_EQ(cudaMemcpy(p_, host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
  std::vector<T> Download() const {
    std::vector<T> host(n_);
    EXPECT_EQ(cudaMemcpy(host.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return host;
  }
  void Poison() { EXPECT_EQ(cudaMemset(p_, 0xff, n_ * sizeof(T)), cudaSuccess); }

 private:
  T* p_ = nullptr;
  size_t n_;
};

inline __nv_bfloat16 ToBf16(float f) {
  __nv_bfloat16_raw raw;
  raw.x = model::F32ToBf16(f);
  return __nv_bfloat16(raw);
}
inline float FromBf16(__nv_bfloat16 b) { return model::Bf16ToF32(__nv_bfloat16_raw(b).x); }
inline std::vector<__nv_bfloat16> ToBf16(const std::vector<float>& v) {
  std::vector<__nv_bfloat16> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = ToBf16(v[i]);
  return out;
}
inline std::vector<float> FromBf16(const std::vector<__nv_bfloat16>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = FromBf16(v[i]);
  return out;
}

// Fresh random inputs each run; the seed goes into every failure message via SCOPED_TRACE.
class Rng {
 public:
  Rng() : seed_(std::random_device{}()), gen_(seed_) {}
  uint32_t seed() const { return seed_; }
  // n values uniform in [-scale, scale], rounded to bf16 so that the CPU reference sees exactly
  // what the GPU sees.
  std::vector<float> Bf16Values(size_t n, float scale) {
    std::uniform_real_distribution<float> d(-scale, scale);
    std::vector<float> v(n);
    for (float& x : v) x = FromBf16(ToBf16(d(gen_)));
    return v;
  }
  std::vector<float> Floats(size_t n, float scale) {
    std::uniform_real_distribution<float> d(-scale, scale);
    std::vector<float> v(n);
    for (float& x : v) x = d(gen_);
    return v;
  }
  int Int(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(gen_); }
  std::mt19937& gen() { return gen_; }

 private:
  uint32_t seed_;
  std::mt19937 gen_;
};

// ||got - ref|| / ||ref||; infinity when any element of `got` is not finite.
inline double RelNormError(const std::vector<float>& got, const std::vector<float>& ref) {
  EXPECT_EQ(got.size(), ref.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size() && i < ref.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    num += (static_cast<double>(got[i]) - ref[i]) * (static_cast<double>(got[i]) - ref[i]);
    den += static_cast<double>(ref[i]) * ref[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

}  // namespace rankd::cuda::test_util

#endif  // RANKD_TESTS_BACKEND_CUDA_CUDA_TEST_UTIL_H_
