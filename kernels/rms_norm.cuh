// RMSNorm of the fp32 residual stream into the input of the next GEMM: bf16, or fp8 e4m3 with a
// scale per row.
#ifndef RANKD_KERNELS_RMS_NORM_CUH_
#define RANKD_KERNELS_RMS_NORM_CUH_

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include "kernels/launch.cuh"

namespace rankd::kernels {

// out[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * (weight_offset + w), computed in fp32,
// rounded once to bf16. weight_offset is 0, or 1 for Gemma's (1 + w) norms (added in fp32, as HF
// does, so that the weight keeps its bf16 precision).
//   x [rows, dim] fp32 row-major, w [dim] bf16 and out 16-byte aligned when dim % 128 == 0;
//   out [rows, dim] bf16 row-major.
// The residual add that precedes each norm happens in the GEMM epilogue (Gemm::LinearAccumulate
// adds o_proj / down_proj output into the fp32 stream), so this kernel reads one stream only.
cudaError_t LaunchRmsNorm(const float* x, const __nv_bfloat16* w, float weight_offset, float eps,
                          int rows, int dim, __nv_bfloat16* out, LaunchStream stream);

// The same norm in fp32, quantised per row (kernels/fp8.cuh) instead of rounded to bf16:
// scale[r] = max |n[r, :]| / 448 (1 for an all-zero row), q[r, :] = e4m3(n[r, :] / scale[r]).
//   q [rows, dim] e4m3 row-major (4-byte aligned when dim % 128 == 0); scale [rows] fp32.
cudaError_t LaunchRmsNormFp8(const float* x, const __nv_bfloat16* w, float weight_offset, float eps,
                             int rows, int dim, __nv_fp8_e4m3* q, float* scale,
                             LaunchStream stream);

// The same quantised per row and group of 64 columns: scale [rows, dim / 64] row-major (the
// Hopper GEMM's HopperXScales::kGroup). dim a multiple of 128 up to 2048 (the row in registers),
// else cudaErrorInvalidValue.
cudaError_t LaunchRmsNormFp8Groups(const float* x, const __nv_bfloat16* w, float weight_offset,
                                   float eps, int rows, int dim, __nv_fp8_e4m3* q, float* scale,
                                   LaunchStream stream);

// The RMSNorm fold's input (kernels/hopper_gemm.cuh, HopperNorm) for a stream that no GEMM
// epilogue wrote (the embeddings'): copy [rows, dim] bf16 = x rounded, sumsq [rows, dim /
// kNormFoldGroup] fp32 = the sums of squares of x per row and group of kNormFoldGroup columns.
// cudaErrorInvalidValue unless dim is a positive multiple of kNormFoldGroup, x 8-byte and copy
// 4-byte aligned.
inline constexpr int kNormFoldGroup = 64;
cudaError_t LaunchNormFoldInput(const float* x, int rows, int dim, __nv_bfloat16* copy,
                                float* sumsq, LaunchStream stream);
// The residual add of a normalised sublayer output (Gemma 2's post-attention and post-feedforward
// norms): x[r, :] += bf16(y[r, :] / sqrt(mean(y[r, :]^2) + eps) * (weight_offset + w)), the norm
// in fp32 and rounded to bf16 (HF's norm output) before the fp32 add.
//   y [rows, dim] bf16 row-major; w [dim] bf16; x [rows, dim] fp32 row-major, read and written.
cudaError_t LaunchRmsNormAdd(const __nv_bfloat16* y, const __nv_bfloat16* w, float weight_offset,
                             float eps, int rows, int dim, float* x, LaunchStream stream);

}  // namespace rankd::kernels

#endif  // RANKD_KERNELS_RMS_NORM_CUH_
