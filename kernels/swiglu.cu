// SwiGLU and GeGLU (the activation a template parameter). Thread mapping: a 1-D grid over the T*I
// outputs in chunks of 8 consecutive columns of one token when the gate span is a multiple of 8
// (one 16-byte load of gate, one of up, one 16-byte store per thread), else one output per
// thread. Consecutive threads
// take consecutive chunks: coalesced. The fp8 variants (e4m3 with a scale per token) take one block
// per token instead, since a token's scale needs its whole row: GatedFp8RegKernel holds the row's
// activations in registers between the row maximum and the quantisation (I <= 8 * 256 * 8), the
// GatedFp8Kernel fallback computes them twice.
#include "kernels/activations.cuh"
#include "kernels/common.cuh"
#include "kernels/fp8.cuh"
#include "kernels/swiglu.cuh"

namespace rankd::kernels {
namespace {

constexpr int kThreads = 256;

enum class Act { kSilu, kGeluTanh };

template <Act A>
__device__ __forceinline__ float Activate(float g) {
  if constexpr (A == Act::kSilu) {
    return Silu(g);
  } else {
    return GeluTanh(g);
  }
}

// Output column i's gate in a gate_up row whose spans of 2 * half columns hold half gate columns
// then their up columns (its up is `half` further).
__device__ __forceinline__ int GateColumn(int i, int half) { return i / half * 2 * half + i % half; }

template <Act A>
__global__ void GatedVec8Kernel(const __nv_bfloat16* __restrict__ gate_up, int64_t num_chunks,
                                int chunks_per_row, int intermediate, int half,
                                __nv_bfloat16* __restrict__ out) {
  EnterGrid();
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= num_chunks) return;
  const int64_t t = c / chunks_per_row;
  const int col = static_cast<int>(c % chunks_per_row) * 8;
  const __nv_bfloat16* g = gate_up + t * 2 * intermediate + GateColumn(col, half);
  const uint4 gv = *reinterpret_cast<const uint4*>(g);
  const uint4 uv = *reinterpret_cast<const uint4*>(g + half);
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
                                  int intermediate, int half, __nv_bfloat16* __restrict__ out) {
  EnterGrid();
  const int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (k >= n) return;
  const int64_t t = k / intermediate;
  const __nv_bfloat16* g = gate_up + t * 2 * intermediate +
                           GateColumn(static_cast<int>(k % intermediate), half);
  out[k] = __float2bfloat16(Activate<A>(__bfloat162float(g[0])) * __bfloat162float(g[half]));
}

// The 8 activations of chunk i (columns 8i..8i+7) of one token's gate_up row `g` (gate, then up
// at + intermediate): one 16-byte load of each.
template <Act A>
__device__ __forceinline__ void Activations8(const __nv_bfloat16* g, int intermediate, int i,
                                             float (&a)[8]) {
  const uint4 gv = reinterpret_cast<const uint4*>(g)[i];
  const uint4 uv = reinterpret_cast<const uint4*>(g + intermediate)[i];
  const __nv_bfloat162* g2 = reinterpret_cast<const __nv_bfloat162*>(&gv);
  const __nv_bfloat162* u2 = reinterpret_cast<const __nv_bfloat162*>(&uv);
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const float2 gf = __bfloat1622float2(g2[k]), uf = __bfloat1622float2(u2[k]);
    a[2 * k] = Activate<A>(gf.x) * uf.x;
    a[2 * k + 1] = Activate<A>(gf.y) * uf.y;
  }
}

// fp8 output: one 256-thread block per token row, which it reads twice (the largest magnitude of
// the activations, a block reduction; then the activations again, quantised), kVec (8 or 1)
// columns a thread a step.
template <Act A, int kVec>
__global__ void __launch_bounds__(kThreads)
    GatedFp8Kernel(const __nv_bfloat16* __restrict__ gate_up, int intermediate,
                   __nv_fp8_storage_t* __restrict__ q, float* __restrict__ scale) {
  __shared__ float scratch[32];
  EnterGrid();
  const int64_t t = blockIdx.x;
  const __nv_bfloat16* g = gate_up + t * 2 * intermediate;
  __nv_fp8_storage_t* qrow = q + t * intermediate;
  const int steps = intermediate / kVec;
  // The kVec activations of step i.
  auto activations = [&](int i, float(&a)[kVec]) {
    if constexpr (kVec == 8) {
      Activations8<A>(g, intermediate, i, a);
    } else {
      a[0] = Activate<A>(__bfloat162float(g[i])) * __bfloat162float(g[intermediate + i]);
    }
  };
  float amax = 0.0f;
  for (int i = threadIdx.x; i < steps; i += kThreads) {
    float a[kVec];
    activations(i, a);
#pragma unroll
    for (int k = 0; k < kVec; ++k) amax = fmaxf(amax, fabsf(a[k]));
  }
  const float s = Fp8Scale(BlockMax(amax, scratch));
  if (threadIdx.x == 0) scale[t] = s;
  for (int i = threadIdx.x; i < steps; i += kThreads) {
    float a[kVec];
    activations(i, a);
    if constexpr (kVec == 8) {
      uint2 out;
      out.x = ToE4m3x4(a[0], a[1], a[2], a[3], s);
      out.y = ToE4m3x4(a[4], a[5], a[6], a[7], s);
      reinterpret_cast<uint2*>(qrow)[i] = out;
    } else {
      qrow[i] = ToE4m3(a[0], s);
    }
  }
}

