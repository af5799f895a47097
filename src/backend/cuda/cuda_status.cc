#include "rankd/backend/cuda/cuda_status.h"

#include "absl/strings/str_cat.h"

namespace rankd::cuda {

absl::Status CudaStatus(cudaError_t err, absl::string_view expr, absl::string_view file, int line) {
  if (err == cudaSuccess) return absl::OkStatus();
  std::string msg = absl::StrCat(expr, " failed at ", file, ":", line, ": ", cudaGetErrorName(err),
                                 ": ", cudaGetErrorString(err));
  if (err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver) {
    return absl::UnavailableError(msg);
  }
  if (err == cudaErrorMemoryAllocation) return absl::ResourceExhaustedError(msg);
  return absl::InternalError(msg);
}

absl::Status CublasStatus(cublasStatus_t st, absl::string_view expr, absl::string_view file,
                          int line) {
  if (st == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  std::string msg =
      absl::StrCat(expr, " failed at ", file, ":", line, ": cuBLAS status ", static_cast<int>(st),
                   " (", cublasLtGetStatusName(st), ": ", cublasLtGetStatusString(st), ")");
  if (st == CUBLAS_STATUS_ALLOC_FAILED) return absl::ResourceExhaustedError(msg);
  if (st == CUBLAS_STATUS_NOT_SUPPORTED) return absl::UnimplementedError(msg);
  return absl::InternalError(msg);
}

}  // namespace rankd::cuda
