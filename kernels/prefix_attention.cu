// Prefix attention, FlashAttention-2 style on mma.sync.m16n8k16 (bf16 in, fp32 accumulate).
//
// Thread mapping: block (blockIdx.x = tile, blockIdx.y = kv head) of 4 warps handles 64 query rows
// of one segment (row r = token r / G, q head kv_head * G + r % G); warp w owns rows 16w..16w+15.
// In the mma fragments, lane (g = lane / 4, c = lane % 4) holds rows g and g + 8 and, of each
// 8-key (or 8-dim) column group, columns 2c and 2c + 1. The block walks the keys [context ++ own
// tokens up to its last token] in tiles of 64: all 128 threads load the K tile ([key][dim],
// 16-byte loads) and the V tile transposed ([dim][key]) into shared memory; each warp computes
// S = Q K^T (Q fragments stay in registers), masks (causal over own tokens), updates the running
// row max and sum (online softmax in fp32, exp2 domain), rescales its O accumulators, and adds
// P V with P re-packed from the S accumulators to bf16 A fragments (no shared-memory round trip).
// Rows of the shared-memory tiles are padded by 8 bf16 so the fragment loads are bank-conflict
// free.
#include "kernels/common.cuh"
#include "kernels/prefix_attention.cuh"

namespace rankd::kernels {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * kWarpSize;
constexpr int kKeys = 64;  // keys per K/V tile
static_assert(kAttentionTileRows == kWarps * 16, "one 16-row mma tile per warp");

__device__ __forceinline__ uint32_t Load32(const __nv_bfloat16* p) {
  return *reinterpret_cast<const uint32_t*>(p);
}

__device__ __forceinline__ uint32_t PackBf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

// c[16x8] += a[16x16] . b[16x8], bf16 inputs, fp32 accumulators.
__device__ __forceinline__ void Mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <int D>
__global__ void __launch_bounds__(kThreads) PrefixAttentionKernel(PrefixAttentionParams p) {
  constexpr int kStrideK = D + 8;      // ks row: one key's D dims (+ pad)
  constexpr int kStrideV = kKeys + 8;  // vt row: one dim over the tile's keys (+ pad)
  __shared__ __align__(16) __nv_bfloat16 ks[kKeys * kStrideK];  // [64 keys][D] bf16
  __shared__ __align__(16) __nv_bfloat16 vt[D * kStrideV];      // [D][64 keys] bf16

  const int2 tile = p.tiles[blockIdx.x];
  const int seg = tile.x, row0 = tile.y, kvh = blockIdx.y;
  const int seg_begin = p.seg_offsets[seg];
  const int len = p.seg_offsets[seg + 1] - seg_begin;
  const int ctx = p.seg_ctx_len[seg];
  const int group = p.num_q_heads / p.num_kv_heads;
  const int rows = len * group;
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int g = lane / 4, c = lane % 4;
  const int64_t q_stride = static_cast<int64_t>(p.num_q_heads) * D;
  const int64_t kv_stride = static_cast<int64_t>(p.num_kv_heads) * D;

  // The two query rows of this thread: [0] = row g, [1] = row g + 8 of the warp's 16.
  int tok[2], head[2];
  bool valid[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int pr = row0 + warp * 16 + g + 8 * r;
    valid[r] = pr < rows;
    const int prc = valid[r] ? pr : rows - 1;  // padding rows compute a copy of the last row
    tok[r] = prc / group;
    head[r] = kvh * group + prc % group;
  }

  // Q as A fragments: qf[kk] covers dims 16kk..16kk+15.
  uint32_t qf[D / 16][4];
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const __nv_bfloat16* qrow =
          p.q + (seg_begin + tok[r]) * q_stride + head[r] * D + kk * 16 + 2 * c;
      qf[kk][r] = Load32(qrow);
      qf[kk][2 + r] = Load32(qrow + 8);
    }
  }

  float o[D / 8][4];
