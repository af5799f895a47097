// Linear layers through cuBLASLt: bf16 or fp8 e4m3 operands, fp32 accumulation, over all tokens of
// a batch.
//   y[T, out] = x[T, in] . w[out, in]^T       (row-major; w as HF stores it)
// Output either bf16 (rounded once) or fp32 accumulated in place (y += x . w^T), which is how the
// residual adds of o_proj and down_proj are fused into the GEMM epilogue. fp8 operands carry one
// fp32 scale per row (per token for x, per output channel for w), applied by cuBLASLt's epilogue
// (CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F: A = w with a vector along M = out, B = x with one
// along N = T).
#ifndef RANKD_BACKEND_CUDA_GEMM_H_
#define RANKD_BACKEND_CUDA_GEMM_H_

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <map>
#include <memory>
#include <tuple>

#include "absl/status/statusor.h"

namespace rankd::cuda {

// Every matrix must be this aligned (arena buffers are); the workspace, more.
inline constexpr size_t kGemmAlignment = 128;
inline constexpr size_t kGemmWorkspaceAlignment = 256;

// A matrix quantised to fp8 by rows: element [r, c] = data[r, c] * scale[r].
struct Fp8Matrix {
  const __nv_fp8_e4m3* data = nullptr;  // [rows, cols] e4m3 row-major
  const float* scale = nullptr;         // [rows] fp32
};

// Threading: one thread at a time (the plan cache is unguarded); calls queue work on `stream`
// and never synchronise it except while tuning a new shape outside graph capture.
class Gemm {
 public:
  // `workspace` (device, `workspace_bytes`, kGemmWorkspaceAlignment-aligned) is cuBLASLt's
  // scratch; it must outlive the Gemm and be used by one stream at a time. With `tune`, the first
  // call of each shape times cuBLASLt's top algorithms on the call's operands (output to a
  // scratch buffer) and keeps the fastest; otherwise the heuristic's first pick. `candidates`
  // (> 0) overrides how many of the heuristic's list are timed for shapes of more than kSmallT
  // rows (kTuneCandidates by default).
  static absl::StatusOr<std::unique_ptr<Gemm>> Create(void* workspace, size_t workspace_bytes,
                                                      bool tune = false, int candidates = 0);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // y [T, out] bf16 = x [T, in] bf16 . w [out, in]^T bf16.
  absl::Status Linear(const __nv_bfloat16* x, const __nv_bfloat16* w, int T, int in, int out,
                      __nv_bfloat16* y, cudaStream_t stream);
  // y [T, out] fp32 += x [T, in] bf16 . w [out, in]^T bf16.
  absl::Status LinearAccumulate(const __nv_bfloat16* x, const __nv_bfloat16* w, int T, int in,
                                int out, float* y, cudaStream_t stream);
  // y [T, out] bf16 = x [T, in] . w [out, in]^T, both fp8 (dequantised by their row scales).
  absl::Status LinearFp8(Fp8Matrix x, Fp8Matrix w, int T, int in, int out, __nv_bfloat16* y,
                         cudaStream_t stream);
  // y [T, out] fp32 += x [T, in] . w [out, in]^T, both fp8.
  absl::Status LinearAccumulateFp8(Fp8Matrix x, Fp8Matrix w, int T, int in, int out, float* y,
                                   cudaStream_t stream);

 private:
  // Descriptors and the heuristic's algorithm for one problem shape, made on first use.
  struct Plan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  // One call's operands: bf16 (no scales), or fp8 with their row scales.
  struct Operands {
    const void* x = nullptr;
    const void* w = nullptr;
    const float* x_scale = nullptr;  // [T]   fp8 only
    const float* w_scale = nullptr;  // [out] fp8 only
    bool fp8 = false;
  };
  using Key = std::tuple<int, int, int, bool, bool>;  // T, in, out, fp32 output, fp8 operands

  static constexpr int kTuneCandidates = 8;
  static constexpr int kTuneCandidatesSmallT = 32;  // for T <= kSmallT rows
  static constexpr int kMaxTuneCandidates = 64;
  static constexpr int kSmallT = 512;

  explicit Gemm(cublasLtHandle_t handle, void* workspace, size_t workspace_bytes, bool tune,
                int candidates)
      : handle_(handle),
        workspace_(workspace),
        workspace_bytes_(workspace_bytes),
        tune_(tune),
        candidates_(candidates) {}
  absl::StatusOr<const Plan*> GetPlan(int T, int in, int out, bool f32_out, const Operands& ops,
                                      cudaStream_t stream);
  absl::Status MakePlan(int T, int in, int out, bool f32_out, const Operands& ops,
                        cudaStream_t stream, Plan* p);
  // Times `candidates` on the operands with the output in a scratch buffer; returns the fastest's
  // index.
  absl::StatusOr<int> Fastest(const Plan& p, const cublasLtMatmulHeuristicResult_t* candidates,
                              int n, int T, int out, bool f32_out, const Operands& ops,
                              cudaStream_t stream);
  // Points an fp8 plan's descriptor at this call's scales (plans are shared by every layer).
  static absl::Status SetScales(const Plan& p, const Operands& ops);
  absl::Status Run(const Operands& ops, int T, int in, int out, void* y, bool f32_out,
                   cudaStream_t stream);

  cublasLtHandle_t handle_;
  void* workspace_;
  size_t workspace_bytes_;
  bool tune_;
  int candidates_;  // timed for T > kSmallT
  std::map<Key, Plan> plans_;
};

}  // namespace rankd::cuda

#endif  // RANKD_BACKEND_CUDA_GEMM_H_
