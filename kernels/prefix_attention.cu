// Prefix attention, FlashAttention-2 style on mma.sync.m16n8k16 (bf16 in, fp32 accumulate).
//
// Thread mapping: a persistent grid of 128-thread blocks (4 warps); each block takes work unit
// blockIdx.x, then others from a queue (an atomic counter, from unit gridDim.x on): unit u is tile
// u / Nkv of the tile list (64 consecutive query rows of one run, row r = token r / G, q head
// kv_head * G + r % G) for kv head u % Nkv. Warp w owns rows 16w..16w+15 of the tile. In the mma
// fragments, lane (g = lane / 4, c = lane % 4) holds rows g and g + 8 and, of each 8-key (or 8-dim)
// column group, columns 2c and 2c + 1. The block walks the tile's keys [run context ++ own rows
// from the segment start of its first token to its last token] in tiles of 64: all 128 threads copy
// the K and V tiles ([key][dim] each, 16-byte cp.async, zero-filled past the end) into shared
// memory, two stages deep where both stages fit in 48 KB (D <= 64), so the next tile's copy
// overlaps this tile's math. Each warp computes S = Q K^T (Q fragments stay in registers, rotated
// there by RoPE when q_rotations is given; K fragments by ldmatrix), masks (context, then own rows
// of the query's segment up to the query; only in key tiles that some row of the warp does not see
// whole), updates the running row max and sum (online softmax in fp32, exp2 domain), rescales its O
// accumulators, and adds P V with P re-packed from the S accumulators to bf16 A fragments and V
// fragments by ldmatrix.trans (no transposed copy). Rows of the shared-memory tiles are padded by 8
// bf16 (16 bytes), so the 8 row addresses of each ldmatrix fall in distinct bank groups. Thread 0
// takes the block's next unit from the queue while the block works on the current one; the
// pipelined kernel (opt-in) also prefetches the next unit's tile, context entry and first K/V tile
// under the current one's work (PrefixAttentionPipelinedKernel's comment has the order).
//
// The wgmma variants (PrefixAttentionParams::wgmma; sm_90a, D of 64 or 128) run the same units,
// masks and softmax with the block's 4 warps as one warpgroup: S = Q K^T is D / 16 wgmma
// m64n64k16 with Q's fragments from registers (the mma.sync A fragment is wgmma's register A
// fragment) and K from shared memory; O += P V is 4 wgmma m64nDk16 with P from registers and V
// from shared memory read transposed (MN-major). wgmma's accumulator fragments are mma.sync's per
// 8-column group, so masking, softmax and the output are the same code. K/V tiles are stored in
// the 128-byte swizzle ([D / 64][64 keys][64 dims], chunk j of key i at j ^ (i % 8)) that both
// operands' descriptors describe; copied by cp.async and fenced to the async proxy before the
// barrier that hands them to wgmma. fp32 sums in another order: not the mma.sync kernels' bits.
// The wgmma queue kernel also comes in blocks of 2 or 3 warpgroups (PrefixAttentionParams::
// warpgroups) over units of 128 or 192 rows: one copy of each K/V tile for all of them, which
// divides the unit's K/V reads from L2 (over a long prefix, most of its traffic) by the warpgroups.
#include <mutex>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/common.cuh"
#include "kernels/prefix_attention.cuh"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define RANKD_ATTENTION_WGMMA_DEVICE 1
#else
#define RANKD_ATTENTION_WGMMA_DEVICE 0
#endif

namespace rankd::kernels {
namespace {

// This compilation pass has wgmma (sm_90a).
constexpr bool kWgmmaDevice = RANKD_ATTENTION_WGMMA_DEVICE != 0;

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * kWarpSize;
constexpr int kKeys = 64;  // keys per K/V tile
// Resident blocks a multiprocessor is asked for. For D <= 64, 3 keeps registers at or below 168 a
// thread whatever the compiler would pick (162 today; at ~180 only 2 blocks fit, and 4 blocks at
// 128 registers measured slower); wider heads keep what the compiler picks (a cap spills there).
template <int D>
inline constexpr int kMinBlocks = D <= 64 ? 3 : 1;
static_assert(kAttentionTileRows == kWarps * 16, "one 16-row mma tile per warp");
// The wgmma queue kernel of kWgs warpgroups (PrefixAttentionParams::warpgroups): 128 kWgs threads,
// units of 64 kWgs query rows. At D 64, 2 warpgroups are capped at 128 registers (two blocks a
// multiprocessor) and 3 take the compiler's ~165 (one block); at D 128, 2 take ~240 (one block).
template <int D>
inline constexpr int kMaxWarpgroupsOf = D <= 64 ? kMaxAttentionWarpgroups : 2;
template <int kWgs>
inline constexpr int kThreadsOf = kWgs* kThreads;
template <int D, int kWgs>
inline constexpr int kMinBlocksOf = kWgs == 1 ? kMinBlocks<D> : (D <= 64 && kWgs == 2 ? 2 : 1);

// A K or V tile in shared memory. mma.sync (W false): kKeys rows of one key's D dims and a 16-byte
// pad (ldmatrix's 8 row addresses then fall in distinct bank groups). wgmma (W true): D / 64
// blocks of kKeys 128-byte rows (64 dims of a key), each row in the 128-byte swizzle.
template <int D>
inline constexpr int kSmemStride = D + 8;
template <int D, bool W>
inline constexpr int kSmemTile = W ? kKeys* D : kKeys*(D + 8);
// The wgmma operands' swizzle atom: 8 rows of 128 bytes.
constexpr int kSwizzleAtom = 1024;
static_assert(kKeys * 128 % kSwizzleAtom == 0, "a 64-dim block of a tile is whole atoms");

// Shared-memory stages of K/V tiles: two when both fit in the 48 KB of static shared memory.
template <int D, bool W>
inline constexpr int kStages = 2 * 2 * kSmemTile<D, W> * 2 <= 48 * 1024 ? 2 : 1;
// The overlapped wgmma loop's shared memory (dynamic: 64 KB at D 128): rings of two K and two V
// tiles, and room to start them at a 1024-byte boundary.
template <int D>
inline constexpr int kOverlapSmemBytes = 4 * kSmemTile<D, true> * 2 + 1024;

// Where dims d0..d0+7 (d0 a multiple of 8) of key i sit in a tile, in elements.
template <int D, bool W>
__device__ __forceinline__ int SmemOffset(int i, int d0) {
  if constexpr (W) {
    return (d0 / 64) * (kKeys * 64) + i * 64 + ((((d0 % 64) / 8) ^ (i % 8)) * 8);
  } else {
    return i * kSmemStride<D> + d0;
  }
}

__device__ __forceinline__ uint32_t Load32(const __nv_bfloat16* p) {
  return *reinterpret_cast<const uint32_t*>(p);
}

// 16 bytes from global memory that the compiler must load again here.
__device__ __forceinline__ int4 LoadVolatile16(const void* p) {
  int4 v;
  asm volatile("ld.global.v4.s32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

__device__ __forceinline__ uint32_t PackBf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

__device__ __forceinline__ uint32_t SmemAddress(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared, asynchronously; zeros when !valid (src is then not read).
__device__ __forceinline__ void CopyAsync16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(SmemAddress(dst)), "l"(src),
               "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void CopyAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void CopyAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// Four 8x8 bf16 matrices; lanes 8i..8i+7 give the row addresses of matrix i, and r[i] gets
// element (g, 2c..2c+1) of matrix i (of its transpose with .trans).
__device__ __forceinline__ void LoadMatrix4(uint32_t (&r)[4], const __nv_bfloat16* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SmemAddress(p)));
}
__device__ __forceinline__ void LoadMatrix4Trans(uint32_t (&r)[4], const __nv_bfloat16* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SmemAddress(p)));
}

// 2^x in one MUFU instruction (results below 2^-126 flush to 0; -inf gives 0).
__device__ __forceinline__ float Exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// c[16x8] += a[16x16] . b[16x8], bf16 inputs, fp32 accumulators.
__device__ __forceinline__ void Mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// wgmma (sm_90a; the bodies trap in other compilation passes, whose wgmma kernels never run).
__device__ __forceinline__ void WgmmaFence() {
#if RANKD_ATTENTION_WGMMA_DEVICE
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void WgmmaCommit() {
#if RANKD_ATTENTION_WGMMA_DEVICE
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
// Until at most N of the warpgroup's committed wgmma groups are still running.
template <int N>
__device__ __forceinline__ void WgmmaWait() {
#if RANKD_ATTENTION_WGMMA_DEVICE
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}
__device__ __forceinline__ void WgmmaCommitAndWait() {
  WgmmaCommit();
  WgmmaWait<0>();
}
// cp.async's writes to shared memory, visible to wgmma's (async proxy) reads after the barrier.
__device__ __forceinline__ void FenceProxyAsyncShared() {
#if RANKD_ATTENTION_WGMMA_DEVICE
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}
// Keeps the compiler from reading accumulators before the wgmma that writes them is waited for.
template <int N>
__device__ __forceinline__ void FenceAcc(float (&d)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i) {
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(d[i][e])::"memory");
  }
}

// Keeps registers that a running wgmma reads (its A fragments) from being reused before the wait
// that ends it: the compiler sees them read here, after the wait.
template <int N>
__device__ __forceinline__ void KeepAlive(const uint32_t (&a)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i) {
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" ::"r"(a[i][e]) : "memory");
  }
}

