// SwiGLU and GeGLU (the activation a template parameter). Thread mapping: a 1-D grid over the T*I
// outputs in chunks of 8 consecutive columns of one token when I % 8 == 0 (one 16-byte load of
// gate, one of up, one 16-byte store per thread), else one output per thread. Consecutive threads
// take consecutive chunks: coalesced.
#include "kernels/common.cuh"
#include "kernels/swiglu.cuh"

namespace rankd::kernels {
namespace {

constexpr int kThreads = 256;

enum class Act { kSilu, kGeluTanh };

__device__ __forceinline__ float Silu(float g) { return g / (1.0f + __expf(-g)); }

__device__ __forceinline__ float GeluTanh(float g) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  return 0.5f * g * (1.0f + tanhf(kSqrt2OverPi * (g + 0.044715f * g * g * g)));
}

template <Act A>
__device__ __forceinline__ float Activate(float g) {
  if constexpr (A == Act::kSilu) {
    return Silu(g);
  } else {
    return GeluTanh(g);
  }
}

template <Act A>
__global__ void GatedVec8Kernel(const __nv_bfloat16* __restrict__ gate_up, int64_t num_chunks,
                                int chunks_per_row, int intermediate,
                                __nv_bfloat16* __restrict__ out) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= num_chunks) return;
  const int64_t t = c / chunks_per_row;
  const int col = static_cast<int>(c % chunks_per_row) * 8;
  const __nv_bfloat16* g = gate_up + t * 2 * intermediate + col;
  const uint4 gv = *reinterpret_cast<const uint4*>(g);
  const uint4 uv = *reinterpret_cast<const uint4*>(g + intermediate);
  const __nv_bfloat162* g2 = reinterpret_cast<const __nv_bfloat162*>(&gv);
  const __nv_bfloat162* u2 = reinterpret_cast<const __nv_bfloat162*>(&uv);
  uint4 ov;
  __nv_bfloat162* o2 = reinterpret_cast<__nv_bfloat162*>(&ov);
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const float2 gf = __bfloat1622float2(g2[k]), uf = __bfloat1622float2(u2[k]);
    o2[k] = __floats2bfloat162_rn(Activate<A>(gf.x) * uf.x, Activate<A>(gf.y) * uf.y);
  }
  *reinterpret_cast<uint4*>(out + t * intermediate + col) = ov;
}

template <Act A>
__global__ void GatedScalarKernel(const __nv_bfloat16* __restrict__ gate_up, int64_t n,
                                  int intermediate, __nv_bfloat16* __restrict__ out) {
  const int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (k >= n) return;
  const int64_t t = k / intermediate;
  const int i = static_cast<int>(k % intermediate);
  const __nv_bfloat16* g = gate_up + t * 2 * intermediate;
  out[k] =
      __float2bfloat16(Activate<A>(__bfloat162float(g[i])) * __bfloat162float(g[intermediate + i]));
}

template <Act A>
cudaError_t LaunchGated(const __nv_bfloat16* gate_up, int num_tokens, int intermediate,
                        __nv_bfloat16* out, cudaStream_t stream) {
  const int64_t n = static_cast<int64_t>(num_tokens) * intermediate;
  if (n == 0) return cudaSuccess;
  const bool aligned =
      reinterpret_cast<uintptr_t>(gate_up) % 16 == 0 && reinterpret_cast<uintptr_t>(out) % 16 == 0;
  if (intermediate % 8 == 0 && aligned) {
    const int per_row = intermediate / 8;
    const int64_t chunks = static_cast<int64_t>(num_tokens) * per_row;
    GatedVec8Kernel<A><<<CeilDiv(chunks, kThreads), kThreads, 0, stream>>>(gate_up, chunks, per_row,
                                                                           intermediate, out);
  } else {
    GatedScalarKernel<A>
        <<<CeilDiv(n, kThreads), kThreads, 0, stream>>>(gate_up, n, intermediate, out);
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchSwiGlu(const __nv_bfloat16* gate_up, int num_tokens, int intermediate,
                         __nv_bfloat16* out, cudaStream_t stream) {
  return LaunchGated<Act::kSilu>(gate_up, num_tokens, intermediate, out, stream);
}

cudaError_t LaunchGeGlu(const __nv_bfloat16* gate_up, int num_tokens, int intermediate,
                        __nv_bfloat16* out, cudaStream_t stream) {
  return LaunchGated<Act::kGeluTanh>(gate_up, num_tokens, intermediate, out, stream);
}

}  // namespace rankd::kernels
