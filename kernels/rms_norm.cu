// RMSNorm. Thread mapping: one warp per row (8 rows per 256-thread block). When dim is a multiple
// of 128 up to kMaxRegDim, the row stays in registers: lane l holds the float4s l + 32 j of the row
// for j < N = dim / 128 (N is a template parameter, so a launch holds exactly the registers its
// dim needs and 1024-wide rows leave room for 5 blocks a multiprocessor). Each of the N loads is a
// coalesced 512-byte warp access, all issued before the reduction; the sum of squares is a warp
// reduction; each float4 becomes 4 bf16 (one 8-byte weight load, one 8-byte store). Other dims
// stride over the row one column per lane and read it twice (the second read hits L1). Each has a
// bf16 and an fp8 output (Out: e4m3 with the row's scale, the largest magnitude a warp reduction).
#include <type_traits>
#include <utility>

#include "kernels/common.cuh"
#include "kernels/fp8.cuh"
#include "kernels/rms_norm.cuh"

namespace rankd::kernels {
namespace {

constexpr int kWarpsPerBlock = 8;
constexpr int kThreads = kWarpsPerBlock * kWarpSize;
constexpr int kMaxChunks = 16;  // float4s a lane keeps in registers: rows up to 2048 floats
static_assert(kNormFoldGroup == 2 * kWarpSize, "LaunchNormFoldInput: a float2 a lane, a group");

// Where a normalised row goes: bf16, or fp8 e4m3 with the row's scale (kernels/fp8.cuh).
struct Bf16Out {
  __nv_bfloat16* out;  // [rows, dim]
};
struct Fp8Out {
  __nv_fp8_storage_t* q;  // [rows, dim]
  float* scale;           // [rows]
};
// Per row and group of 64 columns: a lane's float4 j is columns 4 (lane + 32 j) .., so group 2j
// is lanes 0-15's float4 j and group 2j + 1 lanes 16-31's (the registers kernel only).
struct Fp8GroupOut {
  __nv_fp8_storage_t* q;  // [rows, dim]
  float* scale;           // [rows, dim / 64]
};

template <int N, typename Out>
__global__ void __launch_bounds__(kThreads)
    RmsNormRegistersKernel(const float* __restrict__ x, const __nv_bfloat16* __restrict__ w,
                           float offset, float eps, int rows, Out o) {
  constexpr int kDim = N * 4 * kWarpSize;
  EnterGrid();
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
#pragma unroll
  for (int j = 0; j < N; ++j) {  // v becomes the normalised row
    const uint2 wr = wv[lane + kWarpSize * j];
    float2 w01 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&wr.x));
    float2 w23 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&wr.y));
    v[j].x = v[j].x * inv * (w01.x + offset);
    v[j].y = v[j].y * inv * (w01.y + offset);
    v[j].z = v[j].z * inv * (w23.x + offset);
    v[j].w = v[j].w * inv * (w23.y + offset);
  }
  if constexpr (std::is_same_v<Out, Fp8GroupOut>) {
    uint32_t* qrow = reinterpret_cast<uint32_t*>(o.q + static_cast<int64_t>(r) * kDim);
#pragma unroll
    for (int j = 0; j < N; ++j) {
      float amax = fmaxf(fmaxf(fabsf(v[j].x), fabsf(v[j].y)), fmaxf(fabsf(v[j].z), fabsf(v[j].w)));
#pragma unroll
      for (int m = 1; m < 16; m *= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, m));
      const float s = Fp8Scale(amax);
      if (lane % 16 == 0) o.scale[static_cast<int64_t>(r) * (2 * N) + 2 * j + lane / 16] = s;
      qrow[lane + kWarpSize * j] = ToE4m3x4(v[j].x, v[j].y, v[j].z, v[j].w, s);
    }
  } else if constexpr (std::is_same_v<Out, Fp8Out>) {
    float amax = 0.0f;
#pragma unroll
    for (int j = 0; j < N; ++j) {
      amax = fmaxf(amax,
                   fmaxf(fmaxf(fabsf(v[j].x), fabsf(v[j].y)), fmaxf(fabsf(v[j].z), fabsf(v[j].w))));
    }
    const float s = Fp8Scale(WarpMax(amax));
    if (lane == 0) o.scale[r] = s;
    uint32_t* qrow = reinterpret_cast<uint32_t*>(o.q + static_cast<int64_t>(r) * kDim);
#pragma unroll
    for (int j = 0; j < N; ++j) {
      qrow[lane + kWarpSize * j] = ToE4m3x4(v[j].x, v[j].y, v[j].z, v[j].w, s);
    }
  } else {
    uint2* orow = reinterpret_cast<uint2*>(o.out + static_cast<int64_t>(r) * kDim);
#pragma unroll
    for (int j = 0; j < N; ++j) {
      const __nv_bfloat162 o01 = __floats2bfloat162_rn(v[j].x, v[j].y);
      const __nv_bfloat162 o23 = __floats2bfloat162_rn(v[j].z, v[j].w);
      uint2 packed;
      packed.x = *reinterpret_cast<const uint32_t*>(&o01);
      packed.y = *reinterpret_cast<const uint32_t*>(&o23);
      orow[lane + kWarpSize * j] = packed;
    }
  }
}