// Descriptors of a tile's 128-byte swizzled rows (1024-byte atoms, so the base offset is 0):
// K-major (K for S = Q K^T: the start advances 32 bytes a K step of 16 dims inside a row, LBO
// unused) and MN-major (V for O += P V: 8-key groups 1024 bytes apart (SBO), 64-dim blocks a
// block of rows apart (LBO); the start advances 16 rows a K step of 16 keys).
__device__ __forceinline__ uint64_t DescKMajor(uint32_t addr) {
  return ((addr & 0x3FFFF) >> 4) | (uint64_t{1} << 16) | (uint64_t{kSwizzleAtom >> 4} << 32) |
         (uint64_t{1} << 62);
}
__device__ __forceinline__ uint64_t DescMnMajor(uint32_t addr) {
  return ((addr & 0x3FFFF) >> 4) | (uint64_t{(kKeys * 128) >> 4} << 16) |
         (uint64_t{kSwizzleAtom >> 4} << 32) | (uint64_t{1} << 62);
}

// d[64 x 8N] += a[64 x 16] . B[16 x 8N]: a from registers (per warp, the mma.sync m16n8k16 A
// fragment of its 16 rows), B by descriptor (kTransB 0: K-major, 1: MN-major); d's fragment is
// mma.sync's C fragment per 8-column group (d[j][e]: row g + 8 (e / 2), column 8j + 2c + e % 2).
template <int kTransB>
__device__ __forceinline__ void WgmmaRs(float (&d)[8][4], const uint32_t (&a)[4], uint64_t desc_b) {
#if RANKD_ATTENTION_WGMMA_DEVICE
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, 1, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%"
      "24,%25,%26,%27,%28,%29,%30,%31}, "
      "{%32, %33, %34, %35}, %36, p, 1, 1, %37;\n"
      "}\n"
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]),
        "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),
        "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]),
        "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),
        "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]),
        "+f"(d[7][2]), "+f"(d[7][3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "n"(kTransB));
#else
  __trap();
#endif
}

template <int kTransB>
__device__ __forceinline__ void WgmmaRs(float (&d)[16][4], const uint32_t (&a)[4],
                                        uint64_t desc_b) {
#if RANKD_ATTENTION_WGMMA_DEVICE
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, 1, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%"
      "24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%"
      "46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, "
      "{%64, %65, %66, %67}, %68, p, 1, 1, %69;\n"
      "}\n"
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]),
        "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),
        "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]),
        "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),
        "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]),
        "+f"(d[7][2]), "+f"(d[7][3]), "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]),
        "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]), "+f"(d[10][0]), "+f"(d[10][1]),
        "+f"(d[10][2]), "+f"(d[10][3]), "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]),
        "+f"(d[11][3]), "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]),
        "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]), "+f"(d[14][0]),
        "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]), "+f"(d[15][0]), "+f"(d[15][1]),
        "+f"(d[15][2]), "+f"(d[15][3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "n"(kTransB));
#else
  __trap();
#endif
}

// Max / sum of row r's (0: g, 1: g + 8) N * 2 accumulator values of s[N][4], as a tree.
template <int R, int N>
__device__ __forceinline__ float TreeMax(const float (&s)[N][4]) {
  float v[N];
#pragma unroll
  for (int i = 0; i < N; ++i) v[i] = fmaxf(s[i][2 * R], s[i][2 * R + 1]);
#pragma unroll
  for (int w = N / 2; w > 0; w /= 2) {
#pragma unroll
    for (int i = 0; i < w; ++i) v[i] = fmaxf(v[i], v[i + w]);
  }
  return v[0];
}
template <int R, int N>
__device__ __forceinline__ float TreeSum(const float (&s)[N][4]) {
  float v[N];
#pragma unroll
  for (int i = 0; i < N; ++i) v[i] = s[i][2 * R] + s[i][2 * R + 1];
#pragma unroll
  for (int w = N / 2; w > 0; w /= 2) {
#pragma unroll
    for (int i = 0; i < w; ++i) v[i] += v[i + w];
  }
  return v[0];
}

// The two query rows of this thread: [0] = row g, [1] = row g + 8 of warp `warp`'s 16 in the
// tile. tok is the row of the pass, head its query head.
__device__ __forceinline__ void QueryRows(const AttentionTile& tile, int kvh, int group,
                                          FastDivmod group_div, int warp, int g, int (&tok)[2],
                                          int (&head)[2]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int pr = tile.row0 + warp * 16 + g + 8 * r;
    const int prc = pr < tile.rows ? pr : tile.rows - 1;  // padding rows copy the last row
    const int t = group_div.Div(prc);
    tok[r] = tile.begin + t;
    head[r] = kvh * group + group_div.Mod(prc, t);
  }
}

// The context's K/V of this layer (null, stride 0 without context).
struct ContextKv {
  const __nv_bfloat16* k = nullptr;
  const __nv_bfloat16* v = nullptr;
  int stride = 0;  // elements (row strides are far below 2^31)
};

// The context's K/V of this layer for `tile`, whose entry of the context table is `cl` (read in
// global memory by the queue kernel, in the pipelined kernel's shared-memory copy); null without
// context rows, when `cl` is not read.
__device__ __forceinline__ ContextKv LayerContextKv(const PrefixAttentionParams& p,
                                                    const AttentionTile& tile, const KvLayers& cl) {
  ContextKv cx;
  if (tile.ctx_len > 0) {
    cx.k = cl.k + p.layer * cl.layer_stride;
    cx.v = cl.v + p.layer * cl.layer_stride;
    cx.stride = static_cast<int>(cl.row_stride);
  }
  return cx;
}

// Q as A fragments: qf[kk] covers dims 16kk..16kk+15.
template <int D>
__device__ __forceinline__ void LoadQ(const PrefixAttentionParams& p, const int (&tok)[2],
                                      const int (&head)[2], int c, uint32_t (&qf)[D / 16][4]) {
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const __nv_bfloat16* qrow = p.q + tok[r] * p.q_row_stride + head[r] * D + kk * 16 + 2 * c;
      qf[kk][r] = Load32(qrow);
      qf[kk][2 + r] = Load32(qrow + 8);
    }
  }
}

// RoPE of q, when rotations are given: register qf[b / 2][2 (b % 2) + r] holds dims 8b + 2c and
// 8b + 2c + 1 of row r; their partners (+ D/2) sit in block b + D/16 of the same lane, and the two
// pairs' (cos, sin) are one float4 of the rotation table.
template <int D>
__device__ __forceinline__ void RotateQ(const float2* rotations, const int (&tok)[2], int c,
                                        uint32_t (&qf)[D / 16][4]) {
  constexpr int kHalfBlocks = D / 16;
  float4 rot[kHalfBlocks][2];
  const bool rotate_q = rotations != nullptr;
  if (rotate_q) {
#pragma unroll
    for (int b = 0; b < kHalfBlocks; ++b) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        rot[b][r] = *reinterpret_cast<const float4*>(
            rotations + static_cast<int64_t>(tok[r]) * (D / 2) + 8 * b + 2 * c);
      }
    }
  }
  if (rotate_q) {
#pragma unroll
    for (int b = 0; b < kHalfBlocks; ++b) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        uint32_t& x2 = qf[b / 2][2 * (b % 2) + r];
        uint32_t& y2 = qf[(b + kHalfBlocks) / 2][2 * ((b + kHalfBlocks) % 2) + r];
        float2 x = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&x2));
        float2 y = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&y2));
        RotatePair(x.x, y.x, rot[b][r].x, rot[b][r].y);
        RotatePair(x.y, y.y, rot[b][r].z, rot[b][r].w);
        x2 = PackBf16(x.x, x.y);
        y2 = PackBf16(y.x, y.y);
      }
    }
  }
}

// Where a work unit's keys come from, for its kv head: the whole context, then own rows own_lo ..
// the tile's last token. Key j is context row j (j < ctx_len) or own row j + own_shift.
struct KeySource {
  const __nv_bfloat16* ctx_k;
  const __nv_bfloat16* ctx_v;
  const __nv_bfloat16* own_k;
  const __nv_bfloat16* own_v;
  int ctx_len;
  int ctx_stride;  // elements
  int own_shift;   // own_lo - ctx_len
  int own_stride;  // elements
  int num_keys;
};

// The keys of `tile` for kv head kvh: its context (cx) then the layer's own rows.
template <int D>
__device__ __forceinline__ KeySource UnitKeys(const PrefixAttentionParams& p,
                                              const AttentionTile& tile, const ContextKv& cx,
                                              int kvh) {
  return KeySource{.ctx_k = cx.k + kvh * D,
                   .ctx_v = cx.v + kvh * D,
                   .own_k = p.own.k + p.layer * p.own.layer_stride + kvh * D,
                   .own_v = p.own.v + p.layer * p.own.layer_stride + kvh * D,
                   .ctx_len = tile.ctx_len,
                   .ctx_stride = cx.stride,
                   .own_shift = tile.own_lo - tile.ctx_len,
                   .own_stride = static_cast<int>(p.own.row_stride),
                   .num_keys = tile.num_keys};
}

// 32 bytes global -> shared, asynchronously (two 16-byte copies in the caller's open group).
__device__ __forceinline__ void CopyAsync32(void* dst, const void* src) {
  CopyAsync16(dst, src, true);
  CopyAsync16(static_cast<char*>(dst) + 16, static_cast<const char*>(src) + 16, true);
}

