// Embedding gather. Thread mapping: one block per token (blockIdx.x = t), 128 threads striding
// over the H columns of that token's row; consecutive threads read consecutive columns, so the
// table row (bf16) and the injected row (fp32) are read coalesced and out[t] written coalesced.
#include "kernels/common.cuh"
#include "kernels/embedding.cuh"

namespace rankd::kernels {
namespace {

constexpr int kThreads = 128;

__global__ void EmbeddingGatherKernel(const int32_t* __restrict__ tokens,
                                      const __nv_bfloat16* __restrict__ table,
                                      const float* __restrict__ rows, int hidden, float scale,
                                      float* __restrict__ out) {
  EnterGrid();
  const int t = blockIdx.x;
  const int32_t id = tokens[t];
  float* dst = out + static_cast<int64_t>(t) * hidden;
  if (id >= 0) {
    const __nv_bfloat16* src = table + static_cast<int64_t>(id) * hidden;
    if (scale == 1.0f) {
      for (int i = threadIdx.x; i < hidden; i += blockDim.x) dst[i] = __bfloat162float(src[i]);
    } else {
      for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
        dst[i] = __bfloat162float(__float2bfloat16(__bfloat162float(src[i]) * scale));
      }
    }
  } else {
    const float* src = rows + (-static_cast<int64_t>(id) - 1) * hidden;
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) dst[i] = src[i];
  }
}

}  // namespace

cudaError_t LaunchEmbeddingGather(const int32_t* tokens, int num_tokens, const __nv_bfloat16* table,
                                  const float* rows, int hidden, float scale, float* out,
                                  LaunchStream stream) {
  if (num_tokens == 0) return cudaSuccess;
  return LaunchKernel(EmbeddingGatherKernel, num_tokens, kThreads, 0, stream, tokens, table, rows,
                      hidden, scale, out);
}

}  // namespace rankd::kernels