#pragma unroll
  for (int dt = 0; dt < D / 8; ++dt) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY};  // running row max (scaled, log2 domain)
  float l[2] = {0.0f, 0.0f};            // running row sum (this thread's columns)
  const float scale = rsqrtf(static_cast<float>(D)) * 1.4426950408889634f;  // 1/sqrt(D) * log2(e)

  // Keys this block needs: the whole context, and own tokens up to its last query row's token.
  const int last_tok = (min(rows, row0 + kAttentionTileRows) - 1) / group;
  const int num_keys = ctx + last_tok + 1;

  for (int key0 = 0; key0 < num_keys; key0 += kKeys) {
    __syncthreads();  // the previous tile's readers are done
    for (int ch = threadIdx.x; ch < kKeys * D / 8; ch += kThreads) {
      const int i = ch / (D / 8), d0 = (ch % (D / 8)) * 8;
      const int j = key0 + i;
      uint4 kv = make_uint4(0, 0, 0, 0), vv = make_uint4(0, 0, 0, 0);  // zeros past the end
      if (j < num_keys) {
        const __nv_bfloat16 *kp, *vp;
        if (j < ctx) {
          const int64_t off = j * kv_stride + kvh * D + d0;
          kp = p.ctx_k + off;
          vp = p.ctx_v + off;
        } else {
          const int64_t off = (seg_begin + j - ctx) * kv_stride + kvh * D + d0;
          kp = p.k + off;
          vp = p.v + off;
        }
        kv = *reinterpret_cast<const uint4*>(kp);
        vv = *reinterpret_cast<const uint4*>(vp);
      }
      *reinterpret_cast<uint4*>(&ks[i * kStrideK + d0]) = kv;
      const __nv_bfloat16* ve = reinterpret_cast<const __nv_bfloat16*>(&vv);
#pragma unroll
      for (int e = 0; e < 8; ++e) vt[(d0 + e) * kStrideV + i] = ve[e];
    }
    __syncthreads();

    // S = Q K^T over the tile's 64 keys: 8 column groups of 8 keys.
    float s[kKeys / 8][4];
#pragma unroll
    for (int nt = 0; nt < kKeys / 8; ++nt) {
      s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        const __nv_bfloat16* kp = &ks[(nt * 8 + g) * kStrideK + kk * 16 + 2 * c];
        Mma16816(s[nt], qf[kk], Load32(kp), Load32(kp + 8));
      }
    }

    // Mask, scale, row max over the quad (the 4 lanes that share rows g and g + 8).
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nt = 0; nt < kKeys / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e / 2;
        const int key = key0 + nt * 8 + 2 * c + (e & 1);
        const bool visible = key < ctx + tok[r] + 1;  // context, then own tokens 0..tok
        s[nt][e] = visible ? s[nt][e] * scale : -INFINITY;
        mx[r] = fmaxf(mx[r], s[nt][e]);
      }
    }
    float alpha[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
      const float m_new = fmaxf(m[r], mx[r]);
      // Key 0 is visible to every row, so m_new is finite from the first tile on; the guards
      // keep a fully masked row at zeros rather than NaN all the same.
      alpha[r] = m[r] == -INFINITY ? 0.0f : exp2f(m[r] - m_new);
      m[r] = m_new;
    }
    float rs[2] = {0.0f, 0.0f};
#pragma unroll
    for (int nt = 0; nt < kKeys / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e / 2;
        s[nt][e] = m[r] == -INFINITY ? 0.0f : exp2f(s[nt][e] - m[r]);
        rs[r] += s[nt][e];
      }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) l[r] = l[r] * alpha[r] + rs[r];
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt) {
      o[dt][0] *= alpha[0];
      o[dt][1] *= alpha[0];
      o[dt][2] *= alpha[1];
      o[dt][3] *= alpha[1];
    }

    // O += P V: P's 16-key slices become A fragments straight from the S accumulators.
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) {
      const uint32_t pa[4] = {PackBf16(s[2 * kk][0], s[2 * kk][1]),
                              PackBf16(s[2 * kk][2], s[2 * kk][3]),
                              PackBf16(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                              PackBf16(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
      for (int dt = 0; dt < D / 8; ++dt) {
        const __nv_bfloat16* vp = &vt[(dt * 8 + g) * kStrideV + kk * 16 + 2 * c];
        Mma16816(o[dt], pa, Load32(vp), Load32(vp + 8));
      }
    }
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    if (!valid[r]) continue;
    const float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
    __nv_bfloat16* orow = p.out + (seg_begin + tok[r]) * q_stride + head[r] * D + 2 * c;
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt) {
      *reinterpret_cast<uint32_t*>(orow + dt * 8) =
          PackBf16(o[dt][2 * r] * inv, o[dt][2 * r + 1] * inv);
    }
  }
}

template <int D>
cudaError_t Launch(const PrefixAttentionParams& p, cudaStream_t stream) {
  const dim3 grid(p.num_tiles, p.num_kv_heads);
  PrefixAttentionKernel<D><<<grid, kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace

bool PrefixAttentionSupportsHeadDim(int head_dim) {
  return head_dim >= 16 && head_dim <= 128 && head_dim % 16 == 0;
}

cudaError_t LaunchPrefixAttention(const PrefixAttentionParams& p, cudaStream_t stream) {
  if (p.num_kv_heads <= 0 || p.num_q_heads % p.num_kv_heads != 0) return cudaErrorInvalidValue;
  if (p.num_tiles == 0) return cudaSuccess;
  switch (p.head_dim) {
    case 16:
      return Launch<16>(p, stream);
    case 32:
      return Launch<32>(p, stream);
    case 48:
      return Launch<48>(p, stream);
    case 64:
      return Launch<64>(p, stream);
    case 80:
      return Launch<80>(p, stream);
    case 96:
      return Launch<96>(p, stream);
    case 112:
      return Launch<112>(p, stream);
    case 128:
      return Launch<128>(p, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace rankd::kernels
