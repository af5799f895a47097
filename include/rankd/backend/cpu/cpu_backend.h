// CpuBackend: the float32 reference implementation of the Backend interface.
#ifndef RANKD_BACKEND_CPU_CPU_BACKEND_H_
#define RANKD_BACKEND_CPU_CPU_BACKEND_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "rankd/engine/backend.h"

namespace rankd::cpu {

absl::StatusOr<std::unique_ptr<engine::Backend>> CreateCpuBackend(
    const engine::BackendOptions& options, const std::string& model_dir,
    const engine::HeadSpec& head);

}  // namespace rankd::cpu

#endif  // RANKD_BACKEND_CPU_CPU_BACKEND_H_
