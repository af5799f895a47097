// q/k/v bias + q/k RMSNorm + RoPE, in place. Thread mapping: one warp per (row t, part), 8 warps
// per 256-thread block. A head's D dims are C = D / 16 chunks, padded to a power of two P; lane
// (j = lane / P, c = lane % P) owns chunk c, i.e. the 8 rotation pairs (i, i + D/2) for
// i = 8c..8c+7, of kHeadsPerLane head slots of its part: slots first + part * S + j + s * (32 / P)
// for s < kHeadsPerLane, S = kHeadsPerLane * 32 / P slots a part, up to the launch's last slot
// (Nq + 2 Nkv slots: q heads, then k heads, then v heads; first = Nq when q is skipped, else 0;
// the v heads are left out of the launch when they have no bias and no K/V cache to fill, as in
// score passes: neither read nor written). The lane loads its 8 (cos, sin) pairs once (4 float4)
// for its heads; per head it moves one 16-byte load and store of each half (16-byte bias and norm
// weight loads too), all its heads' loads issued before any math or store, and kept as loaded
// (bf16) until their math. The q/k norm's sum of squares is a reduction over the head's P lanes
// (shuffles); padding lanes (c >= C) and slots past the part's last join the shuffles with zeros.
// A row at or past the live count is loaded (it is inside the buffer) and its warp leaves before
// any shuffle or store. Registers bound how many warps a multiprocessor holds, and so the bytes
// in flight of this memory-bound kernel: 2 heads a lane, the loads held as bf16 and the v heads
// left out when idle take it from 125 registers a thread (2 blocks a multiprocessor, 16 warps, a
// third of the Qwen3 rows' warps and half of each Llama lane's slots idle on v; the 379M's k RoPE
// at 44-60% of DRAM bandwidth, bench/RESULTS.md 2026-12-08) to 80 (kMinBlocks).
#include "kernels/common.cuh"
#include "kernels/qkv_rope.cuh"

namespace rankd::kernels {
namespace {

constexpr int kThreads = 256;

struct Bf16x8 {
  float v[8];
};

__device__ __forceinline__ Bf16x8 Unpack8(const uint4& raw) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
  Bf16x8 out;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const float2 f = __bfloat1622float2(h[k]);
    out.v[2 * k] = f.x;
    out.v[2 * k + 1] = f.y;
  }
  return out;
}

__device__ __forceinline__ uint4 LoadRaw8(const __nv_bfloat16* p) {
  return *reinterpret_cast<const uint4*>(p);
}

__device__ __forceinline__ Bf16x8 Load8(const __nv_bfloat16* p) { return Unpack8(LoadRaw8(p)); }

__device__ __forceinline__ void Store8(__nv_bfloat16* p, const Bf16x8& x) {
  uint4 raw;
  __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&raw);
#pragma unroll
  for (int k = 0; k < 4; ++k) h[k] = __floats2bfloat162_rn(x.v[2 * k], x.v[2 * k + 1]);
  *reinterpret_cast<uint4*>(p) = raw;
}

constexpr int kWarpsPerBlock = kThreads / kWarpSize;
constexpr int kHeadsPerLane = 2;  // head slots per lane, loaded together
// Blocks a multiprocessor is asked for: 3 caps registers at 85 a thread (80 used, no spills): 24
// warps, 1.5 times the 16 warps (and bytes in flight) that 125 registers allowed. (At 4 blocks, 64
// registers, ptxas spills.)
constexpr int kMinBlocks = 3;

