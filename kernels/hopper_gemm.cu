// The Hopper GEMM of hopper_gemm.cuh. One CTA of 3 warpgroups per SM, persistent over the
// output tiles of 128 x BN (tile t = blockIdx.x + i * gridDim.x for i = 0, 1, ...; M tiles
// fastest, so that CTAs running at the same time share W's tile in L2, within raster groups of
// rows where X is too large to stay in L2: UnitTile). In clusters of CM = 2
// CTAs the unit of work is a pair of vertically adjacent tiles (one per CTA, the same W tile):
//   warpgroup 0, the producer: one thread issues, per K block (128 bytes of a row: 64 bf16 or,
//     with e4m3 operands, 128 columns), the TMA loads of X's [128 x block] and W's [BN x block]
//     tiles into stage s of a Cfg::kStages ring (128-byte swizzle),
//     after waiting for empty[s]; the loads complete full[s] (arrive.expect_tx of the stage's
//     bytes). The ring holds the CTA's tiles' K blocks in tile order, whichever consumer takes
//     them. In a cluster, each CTA's producer loads BN / CM of W's rows and multicasts them into
//     the same stage of every CTA (each full[s] expects the whole stage), and empty[s] counts the
//     consumers of every CTA, so no producer overwrites a stage that a consumer anywhere in the
//     cluster still reads; a producer stays until its empty[]s have had their last arrivals.
//   warpgroups 1 and 2, the consumers. kPingPong: consumer c takes the CTA's tiles i = c, c + 2,
//     ... whole (128 x 128: two wgmma m64n128k16 a K step, one per 64-row half), their K blocks
//     in turn (OrderWait/OrderSignal), so while one runs its epilogue the other's K blocks, next
//     in the ring, keep the tensor cores busy.
//     kCooperative: both take every tile, rows 0..63 and 64..127, consumer 1 `stagger` K blocks
//     behind consumer 0 (HopperGemmPlan::stagger; it waits once, at its first tile, and the lag
//     keeps itself: while one consumer runs its epilogue the other has the tensor cores alone and
//     runs twice as fast, so their epilogues alternate as ping-pong's do). Per K block: wait
//     full[s], the block's wgmmas from the stage's shared memory (one commit group), wait for the
//     previous block's group, and arrive on that block's empty[] (one arrive per warp). After the
//     last K block, wait for all and free its stage.
//   The epilogue: the consumer's fp32 accumulators, converted (bf16, the gated activation) or not
//     (kAccumulateF32), go to the consumer's own shared-memory buffer in the 128-byte swizzled
//     layout of the output's TMA boxes (128 bytes of a row a box: 64 bf16 or 32 fp32 columns),
//     then one thread issues the boxes' TMA stores (kAccumulateF32: TMA reduce-adds, so the
//     residual is read and written in L2, not by the threads) and moves on; the buffer is written
//     again only after the copy engine has read it (cp.async.bulk.wait_group.read). A tile larger
//     than the buffer goes out in rounds. kStoreBf16Rope first rotates the accumulators of the
//     rope columns in registers (RopeBlock): a head's dims i and i + D/2 sit in the same thread
//     (and with the head norm, a row's head is in the registers of a quad of threads).
// Phases: the i-th use of stage s (i = it / kStages, `it` counting K blocks over all of a CTA's
// tiles) waits full[s] for parity i & 1 and, in the producer, empty[s] for parity (i & 1) ^ 1
// (a fresh barrier counts as having completed the phase of parity 1, so the first round passes).
// Tails: TMA zero-fills the rows and K columns beyond X and W (and counts them in the stage's
// bytes), so partial tiles accumulate zeros; TMA stores skip the rows and columns beyond Y.
#include <cudaTypedefs.h>

#include <cstdint>
#include <utility>

#include "kernels/activations.cuh"
#include "kernels/common.cuh"
#include "kernels/fp8.cuh"
#include "kernels/hopper_gemm.cuh"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define RANKD_HOPPER_GEMM_DEVICE 1
#else
#define RANKD_HOPPER_GEMM_DEVICE 0
#endif

namespace rankd::kernels {
namespace {

constexpr int kBK = kHopperTileK;  // bf16 K columns a block; fp8's are KBlock<true>
// K columns a block of 128 bytes: 64 bf16 or 128 e4m3.
template <bool F8>
inline constexpr int KBlock = F8 ? 2 * kBK : kBK;
constexpr int kConsumers = 2;  // consumer warpgroups
constexpr int kThreads = 128 * (1 + kConsumers);
constexpr int kSwizzleAlign = 1024;  // 8 rows of 128 bytes: one swizzle atom
// The ring's and the epilogue buffers' shared memory together (the rest of the 227 KB a CTA may
// have goes to alignment and the barriers).
constexpr int kSmemBudget = 224 * 1024;
static_assert(kBK * 2 == 128, "one K block is one 128-byte swizzle row");
// The static shared memory of the kernel's body in a pass without sm_90a (see the kernel's #else):
// far above the 0 of the sm_90a body, and above the 1 KiB that tools report as reserved per CTA.
constexpr int kNoSm90aMarkerBytes = 4096;

__host__ __device__ constexpr bool IsFp8Out(HopperEpilogue e) {
  return e == HopperEpilogue::kSwiGluFp8 || e == HopperEpilogue::kGeGluFp8;
}
__host__ __device__ constexpr bool IsGated(HopperEpilogue e) {
  return e == HopperEpilogue::kSwiGlu || e == HopperEpilogue::kGeGlu || IsFp8Out(e);
}

// The tile's rows: 256 for kCooperativeTall (128 a consumer), 64 for kPingPongShort, else 128.
__host__ __device__ constexpr int TileRows(HopperSchedule s) {
  return s == HopperSchedule::kCooperativeTall ? 2 * kHopperTileM
         : s == HopperSchedule::kPingPongShort ? kHopperTileM / 2
                                               : kHopperTileM;
}
// Whether each consumer owns whole tiles, the two on alternate ones.
// K slices (HopperSlices) run on consumers of 64 fp32 accumulators a thread (64 x 128 blocks:
// ping-pong 64, cooperative 128), the shapes of few rows take: the gather's registers beside
// 128 of them spill.
__host__ __device__ constexpr bool TakesSlices(HopperSchedule s, int tile_n) {
  return s == HopperSchedule::kPingPongShort ||
         (s == HopperSchedule::kCooperative && tile_n == 128);
}
__host__ __device__ constexpr bool IsPingPong(HopperSchedule s) {
  return s == HopperSchedule::kPingPong || s == HopperSchedule::kPingPongShort;
}

// fp8 operands' scales (HopperGemmPlan::x_scale, w_scale; both null for bf16) and the fp8
// gated output's (y_scale).
struct HopperScales {
  const float* x = nullptr;  // [m], or [m, x_groups] (kGroup)
  const float* w = nullptr;  // [n]
  int x_groups = 0;          // kGroup: groups of kHopperScaleGroup K columns a row of X
  float* y = nullptr;        // kSwiGluFp8/kGeGluFp8: [m, n / 2 / kHopperScaleGroup]
};

// The sizes that depend on the tile, the schedule, the cluster, the epilogue and the operands
// (F8: e4m3, else bf16; a K block is 128 bytes of a row either way).
template <HopperEpilogue E, int BN, HopperSchedule S, int CM, bool F8>
struct Cfg {
  static constexpr int kBlockK = KBlock<F8>;  // K columns a block
  static constexpr bool kPingPong = IsPingPong(S);
  // CM, CTAs a cluster (1 or 2): the cluster's CTAs compute vertically adjacent tiles (the same
  // W tile), and each loads 1/CM of W's tile by TMA multicast into all of them.
  static_assert(CM == 1 || CM == 2, "clusters of 1 or 2 CTAs");
  static constexpr int kBM = TileRows(S);
  static_assert(BN == 128 || BN == 256, "wgmma m64nBNk16 with one TMA box of BN rows");
  static constexpr int kABytes = kBM * 128;  // X tile: kBM rows of 128 bytes
  static constexpr int kBBytes = BN * 128;   // W tile
  static constexpr int kStageBytes = kABytes + kBBytes;
  // W's rows a CTA loads (and multicasts) a stage: a whole number of 8-row swizzle atoms.
  static constexpr int kBLoadRows = BN / CM;
  static_assert(kBLoadRows % 8 == 0, "whole swizzle atoms");
  // A consumer's rows (the whole tile's in ping-pong), in 64-row halves (wgmma's M is 64).
  static constexpr int kRows = kPingPong ? kBM : kBM / kConsumers;
  static constexpr int kHalves = kRows / 64;
  static_assert(kHalves * BN <= 256, "a consumer holds at most 128 fp32 accumulators a thread");
  // Empty-barrier arrivals a stage's use: one per warp of the consumers that read it, in every
  // CTA of the cluster (a stage is free for the multicast only once all of them have read it).
  static constexpr int kEmptyArrivals = 4 * (kPingPong ? 1 : kConsumers) * CM;
  // The output: columns of the consumer's block, bytes an element, and its TMA boxes of
  // kRows x 128 bytes (64 bf16 or 32 fp32 columns), 128-byte swizzled; e4m3 (kFp8Out) in boxes of
  // kRows x 64 bytes, 64-byte swizzled, one scale group of kHopperScaleGroup columns each.
  static constexpr bool kF32Out = E == HopperEpilogue::kAccumulateF32;
  static constexpr bool kFp8Out = IsFp8Out(E);
  static constexpr int kOutCols = IsGated(E) ? BN / 2 : BN;
  static constexpr int kOutBytes = kF32Out ? 4 : kFp8Out ? 1 : 2;
  static constexpr int kBoxRowBytes = kFp8Out ? kHopperScaleGroup : 128;
  static_assert(!kFp8Out || kBoxRowBytes == 64, "the e4m3 boxes' swizzle is the 64-byte one");
  static constexpr int kBoxCols = kBoxRowBytes / kOutBytes;
  static constexpr int kBoxes = kOutCols / kBoxCols;
  static constexpr int kBoxBytes = kRows * kBoxRowBytes;
  // A consumer's epilogue buffer: its whole output block where that is smaller (the gated
  // epilogues' e4m3 block, 8 KB on ping-pong 128), else 16 KB, written in rounds of
  // kBoxesPerRound boxes: the ring of ping-pong 128 then has a sixth stage, which took gate_up +
  // SwiGLU (a 16 KB block) from 141.9 to 129.6 us on an H100 (bench/RESULTS.md, 2026-12-07,
  // sessions 40-41). qkv's bf16 block (32 KB) and the residual adds' fp32 block (64 KB) go out in
  // rounds of 16 KB for it (session 42; their rows against cuBLASLt's in the same call are what
  // measures it).
  static constexpr int kEpiBufCap = 16 * 1024;
  static constexpr int kEpiBufBytes =
      kBoxes * kBoxBytes < kEpiBufCap ? kBoxes * kBoxBytes : kEpiBufCap;
  static constexpr int kBoxesPerRound =
      kBoxes < kEpiBufBytes / kBoxBytes ? kBoxes : kEpiBufBytes / kBoxBytes;
  static constexpr int kRounds = kBoxes / kBoxesPerRound;
  static_assert(kBoxes % kBoxesPerRound == 0 && kRounds >= 1, "whole rounds");
  static constexpr int kEpiBytes = kConsumers * kEpiBufBytes;
  // Ping-pong 128: 6 stages; ping-pong 64: 8; cooperative: 6 / 4 at BN 128 / 256.
  static constexpr int kStages = (kSmemBudget - kEpiBytes) / kStageBytes;
  // Dynamic shared memory: slack to align to kSwizzleAlign, the A stages, the B stages, the
  // epilogue buffers (1024-aligned: the swizzle pattern is that of the address), then full[] and
  // empty[] (8-byte mbarriers).
  static constexpr int kBarrierBytes = 2 * kStages * 8;
  static constexpr int kSmemBytes =
      kSwizzleAlign + kStages * kStageBytes + kEpiBytes + kBarrierBytes;
  static_assert(kSmemBytes <= 227 * 1024, "shared memory of one CTA");
  static_assert(kStageBytes % kSwizzleAlign == 0 && kEpiBufBytes % kSwizzleAlign == 0,
                "1024-aligned stages and buffers");
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

// Box (c0, c1) of `map` into L2 (no shared memory, no barrier).
__device__ __forceinline__ void TmaPrefetchL2(const CUtensorMap* map, int c0, int c1) {
  asm volatile("cp.async.bulk.prefetch.tensor.2d.L2.global.tile [%0, {%1, %2}];" ::"l"(
                   reinterpret_cast<uint64_t>(map)),
               "r"(c0), "r"(c1)
               : "memory");
}

// Box (c0, c1) of `map` into shared memory at dst and `bar`'s tx bytes in every CTA of `mask`
// (the same shared-memory offsets in each).
__device__ __forceinline__ void TmaLoad2dMulticast(uint32_t dst, const CUtensorMap* map, int c0,
                                                   int c1, uint32_t bar, uint16_t mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
      ".multicast::cluster [%0], [%1, {%2, %3}], [%4], %5;" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar), "h"(mask)
      : "memory");
}

__device__ __forceinline__ uint32_t ClusterRank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}

