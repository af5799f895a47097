#include "rankd/server/pool/worker_plan.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "rankd/backend/backend.h"

namespace rankd::server {

absl::StatusOr<std::vector<WorkerSpec>> PlanWorkers(const WorkersSection& w, bool uses_gpus,
                                                    int visible_gpus,
                                                    const std::vector<int>& available_cpus) {
  std::vector<int> gpus;
  if (uses_gpus) {
    if (w.all_gpus || w.gpus.empty()) {
      if (visible_gpus <= 0) {
        return absl::FailedPreconditionError(
            "workers.gpus: the cuda backend needs a GPU and none is visible");
      }
      for (int g = 0; g < visible_gpus; ++g) gpus.push_back(g);
    } else {
      gpus = w.gpus;
    }
  }
  const int count = w.count > 0 ? w.count : static_cast<int>(gpus.size()) * w.workers_per_gpu;
  if (count <= 0) return absl::InvalidArgumentError("workers.count: must be positive");
  if (w.min_ready > count) {
    return absl::InvalidArgumentError(absl::StrCat(
        "workers.min_ready: ", w.min_ready, " exceeds the ", count,
        " workers planned (workers.count=", w.count, "): the server would never be ready"));
  }

  std::vector<WorkerSpec> specs(count);
  for (int i = 0; i < count; ++i) {
    specs[i].index = i;
    if (!gpus.empty()) {
      specs[i].gpu = gpus[(i / w.workers_per_gpu) % gpus.size()];
    }
  }
  if (w.cpu_affinity == "auto") {
    const int n = static_cast<int>(available_cpus.size());
    if (n == 0) return absl::FailedPreconditionError("workers.cpu_affinity: no CPU available");
    if (count >= n) {
      for (int i = 0; i < count; ++i) specs[i].cpus = {available_cpus[i % n]};
    } else {
      // Worker i gets CPUs [i*n/count, (i+1)*n/count).
      for (int i = 0; i < count; ++i) {
        for (int c = i * n / count; c < (i + 1) * n / count; ++c) {
          specs[i].cpus.push_back(available_cpus[c]);
        }
      }
    }
  } else if (w.cpu_affinity == "explicit") {
    if (static_cast<int>(w.cpu_sets.size()) != count) {
      return absl::InvalidArgumentError(absl::StrCat("workers.cpu_affinity: ", w.cpu_sets.size(),
                                                     " CPU lists for ", count,
                                                     " workers (give one list per worker)"));
    }
    for (int i = 0; i < count; ++i) {
      if (w.cpu_sets[i].empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("workers.cpu_affinity[", i, "]: empty CPU list"));
      }
      for (int cpu : w.cpu_sets[i]) {
        if (cpu < 0) {
          return absl::InvalidArgumentError(
              absl::StrCat("workers.cpu_affinity[", i, "]: bad CPU ", cpu));
        }
      }
      specs[i].cpus = w.cpu_sets[i];
    }
  }
  return specs;
}

std::vector<std::string> WorkerCommandLine(const std::string& config_file, const WorkerSpec& spec,
                                           const std::string& socket_path) {
  // Everything else (model, engine options, limits, logging) is in the config file. A worker
  // with a GPU sees only that one (CUDA_VISIBLE_DEVICES) as device 0.
  return {"rankd", "worker", "--socket=" + socket_path, absl::StrCat("--index=", spec.index),
          "--config=" + config_file};
}

std::vector<std::string> WorkerEnvironment(const std::vector<std::string>& parent,
                                           const ServeConfig& config, const WorkerSpec& spec) {
  const backend::BackendOptions& backend = config.model.engine.backend;
  const bool fixed_threads = backend.kind == backend::kCpuBackend && backend.threads > 0;
  std::vector<std::string> env;
  for (const std::string& entry : parent) {
    if (absl::StartsWith(entry, "CUDA_VISIBLE_DEVICES=")) continue;
    if (fixed_threads && (absl::StartsWith(entry, "OPENBLAS_NUM_THREADS=") ||
                          absl::StartsWith(entry, "OMP_NUM_THREADS="))) {
      continue;
    }
    env.push_back(entry);
  }
  if (spec.gpu >= 0) env.push_back(absl::StrCat("CUDA_VISIBLE_DEVICES=", spec.gpu));
  if (fixed_threads) {
    env.push_back(absl::StrCat("OPENBLAS_NUM_THREADS=", backend.threads));
    env.push_back(absl::StrCat("OMP_NUM_THREADS=", backend.threads));
  }
  return env;
}

}  // namespace rankd::server