// slot_limit: one past the launch's last slot (Nq + Nkv without v work, else Nq + 2 Nkv).
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    QkvRopeKernel(QkvRopeParams p, int chunks, int chunks_pow2, int parts, int slot_limit) {
  EnterGrid();
  const int64_t warp = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarpSize;
  const int t = static_cast<int>(warp / parts), part = static_cast<int>(warp % parts);
  const int lane = threadIdx.x % kWarpSize;
  const int c = lane % chunks_pow2, j = lane / chunks_pow2,
            heads_per_step = kWarpSize / chunks_pow2;
  const int slots = p.num_q_heads + 2 * p.num_kv_heads;
  const int first = p.skip_q ? p.num_q_heads : 0;
  const int D = p.head_dim, half = D / 2;
  // Uniform over the warp, so the whole warp takes part in the shuffles below or none of it does.
  // The live count is read beside the row's loads, not in front of them: checked first, it was a
  // round trip of its own before any load went out, which halves the bytes a warp keeps in flight
  // (this kernel moved 44% of an H200's DRAM bandwidth, 60% of an H100's). Rows at or past it are
  // inside the buffer's num_tokens rows: read, never written.
  if (t >= p.num_tokens) return;
  const int live_rows = *p.num_rows;
  const bool chunk = c < chunks;

  float cs[8], sn[8];  // (cos, sin) of pairs 8c..8c+7
  if (chunk) {
    const float4* rot =
        reinterpret_cast<const float4*>(p.rotations + static_cast<int64_t>(t) * half + 8 * c);
#pragma unroll
    for (int k2 = 0; k2 < 4; ++k2) {
      const float4 v = rot[k2];
      cs[2 * k2] = v.x;
      sn[2 * k2] = v.y;
      cs[2 * k2 + 1] = v.z;
      sn[2 * k2 + 1] = v.w;
    }
  }
  KvLayers kv;
  if (p.kv_out != nullptr) kv = *p.kv_out;
  __nv_bfloat16* row = p.qkv + static_cast<int64_t>(t) * slots * D;
  const int slot_begin = first + part * kHeadsPerLane * heads_per_step;
  const int slot_end = min(slot_limit, slot_begin + kHeadsPerLane * heads_per_step);
  // A v head with no bias and no cache to go to needs nothing: left alone, never read.
  const bool v_work = p.bias != nullptr || kv.k != nullptr;

  // Every load of the lane's heads first (2 kHeadsPerLane 16-byte loads in flight), then the math
  // and the stores: the in-place stores would otherwise keep the next head's loads behind them.
  uint4 ra[kHeadsPerLane], rb[kHeadsPerLane];  // x[8c + k], x[half + 8c + k] of each head
  bool active[kHeadsPerLane];
#pragma unroll
  for (int s = 0; s < kHeadsPerLane; ++s) {
    const int slot = slot_begin + s * heads_per_step + j;
    active[s] = chunk && slot < slot_end && (slot < p.num_q_heads + p.num_kv_heads || v_work);
    ra[s] = rb[s] = uint4{0, 0, 0, 0};  // (bf16 zeros)
    if (active[s]) {
      ra[s] = LoadRaw8(row + slot * D + 8 * c);
      rb[s] = LoadRaw8(row + slot * D + half + 8 * c);
    }
  }
  if (t >= live_rows) return;  // uniform, as above: before the shuffles and the stores
#pragma unroll
  for (int s = 0; s < kHeadsPerLane; ++s) {
    const int slot = slot_begin + s * heads_per_step + j;
    const bool is_q = slot < p.num_q_heads;
    const bool is_k = !is_q && slot < p.num_q_heads + p.num_kv_heads;
    Bf16x8 a = Unpack8(ra[s]), b = Unpack8(rb[s]);
    if (p.bias && active[s]) {
      const Bf16x8 ba = Load8(p.bias + slot * D + 8 * c);
      const Bf16x8 bb = Load8(p.bias + slot * D + half + 8 * c);
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        a.v[k] += ba.v[k];
        b.v[k] += bb.v[k];
      }
    }
    if (p.q_norm) {  // uniform: every lane takes part in the shuffles
      float ss = 0.0f;
#pragma unroll
      for (int k = 0; k < 8; ++k) ss += a.v[k] * a.v[k] + b.v[k] * b.v[k];
      for (int o = 1; o < chunks_pow2; o <<= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
      const float inv = rsqrtf(ss / static_cast<float>(D) + p.eps);
      if (active[s] && (is_q || is_k)) {
        const __nv_bfloat16* w = is_q ? p.q_norm : p.k_norm;
        const Bf16x8 wa = Load8(w + 8 * c), wb = Load8(w + half + 8 * c);
#pragma unroll
        for (int k = 0; k < 8; ++k) {
          a.v[k] *= inv * wa.v[k];
          b.v[k] *= inv * wb.v[k];
        }
      }
    }
    if (!active[s]) continue;
    if (is_q || is_k) {
#pragma unroll
      for (int k = 0; k < 8; ++k) RotatePair(a.v[k], b.v[k], cs[k], sn[k]);
    }
    __nv_bfloat16* head = row + slot * D;
    if (is_q || is_k || p.bias) {
      Store8(head + 8 * c, a);
      Store8(head + half + 8 * c, b);
    }
    if (!is_q && kv.k != nullptr) {
      const int h = is_k ? slot - p.num_q_heads : slot - p.num_q_heads - p.num_kv_heads;
      __nv_bfloat16* dst =
          (is_k ? kv.k : kv.v) + p.layer * kv.layer_stride + t * kv.row_stride + h * D;
      Store8(dst + 8 * c, a);
      Store8(dst + half + 8 * c, b);
    }
  }
}

