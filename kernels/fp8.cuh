// fp8 e4m3 quantisation of GEMM inputs, shared by the kernels that write them (RMSNorm, SwiGLU,
// the row quantiser): a row's scale from its largest magnitude, and the saturating conversion.
// A quantised row r holds q[r, :] with x[r, :] ~= q[r, :] * scale[r]. Device-only.
#ifndef RANKD_KERNELS_FP8_CUH_
#define RANKD_KERNELS_FP8_CUH_

#include <cuda_fp8.h>

#include <cstdint>

namespace rankd::kernels {

inline constexpr float kE4m3Max = 448.0f;  // the largest finite e4m3 value

// scale = amax / 448, so that the row's largest element maps to 448; an all-zero row (padding)
// gets 1, so that it stays zero and finite.
__device__ __forceinline__ float Fp8Scale(float amax) {
  return amax > 0.0f ? __fdiv_rn(amax, kE4m3Max) : 1.0f;
}

// e4m3(v / scale), rounded to nearest even, saturated to +-448.
__device__ __forceinline__ __nv_fp8_storage_t ToE4m3(float v, float scale) {
  return __nv_cvt_float_to_fp8(__fdiv_rn(v, scale), __NV_SATFINITE, __NV_E4M3);
}

// e4m3(a * inv_scale) and e4m3(b * inv_scale) as the 2 bytes they occupy (a at the lower
// address), in one conversion (cvt.rn.satfinite.e4m3x2.f32); inv_scale = 1 / scale computed once
// per row: a multiply where ToE4m3 divides (the kernels that quantise from registers, where the
// division was most of the work). It can pick the adjacent code where v / scale lies within an
// fp32 ulp of a rounding boundary.
__device__ __forceinline__ uint16_t ToE4m3x2Inv(float a, float b, float inv_scale) {
  return __nv_cvt_float2_to_fp8x2(make_float2(__fmul_rn(a, inv_scale), __fmul_rn(b, inv_scale)),
                                  __NV_SATFINITE, __NV_E4M3);
}

// Four consecutive elements as the 4 bytes they occupy in memory (a, b, c, d at rising addresses).
__device__ __forceinline__ uint32_t ToE4m3x4(float a, float b, float c, float d, float scale) {
  return static_cast<uint32_t>(ToE4m3(a, scale)) | static_cast<uint32_t>(ToE4m3(b, scale)) << 8 |
         static_cast<uint32_t>(ToE4m3(c, scale)) << 16 |
         static_cast<uint32_t>(ToE4m3(d, scale)) << 24;
}

// ToE4m3x4 with the row's reciprocal scale (ToE4m3x2Inv), two conversions of two.
__device__ __forceinline__ uint32_t ToE4m3x4Inv(float a, float b, float c, float d,
                                                float inv_scale) {
  return static_cast<uint32_t>(ToE4m3x2Inv(a, b, inv_scale)) |
         static_cast<uint32_t>(ToE4m3x2Inv(c, d, inv_scale)) << 16;
}

}  // namespace rankd::kernels

#endif  // RANKD_KERNELS_FP8_CUH_
