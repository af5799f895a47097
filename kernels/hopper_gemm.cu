// The Hopper GEMM of hopper_gemm.cuh. One CTA of 3 warpgroups per SM, persistent over the
// output tiles of 128 x BN (BN = 128 or 256; tile t, t + gridDim.x, ...; M tiles fastest, so that
// CTAs running at the same time share W's tile in L2):
//   warpgroup 0, the producer: one thread issues, per K block of 64, the TMA loads of X's
//     [128 x 64] and W's [BN x 64] tiles into stage s of a Cfg::kStages ring (128-byte swizzle),
//     after waiting for empty[s]; the loads complete full[s] (arrive.expect_tx of the stage's
//     bytes).
//   warpgroups 1 and 2, the consumers: rows 0..63 and 64..127 of the tile. Per K block: wait
//     full[s], 4 wgmma m64nBNk16 from the stage's shared memory (one commit group), wait for the
//     previous block's group, and arrive on that block's empty[] (one arrive per warp). After the
//     last K block, wait for all and free its stage; the epilogue writes from registers (the fp32
//     residual add) or, for bf16 outputs, through a shared-memory buffer of the consumer's own,
//     in 16-byte stores of whole rows.
// Phases: the i-th use of stage s (i = it / kStages, `it` counting K blocks over all of a CTA's
// tiles) waits full[s] for parity i & 1 and, in the producer, empty[s] for parity (i & 1) ^ 1
// (a fresh barrier counts as having completed the phase of parity 1, so the first round passes).
// Tails: TMA zero-fills the rows and K columns beyond the tensor (and counts them in the stage's
// bytes), so partial tiles accumulate zeros; the epilogue's stores are predicated on row < m and
// column < n.
#include <cudaTypedefs.h>

#include <cstdint>

#include "kernels/activations.cuh"
#include "kernels/hopper_gemm.cuh"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define RANKD_HOPPER_GEMM_DEVICE 1
#else
#define RANKD_HOPPER_GEMM_DEVICE 0
#endif

namespace rankd::kernels {
namespace {

constexpr int kBM = kHopperTileM, kBK = kHopperTileK;
constexpr int kConsumers = 2;  // warpgroups of 64 rows each
constexpr int kThreads = 128 * (1 + kConsumers);
constexpr int kABytes = kBM * kBK * 2;  // X tile, bf16: 128 rows of 128 bytes
constexpr int kSwizzleAlign = 1024;     // 8 rows of 128 bytes: one swizzle atom
constexpr int kRingBytes = 192 * 1024;  // the stages' shared memory, whatever BN
// With a staged epilogue: the stages and the epilogue's buffers together.
constexpr int kStagedRingBytes = 224 * 1024;
static_assert(kBK * 2 == 128, "one K block is one 128-byte swizzle row");
// The static shared memory of the kernel's body in a pass without sm_90a (see the kernel's #else):
// far above the 0 of the sm_90a body, and above the 1 KiB that tools report as reserved per CTA.
constexpr int kNoSm90aMarkerBytes = 4096;

__host__ __device__ constexpr bool IsGated(HopperEpilogue e) {
  return e == HopperEpilogue::kSwiGlu || e == HopperEpilogue::kGeGlu;
}
// The epilogues whose output is bf16 write it through shared memory (StagedEpilogue).
__host__ __device__ constexpr bool IsStaged(HopperEpilogue e) {
  return e != HopperEpilogue::kAccumulateF32;
}

// The sizes that depend on the tile's N and the epilogue.
template <int BN, bool kStaged>
struct Cfg {
  static_assert(BN == 128 || BN == 256, "wgmma m64nBNk16 with one TMA box of BN rows");
  static constexpr int kBBytes = BN * kBK * 2;  // W tile
  static constexpr int kStageBytes = kABytes + kBBytes;
  // A consumer's 64 output rows of BN bf16 columns in shared memory, each row padded by 16 bytes
  // so that the fragment's 8 rows a store land in different banks.
  static constexpr int kEpiRowBytes = BN * 2 + 16;
  static constexpr int kEpiBytes = kStaged ? kConsumers * 64 * kEpiRowBytes : 0;
  static constexpr int kStages = kStaged ? (kStagedRingBytes - kEpiBytes) / kStageBytes
                                         : kRingBytes / kStageBytes;  // 5 / 3 staged, 6 / 4 not
  // Dynamic shared memory: slack to align the ring to kSwizzleAlign, the A stages, the B stages,
  // full[kStages] and empty[kStages] (8-byte mbarriers), then the epilogue's buffers.
  static constexpr int kBarrierBytes = 2 * kStages * 8;
  static constexpr int kSmemBytes =
      kSwizzleAlign + kStages * kStageBytes + kBarrierBytes + kEpiBytes;
  static_assert(kSmemBytes <= 227 * 1024, "shared memory of one CTA");
};

#if RANKD_HOPPER_GEMM_DEVICE

__device__ __forceinline__ uint32_t SmemAddr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void MbarInit(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}

__device__ __forceinline__ void MbarWait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n"
      "}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}

__device__ __forceinline__ void MbarArrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

__device__ __forceinline__ void MbarArriveExpectTx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
               : "memory");
}