// Arrives on the mbarrier at `bar` (this CTA's shared-memory address) of the cluster's CTA `cta`,
// with the arrive's default semantics (release at CTA scope), as CUTLASS's ClusterBarrier does. The
// consumers arrive so to free a stage that their wgmmas have finished reading (wgmma.wait_group):
// no memory of theirs needs ordering before the producer's TMA overwrites it, so no cluster-scope
// release, which costs a fence each arrive: with .release.cluster the clusters of 2 ran 1.4x to
// 2.7x slower than single CTAs, their consumers stalled on memory barriers 7.2 cycles an issued
// instruction (Nsight Compute, bench/RESULTS.md 2026-12-04).
__device__ __forceinline__ void MbarArriveCluster(uint32_t bar, uint32_t cta) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(bar), "r"(cta));
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];" ::"r"(remote) : "memory");
}

// Every thread of every CTA of the cluster.
__device__ __forceinline__ void ClusterSync() {
  asm volatile(
      "barrier.cluster.arrive.release.aligned;\n"
      "barrier.cluster.wait.acquire.aligned;" ::
          : "memory");
}

// wgmma shared-memory matrix descriptor of a K-major tile in the 128-byte swizzle that TMA's
// CU_TENSOR_MAP_SWIZZLE_128B writes: rows of 128 bytes, 8-row atoms 1024 bytes apart (SBO),
// LBO unused (1) for a swizzled K-major operand, layout type 1 (128B) in bits 62-63. The start
// address advances by 32 bytes per K step of 16 inside the 128-byte row; atoms are
// 1024-aligned, so the base offset (bits 49-51) stays 0. In two halves: DescLo(addr) (the start
// address >> 4 in bits 0-13, LBO in 16-29) and the constant kDescHi. Shared addresses are below
// 0x40000 (228 KB), so DescLo(addr + off) = DescLo(addr) + off / 16 for 16-byte multiples: the
// K loops build a tile's descriptor once and add the stage's and the K step's offsets to it.
__device__ __forceinline__ constexpr uint32_t DescLo(uint32_t addr) {
  return ((addr & 0x3FFFF) >> 4) | (uint32_t{1} << 16);
}
constexpr uint32_t kDescHi = (1024 >> 4) | (uint32_t{1} << 30);
__device__ __forceinline__ uint64_t Desc(uint32_t lo) { return uint64_t{kDescHi} << 32 | lo; }

// A position in the kStages ring of K blocks: the stage (it % kStages) and the parity of its
// use ((it / kStages) & 1) of the it-th block, advanced without a division.
template <int kStages>
struct RingPos {
  int s, phase;
  __device__ __forceinline__ explicit RingPos(int it)
      : s(it % kStages), phase((it / kStages) & 1) {}
  __device__ __forceinline__ void Next() {
    if (++s == kStages) {
      s = 0;
      phase ^= 1;
    }
  }
};

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

// The wgmma asm statements' accumulator operands: "+f" of d[0..63] (d[0..127]) and the register
// list naming them (%0..%63, %0..%127; the descriptors and the scale-d flag follow).
#define RANKD_WGMMA_D8(i)                                                                     \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
      "+f"(d[i + 6]), "+f"(d[i + 7])
#define RANKD_WGMMA_D64(i)                                                                  \
  RANKD_WGMMA_D8(i), RANKD_WGMMA_D8(i + 8), RANKD_WGMMA_D8(i + 16), RANKD_WGMMA_D8(i + 24), \
      RANKD_WGMMA_D8(i + 32), RANKD_WGMMA_D8(i + 40), RANKD_WGMMA_D8(i + 48),               \
      RANKD_WGMMA_D8(i + 56)
#define RANKD_WGMMA_REGS64                                                                  \
  "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23," \
  "%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,"    \
  "%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, "
#define RANKD_WGMMA_REGS128                                                                 \
  "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23," \
  "%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,"    \
  "%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,"    \
  "%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,"    \
  "%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106," \
  "%107,%108,%109,%110,%111,%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,"   \
  "%124,%125,%126,%127}, "

// d [64 x BN] fp32 += A [64 x 16] . B [BN x 16]^T, both K-major in shared memory (BN = 2 x the
// size of d). Fragment of thread t (warp w = t / 32 of the warpgroup, lane l): d[4j + q] is row
// w*16 + l/4 + 8*(q/2), column 8j + 2*(l%4) + q%2 (j < BN/8, q < 4).
__device__ __forceinline__ void Wgmma(float (&d)[64], uint64_t desc_a, uint64_t desc_b) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " RANKD_WGMMA_REGS64
      "%64, %65, p, 1, 1, 0, 0;\n"
      "}\n"
      : RANKD_WGMMA_D64(0)
      : "l"(desc_a), "l"(desc_b), "r"(1));
}

__device__ __forceinline__ void Wgmma(float (&d)[128], uint64_t desc_a, uint64_t desc_b) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 " RANKD_WGMMA_REGS128
      "%128, %129, p, 1, 1, 0, 0;\n"
      "}\n"
      : RANKD_WGMMA_D64(0), RANKD_WGMMA_D64(64)
      : "l"(desc_a), "l"(desc_b), "r"(1));
}

// The same with e4m3 operands: d [64 x BN] fp32 += A [64 x 32] . B [BN x 32]^T, 32 bytes of each
// row a step as above (fp8's wgmma has no transpose: both operands K-major, as TMA writes them).
// accumulate 0: d = A . B^T (the promotion's partial products start so).
__device__ __forceinline__ void WgmmaF8(float (&d)[64], uint64_t desc_a, uint64_t desc_b,
                                        int accumulate = 1) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 " RANKD_WGMMA_REGS64
      "%64, %65, p, 1, 1;\n"
      "}\n"
      : RANKD_WGMMA_D64(0)
      : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}

__device__ __forceinline__ void WgmmaF8(float (&d)[128], uint64_t desc_a, uint64_t desc_b) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e4m3 " RANKD_WGMMA_REGS128
      "%128, %129, p, 1, 1;\n"
      "}\n"
      : RANKD_WGMMA_D64(0), RANKD_WGMMA_D64(64)
      : "l"(desc_a), "l"(desc_b), "r"(1));
}
#undef RANKD_WGMMA_D8
#undef RANKD_WGMMA_D64
#undef RANKD_WGMMA_REGS64
#undef RANKD_WGMMA_REGS128

// The row of a consumer's block that thread (warp w, lane l) holds in d[hf][4j + 2h + {0, 1}]:
// wgmma's accumulator fragment, 64 rows a half, 16 a warp, lanes l / 4, and 8 more for h.
__device__ __forceinline__ constexpr int FragmentRow(int hf, int h, int w, int l) {
  return 64 * hf + 16 * w + l / 4 + 8 * h;
}

// The gated epilogues' column groups (8 columns, the fragment's d[4g .. 4g + 3]): output group j
// of a block (BN / 2 outputs) is gate group GatedGroup(j) of the accumulators, its up group 8
// later (kHopperGluHalf / 8): the interleaved weight's 128-row blocks hold 64 gate rows, then
// 64 up rows, and a block of BN = 256 holds two.
__device__ __forceinline__ constexpr int GatedGroup(int j) {
  constexpr int kHalfGroups = kHopperGluHalf / 8;
  return j / kHalfGroups * 2 * kHalfGroups + j % kHalfGroups;
}

template <HopperEpilogue E>
__device__ __forceinline__ float Gated(float gate, float up) {
  // Rounded to bf16 first: the unfused path's gate_up is a bf16 tensor.
  const float g = __bfloat162float(__float2bfloat16(gate));
  const float u = __bfloat162float(__float2bfloat16(up));
  if constexpr (E == HopperEpilogue::kSwiGlu || E == HopperEpilogue::kSwiGluFp8) {
    return Silu(g) * u;
  } else {
    return GeluTanh(g) * u;
  }
}

// Synchronises the 128 threads of consumer warpgroup c (named barrier 1 + c; 0 is __syncthreads).
__device__ __forceinline__ void ConsumerBarrier(int c) {
  asm volatile("bar.sync %0, 128;" ::"r"(1 + c) : "memory");
}

// Ping-pong's order (named barriers 3 + c): consumer c starts the K blocks of its tile i > 0 only
// once the other consumer is through those of tile i - 1 (OrderWait: bar.sync of c's 128 threads
// with the other's 128 bar.arrive of OrderSignal). Besides keeping the MMAs of the two apart, it
// is what makes the phase parities right: a consumer that waited on a stage's full[] while an
// earlier use of the stage was still unconsumed would take that use's completed phase (of the same
// parity, two phases back) for its own.
__device__ __forceinline__ void OrderWait(int c) {
  asm volatile("bar.sync %0, 256;" ::"r"(3 + c) : "memory");
}
__device__ __forceinline__ void OrderSignal(int c) {
  asm volatile("bar.arrive %0, 256;" ::"r"(3 + (1 - c)) : "memory");
}

// The cooperative consumers' stagger (named barrier 5): consumer 1 starts only once consumer 0 is
// through the first K blocks of its first tile (StaggerSignal by consumer 0's 128 threads,
// StaggerWait by consumer 1's), once a kernel.
__device__ __forceinline__ void StaggerWait() { asm volatile("bar.sync 5, 256;" ::: "memory"); }
__device__ __forceinline__ void StaggerSignal() { asm volatile("bar.arrive 5, 256;" ::: "memory"); }

// ConsumerBarrier that also returns whether any of the 128 threads passed `v` true (bar.red.or).
__device__ __forceinline__ bool ConsumerBarrierAny(int c, bool v) {
  uint32_t any;
  asm volatile(
      "{\n .reg .pred p, q;\n setp.ne.u32 p, %1, 0;\n bar.red.or.pred q, %2, 128, p;\n"
      " selp.u32 %0, 1, 0, q;\n}"
      : "=r"(any)
      : "r"(static_cast<uint32_t>(v)), "r"(1 + c)
      : "memory");
  return any != 0;
}

