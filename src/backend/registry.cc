#include "rankd/backend/registry.h"

#include "absl/strings/str_cat.h"
#include "rankd/backend/cpu/cpu_backend.h"
#ifdef RANKD_HAVE_CUDA
#include "rankd/backend/cuda/cuda_backend.h"
#endif

namespace rankd::backend {

absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(const BackendOptions& options,
                                                       const std::string& model_dir,
                                                       const HeadSpec& head) {
  if (options.kind == "cpu") return cpu::CreateCpuBackend(options, model_dir, head);
  if (options.kind == "cuda") {
#ifdef RANKD_HAVE_CUDA
    return cuda::CreateCudaBackend(options, model_dir, head);
#else
    return absl::UnavailableError(
        "backend 'cuda' is not built into this binary (configure with -DRANKD_CUDA=ON)");
#endif
  }
  return absl::InvalidArgumentError(
      absl::StrCat("backend '", options.kind, "' is unknown (cpu, cuda)"));
}

}  // namespace rankd::backend
