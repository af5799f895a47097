// SwiGLU activation of the fused gate/up projection.
#ifndef RANKD_KERNELS_SWIGLU_CUH_
#define RANKD_KERNELS_SWIGLU_CUH_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace rankd::kernels {

// out[t, i] = silu(gate_up[t, i]) * gate_up[t, I + i], silu(g) = g / (1 + exp(-g)), in fp32.
//   gate_up [T, 2I] bf16 row-major (gate_proj outputs, then up_proj outputs, per token);
//   out [T, I] bf16 row-major.
cudaError_t LaunchSwiGlu(const __nv_bfloat16* gate_up, int num_tokens, int intermediate,
                         __nv_bfloat16* out, cudaStream_t stream);

}  // namespace rankd::kernels

#endif  // RANKD_KERNELS_SWIGLU_CUH_
