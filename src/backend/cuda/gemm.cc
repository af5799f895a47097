#include "rankd/backend/cuda/gemm.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "rankd/backend/cuda/cuda_status.h"
#include "rankd/common/status.h"

namespace rankd::cuda {

absl::StatusOr<std::unique_ptr<Gemm>> Gemm::Create(void* workspace, size_t workspace_bytes,
                                                   bool tune, int candidates) {
  if (reinterpret_cast<uintptr_t>(workspace) % kGemmWorkspaceAlignment != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuBLASLt workspace is not ", kGemmWorkspaceAlignment, "-byte aligned"));
  }
  cublasLtHandle_t handle = nullptr;
  RANKD_CUBLAS_RETURN_IF_ERROR(cublasLtCreate(&handle));
  candidates = candidates > 0 ? std::min(candidates, kMaxTuneCandidates) : kTuneCandidates;
  return std::unique_ptr<Gemm>(new Gemm(handle, workspace, workspace_bytes, tune, candidates));
}

namespace {

// Layouts and descriptors of a plan; null handles are skipped by the destroy calls.
template <typename PlanT>
void DestroyPlan(PlanT& p) {
  if (p.a) cublasLtMatrixLayoutDestroy(p.a);
  if (p.b) cublasLtMatrixLayoutDestroy(p.b);
  if (p.c) cublasLtMatrixLayoutDestroy(p.c);
  if (p.op) cublasLtMatmulDescDestroy(p.op);
  p = PlanT{};
}

// Plans are per token count, which varies from batch to batch; past this many the cache starts
// over, so that a long-running worker's plan map stays small.
constexpr size_t kMaxPlans = 4096;

}  // namespace

Gemm::~Gemm() {
  for (auto& [key, p] : plans_) DestroyPlan(p);
  cublasLtDestroy(handle_);
}

// cuBLASLt is column-major. Row-major y [T, out] is column-major y^T [out, T]; row-major
// w [out, in] is column-major [in, out], transposed to [out, in]; row-major x [T, in] is
// column-major [in, T]. So y^T = op(w) . x with A = w (transposed), B = x, C = D = y.
absl::StatusOr<const Gemm::Plan*> Gemm::GetPlan(int T, int in, int out, bool f32_out,
                                                const Operands& ops, cudaStream_t stream) {
  const Key key{T, in, out, f32_out, ops.fp8};
  if (auto it = plans_.find(key); it != plans_.end()) return &it->second;
  if (plans_.size() >= kMaxPlans) {
    for (auto& [k, old] : plans_) DestroyPlan(old);
    plans_.clear();
  }
  Plan p;
  absl::Status s = MakePlan(T, in, out, f32_out, ops, stream, &p);
  if (!s.ok()) {
    DestroyPlan(p);
    return s;
  }
  return &plans_.emplace(key, p).first->second;
}

absl::Status Gemm::SetScales(const Plan& p, const Operands& ops) {
  if (!ops.fp8) return absl::OkStatus();
  RANKD_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
      p.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &ops.w_scale, sizeof(ops.w_scale)));
  RANKD_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
      p.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &ops.x_scale, sizeof(ops.x_scale)));
  return absl::OkStatus();
}

