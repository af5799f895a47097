// rankd's own Hopper (sm_90a) GEMM: Y[M, N] = X[M, K] . W[N, K]^T with bf16 operands (both
// row-major, K contiguous) and fp32 accumulation, through TMA loads into a multi-stage
// shared-memory ring and wgmma (warp-specialised: one producer warpgroup, two consumer
// warpgroups; persistent grid of at most one CTA per SM). The epilogue is fused:
//   kStoreBf16      Y [M, N] bf16  = acc
//   kAccumulateF32  Y [M, N] fp32 += acc                 (the residual add of o_proj, down_proj)
//   kSwiGlu/kGeGlu  Y [M, N/2] bf16 = act(gate) * up     (gate_up with its rows interleaved by
//                   InterleaveGateUp: gate and up stay in registers, never in memory)
// The gated epilogues round gate and up to bf16 before the activation, as the unfused path
// (cuBLASLt's bf16 gate_up, then kernels/swiglu.cu) does, and use the same fp32 activation.
// cuBLASLt (rankd/backend/cuda/gemm.h) remains the fallback: every launcher reports
// cudaErrorNotSupported on a device other than sm_90 or a build without sm_90a code.
#ifndef RANKD_KERNELS_HOPPER_GEMM_CUH_
#define RANKD_KERNELS_HOPPER_GEMM_CUH_

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>

namespace rankd::kernels {

enum class HopperEpilogue { kStoreBf16, kAccumulateF32, kSwiGlu, kGeGlu };

// The CTA tile is kHopperTileM x tile_n x kHopperTileK, tile_n 128 or 256 (HopperGemmPlan). The
// gated epilogues use tile_n = kHopperGluTileN: each N tile holds kHopperGluHalf gate rows then
// as many up rows.
inline constexpr int kHopperTileM = 128;
inline constexpr int kHopperTileK = 64;
inline constexpr int kHopperGluTileN = 128;
inline constexpr int kHopperGluHalf = kHopperGluTileN / 2;

// One launch's TMA descriptors and shape: X [m, k] and W [n, k], both bf16 row-major, the
// epilogue and the tile's N. Building it costs one host-side driver call per operand (no GPU
// work); a caller that launches the same operands repeatedly (a weight and an activation buffer
// at a given m) keeps the plan. Plain data: copy it freely; any thread may launch with it.
struct HopperGemmPlan {
  CUtensorMap x_map;
  CUtensorMap w_map;
  int m = 0, n = 0, k = 0;
  HopperEpilogue epilogue = HopperEpilogue::kStoreBf16;
  int tile_n = 128;
};

// Fills `plan`. cudaErrorInvalidValue unless m >= 0, n > 0 and k > 0 are multiples of 8 (n, k),
// x and w are 16-byte aligned, tile_n is 0 (choose), 128 or 256, and for a gated epilogue n is a
// multiple of kHopperGluTileN (tile_n 0 or kHopperGluTileN). With tile_n 0: the tile whose waves
// over the SMs take less time (gated: kHopperGluTileN). cudaErrorNotSupported on a device
// other than sm_90 or a driver without cuTensorMapEncodeTiled. Reads device attributes only:
// callable during stream capture.
cudaError_t MakeHopperGemmPlan(const __nv_bfloat16* x, const __nv_bfloat16* w, int m, int n, int k,
                               HopperEpilogue epilogue, HopperGemmPlan* plan, int tile_n = 0);

// Launches `plan` into y (16-byte aligned): bf16 [m, n] for kStoreBf16, fp32 [m, n] (read and
// written) for kAccumulateF32, bf16 [m, n/2] for the gated epilogues. cudaErrorNotSupported on a
// device that is not sm_90 or when this build has no sm_90a code for the kernel (the caller falls
// back to cuBLASLt). m == 0 launches nothing. Never synchronizes, allocates nothing:
// capture-safe.
cudaError_t LaunchHopperGemm(const HopperGemmPlan& plan, void* y, cudaStream_t stream);

// cudaSuccess when this device and build can run the kernel (an sm_90 device, a driver with
// cuTensorMapEncodeTiled, sm_90a code in this build), else cudaErrorNotSupported (or the error
// that stopped the check). For callers that commit to the kernel before a launch: a weight
// layout made for the gated epilogues, say.
cudaError_t HopperGemmSupported();

// MakeHopperGemmPlan (tile_n chosen), then LaunchHopperGemm.
cudaError_t LaunchHopperGemm(const __nv_bfloat16* x, const __nv_bfloat16* w, int m, int n, int k,
                             HopperEpilogue epilogue, void* y, cudaStream_t stream);

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