// K slices (HopperSlices): a consumer that multiplied slice `slice` of its block of tile `tile`
// writes its accumulators to the block's partial of that slice (thread t's value v at v * 128 +
// t: each store a warpgroup's 512 contiguous bytes), and counts itself in on the block's
// counter. The last of the slices to arrive sums all of them, read back from L2 in slice order
// into d, whichever consumer that is: the same bits from launch to launch. It resets the counter
// for the next launch and returns true (it runs the epilogue); the others return false. The
// classic last-block reduction: each thread's stores fenced (membar.gl) before the count, the
// last reader's loads after it, through L2 (ld.global.cg).
template <int kHalves, int BN>
__device__ __forceinline__ bool GatherSlices(float (&d)[kHalves][BN / 2], const HopperSlices& sl,
                                             int64_t block, int slice, int c) {
  constexpr int kVals = kHalves * BN / 2;  // a thread's accumulators
  constexpr int64_t kBlockFloats = int64_t{kVals} * 128;
  const int t = threadIdx.x % 128;
  float* const first = sl.partials + block * sl.count * kBlockFloats + t;
  float* const mine = first + slice * kBlockFloats;
#pragma unroll
  for (int hf = 0; hf < kHalves; ++hf) {
#pragma unroll
    for (int q = 0; q < BN / 2; ++q) __stcg(mine + (hf * BN / 2 + q) * 128, d[hf][q]);
  }
  __threadfence();
  bool last = false;
  if (t == 0) {
    last = atomicAdd(sl.counters + block, 1) == sl.count - 1;
    if (last) sl.counters[block] = 0;  // every slice has counted: nobody reads it again
  }
  if (!ConsumerBarrierAny(c, last)) return false;
  __threadfence();
#pragma unroll
  for (int hf = 0; hf < kHalves; ++hf) {
#pragma unroll
    for (int q = 0; q < BN / 2; ++q) d[hf][q] = 0.0f;
  }
  for (int j = 0; j < sl.count; ++j) {
    const float* p = first + j * kBlockFloats;
#pragma unroll
    for (int hf = 0; hf < kHalves; ++hf) {
#pragma unroll
      for (int q = 0; q < BN / 2; ++q) d[hf][q] += __ldcg(p + (hf * BN / 2 + q) * 128);
    }
  }
  return true;
}

// TMA store (kStore) or reduce-add of the box at (c0 = column, c1 = row) of `map` from shared
// memory at src, in this thread's bulk async-group.
template <bool kReduceAdd>
__device__ __forceinline__ void TmaStore2d(const CUtensorMap* map, int c0, int c1, uint32_t src) {
  if constexpr (kReduceAdd) {
    asm volatile(
        "cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group"
        " [%0, {%1, %2}], [%3];" ::"l"(reinterpret_cast<uint64_t>(map)),
        "r"(c0), "r"(c1), "r"(src)
        : "memory");
  } else {
    asm volatile(
        "cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group"
        " [%0, {%1, %2}], [%3];" ::"l"(reinterpret_cast<uint64_t>(map)),
        "r"(c0), "r"(c1), "r"(src)
        : "memory");
  }
}
__device__ __forceinline__ void BulkCommit() {
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}
// Waits until this thread's bulk async-groups have read their shared memory (kRead) or are
// complete.
template <bool kRead>
__device__ __forceinline__ void BulkWait() {
  if constexpr (kRead) {
    asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
  } else {
    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
  }
}
// Orders this thread's ordinary shared-memory stores before the copy engine's reads of them.
// Four 8 x 8 matrices of 16-bit elements from the warp's registers into shared memory, one
// instruction (stmatrix .x4): register k of each thread is matrix k's row l / 4, columns
// 2 (l % 4) and 2 (l % 4) + 1 (wgmma's accumulator fragment, packed two to a register); thread
// l gives the address of row l % 8 of matrix l / 8 (16 contiguous bytes).
__device__ __forceinline__ void StMatrix4(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2,
                                          uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(addr),
               "r"(r0), "r"(r1), "r"(r2), "r"(r3)
               : "memory");
}

__device__ __forceinline__ uint32_t PackBf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

__device__ __forceinline__ void FenceProxyAsync() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// RoPE of a consumer's kHalves x 64 rows x BN block d (the wgmma fragment: d[hf][4j + q] is row
// 64 hf + 16 w + l/4 + 8 (q/2), column 8j + 2 (l%4) + q%2) for heads of D = 16 kHalfJ dims: column
// group j of a head's first half (j % 2kHalfJ < kHalfJ) pairs with group j + kHalfJ in the same
// thread, and the pair's angles i, i + 1 (i = 8j % D + 2 (l%4)) are one float4 of the table.
// Only the heads inside [col_lo, col_hi) and rows below m (the table's rows) are rotated. With
// the head norm (rope.q_norm set), each such head of each row is first divided by its rms (its
// sum of squares: the thread's 2 D / 8 values, then the quad's four threads by shuffles) and
// multiplied by the norm's weight (k_norm's from k_lo on, q_norm's before), all in fp32 as
// kernels/qkv_rope.cu does: the same values within fp32 rounding (the sum in another order).
// Requires out0 % D == 0 (BN is a multiple of D).
template <int BN, int kHalves, int kHalfJ>
__device__ __forceinline__ void RopeBlock(float (&d)[kHalves][BN / 2], const HopperRope& rope,
                                          int m, int row0, int out0, int w, int l) {
  constexpr int kD = 16 * kHalfJ;
  constexpr int kHeadJ = 2 * kHalfJ;  // column groups of 8 a head
  static_assert(BN % kD == 0, "whole heads in a block");
  const bool norm = rope.q_norm != nullptr;  // uniform
#pragma unroll
  for (int head = 0; head < BN / kD; ++head) {
    const int col = out0 + head * kD;
    if (col < rope.col_lo || col >= rope.col_hi) continue;  // uniform
    const __nv_bfloat16* weight = col >= rope.k_lo ? rope.k_norm : rope.q_norm;
#pragma unroll
    for (int hf = 0; hf < kHalves; ++hf) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = row0 + FragmentRow(hf, h, w, l);
        // Rounded to bf16 first: the unfused path works on the GEMM's bf16 output.
        float ss = 0.0f;
#pragma unroll
        for (int jj = 0; jj < kHeadJ; ++jj) {
          const int q = 4 * (head * kHeadJ + jj) + 2 * h;
          d[hf][q] = __bfloat162float(__float2bfloat16(d[hf][q]));
          d[hf][q + 1] = __bfloat162float(__float2bfloat16(d[hf][q + 1]));
          ss += d[hf][q] * d[hf][q] + d[hf][q + 1] * d[hf][q + 1];
        }
        if (norm) {  // every lane: the quad's shuffles (rows past m hold zeros, never stored)
          ss += __shfl_xor_sync(0xffffffffu, ss, 1);
          ss += __shfl_xor_sync(0xffffffffu, ss, 2);
          const float inv = rsqrtf(ss / static_cast<float>(kD) + rope.eps);
#pragma unroll
          for (int jj = 0; jj < kHeadJ; ++jj) {
            const int q = 4 * (head * kHeadJ + jj) + 2 * h;
            const float2 wv = __bfloat1622float2(
                *reinterpret_cast<const __nv_bfloat162*>(weight + 8 * jj + 2 * (l % 4)));
            d[hf][q] *= inv * wv.x;
            d[hf][q + 1] *= inv * wv.y;
          }
        }
        if (row >= m) continue;
#pragma unroll
        for (int jj = 0; jj < kHalfJ; ++jj) {
          const int j = head * kHeadJ + jj;
          const int i0 = 8 * jj + 2 * (l % 4);
          const float4 cs = *reinterpret_cast<const float4*>(
              rope.rotations + static_cast<int64_t>(row) * (kD / 2) + i0);
          const int q = 4 * j + 2 * h, p = 4 * (j + kHalfJ) + 2 * h;
          RotatePair(d[hf][q], d[hf][p], cs.x, cs.y);
          RotatePair(d[hf][q + 1], d[hf][p + 1], cs.z, cs.w);
        }
      }
    }
  }
}

// Dequantises a consumer's kHalves x 64 rows x BN block of e4m3 products (the wgmma fragment:
// d[hf][4j + q] is row 64 hf + 16 w + l/4 + 8 (q/2), column 8j + 2 (l%4) + q%2, of the block at
// row0, col0 of the product): each times its row's x_scale and its column's w_scale, as cuBLASLt's
// outer-vector scales (x_scale null: X's scales are already in, kGroup's promotion). Rows at or
// past m and columns at or past n (TMA's zero fill; never stored) take 0 rather than a scale from
// past the vectors' ends. In two steps: Load, the thread's scales into registers, issued while
// the tile's last wgmma group still runs (the loads' latency was the e4m3 epilogue's first
// stall: session 40's profile), and Apply, in the epilogue.
template <int BN, int kHalves>
struct BlockScales {
  float xs[kHalves][2];
  float2 ws[BN / 8];

  __device__ __forceinline__ void Load(const float* x_scale, const float* w_scale, int m, int n,
                                       int row0, int col0) {
    const int t = threadIdx.x % 128, w = t / 32, l = t % 32;
#pragma unroll
    for (int hf = 0; hf < kHalves; ++hf) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = row0 + FragmentRow(hf, h, w, l);
        xs[hf][h] = row >= m ? 0.0f : x_scale != nullptr ? __ldg(x_scale + row) : 1.0f;
      }
    }
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
      // An even column, n a multiple of 8: both of the pair are inside, or neither.
      const int col = col0 + 8 * j + 2 * (l % 4);
      ws[j] =
          col < n ? __ldg(reinterpret_cast<const float2*>(w_scale + col)) : make_float2(0.0f, 0.0f);
    }
  }

  __device__ __forceinline__ void Apply(float (&d)[kHalves][BN / 2]) const {
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
#pragma unroll
      for (int hf = 0; hf < kHalves; ++hf) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int q = 4 * j + 2 * h;
          d[hf][q] *= xs[hf][h] * ws[j].x;
          d[hf][q + 1] *= xs[hf][h] * ws[j].y;
        }
      }
    }
  }
};

