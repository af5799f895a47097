// The backends this binary was built with, by name: where a program is assembled (rankd's score
// and worker commands, rankd-bench, tests) it picks its backend here and hands CreateBackend to
// the engine as its BackendFactory. Only this part knows the concrete backends.
#ifndef RANKD_BACKEND_REGISTRY_H_
#define RANKD_BACKEND_REGISTRY_H_

#include <cstdlib>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "rankd/backend/backend.h"

namespace rankd::backend {

// Creates the backend options.kind names ("cpu", "cuda") for the model in `model_dir`.
// Unavailable when the kind is not built in or no device exists; InvalidArgument for an unknown
// kind.
absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(const BackendOptions& options,
                                                       const std::string& model_dir,
                                                       const HeadSpec& head);

// Reads the RANKD_CUDA_* switches into `options` through `getenv` (the process environment by
// default), once, where a program starts: RANKD_CUDA_GRAPHS=0 turns cuda_graphs off (logged as a
// warning when it overrides a config or flag that had them on), the others set options->cuda.
// InvalidArgument naming the variable for a value that is not 0/1 or not an integer.
absl::Status ApplyBackendEnvironment(
    BackendOptions* options,
    const std::function<const char*(const char*)>& getenv = [](const char* name) {
      return static_cast<const char*>(std::getenv(name));
    });

}  // namespace rankd::backend

#endif  // RANKD_BACKEND_REGISTRY_H_