// Copies key tile `kt`'s keys (kK) and values (kV) into stage `st` of ks / vs (one commit group):
// 16-byte chunks, D / 8 per key; past num_keys, zeros (the source is then own row 0, never read).
// kT threads of the block share the copy. Where kT is a multiple of a key's chunks (every wgmma
// kernel; mma.sync at D 16, 32, 64, 128), each thread copies one column of chunks (d0 fixed) of
// keys kRowStep apart, at shared-memory offsets a constant apart (kRowStep is a multiple of the
// swizzle's 8 rows): a fully unrolled loop of selects and one wide multiply a chunk, no division
// (a strided loop over chunk indices compiled to a general loop with signed divisions, about 200
// instructions a warp a tile at D 64: the SASS of bench/results/2026-12-08-session44/
// sass_attn50.csv.gz).
template <int D, bool W, bool kK = true, bool kV = true, int kT = kThreads>
__device__ __forceinline__ void CopyKeyTile(const KeySource& src, int kt, int st, __nv_bfloat16* ks,
                                            __nv_bfloat16* vs) {
  constexpr int kChunksPerKey = D / 8;
  constexpr int kChunks = kKeys * kChunksPerKey;
  constexpr int kPerThread = (kChunks + kT - 1) / kT;
  constexpr bool kColumn = kT % kChunksPerKey == 0;  // a thread's chunks share d0
  constexpr int kRowStep = kT / kChunksPerKey;
  static_assert(!kColumn || !W || kRowStep % 8 == 0, "a thread's rows share the swizzle phase");
  const unsigned tid = threadIdx.x;
  const int i0 = static_cast<int>(tid / kChunksPerKey);
  const int d00 = static_cast<int>(tid % kChunksPerKey) * 8;
  const int dst0 = st * kSmemTile<D, W> + SmemOffset<D, W>(i0, d00);
  constexpr int kRowElems = W ? 64 : kSmemStride<D>;  // elements from key i to key i + 1
#pragma unroll
  for (int u = 0; u < kPerThread; ++u) {
    int i = i0 + u * kRowStep, d0 = d00, dst = dst0 + u * kRowStep * kRowElems;
    if constexpr (!kColumn) {
      const unsigned ch = tid + static_cast<unsigned>(u * kT);
      i = static_cast<int>(ch / kChunksPerKey);
      d0 = static_cast<int>(ch % kChunksPerKey) * 8;
      dst = st * kSmemTile<D, W> + SmemOffset<D, W>(i, d0);
    }
    if (kChunks % kT != 0 && i >= kKeys) break;  // (threads past the tile's last chunk)
    const int j = kt * kKeys + i;
    const bool in_ctx = j < src.ctx_len, valid = j < src.num_keys;
    const int row = in_ctx ? j : (valid ? j + src.own_shift : 0);
    const int64_t off = static_cast<int64_t>(row) * (in_ctx ? src.ctx_stride : src.own_stride) + d0;
    if constexpr (kK) CopyAsync16(ks + dst, (in_ctx ? src.ctx_k : src.own_k) + off, valid);
    if constexpr (kV) CopyAsync16(vs + dst, (in_ctx ? src.ctx_v : src.own_v) + off, valid);
  }
  CopyAsyncCommit();
}

// Waits until key tile kt has landed in stage (base + kt) % kStages, issuing first the copy that
// the stages leave room for: tile kt + 1 (two stages), or tile kt itself (one stage; tile 0 was
// issued before the loop, and the stage is free again after the last barrier). The calling thread's
// older commit groups (thread 0's prefetches of the next unit's tile and context) land too. For
// wgmma (W), the thread's landed copies are then fenced to the async proxy.
template <int D, bool W, int kT = kThreads>
__device__ __forceinline__ void AwaitKeyTile(const KeySource& src, int kt, int num_key_tiles,
                                             int base, __nv_bfloat16* ks, __nv_bfloat16* vs) {
  if (kStages<D, W> == 1) {
    if (kt > 0) CopyKeyTile<D, W, true, true, kT>(src, kt, 0, ks, vs);
    CopyAsyncWait<0>();
  } else if (kt + 1 < num_key_tiles) {
    CopyKeyTile<D, W, true, true, kT>(src, kt + 1, (base + kt + 1) % kStages<D, W>, ks, vs);
    CopyAsyncWait<1>();  // tile kt has landed; kt + 1 may still be in flight
  } else {
    CopyAsyncWait<0>();
  }
  if constexpr (W) FenceProxyAsyncShared();
}

// Which keys the warp's rows see. Row r sees key j (an index into [context ++ own rows from
// own_lo]) iff ctx_lo[r] <= j < ctx or lo[r] <= j <= hi[r]: the context, and its own segment's rows
// up to itself. Without a window ctx_lo is 0 and lo the segment start; with window W, key j of the
// context is position j and own key j is position j - (lo - ctx) (lo before the window), the
// query's position is ctx + hi - lo, and both ranges start W - 1 positions before the query.
// Every row of the warp (consecutive rows: tokens and segment starts never decrease) sees own
// tokens [w_last_lo, w_first_tok] (maybe none): a key tile within them needs no mask, decided
// per warp. (Skipping the tiles no row of a warp sees measured no faster: bench/RESULTS.md.)
struct Visibility {
  int w_first_tok;
  int w_last_lo;
  int ctx_lo[2];
  int lo[2];
  int hi[2];
};

__device__ __forceinline__ Visibility RowVisibility(const int (&tok)[2], const int (&seg_lo)[2],
                                                    int ctx, int own_lo, int window) {
  Visibility v;
  v.w_first_tok = __shfl_sync(0xffffffffu, tok[0], 0);    // lane 0: row 0
  v.w_last_lo = __shfl_sync(0xffffffffu, seg_lo[1], 28);  // lane 28: row 15
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    v.lo[r] = ctx + seg_lo[r] - own_lo;
    v.hi[r] = ctx + tok[r] - own_lo;
    v.ctx_lo[r] = 0;
    if (window > 0) {
      const int first_pos = ctx + tok[r] - seg_lo[r] - window + 1;  // the window's first position
      v.ctx_lo[r] = max(0, first_pos);
      v.lo[r] = max(v.lo[r], v.hi[r] - window + 1);
    }
  }
  return v;
}

// wgmma: S = Q K^T over the tile's 64 keys issued (D / 16 m64n64k16, one a 16 dims), not
// committed; s is zero before (the caller's wgmma fence after).
template <int D>
__device__ __forceinline__ void IssueScores(const uint32_t (&qf)[D / 16][4],
                                            const __nv_bfloat16* kt_s, float (&s)[kKeys / 8][4]) {
  const uint32_t k_addr = SmemAddress(kt_s);
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    WgmmaRs<0>(s, qf[kk], DescKMajor(k_addr + (kk / 4) * (kKeys * 128) + 32 * (kk % 4)));
  }
}

// S = Q K^T over the tile's 64 keys: 8 column groups of 8 keys, two per ldmatrix.x4 (wgmma: one
// m64n64k16 a 16 dims).
template <int D, bool W>
__device__ __forceinline__ void ScoreKeyTile(const uint32_t (&qf)[D / 16][4],
                                             const __nv_bfloat16* kt_s, int lane,
                                             float (&s)[kKeys / 8][4]) {
#pragma unroll
  for (int nt = 0; nt < kKeys / 8; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
  if constexpr (W) {
    WgmmaFence();
    IssueScores<D>(qf, kt_s, s);
    WgmmaCommitAndWait();
    FenceAcc(s);
  } else {
#pragma unroll
    for (int np = 0; np < kKeys / 16; ++np) {
      // All of this key pair's fragments first, so the loads overlap one another.
      uint32_t b[D / 16][4];
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        LoadMatrix4(b[kk], &kt_s[((2 * np + (lane >> 4)) * 8 + (lane & 7)) * kSmemStride<D> +
                                 kk * 16 + ((lane >> 3) & 1) * 8]);
      }
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        Mma16816(s[2 * np], qf[kk], b[kk][0], b[kk][1]);
        Mma16816(s[2 * np + 1], qf[kk], b[kk][2], b[kk][3]);
      }
    }
  }
}

// Masks the raw scores of the key tile starting at key0 (scale > 0 commutes with the max taken
// next): -inf where the row does not see the key. Element (nt, e) is key key0 + 2c + nt * 8 +
// (e & 1); the bounds are shifted by key0 + 2c once, so each test compares with a constant.
__device__ __forceinline__ void MaskKeyTile(const Visibility& vis, int key0, int ctx, int c,
                                            float (&s)[kKeys / 8][4]) {
  // Branch-free (a short-circuit || here compiled to a branch per element): k sees its row iff
  // k - ctx_lo_r, as unsigned, < ctx_span_r or k - lo_r, as unsigned, <= span_r (lo <= hi always).
  const int base = key0 + 2 * c;
  // Context keys [ctx_lo, ctx): k - ctx_lo, as unsigned, < ctx - ctx_lo (empty when ctx_lo >= ctx).
  const int ctx_lo_r[2] = {vis.ctx_lo[0] - base, vis.ctx_lo[1] - base};
  const unsigned ctx_span_r[2] = {static_cast<unsigned>(max(0, ctx - vis.ctx_lo[0])),
                                  static_cast<unsigned>(max(0, ctx - vis.ctx_lo[1]))};
  const int lo_r[2] = {vis.lo[0] - base, vis.lo[1] - base};
  const unsigned span_r[2] = {static_cast<unsigned>(vis.hi[0] - vis.lo[0]),
                              static_cast<unsigned>(vis.hi[1] - vis.lo[1])};
  if (key0 >= ctx) {  // no context key in the tile (uniform)
#pragma unroll
    for (int nt = 0; nt < kKeys / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e / 2, k = nt * 8 + (e & 1);
        const bool visible = static_cast<unsigned>(k - lo_r[r]) <= span_r[r];
        s[nt][e] = visible ? s[nt][e] : -INFINITY;
      }
    }
  } else {
#pragma unroll
    for (int nt = 0; nt < kKeys / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e / 2, k = nt * 8 + (e & 1);
        const bool visible = (static_cast<unsigned>(k - ctx_lo_r[r]) < ctx_span_r[r]) |
                             (static_cast<unsigned>(k - lo_r[r]) <= span_r[r]);
        s[nt][e] = visible ? s[nt][e] : -INFINITY;
      }
    }
  }
}

