// n / d and n % d for 0 <= n < 2^31 and a divisor 1 <= d < 2^31 fixed at launch: a multiply-high
// and a shift instead of the ~20 instructions of a run-time integer division. m = ceil(2^p / d)
// with p = 31 + ceil(log2 d), as CUTLASS's FastDivmod. Built on the host, passed to kernels by
// value; plain C++ outside nvcc, so the host tests check the same arithmetic.
#ifndef RANKD_KERNELS_FAST_DIVMOD_H_
#define RANKD_KERNELS_FAST_DIVMOD_H_

#include <cstdint>

#ifdef __CUDACC__
#define RANKD_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define RANKD_HOST_DEVICE inline
#endif

namespace rankd::kernels {

struct FastDivmod {
  int32_t d = 1;
  uint32_t m = 0;
  uint32_t shift = 0;  // p - 32

  FastDivmod() = default;
  RANKD_HOST_DEVICE explicit FastDivmod(int32_t divisor) : d(divisor) {
    if (d == 1) return;
    uint32_t l = 0;
    while ((uint32_t{1} << l) < static_cast<uint32_t>(d)) ++l;
    const uint64_t two_p = uint64_t{1} << (31 + l);
    m = static_cast<uint32_t>((two_p + static_cast<uint64_t>(d) - 1) / static_cast<uint64_t>(d));
    shift = l - 1;
  }

  RANKD_HOST_DEVICE int32_t Div(int32_t n) const {
    if (d == 1) return n;
#ifdef __CUDA_ARCH__
    return static_cast<int32_t>(__umulhi(static_cast<uint32_t>(n), m) >> shift);
#else
    return static_cast<int32_t>(((static_cast<uint64_t>(n) * m) >> 32) >> shift);
#endif
  }
  // n % d, given q = Div(n).
  RANKD_HOST_DEVICE int32_t Mod(int32_t n, int32_t q) const { return n - q * d; }
};

}  // namespace rankd::kernels

#undef RANKD_HOST_DEVICE

#endif  // RANKD_KERNELS_FAST_DIVMOD_H_