// Box (c0 = K column, c1 = row) of `map` into shared memory at dst; completes `bar`'s tx bytes.
__device__ __forceinline__ void TmaLoad2d(uint32_t dst, const CUtensorMap* map, int c0, int c1,
                                          uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3}], [%4];" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
}

// wgmma shared-memory matrix descriptor of a K-major tile in the 128-byte swizzle that TMA's
// CU_TENSOR_MAP_SWIZZLE_128B writes: rows of 128 bytes, 8-row atoms 1024 bytes apart (SBO),
// LBO unused (1) for a swizzled K-major operand, layout type 1 (128B) in bits 62-63. The start
// address advances by 32 bytes per K step of 16 inside the 128-byte row; atoms are
// 1024-aligned, so the base offset (bits 49-51) stays 0.
__device__ __forceinline__ uint64_t SmemDesc(uint32_t addr) {
  uint64_t d = (addr & 0x3FFFF) >> 4;
  d |= uint64_t{1} << 16;
  d |= uint64_t{1024 >> 4} << 32;
  d |= uint64_t{1} << 62;
  return d;
}

__device__ __forceinline__ void WgmmaFence() {
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ void WgmmaCommit() {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
// Waits until at most N of this warpgroup's committed wgmma groups are still running.
template <int N>
__device__ __forceinline__ void WgmmaWait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
// Keeps the compiler from moving accumulator reads or writes across the asynchronous wgmma.
template <int N>
__device__ __forceinline__ void FenceAcc(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// d [64 x BN] fp32 += A [64 x 16] . B [BN x 16]^T, both K-major in shared memory (BN = 2 x the
// size of d). Fragment of thread t (warp w = t / 32 of the warpgroup, lane l): d[4j + q] is row
// w*16 + l/4 + 8*(q/2), column 8j + 2*(l%4) + q%2 (j < BN/8, q < 4).
__device__ __forceinline__ void Wgmma(float (&d)[64], uint64_t desc_a, uint64_t desc_b) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%"
      "25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%"
      "48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, "
      "%64, %65, p, 1, 1, 0, 0;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
        "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
        "+f"(d[63])
      : "l"(desc_a), "l"(desc_b), "r"(1));
}

__device__ __forceinline__ void Wgmma(float (&d)[128], uint64_t desc_a, uint64_t desc_b) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%"
      "25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%"
      "48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%"
      "71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%"
      "94,%95,%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,%112,%"
      "113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127}, "
      "%128, %129, p, 1, 1, 0, 0;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
        "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
        "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]),
        "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]),
        "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]),
        "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]),
        "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]),
        "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
        "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]),
        "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]),
        "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]),
        "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "l"(desc_a), "l"(desc_b), "r"(1));
}

template <HopperEpilogue E>
__device__ __forceinline__ float Gated(float gate, float up) {
  // Rounded to bf16 first: the unfused path's gate_up is a bf16 tensor.
  const float g = __bfloat162float(__float2bfloat16(gate));
  const float u = __bfloat162float(__float2bfloat16(up));
  if constexpr (E == HopperEpilogue::kSwiGlu) {
    return Silu(g) * u;
  } else {
    return GeluTanh(g) * u;
  }
}

// Synchronises the 128 threads of consumer warpgroup c (named barrier 1 + c; 0 is __syncthreads).
__device__ __forceinline__ void ConsumerBarrier(int c) {
  asm volatile("bar.sync %0, 128;" ::"r"(1 + c) : "memory");
}