// The epilogue of one consumer's kRows x BN block (d[h]: rows 64h..64h+63, the wgmma fragment)
// into Y at rows row0.., output columns out0.. (gated: the block's BN/2 outputs). Each round: the
// buffer free (thread 0 waits for its last stores to have read it), the round's boxes written in
// the swizzled layout (row r's 16-byte chunk j at r * 128 + 16 * (j ^ r % 8): the fragment's 8
// rows a store land in 8 different chunks, no bank conflicts), a proxy fence, then thread 0 issues
// the boxes' TMA stores and does not wait for them. e4m3 products (F8) are dequantised first
// (BlockScales, loaded by the caller: `dq`; col0 is the block's first column of the product,
// tn * BN). The e4m3 output
// (kFp8Out) is quantised first too (QuantizeGated), and its boxes are 64-byte rows in the 64-byte
// swizzle (row r's chunk j at r * 64 + 16 * (j ^ (r / 2 % 4)): a store's 8 rows in distinct banks).
// kSwiGluFp8/kGeGluFp8: the gated activation of a consumer's block into the gate slots of d
// (d[hf][4 GatedGroup(j) + 2h + {0, 1}]: row 64 hf + 16 w + l/4 + 8h, output column 8j + 2 (l%4)
// + {0, 1} of the block), then per row and box (kHopperScaleGroup outputs: output groups j of 8
// columns, 8 a box) the largest magnitude over the 4 threads of the row (a quad: lanes 4i..4i+3)
// and its scale (kernels/fp8.cuh): its reciprocal into sc (the stores multiply, ToE4m3x2Inv) and,
// by the quad's first thread, the scale into y_scale [m, groups] at the block's first group g0.
// Rows at or past m are computed (zeros) and not written.
template <HopperEpilogue E, int kHalves, int kOutCols, int BN>
__device__ __forceinline__ void QuantizeGated(float (&d)[kHalves][BN / 2],
                                              float (&sc)[kHalves][2][kOutCols / kHopperScaleGroup],
                                              float* y_scale, int groups, int g0, int m, int row0,
                                              int w, int l) {
  constexpr int kUp = 4 * (kHopperGluHalf / 8);
  constexpr int kGroupJ = kHopperScaleGroup / 8;  // output groups of 8 columns a scale group
#pragma unroll
  for (int hf = 0; hf < kHalves; ++hf) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = row0 + FragmentRow(hf, h, w, l);
#pragma unroll
      for (int b = 0; b < kOutCols / kHopperScaleGroup; ++b) {
        float amax = 0.0f;
#pragma unroll
        for (int j = b * kGroupJ; j < (b + 1) * kGroupJ; ++j) {
          const int q = 4 * GatedGroup(j) + 2 * h;
          d[hf][q] = Gated<E>(d[hf][q], d[hf][q + kUp]);
          d[hf][q + 1] = Gated<E>(d[hf][q + 1], d[hf][q + 1 + kUp]);
          amax = fmaxf(amax, fmaxf(fabsf(d[hf][q]), fabsf(d[hf][q + 1])));
        }
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
        const float scale = Fp8Scale(amax);
        sc[hf][h][b] = __frcp_rn(scale);
        if (l % 4 == 0 && row < m) y_scale[static_cast<int64_t>(row) * groups + g0 + b] = scale;
      }
    }
  }
}

// The RMSNorm fold's input side (HopperNorm), in two steps. RowSums, before the tile's K blocks
// (ping-pong: before the consumer waits for its turn, which hides the loads' latency): the
// thread's part of the sums of squares of each of its rows of a consumer's kHalves x 64 rows
// (the wgmma fragment's rows 64 hf + 16 w + l/4 + 8 h), the 4 threads of a row (a quad) taking
// every 4th group, 4 groups a thread a round with every row's loads in flight together. Rows
// at or past m: 0. NormRows, in the epilogue: the quad's parts added and each row times
// rsqrt(mean + eps) (rows past m are left as they are: never stored).
template <int kHalves>
__device__ __forceinline__ void RowSums(const HopperNorm& norm, int m, int row0, int w, int l,
                                        float (&ss)[kHalves][2]) {
  constexpr int kRound = 4;  // groups a thread a round
#pragma unroll
  for (int hf = 0; hf < kHalves; ++hf) {
    ss[hf][0] = ss[hf][1] = 0.0f;
  }
  for (int g0 = 0; g0 < norm.in_groups; g0 += 4 * kRound) {
    float v[kHalves][2][kRound];
#pragma unroll
    for (int hf = 0; hf < kHalves; ++hf) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = row0 + FragmentRow(hf, h, w, l);
        const float* p = norm.in_sumsq + static_cast<int64_t>(row) * norm.in_groups;
#pragma unroll
        for (int u = 0; u < kRound; ++u) {
          const int g = g0 + 4 * u + l % 4;
          v[hf][h][u] = row < m && g < norm.in_groups ? __ldg(p + g) : 0.0f;
        }
      }
    }
#pragma unroll
    for (int hf = 0; hf < kHalves; ++hf) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
#pragma unroll
        for (int u = 0; u < kRound; ++u) ss[hf][h] += v[hf][h][u];
      }
    }
  }
}

template <int BN, int kHalves>
__device__ __forceinline__ void NormRows(float (&d)[kHalves][BN / 2], const HopperNorm& norm,
                                         const float (&ss)[kHalves][2], int m, int row0, int w,
                                         int l) {
  const float inv_cols = 1.0f / static_cast<float>(kHopperScaleGroup * norm.in_groups);
#pragma unroll
  for (int hf = 0; hf < kHalves; ++hf) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = row0 + FragmentRow(hf, h, w, l);
      float s = ss[hf][h];
      s += __shfl_xor_sync(0xffffffffu, s, 1);
      s += __shfl_xor_sync(0xffffffffu, s, 2);
      const float r = row < m ? rsqrtf(s * inv_cols + norm.eps) : 1.0f;
#pragma unroll
      for (int j = 0; j < BN / 8; ++j) {
        d[hf][4 * j + 2 * h] *= r;
        d[hf][4 * j + 2 * h + 1] *= r;
      }
    }
  }
}

// kResidualNorm: the consumer's block of the fp32 stream (rows row0.., columns col0..) into L2,
// a 128-byte line a prefetch, the consumer's 128 threads taking kRows x BN / 32 lines between
// them.
template <int BN, int kRows>
__device__ __forceinline__ void PrefetchResidual(const float* residual, int m, int n, int row0,
                                                 int col0) {
  constexpr int kLinesARow = BN * 4 / 128;
  for (int i = threadIdx.x % 128; i < kRows * kLinesARow; i += 128) {
    const int row = row0 + i / kLinesARow, col = col0 + 32 * (i % kLinesARow);
    if (row < m && col < n) {
      asm volatile(
          "prefetch.global.L2 [%0];" ::"l"(residual + static_cast<int64_t>(row) * n + col));
    }
  }
}

// kResidualNorm's epilogue, without the shared-memory boxes: each thread adds its fragment of the
// product into the stream (two columns at a time, a quad's 8 columns one 32-byte sector), writes
// the sum back and its bf16 copy, and adds the squares of each group of kHopperScaleGroup columns
// (8 column groups j of the fragment), which the quad sums and its first thread writes. n is a
// multiple of kHopperScaleGroup (SetHopperGemmNormOut), so a group is inside n or past it whole.
// A group's loads, of every row of the thread, go out before any of its stores: the compiler may
// not move a load of the stream above a store into it, so loads issued row by row cost a round
// trip each (session 39's profile: the epilogue's FADDs waiting on them, 62% of its samples).
template <int BN, int kHalves>
__device__ __forceinline__ void ResidualNormBlock(const float (&d)[kHalves][BN / 2],
                                                  const HopperNorm& norm, int m, int n, int row0,
                                                  int col0, int w, int l) {
  constexpr int kGroupJ = kHopperScaleGroup / 8;
  const int groups = n / kHopperScaleGroup;
#pragma unroll
  for (int g = 0; g < BN / kHopperScaleGroup; ++g) {
    const bool cols_in = col0 + g * kHopperScaleGroup < n;  // uniform
    float2 x[kHalves][2][kGroupJ];
#pragma unroll
    for (int hf = 0; hf < kHalves; ++hf) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = row0 + FragmentRow(hf, h, w, l);
        const int64_t at = static_cast<int64_t>(row) * n + col0 + 2 * (l % 4);
#pragma unroll
        for (int jj = 0; jj < kGroupJ; ++jj) {
          x[hf][h][jj] =
              cols_in && row < m
                  ? *reinterpret_cast<const float2*>(norm.residual + at + 8 * (g * kGroupJ + jj))
                  : make_float2(0.0f, 0.0f);
        }
      }
    }
#pragma unroll
    for (int hf = 0; hf < kHalves; ++hf) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = row0 + FragmentRow(hf, h, w, l);
        const bool in = cols_in && row < m;
        const int64_t at = static_cast<int64_t>(row) * n + col0 + 2 * (l % 4);
        float ss = 0.0f;
        if (in) {
#pragma unroll
          for (int jj = 0; jj < kGroupJ; ++jj) {
            const int j = g * kGroupJ + jj, q = 4 * j + 2 * h;
            float2& v = x[hf][h][jj];
            v.x += d[hf][q];
            v.y += d[hf][q + 1];
            *reinterpret_cast<float2*>(norm.residual + at + 8 * j) = v;
            *reinterpret_cast<__nv_bfloat162*>(norm.copy + at + 8 * j) =
                __floats2bfloat162_rn(v.x, v.y);
            ss += v.x * v.x + v.y * v.y;
          }
        }
        ss += __shfl_xor_sync(0xffffffffu, ss, 1);
        ss += __shfl_xor_sync(0xffffffffu, ss, 2);
        if (in && l % 4 == 0) {
          norm.out_sumsq[static_cast<int64_t>(row) * groups + col0 / kHopperScaleGroup + g] = ss;
        }
      }
    }
  }
}

