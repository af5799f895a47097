// Device helpers shared by the kernels: warp/block reductions (sum, max) and launch-shape
// arithmetic. Device-only code (include from .cu files).
#ifndef RANKD_KERNELS_COMMON_CUH_
#define RANKD_KERNELS_COMMON_CUH_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/fast_divmod.h"

namespace rankd::kernels {

inline constexpr int kWarpSize = 32;

__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int o = kWarpSize / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float WarpMax(float v) {
#pragma unroll
  for (int o = kWarpSize / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over a block of up to 1024 threads (blockDim.x a multiple of 32); every thread gets the
// result. `scratch` holds 32 floats of shared memory; safe to call repeatedly.
__device__ __forceinline__ float BlockSum(float v, float* scratch) {
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int num_warps = blockDim.x / kWarpSize;
  v = WarpSum(v);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < num_warps ? scratch[lane] : 0.0f;
  return WarpSum(v);
}

// Maximum over a block, as BlockSum.
__device__ __forceinline__ float BlockMax(float v, float* scratch) {
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int num_warps = blockDim.x / kWarpSize;
  v = WarpMax(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < num_warps ? scratch[lane] : -INFINITY;
  return WarpMax(v);
}

// RoPE of one (x, y) = (x[i], x[i + D/2]) pair by the angle whose (cos, sin) is (c, s), in fp32
// with the roundings spelled out, so that every kernel that rotates (QkvRope for k, attention for
// q) gets the same bits from the same inputs whatever the compiler would contract.
__device__ __forceinline__ void RotatePair(float& x, float& y, float c, float s) {
  const float nx = __fmaf_rn(x, c, -__fmul_rn(y, s));
  const float ny = __fmaf_rn(y, c, __fmul_rn(x, s));
  x = nx;
  y = ny;
}

inline unsigned CeilDiv(int64_t a, int64_t b) { return static_cast<unsigned>((a + b - 1) / b); }

}  // namespace rankd::kernels

#endif  // RANKD_KERNELS_COMMON_CUH_
