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
#include "rankd/engine/options.h"
#include "rankd/protocol/limits.h"

namespace rankd::server {

struct ModelSection {
  std::string name;  // served name; default: base name of `engine.model_dir`
  // model::ModelIdentity of the directory, "sha256:" and 16 hex digits. Empty: `rankd serve`
  // records the directory's at start; set: it must be that (the config pins the model). The
  // workers get it in their config and refuse to serve a directory that holds another.
  std::string identity;
  // The workers' engine, the one definition of its options. YAML keys of `model:` and the field
  // each sets: dir (engine.model_dir), backend (engine.backend.kind), head, query_template,
  // item_template, preset, instruction (engine.settings.*; unset: rankd.yaml beside the weights,
  // then the defaults), threads (engine.backend.threads), tokenizer_threads,
  // max_batch_tokens (engine.backend.max_batch_tokens), cuda_strategy (engine.backend.strategy),
  // cuda_graphs (engine.backend.cuda_graphs), precision (engine.backend.precision).
  engine::EngineOptions engine = ServeEngineDefaults();

  // Serve's defaults where they differ from a lone engine's (`rankd score`): one CPU backend
  // thread and one tokenizer thread per worker, so that workers x threads fits the cores.
  static engine::EngineOptions ServeEngineDefaults() {
    engine::EngineOptions o;
    o.backend.threads = 1;
    o.tokenizer_threads = 1;
    return o;
  }
  bool operator==(const ModelSection&) const = default;
};

// TLS on the gRPC port (server.tls). Both files set: TLS; both empty: plaintext.
struct TlsSection {
  std::string cert_file;  // PEM certificate chain of the server
  std::string key_file;   // PEM private key of cert_file
  // PEM CA bundle: set, clients must present a certificate it signed (mutual TLS).
  std::string client_ca_file;
  // Seconds between re-reads of the three files (a changed file is used by new connections).
  int refresh_interval_s = 60;

  bool operator==(const TlsSection&) const = default;
};

// API keys on the gRPC port (server.auth); the health service stays open.
struct AuthSection {
  std::string api_keys_file;     // one key per line, # comments; empty: no keys required
  bool protect_metrics = false;  // /metrics requires a key too (/healthz, /readyz stay open)

  bool operator==(const AuthSection&) const = default;
};

struct ServerSection {
  std::string listen = "127.0.0.1:50051";         // gRPC; port 0 picks a free port
  std::string metrics_listen = "127.0.0.1:9464";  // HTTP /metrics, /healthz, /readyz; empty: off
  std::string http_listen = "127.0.0.1:8080";     // HTTP JSON API (http_api.h); empty: off
  // Both HTTP ports, each on its own: connections open at once (more: the idlest closes), and
  // the time within which a request must arrive whole.
  int http_max_connections = 256;
  double http_read_timeout_s = 10;
  // The HTTP API's request bodies held at once (received or announced, not yet answered), all
  // connections together: a body beyond it gets 503 at its headers. At least
  // limits.max_message_bytes.
  int64_t http_max_buffered_bytes = int64_t{256} << 20;
  // The deadline of an HTTP API call (gRPC calls bring their own): admission and the queue
  // answer 504 when it cannot be met.
  double http_request_timeout_s = 60;
  int queue_size = 64;          // requests waiting for a worker, at most
  // Interactive calls are refused (RESOURCE_EXHAUSTED) when the work queued ahead of them is
  // estimated to take longer than this (its estimated compute / workers up); 0: off.
  double max_queue_wait_s = 0;
  double drain_timeout_s = 30;  // SIGTERM: how long in-flight work may finish
  int stream_chunk_items = 64;  // ScoreStream: items per chunk
  // SIGTERM, before the drain: seconds of health NOT_SERVING while calls are still accepted, for
  // balancers to take the server out.
  double drain_delay_s = 0;
  // Scoring cost per item assumed until the first measurement (deadline admission: CostEstimator).
  double initial_seconds_per_item = 0.001;
  // Bytes the answers of all calls in progress may hold, reserved at admission (AnswerBudget).
  int64_t max_buffered_answer_bytes = int64_t{256} << 20;
  // The names the model is served under: the first is the one answers report (the `model` of
  // Score's and the HTTP routes' answers, GET /v1/models' first entry). Empty: FinalizeServeConfig
  // makes it {model.name}. Each 1..kMaxModelNameBytes bytes, printable ASCII or UTF-8 without
  // control characters, at most kMaxServedModelNames.
  std::vector<std::string> served_model_names;
  // A request's `model` must be one of served_model_names (else NOT_FOUND). false: any name is
  // accepted (rankd serves one model; clients send their own defaults, as TEI accepts them), the
  // answer naming the model that scored.
  bool strict_model_name = false;
  // Origins whose browsers may call the HTTP API (CORS): exact "scheme://host[:port]" values, or
  // "*" for any. Empty: off (no Access-Control-* headers, preflights refused).
  std::vector<std::string> cors_allow_origins;
  TlsSection tls;
  AuthSection auth;
  // Server reflection. Unset: on when `listen` is a loopback address (FinalizeServeConfig
  // decides), off otherwise.
  std::optional<bool> reflection;

