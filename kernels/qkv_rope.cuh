// The step between the fused q/k/v projection and attention: q/k/v biases (Qwen2), per-head q/k
// RMSNorm (Qwen3), RoPE (rotate_half layout; default, linear and llama3 frequencies all come in
// as `inv_freq`, computed on the host by cpu::RopeInverseFrequencies), and the split into
// per-head q, k, v buffers (k and v straight into a prefix's KV cache when encoding one).
#ifndef RANKD_KERNELS_QKV_ROPE_CUH_
#define RANKD_KERNELS_QKV_ROPE_CUH_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace rankd::kernels {

inline constexpr int kQkvRopeMaxHeadDim = 256;

struct QkvRopeParams {
  const __nv_bfloat16* qkv = nullptr;     // [T, (Nq + 2 Nkv) * D] bf16: q heads, k heads, v heads
  const __nv_bfloat16* bias = nullptr;    // [(Nq + 2 Nkv) * D] bf16, or null (no biases)
  const __nv_bfloat16* q_norm = nullptr;  // [D] bf16, or null (no q/k norm)
  const __nv_bfloat16* k_norm = nullptr;  // [D] bf16, null exactly when q_norm is
  const int32_t* positions = nullptr;     // [T] int32 RoPE positions
  const float* inv_freq = nullptr;        // [D / 2] fp32
  int num_tokens = 0;                     // T
  int num_q_heads = 0;                    // Nq
  int num_kv_heads = 0;                   // Nkv
  int head_dim = 0;                       // D, even, <= kQkvRopeMaxHeadDim
  float eps = 1e-6f;                      // q/k norm epsilon
  __nv_bfloat16* q = nullptr;             // [T, Nq, D] bf16 out
  __nv_bfloat16* k = nullptr;             // [T, Nkv, D] bf16 out
  __nv_bfloat16* v = nullptr;             // [T, Nkv, D] bf16 out
};

// For each token and head h: x = qkv[t, h] (+ bias[h]); for q and k heads x = RMSNorm(x) * norm
// (when q_norm is set), then x[i], x[i + D/2] rotated by the angle positions[t] * inv_freq[i].
// Everything in fp32, each output rounded once to bf16. Returns cudaErrorInvalidValue for a
// head_dim that is odd or above kQkvRopeMaxHeadDim.
cudaError_t LaunchQkvRope(const QkvRopeParams& p, cudaStream_t stream);

}  // namespace rankd::kernels

#endif  // RANKD_KERNELS_QKV_ROPE_CUH_
