// RMSNorm. Thread mapping: one warp per row (8 rows per 256-thread block). When dim is a multiple
// of 128 up to kMaxRegDim, the row stays in registers: lane l holds the float4s l + 32 j of the row
// for j < N = dim / 128 (N is a template parameter, so a launch holds exactly the registers its
// dim needs and 1024-wide rows leave room for 5 blocks a multiprocessor). Each of the N loads is a
// coalesced 512-byte warp access, all issued before the reduction; the sum of squares is a warp
// reduction; each float4 becomes 4 bf16 (one 8-byte weight load, one 8-byte store). Other dims
// stride over the row one column per lane and read it twice (the second read hits L1).
#include <type_traits>
#include <utility>

#include "kernels/common.cuh"
#include "kernels/rms_norm.cuh"

namespace rankd::kernels {
namespace {

constexpr int kWarpsPerBlock = 8;
constexpr int kThreads = kWarpsPerBlock * kWarpSize;
constexpr int kMaxChunks = 16;  // float4s a lane keeps in registers: rows up to 2048 floats

template <int N>
__global__ void __launch_bounds__(kThreads)
    RmsNormRegistersKernel(const float* __restrict__ x, const __nv_bfloat16* __restrict__ w,
                           float offset, float eps, int rows, __nv_bfloat16* __restrict__ out) {
  constexpr int kDim = N * 4 * kWarpSize;
  const int r = blockIdx.x * kWarpsPerBlock + threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  if (r >= rows) return;  // whole warps
  const float4* row = reinterpret_cast<const float4*>(x + static_cast<int64_t>(r) * kDim);
  float4 v[N];
#pragma unroll
  for (int j = 0; j < N; ++j) v[j] = row[lane + kWarpSize * j];
  float ss = 0.0f;
#pragma unroll
  for (int j = 0; j < N; ++j)
    ss += v[j].x * v[j].x + v[j].y * v[j].y + v[j].z * v[j].z + v[j].w * v[j].w;
  const float inv = rsqrtf(WarpSum(ss) / static_cast<float>(kDim) + eps);
  const uint2* wv = reinterpret_cast<const uint2*>(w);
  uint2* orow = reinterpret_cast<uint2*>(out + static_cast<int64_t>(r) * kDim);
#pragma unroll
  for (int j = 0; j < N; ++j) {
    const uint2 wr = wv[lane + kWarpSize * j];
    float2 w01 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&wr.x));
    float2 w23 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&wr.y));
    w01.x += offset;
    w01.y += offset;
    w23.x += offset;
    w23.y += offset;
    const __nv_bfloat162 o01 = __floats2bfloat162_rn(v[j].x * inv * w01.x, v[j].y * inv * w01.y);
    const __nv_bfloat162 o23 = __floats2bfloat162_rn(v[j].z * inv * w23.x, v[j].w * inv * w23.y);
    uint2 o;
    o.x = *reinterpret_cast<const uint32_t*>(&o01);
    o.y = *reinterpret_cast<const uint32_t*>(&o23);
    orow[lane + kWarpSize * j] = o;
  }
}

__global__ void __launch_bounds__(kThreads)
    RmsNormStridedKernel(const float* __restrict__ x, const __nv_bfloat16* __restrict__ w,
                         float offset, float eps, int rows, int dim,
                         __nv_bfloat16* __restrict__ out) {
  const int r = blockIdx.x * kWarpsPerBlock + threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  if (r >= rows) return;  // whole warps
  const float* row = x + static_cast<int64_t>(r) * dim;
  __nv_bfloat16* orow = out + static_cast<int64_t>(r) * dim;
  float ss = 0.0f;
  for (int i = lane; i < dim; i += kWarpSize) ss += row[i] * row[i];
  const float inv = rsqrtf(WarpSum(ss) / static_cast<float>(dim) + eps);
  for (int i = lane; i < dim; i += kWarpSize) {
    orow[i] = __float2bfloat16(row[i] * inv * (offset + __bfloat162float(w[i])));
  }
}

// One warp per row, striding; the row is read twice (the second read hits L1).
__global__ void __launch_bounds__(kThreads)
    RmsNormAddKernel(const __nv_bfloat16* __restrict__ y, const __nv_bfloat16* __restrict__ w,
                     float offset, float eps, int rows, int dim, float* __restrict__ x) {
  const int r = blockIdx.x * kWarpsPerBlock + threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  if (r >= rows) return;  // whole warps
  const __nv_bfloat16* row = y + static_cast<int64_t>(r) * dim;
  float* xrow = x + static_cast<int64_t>(r) * dim;
  float ss = 0.0f;
  for (int i = lane; i < dim; i += kWarpSize) {
    const float v = __bfloat162float(row[i]);
    ss += v * v;
  }
  const float inv = rsqrtf(WarpSum(ss) / static_cast<float>(dim) + eps);
  for (int i = lane; i < dim; i += kWarpSize) {
    const float n = __bfloat162float(row[i]) * inv * (offset + __bfloat162float(w[i]));
    xrow[i] += __bfloat162float(__float2bfloat16(n));
  }
}

template <int... Ns>
cudaError_t LaunchRegisters(int n, const float* x, const __nv_bfloat16* w, float offset, float eps,
                            int rows, __nv_bfloat16* out, cudaStream_t stream,
                            std::integer_sequence<int, Ns...>) {
  const unsigned blocks = static_cast<unsigned>(CeilDiv(rows, kWarpsPerBlock));
  bool launched = false;
  // Exactly one N + 1 equals n.
  ((n == Ns + 1 ? (RmsNormRegistersKernel<Ns + 1>
                   <<<blocks, kThreads, 0, stream>>>(x, w, offset, eps, rows, out),
                   launched = true)
                : false),
   ...);
  return launched ? cudaGetLastError() : cudaErrorInvalidValue;
}

}  // namespace

cudaError_t LaunchRmsNorm(const float* x, const __nv_bfloat16* w, float weight_offset, float eps,
                          int rows, int dim, __nv_bfloat16* out, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  constexpr int kChunk = 4 * kWarpSize;  // floats a warp covers with one float4 each
  if (dim % kChunk == 0 && dim / kChunk <= kMaxChunks) {
    return LaunchRegisters(dim / kChunk, x, w, weight_offset, eps, rows, out, stream,
                           std::make_integer_sequence<int, kMaxChunks>{});
  }
  RmsNormStridedKernel<<<CeilDiv(rows, kWarpsPerBlock), kThreads, 0, stream>>>(x, w, weight_offset,
                                                                               eps, rows, dim, out);
  return cudaGetLastError();
}

cudaError_t LaunchRmsNormAdd(const __nv_bfloat16* y, const __nv_bfloat16* w, float weight_offset,
                             float eps, int rows, int dim, float* x, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  RmsNormAddKernel<<<CeilDiv(rows, kWarpsPerBlock), kThreads, 0, stream>>>(y, w, weight_offset, eps,
                                                                           rows, dim, x);
  return cudaGetLastError();
}

}  // namespace rankd::kernels