__global__ void RopeRotationsKernel(const int32_t* __restrict__ positions,
                                    const float* __restrict__ inv_freq, int64_t n, int half,
                                    float2* __restrict__ rotations) {
  EnterGrid();
  const int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (k >= n) return;
  const int t = static_cast<int>(k / half), i = static_cast<int>(k % half);
  float s, c;
  sincosf(static_cast<float>(positions[t]) * inv_freq[i], &s, &c);
  rotations[k] = make_float2(c, s);
}

}  // namespace

cudaError_t LaunchQkvRope(const QkvRopeParams& p, LaunchStream stream) {
  if (p.head_dim <= 0 || p.head_dim % 16 != 0 || p.head_dim > kQkvRopeMaxHeadDim) {
    return cudaErrorInvalidValue;
  }
  const int chunks = p.head_dim / 16;
  int chunks_pow2 = 1;
  while (chunks_pow2 < chunks) chunks_pow2 *= 2;
  if (p.skip_q && (p.bias != nullptr || p.q_norm != nullptr)) return cudaErrorInvalidValue;
  if (p.num_tokens == 0) return cudaSuccess;
  // The v heads take part where they have a bias or may have a K/V cache to fill (the kernel
  // reads kv_out's entry; a null k there leaves them alone).
  const bool v_heads = p.bias != nullptr || p.kv_out != nullptr;
  const int slot_limit = p.num_q_heads + p.num_kv_heads * (v_heads ? 2 : 1);
  const int slots = slot_limit - (p.skip_q ? p.num_q_heads : 0);
  const int parts = static_cast<int>(CeilDiv(slots, kHeadsPerLane * (kWarpSize / chunks_pow2)));
  return LaunchKernel(QkvRopeKernel,
                      CeilDiv(static_cast<int64_t>(p.num_tokens) * parts, kWarpsPerBlock), kThreads,
                      0, stream, p, chunks, chunks_pow2, parts, slot_limit);
}

cudaError_t LaunchRopeRotations(const int32_t* positions, const float* inv_freq, int num_tokens,
                                int half, float2* rotations, LaunchStream stream) {
  const int64_t n = static_cast<int64_t>(num_tokens) * half;
  if (n == 0) return cudaSuccess;
  return LaunchKernel(RopeRotationsKernel, CeilDiv(n, 256), 256, 0, stream, positions, inv_freq, n,
                      half, rotations);
}

}  // namespace rankd::kernels
