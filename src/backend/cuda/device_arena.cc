#include "rankd/backend/cuda/device_arena.h"

#include <cuda_runtime.h>

#include "rankd/backend/cuda/cuda_status.h"

namespace rankd::cuda {

absl::StatusOr<std::unique_ptr<Arena>> Arena::Create(Kind kind, size_t bytes) {
  bytes = AlignUp(bytes == 0 ? 1 : bytes);
  void* p = nullptr;
  if (kind == Kind::kDevice) {
    RANKD_CUDA_RETURN_IF_ERROR(cudaMalloc(&p, bytes));
  } else {
    RANKD_CUDA_RETURN_IF_ERROR(cudaMallocHost(&p, bytes));
  }
  return std::unique_ptr<Arena>(new Arena(kind, p, bytes));
}

Arena::~Arena() {
  // Errors here (a dead context at exit) have nowhere to go; the memory goes with the context.
  if (kind_ == Kind::kDevice) {
    cudaFree(base_);
  } else {
    cudaFreeHost(base_);
  }
}

}  // namespace rankd::cuda
