// ServeConfig: everything `rankd serve` reads from its YAML file (configs/*.yaml, documented in
// docs/config.md), after the command-line flags have overridden it. The embedded default is
// configs/tiny-cpu.yaml, compiled in.
#ifndef RANKD_SERVER_CONFIG_H_
#define RANKD_SERVER_CONFIG_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace rankd::server {

struct ModelSection {
  std::string dir;                            // Hugging Face model directory
  std::string name;                           // served name; default: base name of `dir`
  std::string backend = "cpu";                // cpu | cuda
  std::optional<std::string> head;            // unset: rankd.yaml beside the weights, then default
  std::optional<std::string> query_template;  // contains {query}
  std::optional<std::string> item_template;   // contains {item}
  std::optional<std::string> preset;          // prompt preset, e.g. qwen3-reranker
  std::optional<std::string> instruction;     // the preset's task instruction
  int threads = 1;                            // CPU backend threads per worker (0: all cores)
  int tokenizer_threads = 1;                  // per worker
  int max_batch_tokens = 8192;                // item tokens per forward pass
  std::string cuda_strategy = "ibpc";         // ibpc | multi-item
  bool cuda_graphs = true;
};

struct ServerSection {
  std::string listen = "127.0.0.1:50051";         // gRPC; port 0 picks a free port
  std::string metrics_listen = "127.0.0.1:9464";  // HTTP /metrics; empty: off
  int queue_size = 64;                            // requests waiting for a worker, at most
  double drain_timeout_s = 30;                    // SIGTERM: how long in-flight work may finish
  int stream_chunk_items = 64;                    // ScoreStream: items per chunk
  // Scoring cost per item assumed until the first measurement (deadline admission).
  double initial_seconds_per_item = 0.001;
};

struct Limits {
  int max_items = 1000;                  // items per request
  int max_query_tokens = 512;            // prefix tokens (template and BOS included)
  int max_item_tokens = 512;             // tokens (or embedding rows) per item
  int64_t max_request_tokens = 262144;   // item tokens per request (per chunk for ScoreStream)
  int64_t max_message_bytes = 16 << 20;  // serialized ScoreRequest
};

struct WorkersSection {
  // Worker processes. Unset (0) with a GPU list: gpus.size() * workers_per_gpu.
  int count = 2;
  bool all_gpus = false;  // gpus: all
  std::vector<int> gpus;  // gpus: [0, 1]; empty and !all_gpus: no GPU
  int workers_per_gpu = 1;
  // cpu_affinity: none (not pinned) | auto (the front end's CPUs split evenly) | explicit
  // per-worker CPU lists ([[0, 1], [2, 3]]).
  std::string cpu_affinity = "none";
  std::vector<std::vector<int>> cpu_sets;  // explicit lists
  // Calls one worker holds at a time; its scheduler scores those it holds together. 0: by
  // backend, kDefaultMaxInflightCuda or kDefaultMaxInflightCpu (FinalizeServeConfig).
  int max_inflight = 0;
  int min_ready = 1;               // ready (health SERVING) with at least this many up
  double startup_timeout_s = 120;  // spawn -> first answered ping, else killed
  double ping_interval_s = 1;
  double ping_timeout_s = 5;       // an unanswered ping marks the worker hung: killed, restarted
  double call_timeout_s = 60;      // one scoring call; beyond it the worker counts as hung
  double restart_backoff_s = 0.5;  // first restart delay, doubled per crash in a row
  double restart_backoff_max_s = 30;
  double stop_timeout_s = 10;  // SIGTERM -> SIGKILL when stopping workers
  std::string socket_dir;      // Unix sockets; empty: a fresh /tmp/rankd-XXXXXX
};

inline constexpr int kDefaultMaxInflightCuda = 4;
inline constexpr int kDefaultMaxInflightCpu = 1;

struct LoggingSection {
  std::string level = "info";   // trace | debug | info | warn | error | off
  std::string format = "text";  // text | json
  bool access_log = false;      // one info line per request
};

struct ServeConfig {
  ModelSection model;
  ServerSection server;
  Limits limits;
  WorkersSection workers;
  LoggingSection logging;
};

// Parses YAML text (`origin` names it in errors). Relative paths resolve against `base_dir`.
// Unknown keys and wrong types are errors that name the key, e.g. "workers.count: ...".
absl::StatusOr<ServeConfig> ParseServeConfig(absl::string_view yaml, absl::string_view base_dir,
                                             absl::string_view origin);
// Reads and parses a file; relative paths resolve against the file's directory.
absl::StatusOr<ServeConfig> LoadServeConfigFile(const std::string& path);
// The embedded default (configs/tiny-cpu.yaml as built in), its paths resolved against the
// source tree's configs/ folder.
absl::StatusOr<ServeConfig> DefaultServeConfig();
absl::string_view EmbeddedDefaultConfigText();

// Range and consistency checks (positive counts and timeouts, known backend, templates with
// their placeholder, ...). Fills `model.name` from `model.dir` when empty, and
// `workers.max_inflight` by backend when 0.
absl::Status FinalizeServeConfig(ServeConfig* config);

}  // namespace rankd::server

#endif  // RANKD_SERVER_CONFIG_H_
