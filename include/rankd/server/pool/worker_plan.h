// What the front end starts: one WorkerSpec per worker process (its GPU and CPUs), and the
// command line and environment of `rankd worker`. Pure functions, unit-tested.
#ifndef RANKD_SERVER_WORKER_PLAN_H_
#define RANKD_SERVER_WORKER_PLAN_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "rankd/server/config/config.h"

namespace rankd::server {

struct WorkerSpec {
  int index = 0;  // 0 .. count-1, stable across restarts
  int gpu = -1;   // CUDA device the worker sees as device 0 (CUDA_VISIBLE_DEVICES); -1: none
  std::vector<int> cpus;  // sched_setaffinity set; empty: not pinned
};

// Resolves the workers section:
// - count: workers.count, or (when 0) number of GPUs x workers_per_gpu;
// - GPUs (only when `uses_gpus`, i.e. the cuda backend): `gpus: all` (or no list) means
//   0 .. visible_gpus-1; worker i gets gpus[(i / workers_per_gpu) % gpus.size()], so the
//   workers of one GPU are neighbours;
// - CPUs: none; auto splits `available_cpus` into `count` contiguous, near-equal groups (one CPU
//   each, round robin, when there are more workers than CPUs); explicit lists are taken as given
//   and must be one per worker;
// - workers.min_ready must not exceed the count (else the server would never be ready).
absl::StatusOr<std::vector<WorkerSpec>> PlanWorkers(const WorkersSection& workers, bool uses_gpus,
                                                    int visible_gpus,
                                                    const std::vector<int>& available_cpus);

// argv of `rankd worker` for one worker (argv[0] is "rankd"): its socket, its index and the
// config file (ServeConfigToYaml of the finalized config) that holds all its other settings.
std::vector<std::string> WorkerCommandLine(const std::string& config_file, const WorkerSpec& spec,
                                           const std::string& socket_path);

// The worker's environment: `parent` (NAME=VALUE entries) with CUDA_VISIBLE_DEVICES set to the
// worker's GPU (removed when it has none), and OPENBLAS_NUM_THREADS / OMP_NUM_THREADS set to the
// CPU backend's thread count when that is fixed, so that workers do not oversubscribe the cores.
std::vector<std::string> WorkerEnvironment(const std::vector<std::string>& parent,
                                           const ServeConfig& config, const WorkerSpec& spec);

}  // namespace rankd::server

#endif  // RANKD_SERVER_WORKER_PLAN_H_
