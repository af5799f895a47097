// RMSNorm. Thread mapping: one warp per row (8 rows per 256-thread block). When dim is a multiple
// of 256 up to kMaxRegDim, lane l holds the 8 consecutive floats 8 (l + 32 j) .. + 7 of the row in
// registers for j < dim / 256 (two 16-byte loads each, all issued before the reduction; coalesced
// 1 KB warp loads), so the row is read once; the sum of squares is a warp reduction; each 8 floats
// become 8 bf16 (one 16-byte store, with one 16-byte load of the weights). Multiples of 128 take 4
// floats at a time the same way (8-byte stores). Other dims stride over the row one column per
// lane and read it twice (the second read hits L1).
#include <type_traits>

#include "kernels/common.cuh"
#include "kernels/rms_norm.cuh"

namespace rankd::kernels {
namespace {

constexpr int kWarpsPerBlock = 8;
constexpr int kMaxRegDim = 2048;  // floats a warp keeps in registers: 64 per lane

// The row in registers, kVec = 4 or 8 consecutive floats a lane at a time (one or two 16-byte
// loads, all issued before the reduction), kVec bf16 out in one store (8 or 16 bytes).
template <int kVec>
__device__ __forceinline__ void NormRowInRegisters(const float* row, const __nv_bfloat16* w,
                                                   float eps, int dim, int lane,
                                                   __nv_bfloat16* orow) {
  constexpr int kHalves = kVec / 4;  // float4s per chunk
  constexpr int kMaxChunks = kMaxRegDim / (kVec * kWarpSize);
  using WeightVec = std::conditional_t<kVec == 8, uint4, uint2>;
  const int n = dim / (kVec * kWarpSize);
  float4 v[kMaxChunks][kHalves];
#pragma unroll
  for (int k = 0; k < kMaxChunks; ++k) {
    if (k < n) {
      const float4* src = reinterpret_cast<const float4*>(row + kVec * (lane + kWarpSize * k));
#pragma unroll
      for (int h = 0; h < kHalves; ++h) v[k][h] = src[h];
    }
  }
  float ss = 0.0f;
#pragma unroll
  for (int k = 0; k < kMaxChunks; ++k) {
    if (k < n) {
#pragma unroll
      for (int h = 0; h < kHalves; ++h) {
        ss += v[k][h].x * v[k][h].x + v[k][h].y * v[k][h].y + v[k][h].z * v[k][h].z +
              v[k][h].w * v[k][h].w;
      }
    }
  }
  const float inv = rsqrtf(WarpSum(ss) / static_cast<float>(dim) + eps);
#pragma unroll
  for (int k = 0; k < kMaxChunks; ++k) {
    if (k < n) {
      const int i = kVec * (lane + kWarpSize * k);
      const WeightVec wv = *reinterpret_cast<const WeightVec*>(w + i);
      const __nv_bfloat162* wh = reinterpret_cast<const __nv_bfloat162*>(&wv);
      WeightVec o;
      __nv_bfloat162* oh = reinterpret_cast<__nv_bfloat162*>(&o);
#pragma unroll
      for (int h = 0; h < kHalves; ++h) {
        const float2 w01 = __bfloat1622float2(wh[2 * h]);
        const float2 w23 = __bfloat1622float2(wh[2 * h + 1]);
        oh[2 * h] = __floats2bfloat162_rn(v[k][h].x * inv * w01.x, v[k][h].y * inv * w01.y);
        oh[2 * h + 1] = __floats2bfloat162_rn(v[k][h].z * inv * w23.x, v[k][h].w * inv * w23.y);
      }
      *reinterpret_cast<WeightVec*>(orow + i) = o;
    }
  }
}

__global__ void __launch_bounds__(kWarpsPerBlock* kWarpSize)
    RmsNormKernel(const float* __restrict__ x, const __nv_bfloat16* __restrict__ w, float eps,
                  int rows, int dim, __nv_bfloat16* __restrict__ out) {
  const int r = blockIdx.x * kWarpsPerBlock + threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  if (r >= rows) return;  // whole warps
  const float* row = x + static_cast<int64_t>(r) * dim;
  __nv_bfloat16* orow = out + static_cast<int64_t>(r) * dim;
  if (dim <= kMaxRegDim && dim % (8 * kWarpSize) == 0) {
    NormRowInRegisters<8>(row, w, eps, dim, lane, orow);
    return;
  }
  if (dim <= kMaxRegDim && dim % (4 * kWarpSize) == 0) {
    NormRowInRegisters<4>(row, w, eps, dim, lane, orow);
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
