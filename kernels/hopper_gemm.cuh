// rankd's own Hopper (sm_90a) GEMM: Y[M, N] = X[M, K] . W[N, K]^T with bf16 operands (both
// row-major, K contiguous) and fp32 accumulation, through TMA loads into a multi-stage
// shared-memory ring and wgmma (warp-specialised: one producer warpgroup, two consumer
// warpgroups; persistent grid of at most one CTA per SM). Two schedules of the consumers:
//   kPingPong     each consumer owns whole 128 x 128 tiles, the two on alternate tiles, so that
//                 one's epilogue runs under the other's MMAs (CUTLASS's "ping-pong");
//   kCooperative  both consumers on one 128 x tile_n tile (64 rows each), epilogue together.
// The epilogue is fused, and the tile leaves through shared memory by TMA (128-byte swizzled
// boxes, asynchronous: the consumer goes on to its next tile while the copy engine writes):
//   kStoreBf16      Y [M, N] bf16  = acc                  (TMA store)
//   kAccumulateF32  Y [M, N] fp32 += acc                  (TMA reduce-add: the residual add of
//                                                          o_proj, down_proj, done in L2)
//   kSwiGlu/kGeGlu  Y [M, N/2] bf16 = act(gate) * up     (gate_up with its rows interleaved by
//                   InterleaveGateUp: gate and up stay in registers, never in memory)
//   kStoreBf16Rope  Y [M, N] bf16  = acc, the columns of HopperRope's range rotated by RoPE
//                   (rotate_half within heads, row r by rotations[r]): qkv with its k heads
//                   rotated as kernels/qkv_rope.cu would, without the pass over k in memory
// The gated epilogues round gate and up to bf16 before the activation, as the unfused path
// (cuBLASLt's bf16 gate_up, then kernels/swiglu.cu) does, and use the same fp32 activation.
//   kSwiGluFp8/kGeGluFp8  Y [M, N/2] e4m3 = the gated activation quantised per row and group of
//                   kHopperScaleGroup outputs (kernels/fp8.cuh's rule: scale = amax / 448), the
//                   scales in y_scale [M, N/2 / kHopperScaleGroup] (SetHopperGemmOutScales): down's
//                   input, with the group scales that kGroup X scales read
// Operands are bf16 (wgmma k16), or fp8 e4m3 with a scale per row of each (MakeHopperGemmPlanFp8:
// wgmma k32 on the same 128-byte K blocks, so 128 K columns a block; acc[r, c] * x_scale[r] *
// w_scale[c] is what every epilogue then takes, as cuBLASLt's outer-vector scales give it), or
// X's scales per row and group of kHopperScaleGroup K columns (HopperXScales::kGroup): each
// group's partial product is multiplied by its scale and added into the accumulators in fp32
// (DeepSeek-V3's fine-grained scales and their promotion out of the tensor cores).
// cuBLASLt (rankd/backend/cuda/gemm.h) remains the fallback: every launcher reports
// cudaErrorNotSupported on a device other than sm_90 or a build without sm_90a code.
#ifndef RANKD_KERNELS_HOPPER_GEMM_CUH_
#define RANKD_KERNELS_HOPPER_GEMM_CUH_

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstddef>

#include "kernels/launch.cuh"