// The bf16 epilogues (kStoreBf16, the gated ones) of one consumer's 64 x BN block through its
// shared-memory buffer `stage` (64 rows of BN * 2 + 16 bytes): the fragments go to shared memory
// as bf16 pairs, then the warpgroup writes whole rows in 16-byte stores, row after row, instead of
// the fragment's 4-byte pieces of 8 rows. Output rows row0 + 0..63, columns col0 + 0..BN-1 of an
// [m, n] output (gated: col0/2 + 0..BN/2-1 of [m, n/2]); n (and n/2) are multiples of 8 and y is
// 16-byte aligned (MakeHopperGemmPlan, LaunchHopperGemm).
template <HopperEpilogue E, int BN>
__device__ __forceinline__ void StagedEpilogue(const float (&d)[BN / 2], int row0, int col0, int m,
                                               int n, void* y, uint8_t* stage, int c) {
  constexpr bool kGated = IsGated(E);
  constexpr int kCols = kGated ? BN / 2 : BN;  // output columns of the block
  constexpr int kRowBytes = Cfg<BN, true>::kEpiRowBytes;
  const int t = threadIdx.x % 128, w = t / 32, l = t % 32;
  const int r_lo = w * 16 + l / 4;
#pragma unroll
  for (int j = 0; j < kCols / 8; ++j) {
    const int col = 8 * j + 2 * (l % 4);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      __nv_bfloat162 v;
      if constexpr (kGated) {
        // d[4j + q] (gate) and d[4j + q + BN/4] (up) are the same row and output column.
        const int q = 4 * j + 2 * h, u = q + BN / 4;
        v = __floats2bfloat162_rn(Gated<E>(d[q], d[u]), Gated<E>(d[q + 1], d[u + 1]));
      } else {
        v = __floats2bfloat162_rn(d[4 * j + 2 * h], d[4 * j + 2 * h + 1]);
      }
      *reinterpret_cast<__nv_bfloat162*>(stage + (r_lo + 8 * h) * kRowBytes + 2 * col) = v;
    }
  }
  ConsumerBarrier(c);
  const int out_n = kGated ? n / 2 : n, out0 = kGated ? col0 / 2 : col0;
  constexpr int kChunks = kCols / 8;  // 16-byte pieces of a row
#pragma unroll 4
  for (int i = t; i < 64 * kChunks; i += 128) {
    const int r = i / kChunks, ch = i % kChunks;
    const int row = row0 + r, col = out0 + 8 * ch;
    if (row >= m || col >= out_n) continue;
    *reinterpret_cast<uint4*>(static_cast<__nv_bfloat16*>(y) + static_cast<int64_t>(row) * out_n +
                              col) = *reinterpret_cast<const uint4*>(stage + r * kRowBytes + 16 * ch);
  }
  ConsumerBarrier(c);  // the buffer is read: the next tile may write it
}

// kAccumulateF32's epilogue of one consumer's 64 x BN block, from registers: y[row0 + 0..63,
// col0 + 0..BN-1] (fp32, [m, n]) += the block. (Reading the residual 8 column blocks at a time
// before adding and writing was slower on the H200: o_proj 84 -> 100 us, bench/RESULTS.md.)
template <int BN>
__device__ __forceinline__ void AccumulateEpilogue(const float (&d)[BN / 2], int row0, int col0,
                                                   int m, int n, void* y) {
  const int t = threadIdx.x % 128, w = t / 32, l = t % 32;
  const int r_lo = row0 + w * 16 + l / 4;
#pragma unroll
  for (int j = 0; j < BN / 8; ++j) {
    const int col = col0 + 8 * j + 2 * (l % 4);
    if (col >= n) continue;  // n is even: col + 1 < n too
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = r_lo + 8 * h;
      if (row >= m) continue;
      float2* p = reinterpret_cast<float2*>(static_cast<float*>(y) +
                                            static_cast<int64_t>(row) * n + col);
      float2 o = *p;
      o.x += d[4 * j + 2 * h];
      o.y += d[4 * j + 2 * h + 1];
      *p = o;
    }
  }
}

#endif  // RANKD_HOPPER_GEMM_DEVICE

