// CpuBackend: the float32 reference implementation of the Backend interface.
#ifndef RANKD_BACKEND_CPU_CPU_BACKEND_H_
#define RANKD_BACKEND_CPU_CPU_BACKEND_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "rankd/backend/backend.h"

namespace rankd::cpu {

// Loads the model of `model_dir` into float32 and returns its CPU backend. It computes on
// options.threads threads (0: all cores): its own ThreadPool for the attention of a layer's
// segments, OpenBLAS's threads for the GEMMs. OpenBLAS's thread count is process-global: this call
// sets it for every backend of the process, and the backend created last wins.
//
// Threading contract: name(), config(), head() and the PrefixState objects it returns may be read
// from any thread at any time. EncodePrefix, ScoreItems and ScoreGroups keep their buffers per call
// and only read the weights, and the pool takes concurrent loops, but whether they may overlap
// depends on the OpenBLAS build and is not tested: call them from one thread at a time (the Engine
// does). Nothing in the backend locks.
absl::StatusOr<std::unique_ptr<backend::Backend>> CreateCpuBackend(
    const backend::BackendOptions& options, const std::string& model_dir,
    const backend::HeadSpec& head);

}  // namespace rankd::cpu

#endif  // RANKD_BACKEND_CPU_CPU_BACKEND_H_