// Online softmax over one key tile (fp32, exp2 domain): the running row max m over the quad (the 4
// lanes that share rows g and g + 8), s turned into probabilities, the running row sum l (this
// thread's columns) and the O accumulators rescaled to the new max.
// In two steps: SoftmaxStats (m, s, l and the rescale factor alpha of each row) and RescaleO,
// which the overlapped wgmma loop runs once the previous tile's P V is done.
__device__ __forceinline__ void SoftmaxStats(float scale, float (&s)[kKeys / 8][4], float (&m)[2],
                                             float (&l)[2], float (&alpha)[2]) {
  // Row maxima as trees (a chain of 16 dependent max per row would stall a warp that has few
  // neighbours to hide it behind).
  float mx[2] = {TreeMax<0>(s), TreeMax<1>(s)};
  float m_sub[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
    mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
    const float m_new = fmaxf(m[r], mx[r] * scale);
    // A row sees no key of a tile when the tile holds only an earlier segment's rows: its
    // max stays -inf, and subtracting 0 instead keeps exp2(-inf) = 0 rather than NaN.
    alpha[r] = m_new == -INFINITY ? 1.0f : Exp2(m[r] - m_new);
    m[r] = m_new;
    m_sub[r] = m_new == -INFINITY ? 0.0f : m_new;
  }
#pragma unroll
  for (int nt = 0; nt < kKeys / 8; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) s[nt][e] = Exp2(fmaf(s[nt][e], scale, -m_sub[e / 2]));
  }
  const float rs[2] = {TreeSum<0>(s), TreeSum<1>(s)};
#pragma unroll
  for (int r = 0; r < 2; ++r) l[r] = l[r] * alpha[r] + rs[r];
}

// O times each row's factor. Once the rows' maxima have settled (over a long context, most key
// tiles) every factor of the warp is 1 and the D / 2 multiplications are skipped: the same bits.
template <int D>
__device__ __forceinline__ void RescaleO(const float (&alpha)[2], float (&o)[D / 8][4]) {
  if (!__any_sync(0xffffffffu, alpha[0] != 1.0f || alpha[1] != 1.0f)) return;
#pragma unroll
  for (int dt = 0; dt < D / 8; ++dt) {
    o[dt][0] *= alpha[0];
    o[dt][1] *= alpha[0];
    o[dt][2] *= alpha[1];
    o[dt][3] *= alpha[1];
  }
}

template <int D>
__device__ __forceinline__ void SoftmaxUpdate(float scale, float (&s)[kKeys / 8][4], float (&m)[2],
                                              float (&l)[2], float (&o)[D / 8][4]) {
  float alpha[2];
  SoftmaxStats(scale, s, m, l, alpha);
  RescaleO<D>(alpha, o);
}

// P's 16-key slices as wgmma A fragments, straight from the S accumulators.
__device__ __forceinline__ void PackP(const float (&s)[kKeys / 8][4],
                                      uint32_t (&pa)[kKeys / 16][4]) {
#pragma unroll
  for (int kk = 0; kk < kKeys / 16; ++kk) {
    pa[kk][0] = PackBf16(s[2 * kk][0], s[2 * kk][1]);
    pa[kk][1] = PackBf16(s[2 * kk][2], s[2 * kk][3]);
    pa[kk][2] = PackBf16(s[2 * kk + 1][0], s[2 * kk + 1][1]);
    pa[kk][3] = PackBf16(s[2 * kk + 1][2], s[2 * kk + 1][3]);
  }
}

// wgmma: O += P V issued (one m64nDk16 a 16 keys, V read MN-major), not committed.
template <int D>
__device__ __forceinline__ void IssuePV(const uint32_t (&pa)[kKeys / 16][4],
                                        const __nv_bfloat16* vt_s, float (&o)[D / 8][4]) {
  const uint32_t v_addr = SmemAddress(vt_s);
#pragma unroll
  for (int kk = 0; kk < kKeys / 16; ++kk) {
    WgmmaRs<1>(o, pa[kk], DescMnMajor(v_addr + kk * 16 * 128));
  }
}

// O += P V: P's 16-key slices become A fragments straight from the S accumulators; V's
// fragments (two 8-dim column groups per ldmatrix.x4.trans) from the [key][dim] tile (wgmma: V
// read MN-major by descriptor, one m64nDk16 a 16 keys).
template <int D, bool W>
__device__ __forceinline__ void AccumulatePV(const float (&s)[kKeys / 8][4],
                                             const __nv_bfloat16* vt_s, int lane,
                                             float (&o)[D / 8][4]) {
  if constexpr (W) {
    uint32_t pa[kKeys / 16][4];
    PackP(s, pa);
    WgmmaFence();
    IssuePV<D>(pa, vt_s, o);
    WgmmaCommitAndWait();
    FenceAcc(o);
  } else {
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) {
      const uint32_t pa[4] = {PackBf16(s[2 * kk][0], s[2 * kk][1]),
                              PackBf16(s[2 * kk][2], s[2 * kk][3]),
                              PackBf16(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                              PackBf16(s[2 * kk + 1][2], s[2 * kk + 1][3])};
      uint32_t b[D / 16][4];
#pragma unroll
      for (int dp = 0; dp < D / 16; ++dp) {
        LoadMatrix4Trans(b[dp],
                         &vt_s[(kk * 16 + ((lane >> 3) & 1) * 8 + (lane & 7)) * kSmemStride<D> +
                               (2 * dp + (lane >> 4)) * 8]);
      }
#pragma unroll
      for (int dp = 0; dp < D / 16; ++dp) {
        Mma16816(o[2 * dp], pa, b[dp][0], b[dp][1]);
        Mma16816(o[2 * dp + 1], pa, b[dp][2], b[dp][3]);
      }
    }
  }
}

// Finishes the row sums over the quad and writes O / l of this thread's two rows (padding rows
// are not written). The rows' tokens and heads are worked out again from the unit's tile (its
// first query row row0, its run's first row `begin` and query rows `rows`) rather than kept live
// through the key loop.
template <int D>
__device__ __forceinline__ void StoreRows(const PrefixAttentionParams& p, int64_t q_stride,
                                          int row0, int begin, int rows, int kvh, int group,
                                          FastDivmod group_div, int warp, int g, int c,
                                          float (&l)[2], const float (&o)[D / 8][4]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    const int pr = row0 + warp * 16 + g + 8 * r;
    if (pr >= rows) continue;
    const int t = group_div.Div(pr);
    const int out_tok = begin + t, out_head = kvh * group + group_div.Mod(pr, t);
    const float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
    __nv_bfloat16* orow = p.out + out_tok * q_stride + out_head * D + 2 * c;
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt) {
      *reinterpret_cast<uint32_t*>(orow + dt * 8) =
          PackBf16(o[dt][2 * r] * inv, o[dt][2 * r + 1] * inv);
    }
  }
}

// The softmax's constants of a launch: scores are scaled into the exp2 domain (after the cap,
// when capped: s -> softcap * tanh(s * cap_in)).
struct SoftmaxScale {
  float scale;
  float cap_in;
};

__device__ __forceinline__ SoftmaxScale MakeSoftmaxScale(const PrefixAttentionParams& p) {
  constexpr float kLog2e = 1.4426950408889634f;
  return {p.softcap > 0.0f ? kLog2e : p.scale * kLog2e,
          p.softcap > 0.0f ? p.scale / p.softcap : 0.0f};
}

// What every thread of either kernel works out first: its warp and lane, the lane's fragment row
// group g and column pair c, the query heads per kv head, the output's row stride, the work
// units of the launch and the softmax's constants.
struct LaunchConstants {
  int warp, lane, g, c, group;
  int64_t q_stride;  // elements a row of out
  int num_units;
  SoftmaxScale sm;
};

template <int D>
__device__ __forceinline__ LaunchConstants MakeLaunchConstants(const PrefixAttentionParams& p) {
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  return {warp,
          lane,
          lane / 4,
          lane % 4,
          p.num_q_heads / p.num_kv_heads,
          static_cast<int64_t>(p.num_q_heads) * D,
          *p.num_units,
          MakeSoftmaxScale(p)};
}