absl::Status Gemm::MakePlan(int T, int in, int out, bool f32_out, const Operands& ops,
                            cudaStream_t stream, Plan* p) {
  RANKD_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
  RANKD_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA,
                                                              &trans_a, sizeof(trans_a)));
  RANKD_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB,
                                                              &trans_b, sizeof(trans_b)));
  // fp8: e4m3 A and B (TN, as here, is the layout cuBLASLt's fp8 kernels take), each scaled by
  // a vector: A's runs along M (w's rows), B's along N (x's rows, the tokens).
  const cudaDataType_t in_type = ops.fp8 ? CUDA_R_8F_E4M3 : CUDA_R_16BF;
  if (ops.fp8) {
    const cublasLtMatmulMatrixScale_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    for (auto attr : {CUBLASLT_MATMUL_DESC_A_SCALE_MODE, CUBLASLT_MATMUL_DESC_B_SCALE_MODE}) {
      RANKD_CUBLAS_RETURN_IF_ERROR(
          cublasLtMatmulDescSetAttribute(p->op, attr, &mode, sizeof(mode)));
    }
    RANKD_RETURN_IF_ERROR(SetScales(*p, ops));
  }
  RANKD_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&p->a, in_type, in, out, in));
  RANKD_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&p->b, in_type, in, T, in));
  RANKD_CUBLAS_RETURN_IF_ERROR(
      cublasLtMatrixLayoutCreate(&p->c, f32_out ? CUDA_R_32F : CUDA_R_16BF, out, T, out));

  cublasLtMatmulPreference_t pref = nullptr;
  RANKD_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t ws = workspace_bytes_;
  cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
  // The heuristic assumes 256-byte-aligned matrices unless told otherwise, and its pick then
  // fails (CUBLAS_STATUS_INVALID_VALUE) on arena buffers that are only 128-byte aligned.
  const uint32_t align = kGemmAlignment;
  for (auto attr :
       {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
    if (st == CUBLAS_STATUS_SUCCESS) {
      st = cublasLtMatmulPreferenceSetAttribute(pref, attr, &align, sizeof(align));
    }
  }
  // Tuning times launches, which a stream being captured into a graph cannot do.
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  RANKD_CUDA_RETURN_IF_ERROR(cudaStreamIsCapturing(stream, &capture));
  // Few rows leave most of the device idle unless the algorithm splits K; the heuristic ranks
  // those lower, so small shapes look further down its list.
  const int candidates = T <= kSmallT ? kTuneCandidatesSmallT : candidates_;
  const int wanted = tune_ && capture == cudaStreamCaptureStatusNone ? candidates : 1;
  cublasLtMatmulHeuristicResult_t results[kMaxTuneCandidates];
  int found = 0;
  if (st == CUBLAS_STATUS_SUCCESS) {
    st = cublasLtMatmulAlgoGetHeuristic(handle_, p->op, p->a, p->b, p->c, p->c, pref, wanted,
                                        results, &found);
  }
  cublasLtMatmulPreferenceDestroy(pref);
  RANKD_CUBLAS_RETURN_IF_ERROR(st);
  if (found == 0) {
    return absl::UnimplementedError(absl::StrCat(
        "cuBLASLt has no ", ops.fp8 ? "fp8 (e4m3, per-row scales)" : "bf16",
        " algorithm for T=", T, " in=", in, " out=", out, f32_out ? " (fp32 output)" : ""));
  }
  int best = 0;
  if (found > 1) {
    RANKD_ASSIGN_OR_RETURN(best, Fastest(*p, results, found, T, out, f32_out, ops, stream));
  }
  p->algo = results[best].algo;
  return absl::OkStatus();
}

