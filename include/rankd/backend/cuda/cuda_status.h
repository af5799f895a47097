// CUDA and cuBLASLt errors as absl::Status, with the failing expression and file:line in the
// message. Kernel launchers return cudaError_t (they check cudaGetLastError() after the launch);
// the backend wraps every call in one of these macros.
#ifndef RANKD_BACKEND_CUDA_CUDA_STATUS_H_
#define RANKD_BACKEND_CUDA_CUDA_STATUS_H_

#include <cublasLt.h>
#include <cuda_runtime.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace rankd::cuda {

// OK for cudaSuccess; otherwise Internal (Unavailable for "no device" style errors) with
// "<expr> failed at <file>:<line>: <error name>: <error string>".
absl::Status CudaStatus(cudaError_t err, absl::string_view expr, absl::string_view file, int line);
absl::Status CublasStatus(cublasStatus_t st, absl::string_view expr, absl::string_view file,
                          int line);

}  // namespace rankd::cuda

// Evaluates a cudaError_t expression; returns the error as a Status from the enclosing function.
#define RANKD_CUDA_RETURN_IF_ERROR(expr)                                            \
  do {                                                                              \
    const cudaError_t _rankd_cuda_err = (expr);                                     \
    if (_rankd_cuda_err != cudaSuccess) {                                           \
      return ::rankd::cuda::CudaStatus(_rankd_cuda_err, #expr, __FILE__, __LINE__); \
    }                                                                               \
  } while (0)

// Same for a cublasStatus_t expression.
#define RANKD_CUBLAS_RETURN_IF_ERROR(expr)                                             \
  do {                                                                                 \
    const cublasStatus_t _rankd_cublas_st = (expr);                                    \
    if (_rankd_cublas_st != CUBLAS_STATUS_SUCCESS) {                                   \
      return ::rankd::cuda::CublasStatus(_rankd_cublas_st, #expr, __FILE__, __LINE__); \
    }                                                                                  \
  } while (0)

#endif  // RANKD_BACKEND_CUDA_CUDA_STATUS_H_