  bool operator==(const ServerSection&) const = default;
};

// limits: the request limits, checked by the front end and by the workers alike, defined in the
// protocol both depend on (rankd/protocol/limits.h).
using Limits = protocol::Limits;

struct WorkersSection {
  // Worker processes. 0 (cuda backend only): one per GPU, GPUs x workers_per_gpu.
  int count = 2;
  bool all_gpus = false;  // gpus: all
  std::vector<int> gpus;  // gpus: [0, 1]; empty: every visible GPU, as `all` (cuda backend)
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
  // While no worker has come up yet, a worker that fails this many starts in a row (exits or is
  // killed before its first answered ping) makes `rankd serve` exit with its error; 0: never.
  int max_failed_starts = 3;
  double stop_timeout_s = 10;  // SIGTERM -> SIGKILL when stopping workers
  std::string socket_dir;      // Unix sockets; empty: a fresh /tmp/rankd-XXXXXX

  bool operator==(const WorkersSection&) const = default;
};

inline constexpr int kMaxServedModelNames = 16;
inline constexpr int kMaxModelNameBytes = 256;
inline constexpr int kMaxCorsOrigins = 64;

inline constexpr int kDefaultMaxInflightCuda = 4;
inline constexpr int kDefaultMaxInflightCpu = 1;

// The front end's (query, item) -> score cache (ResultCache).
struct ResultCacheSection {
  int64_t capacity_mb = 256;  // MiB of entries, at most; 0 turns the cache off
  double ttl_s = 600;         // how long a score is kept after it was computed

  bool operator==(const ResultCacheSection&) const = default;
};

// The latency controller that sets how many candidates of a Score call (depth 0) get scored.
struct DepthControlSection {
  bool enabled = false;
  double target_p99_s = 0.5;  // end-to-end p99 of Score calls to hold
  int min_depth = 50;
  int max_depth = 250;
  double kp = 60, ki = 40, kd = 5;  // DepthControlOptions' gains
  double window_s = 10;             // the p99 is of the Score calls that ended this recently

  bool operator==(const DepthControlSection&) const = default;
};

// Traffic shaping: PRIORITY_BATCH work waits for idle capacity (WorkerPool).
struct ShapingSection {
  // How long batch work may wait for idle capacity before it is admitted anyway.
  double batch_max_wait_s = 30;
  // The interactive load (0..1: the share of the workers busy with interactive calls, now or
  // averaged over the last second, whichever is higher) above which batch work waits; 1 never.
  double busy_threshold = 0.5;

  bool operator==(const ShapingSection&) const = default;
};

struct LoggingSection {
  std::string level = "info";   // trace | debug | info | warn | error | off
  std::string format = "text";  // text | json
  bool access_log = false;      // one info line per request

  bool operator==(const LoggingSection&) const = default;
};

struct ServeConfig {
  ModelSection model;
  ServerSection server;
  Limits limits;
  WorkersSection workers;
  ResultCacheSection result_cache;
  DepthControlSection depth_control;
  ShapingSection shaping;
  LoggingSection logging;

  bool operator==(const ServeConfig&) const = default;
};

// Parses YAML text (`origin` names it in errors). Relative paths resolve against `base_dir`.
// Unknown keys and wrong types are errors that name the key, e.g. "workers.count: ...".
absl::StatusOr<ServeConfig> ParseServeConfig(absl::string_view yaml, absl::string_view base_dir,
                                             absl::string_view origin);
// The YAML text of `config`, which ParseServeConfig reads back into an equal ServeConfig (paths
// made absolute): how `rankd serve` hands its finalized config to the workers, as one file.
// Written from the same key table as the parser, so a new key round-trips without more code.
std::string ServeConfigToYaml(const ServeConfig& config);
// Reads and parses a file; relative paths resolve against the file's directory.
absl::StatusOr<ServeConfig> LoadServeConfigFile(const std::string& path);
// The embedded default (configs/tiny-cpu.yaml as built in), its paths resolved against the
// source tree's configs/ folder.
absl::StatusOr<ServeConfig> DefaultServeConfig();
absl::string_view EmbeddedDefaultConfigText();

// Range and consistency checks (positive counts and timeouts, known backend, templates with
// their placeholder, ...). Fills `model.name` from `model.dir` when empty, and
// `workers.max_inflight` by backend when 0, and `server.reflection` from `server.listen` when
// unset.
absl::Status FinalizeServeConfig(ServeConfig* config);

// True for addresses only this host reaches: 127.0.0.0/8, [::1], localhost, unix: sockets.
bool IsLoopbackAddress(absl::string_view address);

}  // namespace rankd::server

#endif  // RANKD_SERVER_CONFIG_H_
