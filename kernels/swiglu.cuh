// Gated MLP activations of the fused gate/up projection: SwiGLU (Llama, Qwen, Mistral) and GeGLU
// with the tanh-approximate GELU (Gemma's gelu_pytorch_tanh).
#ifndef RANKD_KERNELS_SWIGLU_CUH_
#define RANKD_KERNELS_SWIGLU_CUH_

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include "kernels/launch.cuh"

namespace rankd::kernels {

// out[t, i] = silu(gate[t, i]) * up[t, i], silu(g) = g / (1 + exp(-g)), in fp32.
//   gate_up [T, 2I] bf16 row-major: per token, spans of 2 * half columns, each half gate
//     outputs then the same outputs' up; half = I (or 0) is the stacked layout (gate_proj's
//     outputs, then up_proj's), half = kHopperGluHalf the interleaved one of kernels/hopper_gemm
//     (GateUpSourceRow). I must be a multiple of half (else cudaErrorInvalidValue).
//   out [T, I] bf16 row-major.
cudaError_t LaunchSwiGlu(const __nv_bfloat16* gate_up, int num_tokens, int intermediate,
                         __nv_bfloat16* out, LaunchStream stream, int half = 0);

// out[t, i] = gelu_tanh(gate[t, i]) * up[t, i] in fp32, gelu_tanh(g) =
// 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))). Layouts as LaunchSwiGlu's.
cudaError_t LaunchGeGlu(const __nv_bfloat16* gate_up, int num_tokens, int intermediate,
                        __nv_bfloat16* out, LaunchStream stream, int half = 0);

// The same activations in fp32, quantised per token (kernels/fp8.cuh) instead of rounded to bf16:
// scale[t] = max |a[t, :]| / 448 (1 for an all-zero row), q[t, :] = e4m3(a[t, :] / scale[t]).
//   q [T, I] e4m3 row-major; scale [T] fp32.
cudaError_t LaunchSwiGluFp8(const __nv_bfloat16* gate_up, int num_tokens, int intermediate,
                            __nv_fp8_e4m3* q, float* scale, LaunchStream stream);
cudaError_t LaunchGeGluFp8(const __nv_bfloat16* gate_up, int num_tokens, int intermediate,
                           __nv_fp8_e4m3* q, float* scale, LaunchStream stream);

}  // namespace rankd::kernels

#endif  // RANKD_KERNELS_SWIGLU_CUH_