// fp8 output from registers: one 256-thread block per token row; thread x takes the 8-column
// chunks x, x + 256, ... (kSteps of them at most), computes their activations once (GatedFp8Kernel
// computes them twice) and keeps them through the block's row maximum, then quantises them with a
// multiply by the row's reciprocal scale. At 379M's shape (I = 3328, 7,500 rows) the two-pass
// kernel was bound by that arithmetic: 70 us a layer on an H200, this one 44 (bench/RESULTS.md).
template <Act A, int kSteps>
__global__ void __launch_bounds__(kThreads)
    GatedFp8RegKernel(const __nv_bfloat16* __restrict__ gate_up, int intermediate,
                      __nv_fp8_storage_t* __restrict__ q, float* __restrict__ scale) {
  __shared__ float scratch[32];
  EnterGrid();
  const int64_t t = blockIdx.x;
  const __nv_bfloat16* g = gate_up + t * 2 * intermediate;
  __nv_fp8_storage_t* qrow = q + t * intermediate;
  const int steps = intermediate / 8;
  float a[kSteps][8];
  float amax = 0.0f;
#pragma unroll
  for (int j = 0; j < kSteps; ++j) {
    const int i = threadIdx.x + j * kThreads;
    if (i >= steps) break;
    Activations8<A>(g, intermediate, i, a[j]);
#pragma unroll
    for (int k = 0; k < 8; ++k) amax = fmaxf(amax, fabsf(a[j][k]));
  }
  const float s = Fp8Scale(BlockMax(amax, scratch));
  if (threadIdx.x == 0) scale[t] = s;
  const float inv = __frcp_rn(s);
#pragma unroll
  for (int j = 0; j < kSteps; ++j) {
    const int i = threadIdx.x + j * kThreads;
    if (i >= steps) break;
    uint2 out;
    out.x = ToE4m3x4Inv(a[j][0], a[j][1], a[j][2], a[j][3], inv);
    out.y = ToE4m3x4Inv(a[j][4], a[j][5], a[j][6], a[j][7], inv);
    reinterpret_cast<uint2*>(qrow)[i] = out;
  }
}

template <Act A>
cudaError_t LaunchGatedFp8(const __nv_bfloat16* gate_up, int num_tokens, int intermediate,
                           __nv_fp8_e4m3* q, float* scale, LaunchStream stream) {
  if (num_tokens == 0 || intermediate == 0) return cudaSuccess;
  auto* qs = reinterpret_cast<__nv_fp8_storage_t*>(q);
  const bool aligned =
      reinterpret_cast<uintptr_t>(gate_up) % 16 == 0 && reinterpret_cast<uintptr_t>(q) % 8 == 0;
  const int steps_per_thread = CeilDiv(intermediate / 8, kThreads);
  if (intermediate % 8 == 0 && aligned && steps_per_thread <= 8) {
    auto* kernel = steps_per_thread <= 1   ? GatedFp8RegKernel<A, 1>
                   : steps_per_thread <= 2 ? GatedFp8RegKernel<A, 2>
                   : steps_per_thread <= 4 ? GatedFp8RegKernel<A, 4>
                                           : GatedFp8RegKernel<A, 8>;
    return LaunchKernel(kernel, num_tokens, kThreads, 0, stream, gate_up, intermediate, qs, scale);
  }
  return LaunchKernel(
      intermediate % 8 == 0 && aligned ? GatedFp8Kernel<A, 8> : GatedFp8Kernel<A, 1>, num_tokens,
      kThreads, 0, stream, gate_up, intermediate, qs, scale);
}

template <Act A>
cudaError_t LaunchGated(const __nv_bfloat16* gate_up, int num_tokens, int intermediate, int half,
                        __nv_bfloat16* out, LaunchStream stream) {
  if (half == 0) half = intermediate;
  if (half < 0 || (intermediate > 0 && intermediate % half != 0)) return cudaErrorInvalidValue;
  const int64_t n = static_cast<int64_t>(num_tokens) * intermediate;
  if (n == 0) return cudaSuccess;
  const bool aligned =
      reinterpret_cast<uintptr_t>(gate_up) % 16 == 0 && reinterpret_cast<uintptr_t>(out) % 16 == 0;
  if (half % 8 == 0 && aligned) {  // then intermediate % 8 == 0 too
    const int per_row = intermediate / 8;
    const int64_t chunks = static_cast<int64_t>(num_tokens) * per_row;
    return LaunchKernel(GatedVec8Kernel<A>, CeilDiv(chunks, kThreads), kThreads, 0, stream, gate_up,
                        chunks, per_row, intermediate, half, out);
  }
  return LaunchKernel(GatedScalarKernel<A>, CeilDiv(n, kThreads), kThreads, 0, stream, gate_up, n,
                      intermediate, half, out);
}

}  // namespace

cudaError_t LaunchSwiGluFp8(const __nv_bfloat16* gate_up, int num_tokens, int intermediate,
                            __nv_fp8_e4m3* q, float* scale, LaunchStream stream) {
  return LaunchGatedFp8<Act::kSilu>(gate_up, num_tokens, intermediate, q, scale, stream);
}

cudaError_t LaunchGeGluFp8(const __nv_bfloat16* gate_up, int num_tokens, int intermediate,
                           __nv_fp8_e4m3* q, float* scale, LaunchStream stream) {
  return LaunchGatedFp8<Act::kGeluTanh>(gate_up, num_tokens, intermediate, q, scale, stream);
}

cudaError_t LaunchSwiGlu(const __nv_bfloat16* gate_up, int num_tokens, int intermediate,
                         __nv_bfloat16* out, LaunchStream stream, int half) {
  return LaunchGated<Act::kSilu>(gate_up, num_tokens, intermediate, half, out, stream);
}

cudaError_t LaunchGeGlu(const __nv_bfloat16* gate_up, int num_tokens, int intermediate,
                        __nv_bfloat16* out, LaunchStream stream, int half) {
  return LaunchGated<Act::kGeluTanh>(gate_up, num_tokens, intermediate, half, out, stream);
}

}  // namespace rankd::kernels
