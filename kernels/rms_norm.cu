// RMSNorm. Thread mapping: one block of 128 threads per row (blockIdx.x = r); the threads stride
// over the row's `dim` columns twice, first summing squares (block reduction), then writing the
// scaled bf16 outputs. Accesses are coalesced; the second read of the row hits L1/L2.
#include "kernels/common.cuh"
#include "kernels/rms_norm.cuh"

namespace rankd::kernels {
namespace {

constexpr int kThreads = 128;

__global__ void RmsNormKernel(const float* __restrict__ x, const __nv_bfloat16* __restrict__ w,
                              float eps, int dim, __nv_bfloat16* __restrict__ out) {
  __shared__ float scratch[32];
  const float* row = x + static_cast<int64_t>(blockIdx.x) * dim;
  __nv_bfloat16* orow = out + static_cast<int64_t>(blockIdx.x) * dim;
  float ss = 0.0f;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) ss += row[i] * row[i];
  ss = BlockSum(ss, scratch);
  const float inv = rsqrtf(ss / static_cast<float>(dim) + eps);
  for (int i = threadIdx.x; i < dim; i += blockDim.x) {
    orow[i] = __float2bfloat16(row[i] * inv * __bfloat162float(w[i]));
  }
}

}  // namespace

cudaError_t LaunchRmsNorm(const float* x, const __nv_bfloat16* w, float eps, int rows, int dim,
                          __nv_bfloat16* out, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  RmsNormKernel<<<rows, kThreads, 0, stream>>>(x, w, eps, dim, out);
  return cudaGetLastError();
}

}  // namespace rankd::kernels
