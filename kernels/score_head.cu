// Score head. Thread mapping: one block of 128 threads per item slot (blockIdx.x = i; slots past
// the live item count return at once); the threads stride over the H columns of row
// last_rows[i] (row i without last_rows), accumulating the sum of squares and the dot
// product with final_norm * (head row difference) at once; two block reductions finish the item.
// Since RMSNorm is a per-row scale, score = rsqrt(mean(h^2) + eps) * sum_j h_j w_j d_j.
#include "kernels/common.cuh"
#include "kernels/score_head.cuh"

namespace rankd::kernels {
namespace {

constexpr int kThreads = 128;

__global__ void ScoreHeadKernel(const float* __restrict__ x, const int32_t* __restrict__ last_rows,
                                const int32_t* __restrict__ num_items,
                                const __nv_bfloat16* __restrict__ final_norm,
                                const __nv_bfloat16* __restrict__ head_rows, int num_head_rows,
                                float eps, int hidden, float* __restrict__ scores) {
  __shared__ float scratch[32];
  if (static_cast<int>(blockIdx.x) >= *num_items) return;  // whole blocks
  const int row = last_rows ? last_rows[blockIdx.x] : static_cast<int>(blockIdx.x);
  const float* h = x + static_cast<int64_t>(row) * hidden;
  float ss = 0.0f, dot = 0.0f;
  for (int j = threadIdx.x; j < hidden; j += blockDim.x) {
    const float v = h[j];
    float d = __bfloat162float(head_rows[j]);
    if (num_head_rows == 2) d -= __bfloat162float(head_rows[hidden + j]);
    ss += v * v;
    dot += v * __bfloat162float(final_norm[j]) * d;
  }
  ss = BlockSum(ss, scratch);
  dot = BlockSum(dot, scratch);
  if (threadIdx.x == 0) scores[blockIdx.x] = dot * rsqrtf(ss / static_cast<float>(hidden) + eps);
}

}  // namespace

cudaError_t LaunchScoreHead(const float* x, const int32_t* last_rows, const int32_t* num_items,
                            int max_items, const __nv_bfloat16* final_norm,
                            const __nv_bfloat16* head_rows, int num_head_rows, float eps,
                            int hidden, float* scores, cudaStream_t stream) {
  if (num_head_rows != 1 && num_head_rows != 2) return cudaErrorInvalidValue;
  if (max_items == 0) return cudaSuccess;
  ScoreHeadKernel<<<max_items, kThreads, 0, stream>>>(
      x, last_rows, num_items, final_norm, head_rows, num_head_rows, eps, hidden, scores);
  return cudaGetLastError();
}

}  // namespace rankd::kernels