namespace rankd::kernels {

enum class HopperEpilogue {
  kStoreBf16,
  kAccumulateF32,
  kSwiGlu,
  kGeGlu,
  kStoreBf16Rope,
  kSwiGluFp8,
  kGeGluFp8,
  kResidualNorm
};
// For messages: "store", "residual add", "SwiGLU", "GeGLU", "store + RoPE", ...
inline const char* HopperEpilogueName(HopperEpilogue e) {
  switch (e) {
    case HopperEpilogue::kStoreBf16:
      return "store";
    case HopperEpilogue::kAccumulateF32:
      return "residual add";
    case HopperEpilogue::kSwiGlu:
      return "SwiGLU";
    case HopperEpilogue::kGeGlu:
      return "GeGLU";
    case HopperEpilogue::kStoreBf16Rope:
      return "store + RoPE";
    case HopperEpilogue::kSwiGluFp8:
      return "SwiGLU to fp8";
    case HopperEpilogue::kGeGluFp8:
      return "GeGLU to fp8";
    case HopperEpilogue::kResidualNorm:
      return "residual add + norm input";
  }
  return "?";
}
// fp8 X scales: one per row (kRow), or one per row and group of kHopperScaleGroup K columns
// (kGroup: x_scale [m, k / kHopperScaleGroup], row-major), or one per row on the promoted kernels
// (kRowPromoted: kGroup's, each group's product added into the fp32 accumulators, the row scale
// applied at the end as kRow's is). Weights keep a scale per row.
enum class HopperXScales { kRow, kGroup, kRowPromoted };
inline constexpr int kHopperScaleGroup = 64;

// kAuto: kPingPong where the tile is 128 wide, else kCooperative. kCooperativeTall: both consumers
// on one 256 x 128 tile, 128 rows each (a quarter fewer operand bytes per MMA than 128 x 128).
// kPingPongShort: ping-pong on 64 x 128 tiles (one wgmma m64 a K step), for passes of few rows:
// twice the tiles of kPingPong, so that a wave of them fills SMs that 128-row tiles leave idle (300
// rows: 5 row tiles instead of 3, the last of them 44 of 64 rows full instead of 44 of 128); W is
// read once per 64 rows. Tile 128 wide and clusters of 1 only.
enum class HopperSchedule { kAuto, kCooperative, kPingPong, kCooperativeTall, kPingPongShort };

// The CTA tile is kHopperTileM x tile_n x kHopperTileK, tile_n 128 or 256 (HopperGemmPlan). The
// gated epilogues' weight comes in blocks of kHopperGluTileN rows, kHopperGluHalf gate rows then as
// many up rows (InterleaveGateUp); a tile of 128 is one block, a tile of 256 (kCooperative) two.
inline constexpr int kHopperTileM = 128;
inline constexpr int kHopperTileK = 64;  // bf16 K columns a block (fp8: 128, the same 128 bytes)
inline constexpr int kHopperGluTileN = 128;
inline constexpr int kHopperGluHalf = kHopperGluTileN / 2;
// CTAs a cluster when the plan leaves it to the kernel (cluster 0): 2 runs vertically adjacent
// tiles (the same W tile) on a pair of SMs, each loading half of W's tile by TMA multicast into
// both, so W's L2 traffic is halved; 1 runs every CTA alone.
inline constexpr int kHopperDefaultCluster = 1;
// HopperGemmPlan::stagger of the cooperative schedules: two K blocks of 64 (a 128 x 256 tile's two
// blocks take about 1.4 us at the tensor cores' rate, longer than a consumer's epilogue). Measured
// on an H100 (bench/RESULTS.md, 2026-12-06, session 35): 0, 1 and 2 within 0.5% on every 379M
// cooperative case; the epilogues are not what holds those tiles back.
inline constexpr int kHopperCooperativeStagger = 2;

// kStoreBf16Rope's rotation: output columns [col_lo, col_hi) are heads of head_dim dims (64 or
// 128), each rotated in rotate_half layout: dims i and i + head_dim/2 of row r by the angle whose
// (cos, sin) is rotations[r * head_dim/2 + i] (kernels/qkv_rope.cuh's LaunchRopeRotations table),
// after the accumulators are rounded to bf16, in fp32, then rounded again: bit for bit what the
// GEMM's bf16 output followed by LaunchQkvRope gives those columns.
// With the head norm (SetHopperGemmRopeNorm: Qwen3's q/k norm), each head of the range is first
// RMS-normed over its head_dim dims and multiplied by q_norm's weight (heads before k_lo) or
// k_norm's (from k_lo on), in fp32 on the bf16-rounded values, as kernels/qkv_rope.cu does: the
// unfused path's values within fp32 rounding (the sum of squares added in another order).
struct HopperRope {
  const float2* rotations = nullptr;  // [M, head_dim / 2] fp32 (cos, sin), 16-byte aligned
  int col_lo = 0, col_hi = 0;         // multiples of head_dim, 0 <= col_lo <= col_hi <= N
  int head_dim = 0;
  const __nv_bfloat16* q_norm = nullptr;  // [head_dim] bf16, or null: no head norm
  const __nv_bfloat16* k_norm = nullptr;  // [head_dim] bf16
  int k_lo = 0;                           // a multiple of head_dim in [col_lo, col_hi]
  float eps = 0.0f;                       // the norm's epsilon
};

// The RMSNorm fold: a norm in front of a GEMM (y = norm(x) . W^T, norm(x) = x / rms(x) * w) runs
// as y[r, :] = (x . (W diag(w))^T)[r, :] / rms(x[r, :]): the norm's weight is folded into the
// GEMM's weight once (the caller's), X is the residual stream's bf16 copy, and the product's rows
// are divided by their rms in the epilogue. The rms comes from the residual add before it
// (kResidualNorm), which writes the stream's new value, its bf16 copy and its sums of squares
// per row and group of kHopperScaleGroup columns: no norm kernel reads or writes the stream.
struct HopperNorm {
  // Input side, any bf16 plan (SetHopperGemmNormIn): row r of the product times
  // rsqrt(sum_g in_sumsq[r, g] / (kHopperScaleGroup * in_groups) + eps), before the epilogue.
  const float* in_sumsq = nullptr;  // [m, in_groups] fp32; in_groups * kHopperScaleGroup = k
  int in_groups = 0;
  float eps = 0.0f;
  // kResidualNorm (SetHopperGemmNormOut): y, the fp32 stream [m, n], += the product; copy [m, n]
  // bf16 = the new stream rounded; out_sumsq [m, n / kHopperScaleGroup] fp32 = its sums of squares
  // per group (in fp32, of the fp32 values).
  __nv_bfloat16* copy = nullptr;
  float* out_sumsq = nullptr;
  float* residual = nullptr;  // kResidualNorm's y (MakeHopperGemmPlan sets it)
};

// K in slices (split-K), for passes of few rows, whose tiles are too few to occupy every SM (an
// embedding-item pass of 250 rows: down_proj's 1,024 columns are 32 tiles of 64 x 128 for 132
// SMs, each running its 52 K blocks in turn): each tile's K blocks are cut into `count` equal
// slices, multiplied by as many units of work, whose fp32 partial products meet in `partials`;
// the last slice of a tile to finish sums them in slice order (the same bits from launch to
// launch, whichever finishes last) and runs the epilogue, any epilogue. SetHopperGemmKSlices.
struct HopperSlices {
  int count = 1;              // slices of K a tile; 1: none
  float* partials = nullptr;  // HopperKSliceBytes(plan, count) bytes, 16-byte aligned
  int* counters = nullptr;    // HopperKSliceCounters(plan) ints, zero before the first launch;
                              // every launch leaves them zero
};

// One launch's TMA descriptors and shape: X [m, k] and W [n, k], both bf16 row-major, the output
// Y, the epilogue, the tile's N and the schedule. Building it costs one host-side driver call per
// tensor (no GPU work); a caller that launches the same operands repeatedly (a weight and
// activation buffers at a given m) keeps the plan. Plain data: copy it freely; any thread may
// launch with it.
struct HopperGemmPlan {
  CUtensorMap x_map;
  CUtensorMap w_map;
  CUtensorMap y_map;
  int m = 0, n = 0, k = 0;
  HopperEpilogue epilogue = HopperEpilogue::kStoreBf16;
  int tile_n = 128;
  HopperSchedule schedule = HopperSchedule::kPingPong;
  int cluster = 1;  // CTAs a cluster, 1 or 2
  // The raster: the persistent CTAs take units of work (a cluster's row tiles and a column tile)
  // in groups of `group` units' rows, row tiles fastest within a group, then its column tiles,
  // group by group. 0 (or at least the row count): row tiles fastest over the whole output.
  // MakeHopperGemmPlan sets it (HopperRasterGroup below); any value >= 0 computes the same Y.
  int group = 0;
  // The cooperative schedules' stagger: consumer 1 starts its first tile this many K blocks after
  // consumer 0 (at most the ring's stages - 1), so that each consumer's epilogue runs while the
  // other multiplies. 0: both in step. MakeHopperGemmPlan sets kHopperCooperativeStagger; ping-pong
  // ignores it. Any value >= 0 computes the same Y.
  int stagger = 0;
  HopperRope rope;  // kStoreBf16Rope only (SetHopperGemmRope)
  // fp8 e4m3 operands (MakeHopperGemmPlanFp8) and their scales: x_scale [m] (kRow) or
  // [m, k / kHopperScaleGroup] (kGroup), w_scale [n], fp32.
  bool fp8 = false;
  HopperXScales x_scales = HopperXScales::kRow;
  const float* x_scale = nullptr;
  const float* w_scale = nullptr;
  // kSwiGluFp8/kGeGluFp8: the output's group scales, [m, n / 2 / kHopperScaleGroup] fp32
  // (SetHopperGemmOutScales).
  float* y_scale = nullptr;
  HopperNorm norm;  // the RMSNorm fold's (SetHopperGemmNormIn, SetHopperGemmNormOut)
  HopperSlices slices;  // K in slices (SetHopperGemmKSlices); MakeHopperGemmPlan: none
};

// The raster group MakeHopperGemmPlan picks, in units' rows (0: none). While X [m, k] and W [n, k]
// fit in half of the L2 cache together, none: a wave of row-fastest tiles reads all of X for a few
// column tiles and the next wave finds X in L2 again. Past that (the 379M down_proj at 7,550
// rows: X is 50 MB, as large as the H100's and H200's L2) each wave would read X from DRAM anew;
// groups of ceil(units_a_wave / column tiles) rows make a wave cover every column tile of one band
// of X's rows, which DRAM then delivers once, while W stays in L2. unit_rows: X's rows a unit
// (the tile's rows x CTAs a cluster); units_a_wave: the units that run at once.
int HopperRasterGroup(int m, int n, int k, int unit_rows, int tile_n, int units_a_wave,
                      size_t l2_bytes);

// Fills `plan` for y (16-byte aligned): bf16 [m, n] for kStoreBf16, fp32 [m, n] (read and
// written) for kAccumulateF32 and kResidualNorm (bf16 operands only: its plan launches once
// SetHopperGemmNormOut has been called), bf16 [m, n/2] for the gated epilogues (e4m3 for kSwiGluFp8
// and kGeGluFp8, whose n must then be a multiple of 2 kHopperScaleGroup and whose kernels are built
// for the schedules of fp8 operands below). cudaErrorInvalidValue
// unless m >= 0, n > 0 and k > 0 are multiples of 8 (n, k), x, w and y are 16-byte aligned,
// tile_n is 0 (choose), 128 or 256, only kCooperative has tile_n 256, cluster is 0
// (kHopperDefaultCluster), 1 or 2 (kPingPongShort: 0 or 1), and for a gated epilogue n
// is a multiple of kHopperGluTileN. With tile_n 0: 128 for the ping-pong and tall schedules, for
// kCooperative the tile whose waves over the SMs take less time.
// cudaErrorNotSupported on a device other than sm_90 or a driver without cuTensorMapEncodeTiled.
// Reads device attributes only: callable during stream capture.
cudaError_t MakeHopperGemmPlan(const __nv_bfloat16* x, const __nv_bfloat16* w, void* y, int m,
                               int n, int k, HopperEpilogue epilogue, HopperGemmPlan* plan,
                               int tile_n = 0, HopperSchedule schedule = HopperSchedule::kAuto,
                               int cluster = 0);

// The same with fp8 e4m3 operands X [m, k] and W [n, k] (row-major, K contiguous), dequantised by
// their row scales x_scale [m] and w_scale [n] (fp32, device): Y = (X . W^T)[r, c] * x_scale[r] *
// w_scale[c], then the epilogue. k a multiple of 16 (rows of 16-byte multiples for TMA), and
// every condition of MakeHopperGemmPlan; cudaErrorInvalidValue for a null scale. The fp8 kernels
// are built for kPingPong, kPingPongShort and kCooperative (tile 128 or 256) in clusters of 1:
// LaunchHopperGemm reports cudaErrorNotSupported for the other schedules and clusters. The
// e4m3 wgmma adds into its fp32 accumulators with fewer mantissa bits kept (what cuBLASLt calls
// fast accumulation) and there is no promotion into a second set of registers: measured on an
// H100, the product is off by up to 3.4e-3 of its largest element at K = 3,328 (1e-3 at 1,024),
// truncated towards zero; cuBLASLt's default promotes. That is below e4m3's own rounding (a 3-bit
// mantissa) and below bf16's output rounding; bench/fidelity.py is the check on the ranking.
// x_scales kGroup: x_scale is [m, k / kHopperScaleGroup] (k a multiple of kHopperScaleGroup) and
// every group's product is promoted into the fp32 accumulators with its scale (no truncation
// past a group's 64 columns). Its kernels are built for kCooperative with tile 128 (the default
// schedule then) and kPingPongShort (one 64-row wgmma a consumer: the promotion's second set of
// accumulators fits beside the first), every epilogue, clusters of 1; the other schedules report
// cudaErrorNotSupported at launch. x_scales kRowPromoted: x_scale [m] as kRow's, on kGroup's
// kernels and schedules (the default schedule cooperative 128), with their promotion (k a multiple
// of 16, as kRow's: a group past k is zeros).
cudaError_t MakeHopperGemmPlanFp8(const __nv_fp8_e4m3* x, const float* x_scale,
                                  const __nv_fp8_e4m3* w, const float* w_scale, void* y, int m,
                                  int n, int k, HopperEpilogue epilogue, HopperGemmPlan* plan,
                                  int tile_n = 0, HopperSchedule schedule = HopperSchedule::kAuto,
                                  int cluster = 0, HopperXScales x_scales = HopperXScales::kRow);

// Sets a kSwiGluFp8/kGeGluFp8 plan's output scales y_scale [m, n / 2 / kHopperScaleGroup] fp32
// (4-byte aligned). cudaErrorInvalidValue for another epilogue or a null pointer. Such a plan
// launches only once set.
cudaError_t SetHopperGemmOutScales(HopperGemmPlan* plan, float* y_scale);

// The RMSNorm fold (HopperNorm above). SetHopperGemmNormIn: a bf16 plan's rows divided by their
// rms from in_sumsq [m, k / kHopperScaleGroup] (4-byte aligned); k a multiple of
// kHopperScaleGroup, eps >= 0. SetHopperGemmNormOut: a kResidualNorm plan's copy [m, n] bf16
// (16-byte aligned) and out_sumsq [m, n / kHopperScaleGroup] fp32 (4-byte aligned); n a multiple
// of kHopperScaleGroup. cudaErrorInvalidValue otherwise (an fp8 plan, another epilogue for
// NormOut, a null pointer).
cudaError_t SetHopperGemmNormIn(HopperGemmPlan* plan, const float* in_sumsq, float eps);
cudaError_t SetHopperGemmNormOut(HopperGemmPlan* plan, __nv_bfloat16* copy, float* out_sumsq);

// K slices. HopperKSlices: the count a plan's shape asks for on this device, 1 unless its tiles
// fill at most half of the SMs (the persistent grid's CTAs): then the most slices, up to
// kHopperMaxKSlices, that divide its K blocks into equal slices of kHopperMinSliceBlocks or
// more, with no more units than SMs. HopperKSliceBytes and HopperKSliceCounters: the partials'
// bytes and the counters that `count` slices need. SetHopperGemmKSlices: cudaErrorInvalidValue
// unless count is 1 (none: the pointers are not read) or a divisor of the K blocks (64 bf16 or 128
// e4m3 columns) of a plan of 64 x 128 consumer blocks (kPingPongShort, or kCooperative with
// tile_n 128) in clusters of 1, bf16 or e4m3 with X's scales per row (kRow: the promoted kernels
// take no slices), with
// partials 16-byte aligned and counters non-null. 0 or -1 from the queries where the plan
// cannot take slices or the device cannot be asked.
inline constexpr int kHopperMaxKSlices = 8;
inline constexpr int kHopperMinSliceBlocks = 4;
int HopperKSlices(const HopperGemmPlan& plan);
size_t HopperKSliceBytes(const HopperGemmPlan& plan, int count);
int HopperKSliceCounters(const HopperGemmPlan& plan);
cudaError_t SetHopperGemmKSlices(HopperGemmPlan* plan, int count, float* partials, int* counters);

// Sets a kStoreBf16Rope plan's rotation (HopperRope above). cudaErrorInvalidValue for another
// epilogue, a head_dim other than 64 or 128, a range that is not whole heads inside [0, N], or
// rotations that are null or not 16-byte aligned. A kStoreBf16Rope plan launches only once set.
cudaError_t SetHopperGemmRope(HopperGemmPlan* plan, const float2* rotations, int col_lo, int col_hi,
                              int head_dim);

// Sets a kStoreBf16Rope plan's head norm (HopperRope above), once its rotation is set.
// cudaErrorInvalidValue for another epilogue, a plan without its rotation, a null or not 4-byte
// aligned weight, a k_lo that is not a multiple of head_dim inside [col_lo, col_hi], or a
// negative (or NaN) eps.
cudaError_t SetHopperGemmRopeNorm(HopperGemmPlan* plan, const __nv_bfloat16* q_norm,
                                  const __nv_bfloat16* k_norm, int k_lo, float eps);

// Launches `plan`. cudaErrorNotSupported on a device that is not sm_90 or when this build has no
// sm_90a code for the kernel (the caller falls back to cuBLASLt). m == 0 launches nothing. Never
// synchronizes, allocates nothing: capture-safe.
cudaError_t LaunchHopperGemm(const HopperGemmPlan& plan, LaunchStream stream);

// cudaSuccess when this device and build can run the kernel (an sm_90 device, a driver with
// cuTensorMapEncodeTiled, sm_90a code in this build), else cudaErrorNotSupported (or the error
// that stopped the check). For callers that commit to the kernel before a launch: a weight
// layout made for the gated epilogues, say.
cudaError_t HopperGemmSupported();

// MakeHopperGemmPlan (tile_n chosen), then LaunchHopperGemm.
cudaError_t LaunchHopperGemm(const __nv_bfloat16* x, const __nv_bfloat16* w, int m, int n, int k,
                             HopperEpilogue epilogue, void* y, LaunchStream stream);

// The gated epilogues' weight layout. gate_up [2I, K] holds gate rows 0..I-1 then up rows; the
// interleaved weight's row r is gate_up's row GateUpSourceRow(r, I): N tile t (rows
// t*kHopperGluTileN ..) holds gate rows t*h .. t*h+h-1, then up rows t*h .. t*h+h-1 (h =
// kHopperGluHalf). I must be a multiple of h.
__host__ __device__ inline int GateUpSourceRow(int r, int intermediate) {
  const int tile = r / kHopperGluTileN, within = r % kHopperGluTileN;
  return within < kHopperGluHalf ? tile * kHopperGluHalf + within
                                 : intermediate + tile * kHopperGluHalf + within - kHopperGluHalf;
}

// out [2I rows of row_bytes] = gate_up's rows in the interleaved order above, with two
// cudaMemcpy2DAsync (cudaMemcpyDefault: device or host buffers). cudaErrorInvalidValue when I is
// not a positive multiple of kHopperGluHalf.
cudaError_t InterleaveGateUp(const void* gate_up, int intermediate, size_t row_bytes, void* out,
                             cudaStream_t stream);

}  // namespace rankd::kernels

#endif  // RANKD_KERNELS_HOPPER_GEMM_CUH_