template <HopperEpilogue E, int BN, HopperSchedule S, int CM, bool F8>
__device__ __forceinline__ void Epilogue(float (&d)[Cfg<E, BN, S, CM, F8>::kHalves][BN / 2],
                                         const CUtensorMap* y_map, const HopperRope& rope,
                                         const HopperScales& scales, const HopperNorm& norm,
                                         const float (&row_ss)[Cfg<E, BN, S, CM, F8>::kHalves][2],
                                         const BlockScales<BN, Cfg<E, BN, S, CM, F8>::kHalves>& dq,
                                         int m, int n, int row0, int col0, int out0, uint8_t* buf,
                                         int c) {
  using C = Cfg<E, BN, S, CM, F8>;
  const int t = threadIdx.x % 128, w = t / 32, l = t % 32;
  if constexpr (F8) {
    dq.Apply(d);
  } else {
    if (norm.in_sumsq != nullptr) {  // uniform
      NormRows<BN, C::kHalves>(d, norm, row_ss, m, row0, w, l);
    }
  }
  if constexpr (E == HopperEpilogue::kResidualNorm) {
    ResidualNormBlock<BN, C::kHalves>(d, norm, m, n, row0, col0, w, l);
  } else {
    // kFp8Out: each row's scale per box (a box is one scale group).
    float sc[C::kHalves][2][C::kFp8Out ? C::kBoxes : 1];
    if constexpr (C::kFp8Out) {
      QuantizeGated<E, C::kHalves, C::kOutCols, BN>(d, sc, scales.y, n / 2 / kHopperScaleGroup,
                                                    out0 / kHopperScaleGroup, m, row0, w, l);
    }
    if constexpr (E == HopperEpilogue::kStoreBf16Rope) {
      if (out0 < rope.col_hi && out0 + BN > rope.col_lo) {  // uniform: the block has rope columns
        if (rope.head_dim == 64) {
          RopeBlock<BN, C::kHalves, 4>(d, rope, m, row0, out0, w, l);
        } else {
          RopeBlock<BN, C::kHalves, 8>(d, rope, m, row0, out0, w, l);
        }
      }
    }
#pragma unroll
  for (int round = 0; round < C::kRounds; ++round) {
    if (t == 0) BulkWait<true>();
    ConsumerBarrier(c);
    if constexpr (C::kOutBytes == 2) {
      // bf16: stmatrix, matrix q of an instruction the 8 rows 64 hf + 16 w + 8 (q % 2) and
      // output column group j0 + q / 2 (16 bytes: one 16-byte chunk of the 128-byte swizzle,
      // chunk j % 8 of row r at 16 ((j % 8) ^ (r % 8)); r % 8 = l % 8 for the row this lane
      // addresses), for j0 = 0, 2, ... (a pair is inside one box of 64 columns).
      const int q_lane = l / 8;
#pragma unroll
      for (int hf = 0; hf < C::kHalves; ++hf) {
#pragma unroll
        for (int j0 = 0; j0 < C::kOutCols / 8; j0 += 2) {
          const int box = 8 * j0 / C::kBoxCols;  // compile-time once unrolled
          if (box / C::kBoxesPerRound != round) continue;
          uint32_t v[4];
#pragma unroll
          for (int q = 0; q < 4; ++q) {
            const int j = j0 + q / 2, h = q % 2;
            if constexpr (IsGated(E)) {
              // Output group j is gate group GatedGroup(j) of the block's 128-column interleave
              // block j / 8; d[g] (gate) and d[g + kUp] (up) are the same row and column.
              const int g = 4 * GatedGroup(j) + 2 * h;
              constexpr int kUp = 4 * (kHopperGluHalf / 8);
              v[q] = PackBf16(Gated<E>(d[hf][g], d[hf][g + kUp]),
                              Gated<E>(d[hf][g + 1], d[hf][g + 1 + kUp]));
            } else {
              v[q] = PackBf16(d[hf][4 * j + 2 * h], d[hf][4 * j + 2 * h + 1]);
            }
          }
          const int r = 64 * hf + 16 * w + 8 * (q_lane % 2) + l % 8;
          const int j = (j0 + q_lane / 2) % 8;
          StMatrix4(SmemAddr(buf + (box % C::kBoxesPerRound) * C::kBoxBytes + r * 128 +
                             16 * (j ^ (l % 8))),
                    v[0], v[1], v[2], v[3]);
        }
      }
    } else {
#pragma unroll
    for (int hf = 0; hf < C::kHalves; ++hf) {
#pragma unroll
      for (int j = 0; j < C::kOutCols / 8; ++j) {
        constexpr int kColsPerBox = C::kBoxCols;
        const int box = 8 * j / kColsPerBox;  // compile-time once unrolled
        if (box / C::kBoxesPerRound != round) continue;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = FragmentRow(hf, h, w, l);
          const int byte = (8 * j + 2 * (l % 4)) % kColsPerBox * C::kOutBytes;  // in the box row
          uint8_t* p =
              buf + (box % C::kBoxesPerRound) * C::kBoxBytes +
              (C::kFp8Out ? r * C::kBoxRowBytes + 16 * ((byte / 16) ^ (r / 2 % 4)) + byte % 16
                          : r * 128 + 16 * ((byte / 16) ^ (r % 8)) + byte % 16);
          if constexpr (C::kFp8Out) {
            // QuantizeGated left the activation in the gate slots.
            const int q = 4 * GatedGroup(j) + 2 * h;
            const float inv = sc[hf][h][box];
            *reinterpret_cast<uint16_t*>(p) = ToE4m3x2Inv(d[hf][q], d[hf][q + 1], inv);
          } else {
            static_assert(C::kF32Out, "bf16 goes by stmatrix");
            const int q = 4 * j + 2 * h;
            *reinterpret_cast<float2*>(p) = make_float2(d[hf][q], d[hf][q + 1]);
          }
        }
      }
    }
    }
    FenceProxyAsync();
    ConsumerBarrier(c);
    if (t == 0) {
#pragma unroll
      for (int b = 0; b < C::kBoxesPerRound; ++b) {
        const int box = round * C::kBoxesPerRound + b;
        TmaStore2d<C::kF32Out>(y_map, out0 + box * C::kBoxCols, row0,
                               SmemAddr(buf + b * C::kBoxBytes));
      }
      BulkCommit();
    }
  }
  }
}

// The raster (HopperGemmPlan::group): unit u's cluster row tile `mc` and column tile `tn`, in
// groups of `group` cluster rows (the last group may have fewer), row tiles fastest within a
// group. group >= num_mc: row tiles fastest over the whole output.
__device__ __forceinline__ void UnitTile(int u, int num_mc, int num_n, int group, int& mc,
                                         int& tn) {
  const int per_group = group * num_n;
  const int g = u / per_group, v = u - g * per_group;
  const int base = g * group;
  const int rows = min(group, num_mc - base);
  mc = base + v % rows;
  tn = v / rows;
}

// With K in `slices` slices: unit u is slice u % slices of tile unit u / slices (UnitTile), the
// slices of a tile on consecutive CTAs, so that they run at once.
__device__ __forceinline__ void SlicedUnitTile(int u, int slices, int num_mc, int num_n, int group,
                                               int& mc, int& tn, int& slice) {
  const int tile = u / slices;
  slice = u - tile * slices;
  UnitTile(tile, num_mc, num_n, group, mc, tn);
}

#endif  // RANKD_HOPPER_GEMM_DEVICE

// X: the promoted kernels (F8 and one 64-row wgmma a consumer only) multiply parts of each K block
// into sets of accumulators of their own and add them into d in fp32: kGroup each group of
// kHopperScaleGroup K columns, times the group's scale of each row (scales.x_groups > 0);
// kRowPromoted each whole K block as it is (X's row scales applied by the epilogue as kRow's are).
template <HopperEpilogue E, int BN, HopperSchedule S, int CM, bool F8,
          HopperXScales X = HopperXScales::kRow>