// fp8 reads the row a third time (its largest magnitude first).
template <typename Out>
__global__ void __launch_bounds__(kThreads)
    RmsNormStridedKernel(const float* __restrict__ x, const __nv_bfloat16* __restrict__ w,
                         float offset, float eps, int rows, int dim, Out o) {
  EnterGrid();
  const int r = blockIdx.x * kWarpsPerBlock + threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  if (r >= rows) return;  // whole warps
  const float* row = x + static_cast<int64_t>(r) * dim;
  float ss = 0.0f;
  for (int i = lane; i < dim; i += kWarpSize) ss += row[i] * row[i];
  const float inv = rsqrtf(WarpSum(ss) / static_cast<float>(dim) + eps);
  auto normed = [&](int i) { return row[i] * inv * (__bfloat162float(w[i]) + offset); };
  if constexpr (std::is_same_v<Out, Fp8Out>) {
    float amax = 0.0f;
    for (int i = lane; i < dim; i += kWarpSize) amax = fmaxf(amax, fabsf(normed(i)));
    const float s = Fp8Scale(WarpMax(amax));
    if (lane == 0) o.scale[r] = s;
    __nv_fp8_storage_t* qrow = o.q + static_cast<int64_t>(r) * dim;
    for (int i = lane; i < dim; i += kWarpSize) qrow[i] = ToE4m3(normed(i), s);
  } else {
    __nv_bfloat16* orow = o.out + static_cast<int64_t>(r) * dim;
    for (int i = lane; i < dim; i += kWarpSize) orow[i] = __float2bfloat16(normed(i));
  }
}

// One warp per row, striding; the row is read twice (the second read hits L1).
__global__ void __launch_bounds__(kThreads)
    RmsNormAddKernel(const __nv_bfloat16* __restrict__ y, const __nv_bfloat16* __restrict__ w,
                     float offset, float eps, int rows, int dim, float* __restrict__ x) {
  EnterGrid();
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

// One warp per row, a group of 64 columns (a float2 a lane) per step: the bf16 copy, then the
// group's sum of squares by lane 0.
__global__ void __launch_bounds__(kThreads)
    NormFoldInputKernel(const float* __restrict__ x, int rows, int dim,
                        __nv_bfloat16* __restrict__ copy, float* __restrict__ sumsq) {
  EnterGrid();
  const int r = blockIdx.x * kWarpsPerBlock + threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  if (r >= rows) return;  // whole warps
  const int groups = dim / kNormFoldGroup;
  const int64_t at = static_cast<int64_t>(r) * dim + 2 * lane;
  for (int g = 0; g < groups; ++g) {
    const float2 v = *reinterpret_cast<const float2*>(x + at + kNormFoldGroup * g);
    *reinterpret_cast<__nv_bfloat162*>(copy + at + kNormFoldGroup * g) =
        __floats2bfloat162_rn(v.x, v.y);
    const float ss = WarpSum(v.x * v.x + v.y * v.y);
    if (lane == 0) sumsq[static_cast<int64_t>(r) * groups + g] = ss;
  }
}

template <typename Out, int... Ns>
cudaError_t LaunchRegisters(int n, const float* x, const __nv_bfloat16* w, float offset, float eps,
                            int rows, Out out, LaunchStream stream,
                            std::integer_sequence<int, Ns...>) {
  const unsigned blocks = static_cast<unsigned>(CeilDiv(rows, kWarpsPerBlock));
  cudaError_t e = cudaErrorInvalidValue;
  // Exactly one N + 1 equals n.
  ((n == Ns + 1 ? (e = LaunchKernel(RmsNormRegistersKernel<Ns + 1, Out>, blocks, kThreads, 0,
                                    stream, x, w, offset, eps, rows, out),
                   true)
                : false),
   ...);
  return e;
}

template <typename Out>
cudaError_t LaunchNorm(const float* x, const __nv_bfloat16* w, float weight_offset, float eps,
                       int rows, int dim, Out out, LaunchStream stream) {
  if (rows == 0) return cudaSuccess;
  constexpr int kChunk = 4 * kWarpSize;  // floats a warp covers with one float4 each
  if (dim % kChunk == 0 && dim / kChunk <= kMaxChunks) {
    return LaunchRegisters(dim / kChunk, x, w, weight_offset, eps, rows, out, stream,
                           std::make_integer_sequence<int, kMaxChunks>{});
  }
  return LaunchKernel(RmsNormStridedKernel<Out>, CeilDiv(rows, kWarpsPerBlock), kThreads, 0, stream,
                      x, w, weight_offset, eps, rows, dim, out);
}

}  // namespace

