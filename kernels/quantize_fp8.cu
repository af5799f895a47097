// Row quantiser to fp8. Thread mapping: one 256-thread block per row; the row is read twice (the
// largest magnitude, a block reduction; then the conversion, mostly from L1/L2), 8 bf16 (16 bytes)
// a thread a step when cols % 8 == 0 and the rows are 16-byte aligned, else one element.
#include "kernels/common.cuh"
#include "kernels/fp8.cuh"
#include "kernels/quantize_fp8.cuh"

namespace rankd::kernels {
namespace {

constexpr int kThreads = 256;

template <int kVec>
__global__ void __launch_bounds__(kThreads)
    QuantizeRowsKernel(const __nv_bfloat16* __restrict__ x, int cols,
                       __nv_fp8_storage_t* __restrict__ q, float* __restrict__ scale) {
  __shared__ float scratch[32];
  EnterGrid();
  const int64_t r = blockIdx.x;
  const __nv_bfloat16* row = x + r * cols;
  __nv_fp8_storage_t* qrow = q + r * cols;
  const int steps = cols / kVec;
  float amax = 0.0f;
  for (int i = threadIdx.x; i < steps; i += kThreads) {
    if constexpr (kVec == 8) {
      const uint4 v = reinterpret_cast<const uint4*>(row)[i];
      const __nv_bfloat162* v2 = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const float2 f = __bfloat1622float2(v2[k]);
        amax = fmaxf(amax, fmaxf(fabsf(f.x), fabsf(f.y)));
      }
    } else {
      amax = fmaxf(amax, fabsf(__bfloat162float(row[i])));
    }
  }
  const float s = Fp8Scale(BlockMax(amax, scratch));
  if (threadIdx.x == 0) scale[r] = s;
  for (int i = threadIdx.x; i < steps; i += kThreads) {
    if constexpr (kVec == 8) {
      const uint4 v = reinterpret_cast<const uint4*>(row)[i];
      const __nv_bfloat162* v2 = reinterpret_cast<const __nv_bfloat162*>(&v);
      const float2 a = __bfloat1622float2(v2[0]), b = __bfloat1622float2(v2[1]),
                   c = __bfloat1622float2(v2[2]), d = __bfloat1622float2(v2[3]);
      uint2 out;
      out.x = ToE4m3x4(a.x, a.y, b.x, b.y, s);
      out.y = ToE4m3x4(c.x, c.y, d.x, d.y, s);
      reinterpret_cast<uint2*>(qrow)[i] = out;
    } else {
      qrow[i] = ToE4m3(__bfloat162float(row[i]), s);
    }
  }
}

// Groups of kFp8Group columns: 16 lanes a group, 4 bf16 (8 bytes) a lane, the largest magnitude
// a reduction over the half-warp; 16 groups a 256-thread block.
constexpr int kGroupLanes = kFp8Group / 4;
__global__ void __launch_bounds__(kThreads)
    QuantizeGroupsKernel(const __nv_bfloat16* __restrict__ x, int64_t groups,
                         __nv_fp8_storage_t* __restrict__ q, float* __restrict__ scale) {
  EnterGrid();
  const int64_t g = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) / kGroupLanes;
  const int lane = threadIdx.x % kGroupLanes;
  // Whole half-warps drop out together: the shuffles below stay within live ones.
  if (g >= groups) return;
  const uint2 v = reinterpret_cast<const uint2*>(x + g * kFp8Group)[lane];
  const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&v.x));
  const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&v.y));
  float amax = fmaxf(fmaxf(fabsf(a.x), fabsf(a.y)), fmaxf(fabsf(b.x), fabsf(b.y)));
  const unsigned mask = threadIdx.x % 32 < kGroupLanes ? 0x0000ffffu : 0xffff0000u;
#pragma unroll
  for (int o = 1; o < kGroupLanes; o *= 2) amax = fmaxf(amax, __shfl_xor_sync(mask, amax, o));
  const float s = Fp8Scale(amax);
  if (lane == 0) scale[g] = s;
  reinterpret_cast<uint32_t*>(q + g * kFp8Group)[lane] = ToE4m3x4(a.x, a.y, b.x, b.y, s);
}

}  // namespace

cudaError_t LaunchQuantizeGroupsFp8(const __nv_bfloat16* x, int64_t rows, int cols,
                                    __nv_fp8_e4m3* q, float* scale, LaunchStream stream) {
  if (rows < 0 || cols <= 0 || cols % kFp8Group != 0 || reinterpret_cast<uintptr_t>(x) % 8 != 0 ||
      reinterpret_cast<uintptr_t>(q) % 4 != 0) {
    return cudaErrorInvalidValue;
  }
  const int64_t groups = rows * (cols / kFp8Group);
  if (groups == 0) return cudaSuccess;
  const int64_t blocks = (groups * kGroupLanes + kThreads - 1) / kThreads;
  if (blocks > 0x7fffffff) return cudaErrorInvalidValue;
  return LaunchKernel(QuantizeGroupsKernel, static_cast<unsigned>(blocks), kThreads, 0, stream, x,
                      groups, reinterpret_cast<__nv_fp8_storage_t*>(q), scale);
}

cudaError_t LaunchQuantizeRowsFp8(const __nv_bfloat16* x, int64_t rows, int cols, __nv_fp8_e4m3* q,
                                  float* scale, LaunchStream stream) {
  if (rows == 0) return cudaSuccess;
  if (rows > 0x7fffffff) return cudaErrorInvalidValue;  // one block a row
  auto* qs = reinterpret_cast<__nv_fp8_storage_t*>(q);
  const bool aligned =
      reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(q) % 8 == 0;
  return LaunchKernel(cols % 8 == 0 && aligned ? QuantizeRowsKernel<8> : QuantizeRowsKernel<1>,
                      static_cast<unsigned>(rows), kThreads, 0, stream, x, cols, qs, scale);
}

}  // namespace rankd::kernels
