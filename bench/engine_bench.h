// rankd-bench engine: throughput and latency of one backend on the standard workload shape, with
// C requests (each with its own random prefix) scored together per step.
#ifndef RANKD_BENCH_ENGINE_BENCH_H_
#define RANKD_BENCH_ENGINE_BENCH_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "rankd/backend/backend.h"
#include "rankd/cli/flag_set.h"
#include "rankd/model/config.h"

namespace rankd::bench {

// Model FLOPs of scoring one item of `ti` tokens after a cached prefix of `tq` tokens: the linear
// layers (2 x weights x tokens) plus attention (QK^T and PV over prefix + causal own tokens).
double ItemFlops(const model::ModelConfig& c, int tq, int ti);

struct EngineBenchOptions {
  std::string model_dir;
  std::string backend = "cpu";
  std::string strategy = "ibpc";
  std::string precision = "bf16";  // BackendOptions::precision: bf16 or fp8
  bool graphs = true;
  std::string head_spec;      // empty: by architecture
  std::string items = "ids";  // ids, or embedding (each item one hidden-size vector)
  int tq = 50, ti = 150, ni = 50;
  int concurrency = 1;         // requests scored together per step
  int iters = 20, warmup = 3;  // timed and untimed steps
  int threads = 0, device = 0, seed = 1;
  int max_batch_tokens = 65536;
  double peak_tflops = 790;
  // The log's level while the bench runs (warn: the table alone; info: the backend's load line
  // and, on CUDA, the GEMM choice per layer shape with every variant's time).
  std::string log_level = "warn";
};

struct EngineBenchResult {
  double items_per_s = 0, tokens_per_s = 0, model_tflops = 0, peak_fraction = 0;
  double p50_ms = 0, p90_ms = 0, p99_ms = 0;  // per request: step start to its scores
  nlohmann::json ToJson(const EngineBenchOptions& o) const;
};

// Registers the flags that set `o`'s model, backend and workload shape, shared by `engine` and
// `sweep` so the two cannot drift apart. Not --ni and --concurrency: the sweep takes lists in their
// place. Defaults shown in --help are `o`'s values at the call.
void AddEngineBenchFlags(cli::FlagSet& flags, EngineBenchOptions* o);

// The backend options `o` names (RANKD_CUDA_* switches not applied).
backend::BackendOptions BenchBackendOptions(const EngineBenchOptions& o);
absl::StatusOr<std::unique_ptr<backend::Backend>> MakeBenchBackend(const EngineBenchOptions& o);

// InvalidArgument naming the flag and its limit when the workload shape cannot run (tq, ti, ni,
// iters, concurrency below 1, warmup below 0, items not ids or embedding). RunEngine checks this
// itself; the commands also call it before loading a model, to fail fast.
absl::Status CheckEngineBenchOptions(const EngineBenchOptions& o);

// Runs warmup + iters steps on `backend`: each step makes `concurrency` fresh requests (not
// timed), then encodes their prefixes and scores all their items through ScoreGroupsInPasses.
// Options that fail CheckEngineBenchOptions give its InvalidArgument, before any step.
absl::StatusOr<EngineBenchResult> RunEngine(backend::Backend& backend, const EngineBenchOptions& o);

// Prints the table header and one row.
void PrintEngineHeader();
void PrintEngineRow(const EngineBenchOptions& o, const EngineBenchResult& r);

int RunEngineBench(int argc, char** argv, int first);

}  // namespace rankd::bench

#endif  // RANKD_BENCH_ENGINE_BENCH_H_