cudaError_t LaunchRmsNorm(const float* x, const __nv_bfloat16* w, float weight_offset, float eps,
                          int rows, int dim, __nv_bfloat16* out, LaunchStream stream) {
  return LaunchNorm(x, w, weight_offset, eps, rows, dim, Bf16Out{out}, stream);
}

cudaError_t LaunchRmsNormFp8(const float* x, const __nv_bfloat16* w, float weight_offset, float eps,
                             int rows, int dim, __nv_fp8_e4m3* q, float* scale,
                             LaunchStream stream) {
  return LaunchNorm(x, w, weight_offset, eps, rows, dim,
                    Fp8Out{reinterpret_cast<__nv_fp8_storage_t*>(q), scale}, stream);
}

cudaError_t LaunchRmsNormFp8Groups(const float* x, const __nv_bfloat16* w, float weight_offset,
                                   float eps, int rows, int dim, __nv_fp8_e4m3* q, float* scale,
                                   LaunchStream stream) {
  constexpr int kChunk = 4 * kWarpSize;
  if (rows < 0 || dim % kChunk != 0 || dim / kChunk < 1 || dim / kChunk > kMaxChunks) {
    return cudaErrorInvalidValue;
  }
  if (rows == 0) return cudaSuccess;
  return LaunchRegisters(dim / kChunk, x, w, weight_offset, eps, rows,
                         Fp8GroupOut{reinterpret_cast<__nv_fp8_storage_t*>(q), scale}, stream,
                         std::make_integer_sequence<int, kMaxChunks>{});
}

cudaError_t LaunchNormFoldInput(const float* x, int rows, int dim, __nv_bfloat16* copy,
                                float* sumsq, LaunchStream stream) {
  if (rows < 0 || dim <= 0 || dim % kNormFoldGroup != 0 || x == nullptr || copy == nullptr ||
      sumsq == nullptr || reinterpret_cast<uintptr_t>(x) % 8 != 0 ||
      reinterpret_cast<uintptr_t>(copy) % 4 != 0) {
    return cudaErrorInvalidValue;
  }
  if (rows == 0) return cudaSuccess;
  return LaunchKernel(NormFoldInputKernel, CeilDiv(rows, kWarpsPerBlock), kThreads, 0, stream, x,
                      rows, dim, copy, sumsq);
}

cudaError_t LaunchRmsNormAdd(const __nv_bfloat16* y, const __nv_bfloat16* w, float weight_offset,
                             float eps, int rows, int dim, float* x, LaunchStream stream) {
  if (rows == 0) return cudaSuccess;
  return LaunchKernel(RmsNormAddKernel, CeilDiv(rows, kWarpsPerBlock), kThreads, 0, stream, y, w,
                      weight_offset, eps, rows, dim, x);
}

}  // namespace rankd::kernels