absl::StatusOr<int> Gemm::Fastest(const Plan& p, const cublasLtMatmulHeuristicResult_t* candidates,
                                  int n, int T, int out, bool f32_out, const Operands& ops,
                                  cudaStream_t stream) {
  constexpr int kRuns = 3;
  const size_t bytes = static_cast<size_t>(T) * out * (f32_out ? 4 : 2);
  void* scratch = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  auto release = [&] {
    if (start) cudaEventDestroy(start);
    if (stop) cudaEventDestroy(stop);
    if (scratch) cudaFreeAsync(scratch, stream);
  };
  absl::StatusOr<int> best = [&]() -> absl::StatusOr<int> {
    RANKD_CUDA_RETURN_IF_ERROR(cudaMallocAsync(&scratch, bytes, stream));
    RANKD_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(scratch, 0, bytes, stream));
    RANKD_CUDA_RETURN_IF_ERROR(cudaEventCreate(&start));
    RANKD_CUDA_RETURN_IF_ERROR(cudaEventCreate(&stop));
    const float alpha = 1.0f, beta = f32_out ? 1.0f : 0.0f;
    int fastest = 0;
    float fastest_ms = -1;  // none timed yet
    for (int i = 0; i < n; ++i) {
      if (candidates[i].state != CUBLAS_STATUS_SUCCESS ||
          candidates[i].workspaceSize > workspace_bytes_) {
        continue;
      }
      auto launch = [&] {
        return cublasLtMatmul(handle_, p.op, &alpha, ops.w, p.a, ops.x, p.b, &beta, scratch, p.c,
                              scratch, p.c, &candidates[i].algo, workspace_, workspace_bytes_,
                              stream);
      };
      if (launch() != CUBLAS_STATUS_SUCCESS) continue;  // a candidate that refuses is skipped
      RANKD_CUDA_RETURN_IF_ERROR(cudaEventRecord(start, stream));
      for (int r = 0; r < kRuns; ++r) RANKD_CUBLAS_RETURN_IF_ERROR(launch());
      RANKD_CUDA_RETURN_IF_ERROR(cudaEventRecord(stop, stream));
      RANKD_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(stop));
      float ms = 0;
      RANKD_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, start, stop));
      if (fastest_ms < 0 || ms < fastest_ms) {
        fastest = i;
        fastest_ms = ms;
      }
    }
    return fastest;
  }();
  release();
  return best;
}

absl::Status Gemm::Run(const Operands& ops, int T, int in, int out, void* y, bool f32_out,
                       cudaStream_t stream) {
  if (T == 0) return absl::OkStatus();
  for (const void* ptr :
       {ops.x, ops.w, static_cast<const void*>(y), static_cast<const void*>(ops.x_scale),
        static_cast<const void*>(ops.w_scale)}) {
    if (reinterpret_cast<uintptr_t>(ptr) % kGemmAlignment != 0) {
      return absl::InvalidArgumentError(absl::StrCat("GEMM operand 0x",
                                                     absl::Hex(reinterpret_cast<uintptr_t>(ptr)),
                                                     " is not ", kGemmAlignment, "-byte aligned"));
    }
  }
  if (ops.fp8 && (ops.x_scale == nullptr || ops.w_scale == nullptr)) {
    return absl::InvalidArgumentError("fp8 GEMM: an operand has no row scales");
  }
  RANKD_ASSIGN_OR_RETURN(const Plan* p, GetPlan(T, in, out, f32_out, ops, stream));
  RANKD_RETURN_IF_ERROR(SetScales(*p, ops));
  const float alpha = 1.0f, beta = f32_out ? 1.0f : 0.0f;
  RANKD_CUBLAS_RETURN_IF_ERROR(cublasLtMatmul(handle_, p->op, &alpha, ops.w, p->a, ops.x, p->b,
                                              &beta, y, p->c, y, p->c, &p->algo, workspace_,
                                              workspace_bytes_, stream));
  return absl::OkStatus();
}

absl::Status Gemm::Linear(const __nv_bfloat16* x, const __nv_bfloat16* w, int T, int in, int out,
                          __nv_bfloat16* y, cudaStream_t stream) {
  return Run(Operands{x, w}, T, in, out, y, /*f32_out=*/false, stream);
}

absl::Status Gemm::LinearAccumulate(const __nv_bfloat16* x, const __nv_bfloat16* w, int T, int in,
                                    int out, float* y, cudaStream_t stream) {
  return Run(Operands{x, w}, T, in, out, y, /*f32_out=*/true, stream);
}

absl::Status Gemm::LinearFp8(Fp8Matrix x, Fp8Matrix w, int T, int in, int out, __nv_bfloat16* y,
                             cudaStream_t stream) {
  return Run(Operands{x.data, w.data, x.scale, w.scale, true}, T, in, out, y, /*f32_out=*/false,
             stream);
}

absl::Status Gemm::LinearAccumulateFp8(Fp8Matrix x, Fp8Matrix w, int T, int in, int out, float* y,
                                       cudaStream_t stream) {
  return Run(Operands{x.data, w.data, x.scale, w.scale, true}, T, in, out, y, /*f32_out=*/true,
             stream);
}

}  // namespace rankd::cuda