__global__ void __launch_bounds__(kThreads, 1)
    HopperGemmKernel(const __grid_constant__ CUtensorMap x_map,
                     const __grid_constant__ CUtensorMap w_map,
                     const __grid_constant__ CUtensorMap y_map, const HopperRope rope,
                     const HopperScales scales, const HopperNorm norm, const HopperSlices slices,
                     int m, int n, int k, int group, int stagger, bool prefetch_w) {
#if RANKD_HOPPER_GEMM_DEVICE
  using C = Cfg<E, BN, S, CM, F8>;
  static_assert(X == HopperXScales::kRow || (F8 && C::kHalves == 1 && BN == 128),
                "group scales: e4m3, 64 x 128 a consumer");
  constexpr int kBlockK = C::kBlockK;
  constexpr bool kPingPong = C::kPingPong;
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw = SmemAddr(smem_raw);
  const uint32_t a_base = (raw + kSwizzleAlign - 1) & ~uint32_t{kSwizzleAlign - 1};
  const uint32_t b_base = a_base + C::kStages * C::kABytes;
  const uint32_t epi_base = b_base + C::kStages * C::kBBytes;
  const uint32_t full_base = epi_base + C::kEpiBytes;
  const uint32_t empty_base = full_base + C::kStages * 8;
  const int num_m = (m + C::kBM - 1) / C::kBM, num_n = (n + BN - 1) / BN;
  const int num_k = (k + kBlockK - 1) / kBlockK;
  // K in slices (SetHopperGemmKSlices; num_k a multiple of their count): each unit multiplies
  // slice_k K blocks of its tile.
  const int num_slices = slices.count;
  const int slice_k = num_k / num_slices;
  // Warp-uniform as the compiler sees it (a shuffle from lane 0), so that what derives from it
  // (the consumer, its rows, its tiles' ring positions, the wgmma descriptors) stays in uniform
  // registers instead of being moved there (R2UR) before every wgmma.
  const int wg = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x / 128), 0);
  // The cluster's units of work: CM vertically adjacent tiles (the same tn), unit u = cluster +
  // i * clusters for i = 0, 1, ... (M fastest); this CTA's tile of unit u is row tile
  // CM * (u % num_mc) + rank, which for an odd num_m is past X's rows in the last unit: TMA loads
  // zeros there and stores nothing, and the CTA still loads its part of W for the other.
  const int rank = CM == 1 ? 0 : static_cast<int>(ClusterRank());
  const int cluster = blockIdx.x / CM, clusters = gridDim.x / CM;
  const int num_mc = (num_m + CM - 1) / CM, num_units = num_mc * num_n * num_slices;
  if (group <= 0 || group > num_mc) group = num_mc;

  if (threadIdx.x == 0) {
    for (int s = 0; s < C::kStages; ++s) {
      MbarInit(full_base + 8 * s, 1);
      MbarInit(empty_base + 8 * s, C::kEmptyArrivals);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  // The barriers initialised before any CTA of the cluster arrives on them or multicasts.
  if constexpr (CM == 1) {
    __syncthreads();
  } else {
    ClusterSync();
  }

  if (wg == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
    if (threadIdx.x != 0) return;
    asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(&x_map)) : "memory");
    asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(&w_map)) : "memory");
    // Launched with PDL (kernels/launch.cuh), before the wait for the previous kernel: W's K
    // blocks of the CTA's first tile into L2. No kernel writes weights, so a small pass's weight
    // stream starts under the previous kernel's tail; X, its output, is loaded only after the
    // wait. Without PDL there is no tail to hide it under, and it is not issued.
    if (prefetch_w && cluster < num_units) {
      int mc, tn, slice;
      SlicedUnitTile(cluster, num_slices, num_mc, num_n, group, mc, tn, slice);
      for (int kb = slice * slice_k; kb < (slice + 1) * slice_k; ++kb) {
        TmaPrefetchL2(&w_map, kb * kBlockK, tn * BN + rank * C::kBLoadRows);
      }
    }
    EnterGrid();
    RingPos<C::kStages> pos(0);
    for (int u = cluster; u < num_units; u += clusters) {
      int mc, tn, slice;
      SlicedUnitTile(u, num_slices, num_mc, num_n, group, mc, tn, slice);
      const int tm = CM * mc + rank;
      for (int kb = slice * slice_k; kb < (slice + 1) * slice_k; ++kb, pos.Next()) {
        const int s = pos.s;
        MbarWait(empty_base + 8 * s, pos.phase ^ 1);
        MbarArriveExpectTx(full_base + 8 * s, C::kStageBytes);
        TmaLoad2d(a_base + s * C::kABytes, &x_map, kb * kBlockK, tm * C::kBM, full_base + 8 * s);
        if constexpr (CM == 1) {
          TmaLoad2d(b_base + s * C::kBBytes, &w_map, kb * kBlockK, tn * BN, full_base + 8 * s);
        } else {
          TmaLoad2dMulticast(b_base + s * C::kBBytes + rank * C::kBLoadRows * 128, &w_map,
                             kb * kBlockK, tn * BN + rank * C::kBLoadRows, full_base + 8 * s,
                             uint16_t{(1u << CM) - 1});
        }
      }
    }
    if constexpr (CM > 1) {
      // The other CTAs' consumers arrive on this CTA's empty[]: it may exit only once every
      // stage's last use is released (a stage never used passes at once).
      for (int j = 0; j < C::kStages; ++j, pos.Next()) {
        MbarWait(empty_base + 8 * pos.s, pos.phase ^ 1);
      }
    }
    return;
  }

  asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
  EnterGrid();  // (the consumers' first global access is their epilogue's; waiting costs nothing)
  const int c = wg - 1;
  const bool warp_leader = threadIdx.x % 32 == 0;
  uint8_t* buf = smem_raw + (epi_base - raw) + c * C::kEpiBufBytes;
  if (threadIdx.x % 128 == 0) {
    asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(&y_map)) : "memory");
  }
  // The fp32 accumulators of the consumer's kRows x BN block over the warpgroup's 128 threads.
  float d[C::kHalves][BN / 2];
  // The CTA's i-th tile; ping-pong: this consumer's are i = c, c + 2, ...
  const int first = kPingPong ? c : 0, step = kPingPong ? 2 : 1;
  // Cooperative: consumer 0 signals after K block `signal_kb` of its first tile, where consumer 1
  // waits (at most kStages - 1 blocks ahead: the producer fills the first kStages stages before
  // any is released, so consumer 0 gets there without consumer 1). -1: no stagger.
  const int signal_kb =
      kPingPong || stagger <= 0 ? -1 : min(min(stagger, C::kStages - 1), slice_k) - 1;
  // Frees stage s's use for the producers of every CTA of the cluster (one arrive per warp each).
  auto release = [&](int s) {
    if (!warp_leader) return;
    if constexpr (CM == 1) {
      MbarArrive(empty_base + 8 * s);
    } else {
#pragma unroll
      for (int r = 0; r < CM; ++r) MbarArriveCluster(empty_base + 8 * s, r);
    }
  };
  for (int i = first; cluster + i * clusters < num_units; i += step) {
    const int u = cluster + i * clusters;
    int mc, tn, slice;
    SlicedUnitTile(u, num_slices, num_mc, num_n, group, mc, tn, slice);
    const int tm = CM * mc + rank;
    // The ring position of the unit's first K block: the CTA's units before it, whole.
    RingPos<C::kStages> pos(i * slice_k);
#pragma unroll
    for (int hf = 0; hf < C::kHalves; ++hf) {
#pragma unroll
      for (int q = 0; q < BN / 2; ++q) d[hf][q] = 0.0f;
    }
    // The A rows this consumer multiplies: its own (cooperative) or all of them (ping-pong).
    const uint32_t a_off = kPingPong ? 0 : c * C::kRows * 128;
    if constexpr (E == HopperEpilogue::kResidualNorm) {
      // The epilogue reads the block of the stream it adds to: into L2 while the block multiplies.
      PrefetchResidual<BN, C::kRows>(norm.residual, m, n,
                                     tm * C::kBM + (kPingPong ? 0 : c * C::kRows), tn * BN);
    }
    // The fold's input side: the rows' sums of squares, loaded while the other consumer runs.
    float row_ss[C::kHalves][2] = {};
    if constexpr (!F8) {
      if (norm.in_sumsq != nullptr) {  // uniform
        RowSums<C::kHalves>(norm, m, tm * C::kBM + (kPingPong ? 0 : c * C::kRows),
                            threadIdx.x % 128 / 32, threadIdx.x % 32, row_ss);
      }
    }
    if (kPingPong && i > 0) OrderWait(c);
    if (!kPingPong && c == 1 && i == first && signal_kb >= 0) StaggerWait();
    if constexpr (X != HopperXScales::kRow) {
      // Each K block's four k32 wgmmas multiply into sets of accumulators of their own, zeroed by
      // the first wgmma of a set: kRowPromoted one set (p[0]) for the block, kGroup one for each
      // of its two groups. Once they are done (wait 0), the sets are added into d (kGroup: times
      // the group's scale of each of the thread's two rows, the fragment's d[4j + q] being row r0
      // for q < 2 and r0 + 8 else) and the stage is released. A promotion every 128 K columns, as
      // DeepSeek-V3's and CUTLASS's fp8 accumulation: the tensor cores run the other consumer's
      // wgmmas while this one adds. (Two sets with one in flight while the other is added are
      // what ptxas serializes every wgmma of the kernel for: C7514, the sets' registers read
      // inside a wgmma pipeline stage; so are wgmmas issued under a branch: C7518.)
      constexpr bool kGrouped = X == HopperXScales::kGroup;
      constexpr int kSets = kGrouped ? 2 : 1;
      constexpr int kSetSteps = 4 / kSets;  // k32 wgmmas a set
      static_assert(!kGrouped || kSetSteps * 32 == kHopperScaleGroup, "a set a scale group");
      float p[kSets][BN / 2];
      // kGroup: the rows' scales of a group (r0 and r0 + 8; rows past m and groups past k: 0).
      const int r0 = tm * C::kBM + (kPingPong ? 0 : c * C::kRows) + 16 * (threadIdx.x % 128 / 32) +
                     threadIdx.x % 32 / 4;
      const float* xs0 = kGrouped && r0 < m ? scales.x + int64_t{r0} * scales.x_groups : nullptr;
      const float* xs1 =
          kGrouped && r0 + 8 < m ? scales.x + int64_t{r0 + 8} * scales.x_groups : nullptr;
      const uint32_t a_lo = DescLo(a_base + a_off), b_lo = DescLo(b_base);
      for (int kb = 0; kb < num_k; ++kb, pos.Next()) {
        const int s = pos.s;
        float sx[kSets][2];
#pragma unroll
        for (int g = 0; g < kSets; ++g) {
          const int gi = kSets * kb + g;
          const bool in = gi < scales.x_groups;
          sx[g][0] = kGrouped && in && xs0 != nullptr ? __ldg(xs0 + gi) : 1.0f;
          sx[g][1] = kGrouped && in && xs1 != nullptr ? __ldg(xs1 + gi) : 1.0f;
        }
        MbarWait(full_base + 8 * s, pos.phase);
        const uint32_t a = a_lo + s * (C::kABytes >> 4), b = b_lo + s * (C::kBBytes >> 4);
#pragma unroll
        for (int g = 0; g < kSets; ++g) FenceAcc(p[g]);
        WgmmaFence();
#pragma unroll
        for (int kk = 0; kk < 128 / 32; ++kk) {
          WgmmaF8(p[kk / kSetSteps], Desc(a + 2 * kk), Desc(b + 2 * kk), kk % kSetSteps > 0);
        }
        WgmmaCommit();
        WgmmaWait<0>();
#pragma unroll
        for (int g = 0; g < kSets; ++g) {
          FenceAcc(p[g]);
          if constexpr (kGrouped) {
#pragma unroll
            for (int q = 0; q < BN / 2; ++q) d[0][q] += p[g][q] * sx[g][q % 4 / 2];
          } else {
#pragma unroll
            for (int q = 0; q < BN / 2; ++q) d[0][q] += p[g][q];
          }
        }
        release(s);
        if (!kPingPong && c == 0 && i == first && kb == signal_kb) StaggerSignal();
      }
      if (kPingPong && cluster + (i + 1) * clusters < num_units) OrderSignal(c);
      const int row0 = tm * C::kBM + (kPingPong ? 0 : c * C::kRows);
      // kGroup: X's scales are in d; kRowPromoted: the epilogue applies the rows' scales.
      BlockScales<BN, C::kHalves> dq;
      dq.Load(kGrouped ? nullptr : scales.x, scales.w, m, n, row0, tn * BN);
      Epilogue<E, BN, S, CM, F8>(d, &y_map, rope, scales, norm, row_ss, dq, m, n, row0, tn * BN,
                                 tn * C::kOutCols, buf, c);
    } else {
      // Two K blocks in flight: block kb's wgmma group is issued before block kb-1's is waited
      // for, and only then is kb-1's stage given back to the producer.
      // Descriptors in 16-byte units (DescLo): the stage's tiles, 64 rows (1024 bytes x 8) a
      // half, 32 bytes a K step.
      const uint32_t a_lo = DescLo(a_base + a_off), b_lo = DescLo(b_base);
      int prev = 0;  // the previous block's stage
      for (int kb = 0; kb < slice_k; ++kb, pos.Next()) {
        const int s = pos.s;
        MbarWait(full_base + 8 * s, pos.phase);
        const uint32_t a = a_lo + s * (C::kABytes >> 4), b = b_lo + s * (C::kBBytes >> 4);
#pragma unroll
        for (int hf = 0; hf < C::kHalves; ++hf) FenceAcc(d[hf]);
        WgmmaFence();
#pragma unroll
        for (int kk = 0; kk < 128 / 32; ++kk) {  // 32 bytes of each row a wgmma
#pragma unroll
          for (int hf = 0; hf < C::kHalves; ++hf) {
            if constexpr (F8) {
              WgmmaF8(d[hf], Desc(a + hf * 512 + 2 * kk), Desc(b + 2 * kk));
            } else {
              Wgmma(d[hf], Desc(a + hf * 512 + 2 * kk), Desc(b + 2 * kk));
            }
          }
        }
        WgmmaCommit();
        WgmmaWait<1>();
#pragma unroll
        for (int hf = 0; hf < C::kHalves; ++hf) FenceAcc(d[hf]);
        if (kb > 0) release(prev);
        prev = s;
        if (!kPingPong && c == 0 && i == first && kb == signal_kb) StaggerSignal();
      }
      // Every full[] of the tile waited for: the other consumer may start its next tile (there is
      // one: every OrderSignal meets an OrderWait).
      if (kPingPong && cluster + (i + 1) * clusters < num_units) OrderSignal(c);
      const int row0 = tm * C::kBM + (kPingPong ? 0 : c * C::kRows);
      // e4m3: the block's scales loaded under the last wgmma group (BlockScales).
      BlockScales<BN, C::kHalves> dq;
      if constexpr (F8) dq.Load(scales.x, scales.w, m, n, row0, tn * BN);
      WgmmaWait<0>();
#pragma unroll
      for (int hf = 0; hf < C::kHalves; ++hf) FenceAcc(d[hf]);
      if (slice_k > 0) release(prev);
      // K in slices: the last of the block's slices to get here sums them and goes on.
      if constexpr (TakesSlices(S, BN)) {
        const int64_t block =
            int64_t{u} / num_slices * (kPingPong ? 1 : kConsumers) + (kPingPong ? 0 : c);
        if (num_slices > 1 && !GatherSlices<C::kHalves, BN>(d, slices, block, slice, c)) continue;
      }
      const int out0 = tn * C::kOutCols;
      Epilogue<E, BN, S, CM, F8>(d, &y_map, rope, scales, norm, row_ss, dq, m, n, row0, tn * BN,
                                 out0, buf, c);
    }
  }
  // The shared memory must outlive the copy engine's reads of it, and the stores must be done
  // when the kernel is.
  if (threadIdx.x % 128 == 0) BulkWait<false>();
#else
  // Not built for sm_90a: this static shared memory (the sm_90a body has none) is the marker that
  // the launcher reads through cudaFuncGetAttributes to report cudaErrorNotSupported.
  __shared__ int no_sm90a[kNoSm90aMarkerBytes / sizeof(int)];
  reinterpret_cast<volatile int*>(no_sm90a)[threadIdx.x % 4] =
      m + n + k + group + stagger + rope.head_dim + prefetch_w + (scales.x != nullptr) +
      norm.in_groups + static_cast<int>(X) + slices.count;
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

