// The step between the fused q/k/v projection and attention, in place on the projection's output:
// q/k/v biases (Qwen2), per-head q/k RMSNorm (Qwen3) and RoPE (rotate_half layout; default, linear
// and llama3 frequencies all come in through the rotation table). Attention then reads q, k and v
// straight from the fused buffer; when encoding a prefix, the roped k and v of each row are also
// written to the prefix's K/V cache.
#ifndef RANKD_KERNELS_QKV_ROPE_CUH_
#define RANKD_KERNELS_QKV_ROPE_CUH_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/kv_layers.cuh"
#include "kernels/launch.cuh"

namespace rankd::kernels {

inline constexpr int kQkvRopeMaxHeadDim = 256;

struct QkvRopeParams {
  __nv_bfloat16* qkv = nullptr;           // [T, (Nq + 2 Nkv) * D] bf16: q heads, k heads, v heads
  const __nv_bfloat16* bias = nullptr;    // [(Nq + 2 Nkv) * D] bf16, or null (no biases)
  const __nv_bfloat16* q_norm = nullptr;  // [D] bf16, or null (no q/k norm)
  const __nv_bfloat16* k_norm = nullptr;  // [D] bf16, null exactly when q_norm is
  const float2* rotations = nullptr;      // [T, D / 2] fp32 (cos, sin), see LaunchRopeRotations
  const int32_t* num_rows = nullptr;      // device, 1: rows at or past it are left alone
  const KvLayers* kv_out = nullptr;       // device, 1, or null: where the rows' k and v also go
                                          // (layer `layer`; a null k in the entry: nowhere)
  int layer = 0;
  bool skip_q = false;   // q heads are neither read nor written: the attention kernel rotates
                         // them (PrefixAttentionParams::q_rotations); needs no bias and no q/k norm
  int num_tokens = 0;    // T, the rows the launch covers
  int num_q_heads = 0;   // Nq
  int num_kv_heads = 0;  // Nkv
  int head_dim = 0;      // D, a multiple of 16, <= kQkvRopeMaxHeadDim
  float eps = 1e-6f;     // q/k norm epsilon
};

// For each row t < *num_rows and head h: x = qkv[t, h] (+ bias[h]); for q and k heads
// x = RMSNorm(x) * norm (when q_norm is set), then x[i], x[i + D/2] rotated by the angle whose
// (cos, sin) is rotations[t, i]. Everything in fp32, each output rounded once to bf16, written back
// in place (v heads only when there is a bias) and, for k and v, to kv_out's row t.
// With skip_q, only the k and v heads are handled (q is rotated where attention loads it).
// cudaErrorInvalidValue for a head_dim that is not a multiple of 16 or above kQkvRopeMaxHeadDim,
// and for skip_q with a bias or a q/k norm.
cudaError_t LaunchQkvRope(const QkvRopeParams& p, LaunchStream stream);

// rotations[t, i] = (cos, sin)(positions[t] * inv_freq[i]) in fp32, for t < num_tokens and
// i < half: computed once per pass, shared by every layer.
//   positions [T] int32; inv_freq [half] fp32; rotations [T, half] float2.
cudaError_t LaunchRopeRotations(const int32_t* positions, const float* inv_freq, int num_tokens,
                                int half, float2* rotations, LaunchStream stream);

}  // namespace rankd::kernels

#endif  // RANKD_KERNELS_QKV_ROPE_CUH_
