// CudaBackend: the Backend interface on one NVIDIA GPU. bf16 weights and activations with fp32
// accumulation, softmax and residual stream; GEMMs through cuBLASLt over all tokens of a batch;
// kernels in kernels/. Two strategies (BackendOptions::strategy), with the same scores:
//   "ibpc"        EncodePrefix runs the prefix and keeps its K/V on the device; ScoreItems runs
//                 the batch's items over it.
//   "multi-item"  EncodePrefix keeps the prefix ids; ScoreItems runs prefix and items in one
//                 packed pass in which the attention mask keeps the items apart.
#ifndef RANKD_BACKEND_CUDA_CUDA_BACKEND_H_
#define RANKD_BACKEND_CUDA_CUDA_BACKEND_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "rankd/engine/backend.h"

namespace rankd::cuda {

// Unavailable when no CUDA device (or driver) is present; InvalidArgument for an unknown strategy
// or a bad device index; Unimplemented for a head_dim the attention kernel lacks.
absl::StatusOr<std::unique_ptr<engine::Backend>> CreateCudaBackend(
    const engine::BackendOptions& options, const std::string& model_dir,
    const engine::HeadSpec& head);

}  // namespace rankd::cuda

#endif  // RANKD_BACKEND_CUDA_CUDA_BACKEND_H_