// A [rows, cols] row-major tensor of `type` (elem_bytes each) in boxes of box_rows x box_cols
// (box_cols * elem_bytes = 128: one swizzle row), 128-byte swizzled; or, with `box_bytes` 64, in
// 64-byte swizzled boxes of 64-byte rows (the e4m3 outputs': row r's 16-byte chunk j at r * 64 +
// 16 * (j ^ (r / 2 % 4))); loads zero-fill out of bounds, stores skip it.
cudaError_t EncodeTensor(EncodeTiledFn encode, CUtensorMapDataType type, int elem_bytes,
                         const void* p, int rows, int cols, int box_rows, CUtensorMap* map,
                         int box_bytes = 128) {
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(cols) * elem_bytes};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(box_bytes / elem_bytes),
                             static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t elem_strides[2] = {1, 1};
  const CUresult r =
      encode(map, type, 2, const_cast<void*>(p), dims, strides, box, elem_strides,
             CU_TENSOR_MAP_INTERLEAVE_NONE,
             box_bytes == 128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_64B,
             CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// The time of a 128 x 256 tile in 128 x 128 tiles: under 2, since each X tile loaded feeds twice
// the MMAs. An estimate, to be set from rankd-bench kernels' own128 / own256 rows.
constexpr double kTile256Cost = 1.75;

int64_t Tiles(int m, int n, int tile_m, int tile_n) {
  return static_cast<int64_t>((m + tile_m - 1) / tile_m) * ((n + tile_n - 1) / tile_n);
}

// The clusters of CM CTAs that the device runs at once with this kernel's shared memory (every
// SM's count in clusters when CM is 1): the persistent grid's size, in clusters. Asked of the
// driver once per kernel.
template <HopperEpilogue E, int BN, HopperSchedule S, int CM, bool F8, HopperXScales X>
cudaError_t ResidentClusters(int sms, int* clusters) {
  static const std::pair<cudaError_t, int> answer = [&]() -> std::pair<cudaError_t, int> {
    if constexpr (CM == 1) {
      return {cudaSuccess, sms};
    } else {
      cudaLaunchConfig_t config{};
      cudaLaunchAttribute attr[1];
      attr[0].id = cudaLaunchAttributeClusterDimension;
      attr[0].val.clusterDim.x = CM;
      attr[0].val.clusterDim.y = 1;
      attr[0].val.clusterDim.z = 1;
      config.gridDim = dim3(CM * (sms / CM));
      config.blockDim = dim3(kThreads);
      config.dynamicSmemBytes = Cfg<E, BN, S, CM, F8>::kSmemBytes;
      config.attrs = attr;
      config.numAttrs = 1;
      int n = 0;
      const cudaError_t e =
          cudaOccupancyMaxActiveClusters(&n, HopperGemmKernel<E, BN, S, CM, F8, X>, &config);
      return {e, n};
    }
  }();
  *clusters = answer.second;
  if (answer.first != cudaSuccess) return answer.first;
  return answer.second > 0 ? cudaSuccess : cudaErrorNotSupported;
}

template <HopperEpilogue E, int BN, HopperSchedule S, int CM, bool F8,
          HopperXScales X = HopperXScales::kRow>
cudaError_t Launch(const HopperGemmPlan& plan, int sms, LaunchStream stream) {
  const auto kernel = HopperGemmKernel<E, BN, S, CM, F8, X>;
  using C = Cfg<E, BN, S, CM, F8>;
  cudaFuncAttributes attr{};
  cudaError_t e = cudaFuncGetAttributes(&attr, kernel);
  if (e != cudaSuccess) return e;
  if (attr.sharedSizeBytes >= kNoSm90aMarkerBytes) return cudaErrorNotSupported;  // no sm_90a
  if ((e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                C::kSmemBytes)) != cudaSuccess) {
    return e;
  }
  int resident = 0;
  if ((e = ResidentClusters<E, BN, S, CM, F8, X>(sms, &resident)) != cudaSuccess) return e;
  // Units of CM vertically adjacent tiles (in K slices: a unit per slice); a cluster per unit, at
  // most `resident` of them.
  const int64_t units = Tiles(plan.m, plan.n, CM * C::kBM, BN) * plan.slices.count;
  const int clusters = static_cast<int>(units < resident ? units : resident);
  return LaunchClusterKernel(
      kernel, CM * clusters, kThreads, C::kSmemBytes, stream, CM, plan.x_map, plan.w_map,
      plan.y_map, plan.rope,
      HopperScales{plan.x_scale, plan.w_scale,
                   plan.x_scales == HopperXScales::kGroup ? plan.k / kHopperScaleGroup : 0,
                   plan.y_scale},
      plan.norm, plan.slices, plan.m, plan.n, plan.k, plan.group, plan.stagger, stream.pdl);
}

// bf16: clusters of 1 and 2. fp8 (e4m3) kernels and the e4m3 outputs' are built in clusters of
// 1 only.
template <HopperEpilogue E, int BN, HopperSchedule S, bool F8>
cudaError_t LaunchCluster(const HopperGemmPlan& plan, int sms, LaunchStream stream) {
  if constexpr (F8 || IsFp8Out(E)) {
    return plan.cluster == 1 ? Launch<E, BN, S, 1, F8>(plan, sms, stream) : cudaErrorNotSupported;
  } else {
    return plan.cluster == 2 ? Launch<E, BN, S, 2, false>(plan, sms, stream)
                             : Launch<E, BN, S, 1, false>(plan, sms, stream);
  }
}

// bf16: every schedule. fp8, and the e4m3 outputs: ping-pong (128 and 64 rows) and cooperative
// (tile 128 or 256).
template <HopperEpilogue E, bool F8>
cudaError_t LaunchTile(const HopperGemmPlan& plan, int sms, LaunchStream stream) {
  constexpr HopperSchedule kCoop = HopperSchedule::kCooperative;
  switch (plan.schedule) {
    case HopperSchedule::kPingPong:
      return LaunchCluster<E, 128, HopperSchedule::kPingPong, F8>(plan, sms, stream);
    case HopperSchedule::kCooperativeTall:
      if constexpr (F8 || IsFp8Out(E)) return cudaErrorNotSupported;
      return LaunchCluster<E, 128, HopperSchedule::kCooperativeTall, false>(plan, sms, stream);
    case HopperSchedule::kPingPongShort:
      return Launch<E, 128, HopperSchedule::kPingPongShort, 1, F8>(plan, sms, stream);
    default:
      break;
  }
  return plan.tile_n == 256 ? LaunchCluster<E, 256, kCoop, F8>(plan, sms, stream)
                            : LaunchCluster<E, 128, kCoop, F8>(plan, sms, stream);
}

// The promoted kernels (kGroup and kRowPromoted X scales): every epilogue on cooperative 128 and
// ping-pong 64, cluster 1.
template <HopperEpilogue E, HopperXScales X>
cudaError_t LaunchPromoted(const HopperGemmPlan& plan, int sms, LaunchStream stream) {
  if (plan.cluster != 1) return cudaErrorNotSupported;
  if (plan.schedule == HopperSchedule::kPingPongShort) {
    return Launch<E, 128, HopperSchedule::kPingPongShort, 1, true, X>(plan, sms, stream);
  }
  if (plan.schedule == HopperSchedule::kCooperative && plan.tile_n == 128) {
    return Launch<E, 128, HopperSchedule::kCooperative, 1, true, X>(plan, sms, stream);
  }
  return cudaErrorNotSupported;
}

template <HopperEpilogue E>
cudaError_t LaunchOperands(const HopperGemmPlan& plan, int sms, LaunchStream stream) {
  if (!plan.fp8) return LaunchTile<E, false>(plan, sms, stream);
  if constexpr (E == HopperEpilogue::kResidualNorm) {
    return cudaErrorNotSupported;  // bf16 only (MakePlan refuses fp8)
  } else {
    switch (plan.x_scales) {
      case HopperXScales::kGroup:
        return LaunchPromoted<E, HopperXScales::kGroup>(plan, sms, stream);
      case HopperXScales::kRowPromoted:
        return LaunchPromoted<E, HopperXScales::kRowPromoted>(plan, sms, stream);
      default:
        return LaunchTile<E, true>(plan, sms, stream);
    }
  }
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

// MakeHopperGemmPlan and MakeHopperGemmPlanFp8: X and W bf16, or e4m3 (fp8) with their scales.
cudaError_t MakePlan(const void* x, const void* w, bool fp8, void* y, int m, int n, int k,
                     HopperEpilogue epilogue, HopperGemmPlan* plan, int tile_n,
                     HopperSchedule schedule, int cluster, HopperXScales x_scales) {
  const bool gated = IsGated(epilogue);
  const bool grouped = x_scales == HopperXScales::kGroup;
  const bool promoted = x_scales != HopperXScales::kRow;
  // A row of X and W is a whole number of 16 bytes (TMA's stride unit); group scales cover
  // whole groups.
  const int k_multiple = grouped ? kHopperScaleGroup : fp8 ? 16 : 8;
  if (schedule == HopperSchedule::kAuto) {
    schedule = tile_n == 256 || promoted ? HopperSchedule::kCooperative : HopperSchedule::kPingPong;
  }
  if (promoted && tile_n == 0) tile_n = 128;  // the promoted kernels' tile
  const bool ping_pong = IsPingPong(schedule);
  const int tile_m = TileRows(schedule);
  if (plan == nullptr || m < 0 || n <= 0 || k <= 0 || n % 8 != 0 || k % k_multiple != 0 ||
      !Aligned16(x) || !Aligned16(w) || !Aligned16(y) ||
      (tile_n != 0 && tile_n != 128 && tile_n != 256) ||
      (schedule != HopperSchedule::kCooperative && tile_n == 256) ||
      (cluster != 0 && cluster != 1 && cluster != 2) ||
      (schedule == HopperSchedule::kPingPongShort && cluster == 2) ||
      (gated && n % kHopperGluTileN != 0) || (promoted && !fp8) ||
      (fp8 && epilogue == HopperEpilogue::kResidualNorm)) {
    return cudaErrorInvalidValue;
  }
  int sms = 0;
  cudaError_t e = Sm90Multiprocessors(&sms);
  if (e != cudaSuccess) return e;
  const EncodeTiledFn encode = GetEncodeTiled();
  if (encode == nullptr) return cudaErrorNotSupported;
  if (tile_n == 0) {
    // The tile whose waves take less time, a 256-wide tile costing kTile256Cost 128-wide ones.
    const int64_t waves128 = (Tiles(m, n, tile_m, 128) + sms - 1) / sms;
    const int64_t waves256 = (Tiles(m, n, tile_m, 256) + sms - 1) / sms;
    tile_n =
        schedule == HopperSchedule::kCooperative && waves256 * kTile256Cost < waves128 ? 256 : 128;
  }
  plan->m = m;
  plan->n = n;
  plan->k = k;
  plan->epilogue = epilogue;
  plan->rope = HopperRope{};
  plan->fp8 = fp8;
  plan->x_scales = x_scales;
  plan->x_scale = plan->w_scale = nullptr;
  plan->y_scale = nullptr;
  plan->norm = HopperNorm{};
  plan->slices = HopperSlices{};
  if (epilogue == HopperEpilogue::kResidualNorm) plan->norm.residual = static_cast<float*>(y);
  if (cluster == 0) cluster = kHopperDefaultCluster;
  plan->tile_n = tile_n;
  plan->schedule = schedule;
  plan->cluster = cluster;
  int device = 0, l2_bytes = 0;
  if ((e = cudaGetDevice(&device)) != cudaSuccess ||
      (e = cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, device)) != cudaSuccess) {
    return e;
  }
  plan->group = HopperRasterGroup(m, n, k, cluster * tile_m, tile_n, sms / cluster,
                                  static_cast<size_t>(l2_bytes));
  plan->stagger = ping_pong ? 0 : kHopperCooperativeStagger;
  // An empty X (m == 0) launches nothing; its descriptors would be invalid (a zero dimension).
  // W's boxes: the rows a CTA loads, tile_n / cluster.
  const int w_box_rows = tile_n / cluster;
  const CUtensorMapDataType in_type =
      fp8 ? CU_TENSOR_MAP_DATA_TYPE_UINT8 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  const int in_bytes = fp8 ? 1 : 2;
  if (m == 0) return EncodeTensor(encode, in_type, in_bytes, w, n, k, w_box_rows, &plan->w_map);
  const bool f32_out =
      epilogue == HopperEpilogue::kAccumulateF32 || epilogue == HopperEpilogue::kResidualNorm;
  // The output's boxes: the rows of a consumer's block (64 cooperative and short ping-pong, 128
  // ping-pong and tall).
  const int y_box_rows = ping_pong ? tile_m : tile_m / kConsumers;
  if ((e = EncodeTensor(encode, in_type, in_bytes, x, m, k, tile_m, &plan->x_map)) != cudaSuccess ||
      (e = EncodeTensor(encode, in_type, in_bytes, w, n, k, w_box_rows, &plan->w_map)) !=
          cudaSuccess) {
    return e;
  }
  if (IsFp8Out(epilogue)) {
    return EncodeTensor(encode, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, y, m, n / 2, y_box_rows,
                        &plan->y_map, kHopperScaleGroup);
  }
  return f32_out ? EncodeTensor(encode, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, y, m, n, y_box_rows,
                                &plan->y_map)
                 : EncodeTensor(encode, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, y, m,
                                gated ? n / 2 : n, y_box_rows, &plan->y_map);
}

}  // namespace