// The raw scores of key tile kt capped (softcap) and masked where some row of the warp does not
// see the whole tile.
__device__ __forceinline__ void CapAndMask(const PrefixAttentionParams& p, SoftmaxScale sm, int c,
                                           int kt, int ctx, int own_lo, int num_keys,
                                           const Visibility& vis, float (&s)[kKeys / 8][4]) {
  if (p.softcap > 0.0f) {
#pragma unroll
    for (int nt = 0; nt < kKeys / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) s[nt][e] = p.softcap * tanhf(s[nt][e] * sm.cap_in);
    }
  }
  const int key0 = kt * kKeys;
  // A key tile that every row of the warp sees whole (context, or own rows at or before the
  // warp's first token and in the segment of its last row) needs no mask.
  const int own_first = own_lo + max(key0, ctx) - ctx;  // own tokens of the tile's keys
  const int own_last = own_lo + key0 + kKeys - 1 - ctx;
  // (With a window, every tile gets the mask.)
  const bool whole =
      p.window == 0 && key0 + kKeys <= num_keys &&
      (key0 + kKeys <= ctx || (own_first >= vis.w_last_lo && own_last <= vis.w_first_tok));
  if (!whole) MaskKeyTile(vis, key0, ctx, c, s);
}

// One key tile of a unit, landed in shared memory (kt_s, vt_s): S = Q K^T, the cap, the mask
// where some row of the warp does not see the whole tile, the online softmax and O += P V. Both
// kernels below run it between the same barriers.
template <int D, bool W>
__device__ __forceinline__ void AttendKeyTile(const PrefixAttentionParams& p, SoftmaxScale sm,
                                              const uint32_t (&qf)[D / 16][4],
                                              const __nv_bfloat16* kt_s, const __nv_bfloat16* vt_s,
                                              int lane, int c, int kt, int ctx, int own_lo,
                                              int num_keys, const Visibility& vis, float (&m)[2],
                                              float (&l)[2], float (&o)[D / 8][4]) {
  float s[kKeys / 8][4];
  ScoreKeyTile<D, W>(qf, kt_s, lane, s);
  CapAndMask(p, sm, c, kt, ctx, own_lo, num_keys, vis, s);
  SoftmaxUpdate<D>(sm.scale, s, m, l, o);
  AccumulatePV<D, W>(s, vt_s, lane, o);
}

// The key tiles that some row of a warpgroup sees (blocks of several warpgroups): every tile with
// context keys, and those holding own keys from its first row's segment start to its last row's
// token (none for a warpgroup past the unit's last row). A unit's keys run from its first row's
// segment start to its last row, so the first warpgroups pass over the keys of the later ones'
// rows and the later ones over an earlier segment's: a warpgroup skips those tiles' MMAs and
// softmax together (it still copies its share and meets the barriers). Skipping a tile that no
// row sees changes no bit: its probabilities are 0 and its maxima leave m as it was.
struct WgKeyTiles {
  int ctx_end;  // keys [0, ctx_end): context (0 for a warpgroup without rows)
  int lo, hi;   // own keys [lo, hi], as key indices
  __device__ __forceinline__ bool Sees(int kt) const {
    const int k0 = kt * kKeys;
    return k0 < ctx_end || (k0 + kKeys - 1 >= lo && k0 <= hi);
  }
};

// Warp `warp`'s warpgroup's WgKeyTiles in `tile` (uniform over the warpgroup).
__device__ __forceinline__ WgKeyTiles WarpgroupKeyTiles(const PrefixAttentionParams& p,
                                                        const AttentionTile& tile,
                                                        FastDivmod group_div, int warp) {
  const int r0 = tile.row0 + warp / 4 * kAttentionTileRows;
  if (r0 >= tile.rows) return {0, 1, 0};
  const int first = tile.begin + group_div.Div(r0);
  const int last = tile.begin + group_div.Div(min(tile.rows, r0 + kAttentionTileRows) - 1);
  return {tile.ctx_len, tile.ctx_len + p.seg_start[first] - tile.own_lo,
          tile.ctx_len + last - tile.own_lo};
}

