// Score head. Thread mapping: one block of 128 threads per item slot (blockIdx.x = i; slots past
// the live item count return at once); the threads stride over the H columns of row
// last_rows[i] (row i without last_rows), accumulating the sum of squares and the dot
// products with final_norm * each head row at once; block reductions finish the item. Since
// RMSNorm is a per-row scale, logit_k = rsqrt(mean(h^2) + eps) * sum_j h_j w_j r_kj.
#include "kernels/common.cuh"
#include "kernels/score_head.cuh"

namespace rankd::kernels {
namespace {

constexpr int kThreads = 128;

__global__ void ScoreHeadKernel(const float* __restrict__ x, const int32_t* __restrict__ last_rows,
                                const int32_t* __restrict__ num_items,
                                const __nv_bfloat16* __restrict__ final_norm, float norm_offset,
                                const __nv_bfloat16* __restrict__ head_rows, int num_head_rows,
                                float softcap, float eps, int hidden, float* __restrict__ scores) {
  __shared__ float scratch[32];
  EnterGrid();
  if (static_cast<int>(blockIdx.x) >= *num_items) return;  // whole blocks
  const int row = last_rows ? last_rows[blockIdx.x] : static_cast<int>(blockIdx.x);
  const float* h = x + static_cast<int64_t>(row) * hidden;
  float ss = 0.0f, dot0 = 0.0f, dot1 = 0.0f;
  for (int j = threadIdx.x; j < hidden; j += blockDim.x) {
    const float v = h[j];
    const float vw = v * (norm_offset + __bfloat162float(final_norm[j]));
    ss += v * v;
    dot0 += vw * __bfloat162float(head_rows[j]);
    if (num_head_rows == 2) dot1 += vw * __bfloat162float(head_rows[hidden + j]);
  }
  ss = BlockSum(ss, scratch);
  dot0 = BlockSum(dot0, scratch);
  if (num_head_rows == 2) dot1 = BlockSum(dot1, scratch);
  if (threadIdx.x == 0) {
    const float inv = rsqrtf(ss / static_cast<float>(hidden) + eps);
    auto cap = [&](float z) { return softcap > 0.0f ? softcap * tanhf(z / softcap) : z; };
    float s = cap(dot0 * inv);
    if (num_head_rows == 2) s -= cap(dot1 * inv);
    scores[blockIdx.x] = s;
  }
}

}  // namespace

cudaError_t LaunchScoreHead(const float* x, const int32_t* last_rows, const int32_t* num_items,
                            int max_items, const __nv_bfloat16* final_norm, float norm_offset,
                            const __nv_bfloat16* head_rows, int num_head_rows, float softcap,
                            float eps, int hidden, float* scores, LaunchStream stream) {
  if (num_head_rows != 1 && num_head_rows != 2) return cudaErrorInvalidValue;
  if (max_items == 0) return cudaSuccess;
  return LaunchKernel(ScoreHeadKernel, max_items, kThreads, 0, stream, x, last_rows, num_items,
                      final_norm, norm_offset, head_rows, num_head_rows, softcap, eps, hidden,
                      scores);
}

}  // namespace rankd::kernels