template <HopperEpilogue E, int BN>
__global__ void __launch_bounds__(kThreads, 1)
    HopperGemmKernel(const __grid_constant__ CUtensorMap x_map,
                     const __grid_constant__ CUtensorMap w_map, int m, int n, int k, void* y) {
#if RANKD_HOPPER_GEMM_DEVICE
  using C = Cfg<BN, IsStaged(E)>;
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw = SmemAddr(smem_raw);
  const uint32_t a_base = (raw + kSwizzleAlign - 1) & ~uint32_t{kSwizzleAlign - 1};
  const uint32_t b_base = a_base + C::kStages * kABytes;
  const uint32_t full_base = b_base + C::kStages * C::kBBytes;
  const uint32_t empty_base = full_base + C::kStages * 8;
  // The epilogue's buffers, after the barriers: 16-byte aligned (the ring is 1024-aligned).
  const uint32_t epi_base = full_base + C::kBarrierBytes;
  const int num_m = (m + kBM - 1) / kBM, num_n = (n + BN - 1) / BN;
  const int num_tiles = num_m * num_n, num_k = (k + kBK - 1) / kBK;
  const int wg = threadIdx.x / 128;

  if (threadIdx.x == 0) {
    for (int s = 0; s < C::kStages; ++s) {
      MbarInit(full_base + 8 * s, 1);
      MbarInit(empty_base + 8 * s, kConsumers * 4);  // lane 0 of each consumer warp
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();

  if (wg == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
    if (threadIdx.x != 0) return;
    asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(&x_map)) : "memory");
    asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(&w_map)) : "memory");
    int it = 0;
    for (int tile = blockIdx.x; tile < num_tiles; tile += gridDim.x) {
      const int tm = tile % num_m, tn = tile / num_m;
      for (int kb = 0; kb < num_k; ++kb, ++it) {
        const int s = it % C::kStages;
        MbarWait(empty_base + 8 * s, ((it / C::kStages) & 1) ^ 1);
        MbarArriveExpectTx(full_base + 8 * s, C::kStageBytes);
        TmaLoad2d(a_base + s * kABytes, &x_map, kb * kBK, tm * kBM, full_base + 8 * s);
        TmaLoad2d(b_base + s * C::kBBytes, &w_map, kb * kBK, tn * BN, full_base + 8 * s);
      }
    }
    return;
  }

  asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
  const int c = wg - 1;  // this consumer's rows: c*64 .. c*64+63 of the tile
  const bool warp_leader = threadIdx.x % 32 == 0;
  float d[BN / 2];  // the 64 x BN fp32 accumulators over the warpgroup's 128 threads
  int it = 0;
  for (int tile = blockIdx.x; tile < num_tiles; tile += gridDim.x) {
    const int tm = tile % num_m, tn = tile / num_m;
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) d[i] = 0.0f;
    // Two K blocks in flight: block kb's wgmma group is issued before block kb-1's is waited
    // for, and only then is kb-1's stage given back to the producer, so the tensor cores do not
    // idle between blocks.
    for (int kb = 0; kb < num_k; ++kb, ++it) {
      const int s = it % C::kStages;
      MbarWait(full_base + 8 * s, (it / C::kStages) & 1);
      const uint32_t a = a_base + s * kABytes + c * 64 * 128, b = b_base + s * C::kBBytes;
      FenceAcc(d);
      WgmmaFence();
#pragma unroll
      for (int kk = 0; kk < kBK / 16; ++kk) Wgmma(d, SmemDesc(a + 32 * kk), SmemDesc(b + 32 * kk));
      WgmmaCommit();
      WgmmaWait<1>();
      FenceAcc(d);
      if (kb > 0 && warp_leader) MbarArrive(empty_base + 8 * ((it - 1) % C::kStages));
    }
    WgmmaWait<0>();
    FenceAcc(d);
    if (num_k > 0 && warp_leader) MbarArrive(empty_base + 8 * ((it - 1) % C::kStages));
    if constexpr (IsStaged(E)) {
      uint8_t* stage = smem_raw + (epi_base - raw) + c * 64 * C::kEpiRowBytes;
      StagedEpilogue<E, BN>(d, tm * kBM + c * 64, tn * BN, m, n, y, stage, c);
    } else {
      AccumulateEpilogue<BN>(d, tm * kBM + c * 64, tn * BN, m, n, y);
    }
  }