// The overlapped wgmma loop over a unit's key tiles (PrefixAttentionParams::overlap; ks and vs
// rings of two tiles each), FlashAttention-3's intra-warpgroup pipelining: in the loop's step kt,
// S_kt = Q K_kt and O += P_{kt-1} V_{kt-1} are issued together, and tile kt's mask and softmax run
// while the second still multiplies; O is rescaled by tile kt's factor once it is done, and P_kt
// packed, for the next step to issue. The same operations on the same values as AttendKeyTile's
// order (O times tile kt's factor, then P_kt V_kt added), so the same bits. K and V have rings of
// two stages each, copied apart: K_{kt+1} at the start of step kt (its stage held K_{kt-1}, whose S
// was waited for in step kt-1), V_{kt+1} at its end (its stage held V_{kt-1}, waited for in step
// kt), so each copy has a step to land. Tile 0's K and V are in flight (one commit group) on entry;
// every thread commits the same groups (empty ones past the last tile), so that "all but the
// newest" waits mean the same tile everywhere (thread 0's older groups land with tile 0). Ends
// with every warp past its last wgmma. kSkip: the warpgroup's S, softmax and P V of the tiles it
// does not see (`seen`) are skipped. at_tile(kt) runs in every thread right after the barrier
// that hands over key tile kt (the caller's prefetch of its next unit).
template <int D, int kT, bool kSkip, typename AtTile>
__device__ __forceinline__ void AttendKeyTilesOverlapped(
    const PrefixAttentionParams& p, SoftmaxScale sm, const uint32_t (&qf)[D / 16][4],
    const KeySource& src, __nv_bfloat16* ks, __nv_bfloat16* vs, int c, int ctx, int own_lo,
    int num_keys, int num_key_tiles, const Visibility& vis, const WgKeyTiles& seen, float (&m)[2],
    float (&l)[2], float (&o)[D / 8][4], const AtTile& at_tile) {
  const auto sees = [&](int kt) { return !kSkip || seen.Sees(kt); };
  constexpr int kTile = kSmemTile<D, true>;
  if (num_key_tiles > 1) {
    CopyKeyTile<D, true, true, false, kT>(src, 1, 1, ks, vs);
    CopyKeyTile<D, true, false, true, kT>(src, 1, 1, ks, vs);
  } else {
    CopyAsyncCommit();
    CopyAsyncCommit();
  }
  CopyAsyncWait<2>();  // tile 0
  FenceProxyAsyncShared();
  __syncthreads();
  at_tile(0);
  float s[kKeys / 8][4];
  uint32_t pa[kKeys / 16][4];
  float alpha[2];
  bool prev = sees(0);  // P of the previous tile is packed in pa
  if (prev) {
    ScoreKeyTile<D, true>(qf, ks, 0, s);
    CapAndMask(p, sm, c, 0, ctx, own_lo, num_keys, vis, s);
    SoftmaxStats(sm.scale, s, m, l, alpha);
    RescaleO<D>(alpha, o);
    PackP(s, pa);
  }
  for (int kt = 1; kt < num_key_tiles; ++kt) {
    const bool more = kt + 1 < num_key_tiles;
    const bool cur = sees(kt);
    CopyAsyncWait<1>();  // K_kt and V_{kt-1}; V_kt may be in flight
    FenceProxyAsyncShared();
    __syncthreads();
    at_tile(kt);
    if (more) {
      CopyKeyTile<D, true, true, false, kT>(src, kt + 1, (kt + 1) % 2, ks, vs);
    } else {
      CopyAsyncCommit();
    }
    if (cur) {
#pragma unroll
      for (int nt = 0; nt < kKeys / 8; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
    }
    WgmmaFence();
    if (cur) IssueScores<D>(qf, ks + kt % 2 * kTile, s);
    WgmmaCommit();
    if (prev) IssuePV<D>(pa, vs + (kt - 1) % 2 * kTile, o);
    WgmmaCommit();
    WgmmaWait<1>();  // S_kt
    if (cur) {
      FenceAcc(s);
      CapAndMask(p, sm, c, kt, ctx, own_lo, num_keys, vis, s);
      SoftmaxStats(sm.scale, s, m, l, alpha);
    }
    WgmmaWait<0>();  // P_{kt-1} V_{kt-1}
    FenceAcc(o);
    KeepAlive(pa);
    if (cur) {
      RescaleO<D>(alpha, o);
      PackP(s, pa);
    }
    prev = cur;
    __syncthreads();  // every warp is done with V_{kt-1}'s stage
    if (more) {
      CopyKeyTile<D, true, false, true, kT>(src, kt + 1, (kt + 1) % 2, ks, vs);
    } else {
      CopyAsyncCommit();
    }
  }
  CopyAsyncWait<0>();  // V of the last tile
  FenceProxyAsyncShared();
  __syncthreads();
  if (prev) {
    WgmmaFence();
    IssuePV<D>(pa, vs + (num_key_tiles - 1) % 2 * kTile, o);
    WgmmaCommitAndWait();
    FenceAcc(o);
    KeepAlive(pa);
  }
  __syncthreads();  // every warp is done with the stages before the next unit's copies
}

// PrefixAttentionParams::prefetch: the loads that start work unit `unit` (of tile `tile`, in
// shared memory), asked into L1 by the block's kT threads (prefetch.global.L1, a 128-byte line
// each) while it finishes the unit before: its query rows' q (and their rotations, when q is
// rotated here) and its context entry. Its LoadQ, RotateQ and context pointers then hit L1 instead
// of waiting on L2 at the unit's start (Nsight Compute on an H100, bench/RESULTS.md 2026-12-08:
// the first use of q the Tq=50 kernel's largest stall). Nothing when unit is past the queue.
template <int D, int kT>
__device__ __forceinline__ void PrefetchUnit(const PrefixAttentionParams& p, int unit,
                                             const AttentionTile& tile, int num_units, int group,
                                             FastDivmod group_div, FastDivmod kv_div) {
  if (unit >= num_units) return;
  constexpr int kRows = kT / kWarpSize * 16;           // the unit's query rows
  constexpr int kQLines = (D * 2 + 127) / 128;         // a row's D bf16
  constexpr int kRotationLines = (D * 4 + 127) / 128;  // its D / 2 (cos, sin) pairs
  const int kvh = kv_div.Mod(unit, kv_div.Div(unit));
  const int lines = kQLines + (p.q_rotations != nullptr ? kRotationLines : 0);
  const int row0 = tile.row0, begin = tile.begin, rows = tile.rows;
  for (unsigned at = threadIdx.x; at < static_cast<unsigned>(kRows * lines); at += kT) {
    const int r = static_cast<int>(at % kRows), line = static_cast<int>(at / kRows);
    const int pr = min(row0 + r, rows - 1);  // padding rows load the last row (QueryRows)
    const int t = group_div.Div(pr);
    const int tok = begin + t;
    const char* a;
    if (line < kQLines) {
      const int head = kvh * group + group_div.Mod(pr, t);
      a = reinterpret_cast<const char*>(p.q + tok * p.q_row_stride + head * D) + line * 128;
    } else {
      a = reinterpret_cast<const char*>(p.q_rotations + static_cast<int64_t>(tok) * (D / 2)) +
          (line - kQLines) * 128;
    }
    asm volatile("prefetch.global.L1 [%0];\n" ::"l"(a));
  }
  if (threadIdx.x == kT - 1 && tile.ctx_len > 0) {
    asm volatile("prefetch.global.L1 [%0];\n" ::"l"(p.contexts + tile.ctx));
  }
}

// The queue kernel (the default): each block takes its units one at a time from the queue and
// loads each unit's tile and context entry when it starts it. kOverlap: its key tiles through
// AttendKeyTilesOverlapped (wgmma), their rings in dynamic shared memory (kOverlapSmemBytes).
// kWgs warpgroups (wgmma): warp w of the block takes rows 16w..16w+15 of a unit of 64 kWgs rows,
// every thread copies its share of each K/V tile, and each warpgroup multiplies its own rows by
// the one copy.
template <int D, bool W, bool kOverlap = false, int kWgs = 1>
__device__ __forceinline__ void QueueKernelBody(const PrefixAttentionParams& p,
                                                FastDivmod group_div, FastDivmod kv_div) {
  // Static K/V stages, or (kOverlap) a placeholder and the rings in dynamic shared memory, from
  // its first 1024-byte boundary (the swizzle's atoms).
  constexpr int kStaticElems = kOverlap ? 8 : kStages<D, W> * kSmemTile<D, W>;
  __shared__ __align__(kSwizzleAtom) __nv_bfloat16 ks_s[kStaticElems];  // [stage][tile]
  __shared__ __align__(kSwizzleAtom) __nv_bfloat16 vs_s[kStaticElems];
  __shared__ int units[2];  // this block's current and next work unit
  // With p.prefetch, their tiles (units' slots): thread 0 copies the next unit's while the block
  // works on the current one, so that a unit starts without a load from global memory.
  __shared__ __align__(16) AttentionTile unit_tiles[2];
  __nv_bfloat16* ks = ks_s;
  __nv_bfloat16* vs = vs_s;
  if constexpr (kOverlap) {
    extern __shared__ uint8_t overlap_smem[];
    const uint32_t base = SmemAddress(overlap_smem);
    ks = reinterpret_cast<__nv_bfloat16*>(overlap_smem +
                                          ((kSwizzleAtom - base % kSwizzleAtom) % kSwizzleAtom));
    vs = ks + 2 * kSmemTile<D, W>;
  }

  const auto [warp, lane, g, c, group, q_stride, num_units, sm] = MakeLaunchConstants<D>(p);

  // A block's first unit is its index (no atomic's round trip in front of the first wave's loads;
  // a small pass runs about a unit a block); the queue hands out the others, from unit gridDim.x
  // on. It is read one unit ahead: thread 0 takes the next unit while the block works on this one,
  // so the atomic's round trip to L2 is off the critical path. units[i % 2] (i >= 1) is written in
  // iteration i - 1 before that iteration's key-tile barriers and read after them; it is written
  // again in iteration i + 1, after every thread has passed iteration i's barriers. Thread 0 keeps
  // the atomic's result in a register until its unit's loads are out (next_unit below): a store
  // right after the atomic would stall warp 0 on the round trip before it even asked for its tile,
  // and the block's first barrier waits for warp 0. unit_tiles[i % 2] (p.prefetch, i >= 1) follows
  // the same rule: thread 0's copy into it (cp.async, a group of its own) has landed at its first
  // key-tile wait and is visible past the barrier after it.
  for (int it = 0;; ++it) {
    const int unit = it == 0 ? static_cast<int>(blockIdx.x) : units[it % 2];
    if (unit >= num_units) break;
    int next_unit = 0;
    if (threadIdx.x == 0) next_unit = static_cast<int>(gridDim.x) + atomicAdd(p.unit_counter, 1);
    const int tile_index = kv_div.Div(unit);
    // The unit's only dependent load (none with p.prefetch past the first unit).
    const AttentionTile tile = p.prefetch && it > 0 ? unit_tiles[it % 2] : p.tiles[tile_index];
    const int kvh = kv_div.Mod(unit, tile_index);
    const int ctx = tile.ctx_len, own_lo = tile.own_lo, num_keys = tile.num_keys;
    const int num_key_tiles = (num_keys + kKeys - 1) / kKeys;

    // Every load that needs only the tile goes out before anything waits on one (a warp issues
    // in order and stalls at the first instruction that needs a pending result): the rows'
    // segment starts, the context's entry, q and its rotations. The rotation then waits for q;
    // the first K/V copy, for the context's pointers. lo is the first row of each row's segment.
    int tok[2], head[2];
    QueryRows(tile, kvh, group, group_div, warp, g, tok, head);
    const int lo[2] = {p.seg_start[tok[0]], p.seg_start[tok[1]]};
    const ContextKv cx = ctx > 0 ? LayerContextKv(p, tile, p.contexts[tile.ctx]) : ContextKv{};
    uint32_t qf[D / 16][4];
    LoadQ<D>(p, tok, head, c, qf);
    // (Rotating before the first K/V copy is issued frees the rotations' registers.)
    RotateQ<D>(p.q_rotations, tok, c, qf);

    const KeySource src = UnitKeys<D>(p, tile, cx, kvh);
    CopyKeyTile<D, W, true, true, kThreadsOf<kWgs>>(src, 0, 0, ks, vs);
    // (Before the key tiles' first barrier, after every load of this unit is out.)
    if (threadIdx.x == 0) {
      units[(it + 1) % 2] = next_unit;
      if (p.prefetch && next_unit < num_units) {
        CopyAsync32(&unit_tiles[(it + 1) % 2], p.tiles + kv_div.Div(next_unit));
        CopyAsyncCommit();
      }
    }
    // Past the barrier that hands over the unit's last key tile, the next unit's loads go out.
    // (group and num_units copied: structured bindings are captured from C++20 on.)
    const auto at_tile = [&, group = group, num_units = num_units](int kt) {
      if (p.prefetch && kt + 1 == num_key_tiles) {
        PrefetchUnit<D, kThreadsOf<kWgs>>(p, units[(it + 1) % 2], unit_tiles[(it + 1) % 2],
                                          num_units, group, group_div, kv_div);
      }
    };

    float o[D / 8][4];
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY};  // running row max (scaled, log2 domain)
    float l[2] = {0.0f, 0.0f};            // running row sum (this thread's columns)
    const Visibility vis = RowVisibility(tok, lo, ctx, own_lo, p.window);
    // (One warpgroup sees every tile its unit walks.)
    const WgKeyTiles seen =
        kWgs > 1 ? WarpgroupKeyTiles(p, tile, group_div, warp) : WgKeyTiles{num_keys, 0, 0};

    if constexpr (kOverlap) {
      AttendKeyTilesOverlapped<D, kThreadsOf<kWgs>, (kWgs > 1)>(p, sm, qf, src, ks, vs, c, ctx,
                                                                own_lo, num_keys, num_key_tiles,
                                                                vis, seen, m, l, o, at_tile);
    } else {
      for (int kt = 0; kt < num_key_tiles; ++kt) {
        AwaitKeyTile<D, W, kThreadsOf<kWgs>>(src, kt, num_key_tiles, 0, ks, vs);
        __syncthreads();
        at_tile(kt);
        const int stage = kt % kStages<D, W>;
        if (kWgs == 1 || seen.Sees(kt)) {
          AttendKeyTile<D, W>(p, sm, qf, ks + stage * kSmemTile<D, W>, vs + stage * kSmemTile<D, W>,
                              lane, c, kt, ctx, own_lo, num_keys, vis, m, l, o);
        }
        __syncthreads();  // every warp is done with this stage before it is copied over
      }
    }
    // The tile's first three fields again (an L1 hit; volatile, so not merged with the first
    // load) rather than kept live through the key loop.
    const int4 out_tile = LoadVolatile16(p.tiles + tile_index);
    StoreRows<D>(p, q_stride, out_tile.x, out_tile.y, out_tile.z, kvh, group, group_div, warp, g, c,
                 l, o);
  }
}

