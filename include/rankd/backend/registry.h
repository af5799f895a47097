// The backends this binary was built with, by name: where a program is assembled (rankd's score
// and worker commands, rankd-bench, tests) it picks its backend here and hands CreateBackend to
// the engine as its BackendFactory. Only this part knows the concrete backends.
#ifndef RANKD_BACKEND_REGISTRY_H_
#define RANKD_BACKEND_REGISTRY_H_

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

}  // namespace rankd::backend

#endif  // RANKD_BACKEND_REGISTRY_H_