#else
  // Not built for sm_90a: this static shared memory (the sm_90a body has none) is the marker that
  // the launcher reads through cudaFuncGetAttributes to report cudaErrorNotSupported.
  __shared__ int no_sm90a[kNoSm90aMarkerBytes / sizeof(int)];
  reinterpret_cast<volatile int*>(no_sm90a)[threadIdx.x % 4] = m + n + k;
#endif
}

using EncodeTiledFn = PFN_cuTensorMapEncodeTiled_v12000;

EncodeTiledFn GetEncodeTiled() {
  static const EncodeTiledFn fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault,
                                         &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess) {
      return EncodeTiledFn{nullptr};
    }
    return reinterpret_cast<EncodeTiledFn>(p);
  }();
  return fn;
}

// A [rows, k] bf16 row-major tensor in boxes of box_rows x kBK, 128-byte swizzled; zero-filled
// out of bounds.
cudaError_t EncodeOperand(EncodeTiledFn encode, const __nv_bfloat16* p, int rows, int k,
                          int box_rows, CUtensorMap* map) {
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(k), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(k) * sizeof(__nv_bfloat16)};
  const cuuint32_t box[2] = {kBK, static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t elem_strides[2] = {1, 1};
  const CUresult r =
      encode(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<__nv_bfloat16*>(p), dims, strides,
             box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
             CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// The time of a 128 x 256 tile in 128 x 128 tiles: under 2, since each X tile loaded feeds twice
// the MMAs. An estimate, to be set from rankd-bench kernels' own128 / own256 rows.
constexpr double kTile256Cost = 1.75;

int64_t Tiles(int m, int n, int tile_n) {
  return static_cast<int64_t>((m + kBM - 1) / kBM) * ((n + tile_n - 1) / tile_n);
}

template <HopperEpilogue E, int BN>
cudaError_t Launch(const HopperGemmPlan& plan, void* y, int sms, cudaStream_t stream) {
  const auto kernel = HopperGemmKernel<E, BN>;
  using C = Cfg<BN, IsStaged(E)>;
  cudaFuncAttributes attr{};
  cudaError_t e = cudaFuncGetAttributes(&attr, kernel);
  if (e != cudaSuccess) return e;
  if (attr.sharedSizeBytes >= kNoSm90aMarkerBytes) return cudaErrorNotSupported;  // no sm_90a
  if ((e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                C::kSmemBytes)) != cudaSuccess) {
    return e;
  }
  const int64_t tiles = Tiles(plan.m, plan.n, BN);
  const int grid = static_cast<int>(tiles < sms ? tiles : sms);
  kernel<<<grid, kThreads, C::kSmemBytes, stream>>>(plan.x_map, plan.w_map, plan.m, plan.n,
                                                   plan.k, y);
  return cudaGetLastError();
}

template <HopperEpilogue E>
cudaError_t LaunchTile(const HopperGemmPlan& plan, void* y, int sms, cudaStream_t stream) {
  return plan.tile_n == 256 ? Launch<E, 256>(plan, y, sms, stream)
                            : Launch<E, 128>(plan, y, sms, stream);
}

// The current device's SM count, cudaErrorNotSupported unless it is sm_90.
cudaError_t Sm90Multiprocessors(int* sms) {
  int device = 0, major = 0, minor = 0;
  cudaError_t e = cudaGetDevice(&device);
  if (e == cudaSuccess) {
    e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  }
  if (e == cudaSuccess) {
    e = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  }
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(sms, cudaDevAttrMultiProcessorCount, device);
  if (e != cudaSuccess) return e;
  return major == 9 && minor == 0 ? cudaSuccess : cudaErrorNotSupported;
}

}  // namespace