// Work units the pipelined kernel holds in shared memory at once: the current one, the next
// (thread 0 prefetches its tile and context entry while the block works on the current one) and
// the previous (warps that are behind may still be storing its rows).
constexpr int kUnitSlots = 3;

// The pipelined kernel (PrefixAttentionParams::pipelined): the same units and the same math as
// PrefixAttentionKernel, with the next unit's loads issued under the current unit's work. A block's
// units: blockIdx.x, blockIdx.x + gridDim.x, then 2 gridDim.x + what the queue gives (the tiles are
// sorted longest first, so the first two waves need no queue). Thread 0 runs one unit ahead of the
// block: at the start of unit i it writes unit i + 1's number to shared memory, starts the copy of
// its tile (cp.async) and asks the queue for unit i + 2; after key tile 0's barrier (the tile has
// landed: thread 0 waited for its groups before it) it starts the copy of unit i + 1's context
// entry; both have landed before the barrier that ends unit i. With two stages and at least two
// key tiles, the block copies unit i + 1's first key tile into the free stage at the start of unit
// i's last one, so the next unit starts with its keys on the way and no dependent load (tile ->
// context entry -> keys) in front of it. Only the first unit's chain is waited for (as in the
// queue kernel).
template <int D, bool W>
__device__ __forceinline__ void PipelinedKernelBody(const PrefixAttentionParams& p,
                                                    FastDivmod group_div, FastDivmod kv_div) {
  __shared__ __align__(kSwizzleAtom)
      __nv_bfloat16 ks[kStages<D, W> * kSmemTile<D, W>];  // [stage][tile]
  __shared__ __align__(kSwizzleAtom) __nv_bfloat16 vs[kStages<D, W> * kSmemTile<D, W>];
  __shared__ __align__(16) AttentionTile unit_tile[kUnitSlots];          // each unit's tile
  __shared__ __align__(16) KvLayers unit_ctx[kUnitSlots];  // its context entry (when ctx_len > 0)
  __shared__ int unit_id[kUnitSlots];                      // the unit

  const auto [warp, lane, g, c, group, q_stride, num_units, sm] = MakeLaunchConstants<D>(p);

  int queued = blockIdx.x + gridDim.x;  // thread 0's: the unit after the current one
  int base = 0;            // the stage of the current unit's key tile 0 (mod kStages)
  bool kv0_ready = false;  // the current unit's key tile 0 was copied during the previous unit
  for (int it = 0;; ++it) {
    const int slot = it % kUnitSlots, next_slot = (it + 1) % kUnitSlots;
    // The first unit is the block's index; its tile and context entry come from global memory as
    // in the queue kernel (every thread, no barrier first); thread 0 keeps the tile for StoreRows.
    const int unit = it == 0 ? static_cast<int>(blockIdx.x) : unit_id[slot];
    if (unit >= num_units) break;
    const int tile_index = kv_div.Div(unit);
    const int kvh = kv_div.Mod(unit, tile_index);
    const AttentionTile tile = it == 0 ? p.tiles[tile_index] : unit_tile[slot];
    if (threadIdx.x == 0) {
      unit_id[next_slot] = queued;
      if (queued < num_units) {
        CopyAsync32(&unit_tile[next_slot], p.tiles + kv_div.Div(queued));
        CopyAsyncCommit();
        queued = 2 * gridDim.x + atomicAdd(p.unit_counter, 1);
      }
      if (it == 0) unit_tile[0] = tile;  // (read by StoreRows after the key tiles' barriers)
    }
    const int ctx = tile.ctx_len, own_lo = tile.own_lo, num_keys = tile.num_keys;
    const int num_key_tiles = (num_keys + kKeys - 1) / kKeys;

    // As in PrefixAttentionKernel: every load that needs only the tile goes out first.
    int tok[2], head[2];
    QueryRows(tile, kvh, group, group_div, warp, g, tok, head);
    const int lo[2] = {p.seg_start[tok[0]], p.seg_start[tok[1]]};
    const ContextKv cx = it > 0    ? LayerContextKv(p, tile, unit_ctx[slot])
                         : ctx > 0 ? LayerContextKv(p, tile, p.contexts[tile.ctx])
                                   : ContextKv{};
    const KeySource src = UnitKeys<D>(p, tile, cx, kvh);
    if (!kv0_ready) CopyKeyTile<D, W>(src, 0, base % kStages<D, W>, ks, vs);
    uint32_t qf[D / 16][4];
    LoadQ<D>(p, tok, head, c, qf);
    RotateQ<D>(p.q_rotations, tok, c, qf);

    float o[D / 8][4];
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY};  // running row max (scaled, log2 domain)
    float l[2] = {0.0f, 0.0f};            // running row sum (this thread's columns)
    const Visibility vis = RowVisibility(tok, lo, ctx, own_lo, p.window);

    bool next_kv0 = false;  // the next unit's key tile 0 copied (block-uniform)
    for (int kt = 0; kt < num_key_tiles; ++kt) {
      AwaitKeyTile<D, W>(src, kt, num_key_tiles, base, ks, vs);
      __syncthreads();
      const bool last_tile = kt + 1 == num_key_tiles;
      if (kt == 0 && threadIdx.x == 0) {
        // The next unit's tile has landed (this thread's wait above): its context entry next.
        const AttentionTile& next = unit_tile[next_slot];
        if (unit_id[next_slot] < num_units && next.ctx_len > 0) {
          CopyAsync32(&unit_ctx[next_slot], p.contexts + next.ctx);
          CopyAsyncCommit();
        }
      }
      if (kStages<D, W> == 2 && last_tile && kt > 0) {
        // Past key tile 1's barrier, the next unit's tile and context entry are visible to all.
        const int next_unit = unit_id[next_slot];
        if (next_unit < num_units) {
          const AttentionTile& next = unit_tile[next_slot];
          const int next_index = kv_div.Div(next_unit);
          CopyKeyTile<D, W>(UnitKeys<D>(p, next, LayerContextKv(p, next, unit_ctx[next_slot]),
                                        kv_div.Mod(next_unit, next_index)),
                            0, (base + kt + 1) % kStages<D, W>, ks, vs);
          next_kv0 = true;
        }
      }
      const int stage = (base + kt) % kStages<D, W>;
      AttendKeyTile<D, W>(p, sm, qf, ks + stage * kSmemTile<D, W>, vs + stage * kSmemTile<D, W>,
                          lane, c, kt, ctx, own_lo, num_keys, vis, m, l, o);
      if (last_tile && threadIdx.x == 0) {
        // The next unit's tile and context entry land before the barrier that publishes them (its
        // key tile 0, when copied, may stay in flight).
        if (next_kv0) {
          CopyAsyncWait<1>();
        } else {
          CopyAsyncWait<0>();
        }
      }
      __syncthreads();  // every warp is done with this stage before it is copied over
    }
    const AttentionTile& out_tile = unit_tile[slot];
    StoreRows<D>(p, q_stride, out_tile.row0, out_tile.begin, out_tile.rows, kvh, group, group_div,
                 warp, g, c, l, o);
    base += num_key_tiles;
    kv0_ready = next_kv0;
  }
}

// The kernels. A wgmma kernel (W) compiled without sm_90a has an empty body, and so no shared
// memory: how WgmmaBuilt tells. kBlocks: the resident blocks a multiprocessor the kernel is built
// for, where not kMinBlocksOf's. The one-warpgroup wgmma queue kernel without overlap at D 64 also
// comes at four blocks (PrefixAttentionParams::four_blocks: 124 registers a thread, no spills,
// instead of 162 at three blocks: 16 warps instead of 12), and at D 128, overlapped or not, at
// three (PrefixAttentionParams::three_blocks: 166 and 164 registers, 48 bytes spilled
// overlapped, instead of ~200 at the two that fit: 12 warps instead of 8).
template <int D, bool W, bool kOverlap = false, int kWgs = 1, int kBlocks = 0>
__global__ void __launch_bounds__(kThreadsOf<kWgs>, (kBlocks > 0 ? kBlocks : kMinBlocksOf<D, kWgs>))
    PrefixAttentionKernel(PrefixAttentionParams p, FastDivmod group_div, FastDivmod kv_div) {
  static_assert(kBlocks == 0 || (kBlocks == 4 && D <= 64 && W && kWgs == 1 && !kOverlap) ||
                (kBlocks == 3 && D == 128 && W && kWgs == 1));
  if constexpr (W && !kWgmmaDevice) {
    __trap();
  } else {
    EnterGrid();
    QueueKernelBody<D, W, kOverlap, kWgs>(p, group_div, kv_div);
  }
}
template <int D, bool W>
__global__ void __launch_bounds__(kThreads, kMinBlocks<D>)
    PrefixAttentionPipelinedKernel(PrefixAttentionParams p, FastDivmod group_div,
                                   FastDivmod kv_div) {
  if constexpr (W && !kWgmmaDevice) {
    __trap();
  } else {
    EnterGrid();
    PipelinedKernelBody<D, W>(p, group_div, kv_div);
  }
}

// wgmma kernels exist for D of 64 and 128 (whole 128-byte rows; wgmma's N for P V), the queue
// one overlapped too.
constexpr bool WgmmaHeadDim(int d) { return d == 64 || d == 128; }

