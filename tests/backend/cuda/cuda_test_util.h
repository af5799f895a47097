// Helpers for the GPU tests: device detection (tests skip without a device), device buffers,
// bf16 rounding, poisoning and the relative-norm error of METHOD.md.
#ifndef RANKD_TESTS_BACKEND_CUDA_CUDA_TEST_UTIL_H_
#define RANKD_TESTS_BACKEND_CUDA_CUDA_TEST_UTIL_H_

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
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

// The fp8 row quantisation of kernels/fp8.cuh on the host (cuda_fp8.h converts on the host too):
// scale[r] = max |x[r, :]| / 448 (1 for a zero row), q = e4m3(x / scale), nearest even, saturated.
struct Fp8Rows {
  std::vector<uint8_t> q;    // [rows, cols]
  std::vector<float> scale;  // [rows]
};
inline Fp8Rows QuantizeRows(const std::vector<float>& x, int rows, int cols) {
  Fp8Rows out{std::vector<uint8_t>(x.size()), std::vector<float>(rows)};
  for (int r = 0; r < rows; ++r) {
    const float* row = x.data() + static_cast<size_t>(r) * cols;
    float amax = 0;
    for (int c = 0; c < cols; ++c) amax = std::max(amax, std::abs(row[c]));
    const float s = amax > 0 ? amax / 448.0f : 1.0f;
    out.scale[r] = s;
    for (int c = 0; c < cols; ++c) {
      out.q[static_cast<size_t>(r) * cols + c] =
          __nv_cvt_float_to_fp8(row[c] / s, __NV_SATFINITE, __NV_E4M3);
    }
  }
  return out;
}
// q[r, c] * scale[r] in fp32.
inline std::vector<float> Dequantize(const Fp8Rows& x, int cols) {
  std::vector<float> out(x.q.size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = model::F8E4M3ToF32(x.q[i]) * x.scale[i / cols];
  return out;
}

// A kernel's fp8 rows against the host quantisation of the fp32 values `ref` [rows, cols] that the
// kernel quantised (computed by the CPU reference, so up to a few ulps off the kernel's own):
// scales within 1e-5 relative; codes equal except where a value sits within those ulps of a
// rounding boundary (at most 0.1% of them, plus 2), and those one code apart; the dequantised
// rows within e4m3's rounding of `ref` (||deq - ref|| / ||ref|| < 0.04: 3 mantissa bits round
// uniform values by about 0.025 relative). Failures print the worst element and the counts.
inline void ExpectFp8RowsMatch(const Fp8Rows& got, const std::vector<float>& ref, int rows,
                               int cols) {
  const Fp8Rows want = QuantizeRows(ref, rows, cols);
  double worst_scale = 0;
  int worst_scale_row = -1;
  for (int r = 0; r < rows; ++r) {
    const double e = std::abs(got.scale[r] - want.scale[r]) / want.scale[r];
    if (!(e <= worst_scale)) {
      worst_scale = std::isfinite(e) ? e : INFINITY;
      worst_scale_row = r;
    }
  }
  EXPECT_LE(worst_scale, 1e-5) << "scale of row " << worst_scale_row << ": got "
                               << got.scale[std::max(0, worst_scale_row)] << ", want "
                               << want.scale[std::max(0, worst_scale_row)];
  size_t mismatched = 0, far = 0, first_far = 0;
  for (size_t i = 0; i < got.q.size(); ++i) {
    if (got.q[i] == want.q[i]) continue;
    ++mismatched;
    // Adjacent codes of one sign differ by one in their bit patterns (e4m3 is sign-magnitude).
    const bool adjacent = (got.q[i] & 0x80) == (want.q[i] & 0x80) &&
                          std::abs(int{got.q[i] & 0x7f} - int{want.q[i] & 0x7f}) == 1;
    if (!adjacent && far++ == 0) first_far = i;
  }
  EXPECT_LE(mismatched, got.q.size() / 1000 + 2)
      << mismatched << " of " << got.q.size() << " codes differ from the host quantisation";
  EXPECT_EQ(far, 0u) << "codes more than one step apart, first at row " << first_far / cols
                     << " col " << first_far % cols << ": got 0x" << std::hex
                     << int{got.q[first_far]} << ", want 0x" << int{want.q[first_far]} << std::dec
                     << " (value " << ref[first_far] << ")";
  EXPECT_LT(RelNormError(Dequantize(got, cols), ref), 0.04) << "dequantised rows vs fp32";
}

}  // namespace rankd::cuda::test_util

#endif  // RANKD_TESTS_BACKEND_CUDA_CUDA_TEST_UTIL_H_
