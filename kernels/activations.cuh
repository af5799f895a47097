// The gated MLP activations in fp32, shared by kernels/swiglu.cu's unfused kernels and the gated
// epilogues of kernels/hopper_gemm.cu, so that the fused and unfused paths compute the same bits.
// Device-only code (include from .cu files).
#ifndef RANKD_KERNELS_ACTIVATIONS_CUH_
#define RANKD_KERNELS_ACTIVATIONS_CUH_

#include <cuda_runtime.h>

namespace rankd::kernels {

// silu(g) = g / (1 + exp(-g)), the division the fast one (__fdividef: a reciprocal and a multiply,
// within 2 ulp; g / (1 + inf) = -0 for g below about -88). IEEE division costs a check and a
// branch to its slow path per element (FCHK, BSSY/BSYNC): in the Hopper GEMM's gated epilogue,
// where the ping-pong gate_up spends most of its time (session 39's per-instruction profile,
// bench/RESULTS.md), FCHK, BSSY and BSYNC alone were 13% of the epilogue's instructions.
__device__ __forceinline__ float Silu(float g) { return __fdividef(g, 1.0f + __expf(-g)); }

// gelu_tanh(g) = 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))).
__device__ __forceinline__ float GeluTanh(float g) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  return 0.5f * g * (1.0f + tanhf(kSqrt2OverPi * (g + 0.044715f * g * g * g)));
}

}  // namespace rankd::kernels

#endif  // RANKD_KERNELS_ACTIVATIONS_CUH_
