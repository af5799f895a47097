// Last-token gather, final RMSNorm and the score head, in one kernel.
#ifndef RANKD_KERNELS_SCORE_HEAD_CUH_
#define RANKD_KERNELS_SCORE_HEAD_CUH_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include "kernels/launch.cuh"

namespace rankd::kernels {

// For item i < *num_items with h = x[last_rows[i]] (x[i] when last_rows is null),
// n = RMSNorm(h) * (norm_offset + final_norm) (fp32) and cap(z) = softcap * tanh(z / softcap)
// (z when softcap == 0):
//   classifier, logit (num_head_rows == 1): scores[i] = cap(head_rows[0] . n)
//   yes_no            (num_head_rows == 2): scores[i] = cap(head_rows[0] . n) - cap(head_rows[1] .
//   n)
// all in fp32 (the two logits are never rounded, so their difference keeps its precision).
//   x [T, H] fp32 (residual stream after the last layer); last_rows [max_items] int32 row indices
//   into x, or null; num_items device, 1 int32 (<= max_items; the grid covers max_items);
//   final_norm [H] bf16; head_rows [num_head_rows, H] bf16 (classifier row, lm_head[token], or
//   lm_head[yes] and lm_head[no]); scores [max_items] fp32 out (the first *num_items written).
cudaError_t LaunchScoreHead(const float* x, const int32_t* last_rows, const int32_t* num_items,
                            int max_items, const __nv_bfloat16* final_norm, float norm_offset,
                            const __nv_bfloat16* head_rows, int num_head_rows, float softcap,
                            float eps, int hidden, float* scores, LaunchStream stream);

}  // namespace rankd::kernels

#endif  // RANKD_KERNELS_SCORE_HEAD_CUH_