cudaError_t MakeHopperGemmPlan(const __nv_bfloat16* x, const __nv_bfloat16* w, int m, int n, int k,
                               HopperEpilogue epilogue, HopperGemmPlan* plan, int tile_n) {
  const bool gated = IsGated(epilogue);
  if (plan == nullptr || m < 0 || n <= 0 || k <= 0 || n % 8 != 0 || k % 8 != 0 || !Aligned16(x) ||
      !Aligned16(w) || (tile_n != 0 && tile_n != 128 && tile_n != 256) ||
      (gated && (n % kHopperGluTileN != 0 || (tile_n != 0 && tile_n != kHopperGluTileN)))) {
    return cudaErrorInvalidValue;
  }
  int sms = 0;
  cudaError_t e = Sm90Multiprocessors(&sms);
  if (e != cudaSuccess) return e;
  const EncodeTiledFn encode = GetEncodeTiled();
  if (encode == nullptr) return cudaErrorNotSupported;
  if (tile_n == 0) {
    // The tile whose waves take less time, a 256-wide tile costing kTile256Cost 128-wide ones.
    const int64_t waves128 = (Tiles(m, n, 128) + sms - 1) / sms;
    const int64_t waves256 = (Tiles(m, n, 256) + sms - 1) / sms;
    tile_n = !gated && waves256 * kTile256Cost < waves128 ? 256 : 128;
  }
  plan->m = m;
  plan->n = n;
  plan->k = k;
  plan->epilogue = epilogue;
  plan->tile_n = tile_n;
  // An empty X (m == 0) launches nothing; its descriptor would be invalid (a zero dimension).
  if (m > 0 && (e = EncodeOperand(encode, x, m, k, kBM, &plan->x_map)) != cudaSuccess) return e;
  return EncodeOperand(encode, w, n, k, tile_n, &plan->w_map);
}

cudaError_t LaunchHopperGemm(const HopperGemmPlan& plan, void* y, cudaStream_t stream) {
  if (!Aligned16(y)) return cudaErrorInvalidValue;
  int sms = 0;
  const cudaError_t e = Sm90Multiprocessors(&sms);
  if (e != cudaSuccess) return e;
  if (plan.m == 0) return cudaSuccess;
  switch (plan.epilogue) {
    case HopperEpilogue::kStoreBf16:
      return LaunchTile<HopperEpilogue::kStoreBf16>(plan, y, sms, stream);
    case HopperEpilogue::kAccumulateF32:
      return LaunchTile<HopperEpilogue::kAccumulateF32>(plan, y, sms, stream);
    case HopperEpilogue::kSwiGlu:
      return Launch<HopperEpilogue::kSwiGlu, kHopperGluTileN>(plan, y, sms, stream);
    case HopperEpilogue::kGeGlu:
      return Launch<HopperEpilogue::kGeGlu, kHopperGluTileN>(plan, y, sms, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t HopperGemmSupported() {
  int sms = 0;
  cudaError_t e = Sm90Multiprocessors(&sms);
  if (e != cudaSuccess) return e;
  if (GetEncodeTiled() == nullptr) return cudaErrorNotSupported;
  cudaFuncAttributes attr{};
  e = cudaFuncGetAttributes(&attr, HopperGemmKernel<HopperEpilogue::kStoreBf16, 128>);
  if (e != cudaSuccess) return e;
  return attr.sharedSizeBytes >= kNoSm90aMarkerBytes ? cudaErrorNotSupported : cudaSuccess;
}

cudaError_t LaunchHopperGemm(const __nv_bfloat16* x, const __nv_bfloat16* w, int m, int n, int k,
                             HopperEpilogue epilogue, void* y, cudaStream_t stream) {
  HopperGemmPlan plan;
  const cudaError_t e = MakeHopperGemmPlan(x, w, m, n, k, epilogue, &plan);
  return e != cudaSuccess ? e : LaunchHopperGemm(plan, y, stream);
}

cudaError_t InterleaveGateUp(const void* gate_up, int intermediate, size_t row_bytes, void* out,
                             cudaStream_t stream) {
  if (intermediate <= 0 || intermediate % kHopperGluHalf != 0) return cudaErrorInvalidValue;
  // Chunks of h rows: gate chunk t goes to out's rows 2t*h.., up chunk t to (2t+1)*h.. .
  const size_t chunk = kHopperGluHalf * row_bytes;
  const size_t chunks = intermediate / kHopperGluHalf;
  const char* src = static_cast<const char*>(gate_up);
  char* dst = static_cast<char*>(out);
  cudaError_t e =
      cudaMemcpy2DAsync(dst, 2 * chunk, src, chunk, chunk, chunks, cudaMemcpyDefault, stream);
  if (e != cudaSuccess) return e;
  return cudaMemcpy2DAsync(dst + chunk, 2 * chunk, src + intermediate * row_bytes, chunk, chunk,
                           chunks, cudaMemcpyDefault, stream);
}

}  // namespace rankd::kernels
