// Rows of a bf16 matrix quantised to fp8 e4m3 with one fp32 scale a row: the attention output
// (o_proj's input, per token) and, at load, the linear weights (per output channel).
#ifndef RANKD_KERNELS_QUANTIZE_FP8_CUH_
#define RANKD_KERNELS_QUANTIZE_FP8_CUH_

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>
#include "kernels/launch.cuh"

namespace rankd::kernels {

// scale[r] = max_c |x[r, c]| / 448 (1 for an all-zero row); q[r, c] = e4m3(x[r, c] / scale[r]),
// rounded to nearest even and saturated, so that x[r, c] ~= q[r, c] * scale[r].
//   x [rows, cols] bf16 row-major; q [rows, cols] e4m3 row-major; scale [rows] fp32.
cudaError_t LaunchQuantizeRowsFp8(const __nv_bfloat16* x, int64_t rows, int cols, __nv_fp8_e4m3* q,
                                  float* scale, LaunchStream stream);

// The same per row and group of kFp8Group (64) columns: scale[r, g] = max over the group's |x| /
// 448, the scales [rows, cols / kFp8Group] row-major (the Hopper GEMM's HopperXScales::kGroup).
// cols a multiple of kFp8Group, x 8-byte and q 4-byte aligned, else cudaErrorInvalidValue.
inline constexpr int kFp8Group = 64;
cudaError_t LaunchQuantizeGroupsFp8(const __nv_bfloat16* x, int64_t rows, int cols,
                                    __nv_fp8_e4m3* q, float* scale, LaunchStream stream);

}  // namespace rankd::kernels

#endif  // RANKD_KERNELS_QUANTIZE_FP8_CUH_
