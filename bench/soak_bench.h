// rankd-bench soak: overload and soak against a running `rankd serve` on this host. Phases of
// open-loop load (RunLoad): the sustainable throughput measured (or --rate), 1x of it, 2x, then
// 1x again (recovery); meanwhile, every --sample-s, the RSS, open fds and threads of the server
// and of each worker (its children, from /proc), and the server's /metrics (worker restarts and
// exits, queue depth). Checks the overload promises (RELIABILITY.md, "Overload and soak") and
// reports which failed. Optionally a memory probe: one request of large texts, the workers' RSS
// before, right after and a few seconds after it.
#ifndef RANKD_BENCH_SOAK_BENCH_H_
#define RANKD_BENCH_SOAK_BENCH_H_

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "load_bench.h"
#include "nlohmann/json.hpp"

namespace rankd::bench {

struct SoakOptions {
  // What every phase sends (target, security, request shape, deadline, connections); its rate,
  // concurrency, schedule, duration and warmup are the soak's to set.
  LoadOptions load;
  double duration = 60;         // seconds of load in all; phases 20% / 25% / 30% / 25% of it
  double rate = 0;              // 1x in requests/s; 0: 90% of the measured closed-loop throughput
  int measure_concurrency = 0;  // closed loop of the measuring phase; 0: 8 per worker up
  std::string metrics;          // HOST:PORT of /metrics; empty: --target's host, port 9464
  pid_t server_pid = 0;         // 0: the process listening on --target's port (this host)
  double sample_s = 1;          // sampling period
  double settle_s = 3;          // idle seconds before the last sample (and after the probe)
  // Promises (see RELIABILITY.md): growth from the first to the last sample at most these many
  // fds / threads (server; workers in all: per worker).
  int fd_slack = 16, thread_slack = 8;
  double reject_p99_ms = 50;  // RESOURCE_EXHAUSTED answered within this at p99
  double max_p99_ratio = 0;   // admitted p99 at 2x / at 1x at most; 0: derived (soak_bench.cc)
  // Memory probe after the phases (0 items: none): one request of probe_items texts of
  // probe_item_bytes bytes each, truncate TRUNCATE_END.
  int probe_items = 0;
  int probe_item_bytes = 16000;
};

struct ProcessSample {
  pid_t pid = 0;
  bool worker = false;
  int64_t rss_kb = 0;
  int fds = 0, threads = 0;
};

struct SoakSample {
  double t_s = 0;  // since the soak's start
  std::string phase;
  std::vector<ProcessSample> processes;  // the server first, then its workers by pid
  // From /metrics (-1 when the series was absent).
  double restarts = -1, exits = -1, queue_depth = -1, workers_up = -1;
};

struct SoakPhase {
  std::string name;            // measure, 1x, 2x, recovery
  double offered = 0;          // requests/s (measure: the concurrency)
  double completed_per_s = 0;  // calls completed per whole second of the measured window
  LoadResult load;
};

// The promises soak checks (RELIABILITY.md, "Overload and soak"). The first four do not depend
// on the host's speed; the last three are bounds on time.
inline constexpr char kPromiseCodes[] = "codes";          // only OK and RESOURCE_EXHAUSTED
inline constexpr char kPromiseRefusal[] = "refusal";      // 2x meets RESOURCE_EXHAUSTED
inline constexpr char kPromiseRestarts[] = "restarts";    // no worker restarts
inline constexpr char kPromiseResources[] = "resources";  // processes, fds, threads back
inline constexpr char kPromiseRefusalLatency[] = "refusal_latency";
inline constexpr char kPromiseAdmittedLatency[] = "admitted_latency";
inline constexpr char kPromiseRecovery[] = "recovery";
inline constexpr char kPromiseProbe[] = "probe";  // the memory probe's call answered OK

struct SoakResult {
  double sustainable_rps = 0;  // the 1x rate
  double max_p99_ratio = 0;    // K used
  std::vector<SoakPhase> phases;
  std::vector<SoakSample> samples;
  struct Probe {
    bool ok = false;
    std::string status;  // of the probe's call
    int64_t text_bytes = 0;
    std::vector<pid_t> workers;
    std::vector<int64_t> rss_before_kb, rss_after_kb, rss_settled_kb;  // [workers]
  } probe;
  int64_t worker_restarts = 0;  // over the soak, from /metrics
  // Promises broken; empty: all held. `promise` is one of kPromise* below.
  struct Failure {
    std::string promise, message;
  };
  std::vector<Failure> failures;
  nlohmann::json ToJson(const SoakOptions& o) const;
  std::string Summary() const;
};

// The live child processes of `parent` (/proc/<parent>/task/*/children), sorted.
std::vector<pid_t> ChildProcesses(pid_t parent);
// RSS, fds and threads of `pid` from /proc; NotFound when it is gone.
absl::StatusOr<ProcessSample> SampleProcess(pid_t pid);
// The process that has a TCP socket listening on `port` (from /proc/net/tcp{,6} and /proc/*/fd).
absl::StatusOr<pid_t> ListeningProcess(int port);

// Errors: bad options (InvalidArgument naming the flag), no server or metrics (Unavailable or
// NotFound). Broken promises are not errors: they are in SoakResult::failures.
absl::StatusOr<SoakResult> RunSoak(const SoakOptions& o);

int RunSoakBench(int argc, char** argv, int first);

}  // namespace rankd::bench

#endif  // RANKD_BENCH_SOAK_BENCH_H_