// A launch's kernel, threads a block and dynamic shared memory: `overlap` applies to the queue
// kernel on wgmma and is ignored by the pipelined one (PrefixAttentionParams::overlap);
// `warpgroups` above 1 to the queue kernel on wgmma only (PrefixAttentionSupportsWarpgroups).
// kernel is null where D has no kernel of that many warpgroups.
using KernelFn = void (*)(PrefixAttentionParams, FastDivmod, FastDivmod);
struct KernelChoice {
  KernelFn kernel;
  int threads;
  int smem;
};

// The wgmma queue kernel of D, overlapped or not, of kWgs warpgroups; four_blocks for the
// one-warpgroup kernel at D 64 without overlap only, three_blocks for the one-warpgroup kernel at
// D 128 only.
template <int D, int kWgs>
KernelChoice WgmmaQueueKernel(bool overlap, bool four_blocks, bool three_blocks) {
  if constexpr (kWgs > kMaxWarpgroupsOf<D>) {
    return {nullptr, 0, 0};
  } else {
    if constexpr (kWgs == 1 && D == 128) {
      if (three_blocks && !four_blocks) {
        return overlap ? KernelChoice{PrefixAttentionKernel<D, true, true, 1, 3>, kThreads,
                                      kOverlapSmemBytes<D>}
                       : KernelChoice{PrefixAttentionKernel<D, true, false, 1, 3>, kThreads, 0};
      }
    }
    if (three_blocks) return {nullptr, 0, 0};
    if (overlap) {
      if (four_blocks) return {nullptr, 0, 0};
      return {PrefixAttentionKernel<D, true, true, kWgs>, kThreadsOf<kWgs>, kOverlapSmemBytes<D>};
    }
    if constexpr (kWgs == 1 && D <= 64) {
      if (four_blocks) return {PrefixAttentionKernel<D, true, false, 1, 4>, kThreads, 0};
    }
    if (four_blocks) return {nullptr, 0, 0};
    return {PrefixAttentionKernel<D, true, false, kWgs>, kThreadsOf<kWgs>, 0};
  }
}

template <int D, bool W>
KernelChoice KernelOf(bool pipelined, bool overlap, int warpgroups, bool four_blocks,
                      bool three_blocks) {
  if constexpr (W) {
    if (!pipelined) {
      static_assert(kMaxAttentionWarpgroups == 3);  // the cases below
      switch (warpgroups) {
        case 1:
          return WgmmaQueueKernel<D, 1>(overlap, four_blocks, three_blocks);
        case 2:
          return WgmmaQueueKernel<D, 2>(overlap, four_blocks, three_blocks);
        case 3:
          return WgmmaQueueKernel<D, 3>(overlap, four_blocks, three_blocks);
        default:
          return {nullptr, 0, 0};
      }
    }
  }
  if (warpgroups != 1 || four_blocks || three_blocks) return {nullptr, 0, 0};
  return {pipelined ? PrefixAttentionPipelinedKernel<D, W> : PrefixAttentionKernel<D, W>, kThreads,
          0};
}

// A kernel's dynamic shared memory allowed past the default 48 KB (once per kernel; a process
// drives one device).
cudaError_t AllowSmem(const KernelChoice& k) {
  if (k.smem <= 48 * 1024) return cudaSuccess;
  static std::mutex mu;
  static std::vector<std::pair<KernelFn, cudaError_t>> done;
  std::lock_guard<std::mutex> lock(mu);
  for (const auto& [fn, e] : done) {
    if (fn == k.kernel) return e;
  }
  const cudaError_t e =
      cudaFuncSetAttribute(k.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, k.smem);
  done.emplace_back(k.kernel, e);
  return e;
}

// The current device is sm_90 and this build has the sm_90a code of D's wgmma kernels. Asked of
// the driver once per D (a process drives one device).
template <int D>
bool WgmmaBuilt() {
  static const bool built = [] {
    int device = 0, major = 0, minor = 0;
    cudaFuncAttributes attr{};
    return cudaGetDevice(&device) == cudaSuccess &&
           cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) ==
               cudaSuccess &&
           cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) ==
               cudaSuccess &&
           major == 9 && minor == 0 &&
           cudaFuncGetAttributes(&attr, PrefixAttentionKernel<D, true>) == cudaSuccess &&
           attr.sharedSizeBytes > 0;
  }();
  return built;
}

template <int D>
cudaError_t Launch(const PrefixAttentionParams& p, LaunchStream stream) {
  const FastDivmod group_div(p.num_q_heads / p.num_kv_heads), kv_div(p.num_kv_heads);
  KernelChoice k{};
  if constexpr (WgmmaHeadDim(D)) {
    if (p.wgmma && !WgmmaBuilt<D>()) return cudaErrorNotSupported;
    k = p.wgmma
            ? KernelOf<D, true>(p.pipelined, p.overlap, p.warpgroups, p.four_blocks, p.three_blocks)
            : KernelOf<D, false>(p.pipelined, false, p.warpgroups, p.four_blocks, p.three_blocks);
  } else {
    if (p.wgmma) return cudaErrorInvalidValue;
    k = KernelOf<D, false>(p.pipelined, false, p.warpgroups, p.four_blocks, p.three_blocks);
  }
  if (k.kernel == nullptr) return cudaErrorInvalidValue;
  if (const cudaError_t e = AllowSmem(k); e != cudaSuccess) return e;
  return LaunchKernel(k.kernel, p.blocks, k.threads, k.smem, stream, p, group_div, kv_div);
}

template <int D>
int ResidentBlocks(bool pipelined, bool wgmma, bool overlap, int warpgroups, bool four_blocks,
                   bool three_blocks) {
  int device = 0, sms = 0, per_sm = 0;
  KernelChoice k{};
  if constexpr (WgmmaHeadDim(D)) {
    if (wgmma && !WgmmaBuilt<D>()) return 0;
    k = wgmma ? KernelOf<D, true>(pipelined, overlap, warpgroups, four_blocks, three_blocks)
              : KernelOf<D, false>(pipelined, false, warpgroups, four_blocks, three_blocks);
  } else {
    if (wgmma) return 0;
    k = KernelOf<D, false>(pipelined, false, warpgroups, four_blocks, three_blocks);
  }
  if (k.kernel == nullptr || AllowSmem(k) != cudaSuccess) return 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(
          &per_sm, reinterpret_cast<const void*>(k.kernel), k.threads, k.smem) != cudaSuccess) {
    return 0;
  }
  return sms * per_sm;
}

// Calls f.template operator()<D>() for the supported head_dim D; `fallback` otherwise.
template <typename F, typename R>
R DispatchHeadDim(int head_dim, F f, R fallback) {
  switch (head_dim) {
    case 16:
      return f(std::integral_constant<int, 16>{});
    case 32:
      return f(std::integral_constant<int, 32>{});
    case 48:
      return f(std::integral_constant<int, 48>{});
    case 64:
      return f(std::integral_constant<int, 64>{});
    case 80:
      return f(std::integral_constant<int, 80>{});
    case 96:
      return f(std::integral_constant<int, 96>{});
    case 112:
      return f(std::integral_constant<int, 112>{});
    case 128:
      return f(std::integral_constant<int, 128>{});
    default:
      return fallback;
  }
}

}  // namespace

bool PrefixAttentionSupportsHeadDim(int head_dim) {
  return head_dim >= 16 && head_dim <= 128 && head_dim % 16 == 0;
}

bool PrefixAttentionSupportsWgmma(int head_dim) {
  if (!WgmmaHeadDim(head_dim)) return false;
  return head_dim == 64 ? WgmmaBuilt<64>() : WgmmaBuilt<128>();
}

int PrefixAttentionBlocks(int head_dim, bool pipelined, bool wgmma, bool overlap, int warpgroups,
                          bool four_blocks, bool three_blocks) {
  return DispatchHeadDim(
      head_dim,
      [&](auto d) {
        return ResidentBlocks<decltype(d)::value>(pipelined, wgmma, overlap, warpgroups,
                                                  four_blocks, three_blocks);
      },
      0);
}

bool PrefixAttentionSupportsWarpgroups(int head_dim, int warpgroups) {
  if (warpgroups == 1) return PrefixAttentionSupportsHeadDim(head_dim);
  return warpgroups >= 1 && PrefixAttentionSupportsWgmma(head_dim) &&
         warpgroups <= (head_dim <= 64 ? kMaxWarpgroupsOf<64> : kMaxWarpgroupsOf<128>);
}

cudaError_t LaunchPrefixAttention(const PrefixAttentionParams& p, LaunchStream stream) {
  if (p.num_kv_heads <= 0 || p.num_q_heads % p.num_kv_heads != 0 || p.blocks <= 0 ||
      !(p.scale > 0.0f) || p.softcap < 0.0f || p.window < 0) {
    return cudaErrorInvalidValue;
  }
  // cp.async copies of tiles (the pipelined kernel, prefetch) and context entries (pipelined).
  if (((p.pipelined || p.prefetch) && reinterpret_cast<uintptr_t>(p.tiles) % 16 != 0) ||
      (p.pipelined && reinterpret_cast<uintptr_t>(p.contexts) % 16 != 0)) {
    return cudaErrorInvalidValue;
  }
  return DispatchHeadDim(
      p.head_dim, [&](auto d) { return Launch<decltype(d)::value>(p, stream); },
      cudaErrorInvalidValue);
}

}  // namespace rankd::kernels
