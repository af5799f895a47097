// RMSNorm. Thread mapping: one warp per row (8 rows per 256-thread block). When dim is a multiple
// of 128 up to kMaxRegDim, lane l holds float4s 4 (l + 32 j) of the row in registers (coalesced
// 512-byte warp loads), so the row is read once; the sum of squares is a warp reduction; each
// float4 becomes 4 bf16 (one 8-byte store). Other dims stride over the row one column per lane
// and read it twice (the second read hits L1).
#include "kernels/common.cuh"
#include "kernels/rms_norm.cuh"

namespace rankd::kernels {
namespace {

constexpr int kWarpsPerBlock = 8;
constexpr int kMaxVecPerLane = 8;  // float4s a lane keeps: rows up to kMaxRegDim
constexpr int kMaxRegDim = kMaxVecPerLane * 4 * kWarpSize;

__global__ void __launch_bounds__(kWarpsPerBlock* kWarpSize)
    RmsNormKernel(const float* __restrict__ x, const __nv_bfloat16* __restrict__ w, float eps,
                  int rows, int dim, __nv_bfloat16* __restrict__ out) {
  const int r = blockIdx.x * kWarpsPerBlock + threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  if (r >= rows) return;  // whole warps
  const float* row = x + static_cast<int64_t>(r) * dim;
  __nv_bfloat16* orow = out + static_cast<int64_t>(r) * dim;
  if (dim % (4 * kWarpSize) == 0 && dim <= kMaxRegDim) {
    const int n = dim / (4 * kWarpSize);
    float4 v[kMaxVecPerLane];
    float ss = 0.0f;
#pragma unroll
    for (int k = 0; k < kMaxVecPerLane; ++k) {
      if (k < n) {
        v[k] = *reinterpret_cast<const float4*>(row + 4 * (lane + kWarpSize * k));
        ss += v[k].x * v[k].x + v[k].y * v[k].y + v[k].z * v[k].z + v[k].w * v[k].w;
      }
    }
    const float inv = rsqrtf(WarpSum(ss) / static_cast<float>(dim) + eps);
#pragma unroll
    for (int k = 0; k < kMaxVecPerLane; ++k) {
      if (k < n) {
        const int i = 4 * (lane + kWarpSize * k);
        const uint2 wv = *reinterpret_cast<const uint2*>(w + i);
        const float2 w01 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&wv.x));
        const float2 w23 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&wv.y));
        uint2 o;
        *reinterpret_cast<__nv_bfloat162*>(&o.x) =
            __floats2bfloat162_rn(v[k].x * inv * w01.x, v[k].y * inv * w01.y);
        *reinterpret_cast<__nv_bfloat162*>(&o.y) =
            __floats2bfloat162_rn(v[k].z * inv * w23.x, v[k].w * inv * w23.y);
        *reinterpret_cast<uint2*>(orow + i) = o;
      }
    }
    return;
  }
  float ss = 0.0f;
  for (int i = lane; i < dim; i += kWarpSize) ss += row[i] * row[i];
  const float inv = rsqrtf(WarpSum(ss) / static_cast<float>(dim) + eps);
  for (int i = lane; i < dim; i += kWarpSize) {
    orow[i] = __float2bfloat16(row[i] * inv * __bfloat162float(w[i]));
  }
}

}  // namespace

cudaError_t LaunchRmsNorm(const float* x, const __nv_bfloat16* w, float eps, int rows, int dim,
                          __nv_bfloat16* out, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  RmsNormKernel<<<CeilDiv(rows, kWarpsPerBlock), kWarpsPerBlock * kWarpSize, 0, stream>>>(
      x, w, eps, rows, dim, out);
  return cudaGetLastError();
}

}  // namespace rankd::kernels