cudaError_t MakeHopperGemmPlan(const __nv_bfloat16* x, const __nv_bfloat16* w, void* y, int m,
                               int n, int k, HopperEpilogue epilogue, HopperGemmPlan* plan,
                               int tile_n, HopperSchedule schedule, int cluster) {
  return MakePlan(x, w, /*fp8=*/false, y, m, n, k, epilogue, plan, tile_n, schedule, cluster,
                  HopperXScales::kRow);
}

cudaError_t MakeHopperGemmPlanFp8(const __nv_fp8_e4m3* x, const float* x_scale,
                                  const __nv_fp8_e4m3* w, const float* w_scale, void* y, int m,
                                  int n, int k, HopperEpilogue epilogue, HopperGemmPlan* plan,
                                  int tile_n, HopperSchedule schedule, int cluster,
                                  HopperXScales x_scales) {
  // w_scale is read two columns at a time (float2).
  if (x_scale == nullptr || w_scale == nullptr || reinterpret_cast<uintptr_t>(w_scale) % 8 != 0) {
    return cudaErrorInvalidValue;
  }
  const cudaError_t e =
      MakePlan(x, w, /*fp8=*/true, y, m, n, k, epilogue, plan, tile_n, schedule, cluster, x_scales);
  if (e != cudaSuccess) return e;
  plan->x_scale = x_scale;
  plan->w_scale = w_scale;
  return cudaSuccess;
}

int HopperRasterGroup(int m, int n, int k, int unit_rows, int tile_n, int units_a_wave,
                      size_t l2_bytes) {
  const double operands = 2.0 * (static_cast<double>(m) + n) * k;  // bf16 X and W
  if (m <= 0 || n <= 0 || unit_rows <= 0 || tile_n <= 0 || units_a_wave <= 0 ||
      operands <= 0.5 * static_cast<double>(l2_bytes)) {
    return 0;
  }
  const int row_units = (m + unit_rows - 1) / unit_rows;
  const int col_tiles = (n + tile_n - 1) / tile_n;
  const int group = (units_a_wave + col_tiles - 1) / col_tiles;
  return group >= row_units ? 0 : group;
}

namespace {

// The K blocks of a plan's tile (kHopperTileK bf16 or 128 e4m3 columns each) and its tiles (of
// a cluster of 1).
int PlanKBlocks(const HopperGemmPlan& plan) {
  const int block = plan.fp8 ? 128 : kHopperTileK;
  return (plan.k + block - 1) / block;
}
int64_t PlanTiles(const HopperGemmPlan& plan) {
  return Tiles(plan.m, plan.n, TileRows(plan.schedule), plan.tile_n);
}
bool TakesSlices(const HopperGemmPlan& plan) {
  return plan.cluster == 1 && (!plan.fp8 || plan.x_scales == HopperXScales::kRow) &&
         TakesSlices(plan.schedule, plan.tile_n);
}

}  // namespace

int HopperKSlices(const HopperGemmPlan& plan) {
  int sms = 0;
  if (!TakesSlices(plan) || Sm90Multiprocessors(&sms) != cudaSuccess) return 0;
  const int64_t tiles = PlanTiles(plan);
  const int blocks = PlanKBlocks(plan);
  if (tiles == 0 || 2 * tiles > sms) return 1;
  for (int count = kHopperMaxKSlices; count > 1; --count) {
    if (blocks % count == 0 && blocks / count >= kHopperMinSliceBlocks && tiles * count <= sms) {
      return count;
    }
  }
  return 1;
}

size_t HopperKSliceBytes(const HopperGemmPlan& plan, int count) {
  if (!TakesSlices(plan) || count < 1) return 0;
  return static_cast<size_t>(PlanTiles(plan)) * count * TileRows(plan.schedule) * plan.tile_n *
         sizeof(float);
}

int HopperKSliceCounters(const HopperGemmPlan& plan) {
  // A counter per consumer block: the cooperative schedules' two consumers count apart.
  if (!TakesSlices(plan)) return 0;
  return static_cast<int>(PlanTiles(plan)) * (IsPingPong(plan.schedule) ? 1 : kConsumers);
}

cudaError_t SetHopperGemmKSlices(HopperGemmPlan* plan, int count, float* partials, int* counters) {
  if (plan == nullptr || count < 1) return cudaErrorInvalidValue;
  if (count == 1) {
    plan->slices = HopperSlices{};
    return cudaSuccess;
  }
  if (!TakesSlices(*plan) || PlanKBlocks(*plan) % count != 0 || partials == nullptr ||
      !Aligned16(partials) || counters == nullptr) {
    return cudaErrorInvalidValue;
  }
  plan->slices = HopperSlices{count, partials, counters};
  return cudaSuccess;
}

cudaError_t SetHopperGemmRope(HopperGemmPlan* plan, const float2* rotations, int col_lo, int col_hi,
                              int head_dim) {
  if (plan == nullptr || plan->epilogue != HopperEpilogue::kStoreBf16Rope || rotations == nullptr ||
      !Aligned16(rotations) || (head_dim != 64 && head_dim != 128) || col_lo < 0 ||
      col_lo > col_hi || col_hi > plan->n || col_lo % head_dim != 0 || col_hi % head_dim != 0) {
    return cudaErrorInvalidValue;
  }
  plan->rope = HopperRope{rotations, col_lo, col_hi, head_dim};
  return cudaSuccess;
}

cudaError_t SetHopperGemmRopeNorm(HopperGemmPlan* plan, const __nv_bfloat16* q_norm,
                                  const __nv_bfloat16* k_norm, int k_lo, float eps) {
  if (plan == nullptr || plan->epilogue != HopperEpilogue::kStoreBf16Rope ||
      plan->rope.rotations == nullptr || q_norm == nullptr || k_norm == nullptr ||
      reinterpret_cast<uintptr_t>(q_norm) % 4 != 0 ||
      reinterpret_cast<uintptr_t>(k_norm) % 4 != 0 || k_lo < plan->rope.col_lo ||
      k_lo > plan->rope.col_hi || k_lo % plan->rope.head_dim != 0 || !(eps >= 0.0f)) {
    return cudaErrorInvalidValue;
  }
  plan->rope.q_norm = q_norm;
  plan->rope.k_norm = k_norm;
  plan->rope.k_lo = k_lo;
  plan->rope.eps = eps;
  return cudaSuccess;
}

cudaError_t SetHopperGemmNormIn(HopperGemmPlan* plan, const float* in_sumsq, float eps) {
  if (plan == nullptr || plan->fp8 || in_sumsq == nullptr ||
      reinterpret_cast<uintptr_t>(in_sumsq) % alignof(float) != 0 ||
      plan->k % kHopperScaleGroup != 0 || !(eps >= 0.0f)) {
    return cudaErrorInvalidValue;
  }
  plan->norm.in_sumsq = in_sumsq;
  plan->norm.in_groups = plan->k / kHopperScaleGroup;
  plan->norm.eps = eps;
  return cudaSuccess;
}

cudaError_t SetHopperGemmNormOut(HopperGemmPlan* plan, __nv_bfloat16* copy, float* out_sumsq) {
  if (plan == nullptr || plan->epilogue != HopperEpilogue::kResidualNorm || copy == nullptr ||
      !Aligned16(copy) || out_sumsq == nullptr ||
      reinterpret_cast<uintptr_t>(out_sumsq) % alignof(float) != 0 ||
      plan->n % kHopperScaleGroup != 0) {
    return cudaErrorInvalidValue;
  }
  plan->norm.copy = copy;
  plan->norm.out_sumsq = out_sumsq;
  return cudaSuccess;
}

cudaError_t SetHopperGemmOutScales(HopperGemmPlan* plan, float* y_scale) {
  if (plan == nullptr || !IsFp8Out(plan->epilogue) || y_scale == nullptr ||
      reinterpret_cast<uintptr_t>(y_scale) % alignof(float) != 0) {
    return cudaErrorInvalidValue;
  }
  plan->y_scale = y_scale;
  return cudaSuccess;
}

cudaError_t LaunchHopperGemm(const HopperGemmPlan& plan, LaunchStream stream) {
  int sms = 0;
  const cudaError_t e = Sm90Multiprocessors(&sms);
  if (e != cudaSuccess) return e;
  if (plan.m == 0) return cudaSuccess;
  switch (plan.epilogue) {
    case HopperEpilogue::kStoreBf16:
      return LaunchOperands<HopperEpilogue::kStoreBf16>(plan, sms, stream);
    case HopperEpilogue::kAccumulateF32:
      return LaunchOperands<HopperEpilogue::kAccumulateF32>(plan, sms, stream);
    case HopperEpilogue::kSwiGlu:
      return LaunchOperands<HopperEpilogue::kSwiGlu>(plan, sms, stream);
    case HopperEpilogue::kGeGlu:
      return LaunchOperands<HopperEpilogue::kGeGlu>(plan, sms, stream);
    case HopperEpilogue::kStoreBf16Rope:
      if (plan.rope.rotations == nullptr) return cudaErrorInvalidValue;
      return LaunchOperands<HopperEpilogue::kStoreBf16Rope>(plan, sms, stream);
    case HopperEpilogue::kSwiGluFp8:
      if (plan.y_scale == nullptr) return cudaErrorInvalidValue;
      return LaunchOperands<HopperEpilogue::kSwiGluFp8>(plan, sms, stream);
    case HopperEpilogue::kGeGluFp8:
      if (plan.y_scale == nullptr) return cudaErrorInvalidValue;
      return LaunchOperands<HopperEpilogue::kGeGluFp8>(plan, sms, stream);
    case HopperEpilogue::kResidualNorm:
      if (plan.norm.copy == nullptr) return cudaErrorInvalidValue;
      return LaunchOperands<HopperEpilogue::kResidualNorm>(plan, sms, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t HopperGemmSupported() {
  int sms = 0;
  cudaError_t e = Sm90Multiprocessors(&sms);
  if (e != cudaSuccess) return e;
  if (GetEncodeTiled() == nullptr) return cudaErrorNotSupported;
  cudaFuncAttributes attr{};
  e = cudaFuncGetAttributes(
      &attr,
      HopperGemmKernel<HopperEpilogue::kStoreBf16, 128, HopperSchedule::kPingPong, 1, false>);
  if (e != cudaSuccess) return e;
  return attr.sharedSizeBytes >= kNoSm90aMarkerBytes ? cudaErrorNotSupported : cudaSuccess;
}

cudaError_t LaunchHopperGemm(const __nv_bfloat16* x, const __nv_bfloat16* w, int m, int n, int k,
                             HopperEpilogue epilogue, void* y, LaunchStream stream) {
  HopperGemmPlan plan;
  const cudaError_t e = MakeHopperGemmPlan(x, w, y, m, n, k, epilogue, &plan);
  return e != cudaSuccess ? e : LaunchHopperGemm(plan, stream);
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
