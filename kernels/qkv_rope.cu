// q/k/v bias + q/k RMSNorm + RoPE + split. Thread mapping: one warp per (token, head slot), with
// Nq + 2 Nkv head slots per token (q heads, then k heads, then v heads); 8 warps per block. Lane
// j holds the rotation pairs (i, i + D/2) for i = j, j + 32, ... < D/2 (at most 4 pairs, since
// D <= 256), so the q/k norm's sum of squares is one warp reduction and RoPE needs no exchange.
// Reads of a head's row are coalesced per half; each head is written once.
#include "kernels/common.cuh"
#include "kernels/qkv_rope.cuh"

namespace rankd::kernels {
namespace {

constexpr int kWarpsPerBlock = 8;
constexpr int kMaxPairsPerLane = kQkvRopeMaxHeadDim / 2 / kWarpSize;

__global__ void QkvRopeKernel(QkvRopeParams p) {
  const int lane = threadIdx.x % kWarpSize;
  const int slots = p.num_q_heads + 2 * p.num_kv_heads;
  const int64_t job = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarpSize;
  if (job >= static_cast<int64_t>(p.num_tokens) * slots) return;
  const int t = static_cast<int>(job / slots), slot = static_cast<int>(job % slots);
  const int D = p.head_dim, half = D / 2;
  const __nv_bfloat16* src = p.qkv + job * D;  // row t, head slot `slot`
  const __nv_bfloat16* bias = p.bias ? p.bias + static_cast<int64_t>(slot) * D : nullptr;

  float a[kMaxPairsPerLane], b[kMaxPairsPerLane];  // x[i], x[i + half] for i = lane + 32 k
#pragma unroll
  for (int k = 0; k < kMaxPairsPerLane; ++k) {
    const int i = lane + k * kWarpSize;
    a[k] = b[k] = 0.0f;
    if (i < half) {
      a[k] = __bfloat162float(src[i]);
      b[k] = __bfloat162float(src[i + half]);
      if (bias) {
        a[k] += __bfloat162float(bias[i]);
        b[k] += __bfloat162float(bias[i + half]);
      }
    }
  }

  const bool is_q = slot < p.num_q_heads;
  const bool is_k = !is_q && slot < p.num_q_heads + p.num_kv_heads;
  __nv_bfloat16* dst;
  if (is_q) {
    dst = p.q + (static_cast<int64_t>(t) * p.num_q_heads + slot) * D;
  } else if (is_k) {
    dst = p.k + (static_cast<int64_t>(t) * p.num_kv_heads + (slot - p.num_q_heads)) * D;
  } else {
    dst = p.v +
          (static_cast<int64_t>(t) * p.num_kv_heads + (slot - p.num_q_heads - p.num_kv_heads)) * D;
  }

  if (is_q || is_k) {
    if (p.q_norm) {
      const __nv_bfloat16* w = is_q ? p.q_norm : p.k_norm;
      float ss = 0.0f;
#pragma unroll
      for (int k = 0; k < kMaxPairsPerLane; ++k) ss += a[k] * a[k] + b[k] * b[k];
      const float inv = rsqrtf(WarpSum(ss) / static_cast<float>(D) + p.eps);
#pragma unroll
      for (int k = 0; k < kMaxPairsPerLane; ++k) {
        const int i = lane + k * kWarpSize;
        if (i < half) {
          a[k] *= inv * __bfloat162float(w[i]);
          b[k] *= inv * __bfloat162float(w[i + half]);
        }
      }
    }
    const float pos = static_cast<float>(p.positions[t]);
#pragma unroll
    for (int k = 0; k < kMaxPairsPerLane; ++k) {
      const int i = lane + k * kWarpSize;
      if (i < half) {
        float s, c;
        sincosf(pos * p.inv_freq[i], &s, &c);
        const float x = a[k], y = b[k];
        a[k] = x * c - y * s;
        b[k] = y * c + x * s;
      }
    }
  }
#pragma unroll
  for (int k = 0; k < kMaxPairsPerLane; ++k) {
    const int i = lane + k * kWarpSize;
    if (i < half) {
      dst[i] = __float2bfloat16(a[k]);
      dst[i + half] = __float2bfloat16(b[k]);
    }
  }
}

}  // namespace

cudaError_t LaunchQkvRope(const QkvRopeParams& p, cudaStream_t stream) {
  if (p.head_dim <= 0 || p.head_dim % 2 != 0 || p.head_dim > kQkvRopeMaxHeadDim) {
    return cudaErrorInvalidValue;
  }
  const int64_t jobs = static_cast<int64_t>(p.num_tokens) * (p.num_q_heads + 2 * p.num_kv_heads);
  if (jobs == 0) return cudaSuccess;
  QkvRopeKernel<<<CeilDiv(jobs, kWarpsPerBlock), kWarpsPerBlock * kWarpSize, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace rankd::kernels
