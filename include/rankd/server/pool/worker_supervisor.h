// WorkerSupervisor: the worker processes' life cycle on the front end. It spawns one worker per
// WorkerSpec through a WorkerLauncher, waits for its socket and first answered ping (up), pings
// it every workers.ping_interval_s, kills a worker that hangs (startup, ping or a call reported
// by the dispatcher), reaps exits and restarts with exponential backoff (and gives up when no
// worker has ever come up and one failed workers.max_failed_starts starts in a row), and stops
// all workers at the end (SIGTERM, then SIGKILL). Each answered ping carries the worker's engine
// prefix cache stats, which it exports (rankd_prefix_cache_*{worker="i"}, metrics.h). It tells its
// owner (the WorkerPool) what happened through WorkerEvents; it knows nothing of the work the
// workers do.
#ifndef RANKD_SERVER_WORKER_SUPERVISOR_H_
#define RANKD_SERVER_WORKER_SUPERVISOR_H_

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/grpcpp.h"
#include "rankd/internal/worker.grpc.pb.h"
#include "rankd/protocol/protocol.h"
#include "rankd/server/config/config.h"
#include "rankd/server/metrics.h"
#include "rankd/server/process.h"
#include "rankd/server/pool/worker_plan.h"

namespace rankd::server {

// How the supervisor starts, signals and reaps worker processes. The real one (ProcessLauncher)
// fork/execs `rankd worker`; tests substitute workers that run in the test process.
// Threads: called on the supervisor thread only, except Signal, which is also called on gRPC
// threads; Signal must not block (it runs under the supervisor's lock).
class WorkerLauncher {
 public:
  virtual ~WorkerLauncher() = default;
  // Called once by WorkerSupervisor::Start, before any Launch, with the socket directory, which
  // the supervisor has made and the launcher may keep files in.
  virtual absl::Status Prepare(const std::string& socket_dir) { return absl::OkStatus(); }
  // Starts the worker for `spec`, which binds `socket_path` once it is ready to serve (the
  // supervisor removes any old socket file first). Returns its process id.
  virtual absl::StatusOr<pid_t> Launch(const WorkerSpec& spec, const std::string& socket_path) = 0;
  // Sends `signal` (SIGTERM: stop in order; SIGKILL: stop now).
  virtual void Signal(pid_t pid, int signal) = 0;
  // How the worker ended ("exited with status 1", "killed by signal 9 (Killed)") once it has,
  // reaping it; nullopt while it runs. With `wait`, waits for it to end.
  virtual std::optional<std::string> Reap(pid_t pid, bool wait) = 0;
};

// The real launcher: `rankd worker` (this binary, WorkerCommandLine / WorkerEnvironment) through
// SpawnSelf, pinned to the spec's CPUs; waitpid and kill. Prepare writes the workers' start-up
// config (ServeConfigToYaml, owner-only) as <socket_dir>/config.yaml; the destructor removes it.
// A worker gets SIGKILL when the thread that launched it exits, so Launch must run on a thread
// that lives as long as the worker.
class ProcessLauncher final : public WorkerLauncher {
 public:
  explicit ProcessLauncher(const ServeConfig& config) : config_(config) {}
  ~ProcessLauncher() override;
  absl::Status Prepare(const std::string& socket_dir) override;
  absl::StatusOr<pid_t> Launch(const WorkerSpec& spec, const std::string& socket_path) override;
  void Signal(pid_t pid, int signal) override;
  std::optional<std::string> Reap(pid_t pid, bool wait) override;

 private:
  const ServeConfig config_;
  std::string config_file_;  // set by Prepare
};

// Where the worker on `socket_path` writes the error it exits with (one line), for the supervisor
// to report: the supervisor removes it before each spawn and reads it when a worker that never
// came up has exited.
std::string WorkerErrorPath(absl::string_view socket_path);

// What a worker is given of the front end's finalized `config` (`rankd worker` reads the file
// Prepare wrote and keeps this of it): the model's name and identity, its engine, the limits.
protocol::WorkerSetup WorkerSetupOf(const ServeConfig& config);

// What the supervisor tells its owner about one worker incarnation (one spawn; incarnations are
// unique and increase with every spawn).
struct WorkerEvent {
  enum class Kind {
    kUp,       // answered its first ping: ready for calls through `stub`
    kHealthy,  // answered a ping after ReportFailure(kill=false)
    kDown,     // exited (reaped); its calls are failing or will fail at the transport
  };
  Kind kind;
  int index;
  uint64_t incarnation;
  std::shared_ptr<rankd::worker::v1::Worker::Stub> stub;  // kUp
};

// Threads: Start, Stop and the destructor on the owner's thread; ReportFailure and WorkerPids on
// any thread, never blocking (a short lock). The supervisor thread spawns, reaps, schedules pings
// and stops the workers; ping completions run on gRPC threads. Events are delivered on the
// supervisor thread only, one at a time in the order they happened, outside the supervisor's lock
// (the handler may call ReportFailure).
class WorkerSupervisor {
 public:
  using EventFn = std::function<void(const WorkerEvent&)>;

  WorkerSupervisor(const ServeConfig& config, std::vector<WorkerSpec> specs,
                   std::unique_ptr<WorkerLauncher> launcher, ServerMetrics* metrics,
                   EventFn on_event);
  ~WorkerSupervisor();  // Stop()

  int size() const { return static_cast<int>(slots_.size()); }
  const WorkerSpec& spec(int index) const { return slots_[index].spec; }

  // Makes the socket directory (workers.socket_dir, or a fresh /tmp/rankd-XXXXXX, after removing
  // those of front ends that are gone), takes it (RunDirectoryLock: fails naming the holder when
  // another process serves from it) and starts the supervisor thread, which spawns the workers.
  absl::Status Start();

  // A call to `incarnation` of worker `index` failed at the transport: with `kill` (it hung) the
  // worker is killed (and restarted); without, it is pinged now, and kHealthy follows if it
  // answers (else it is killed). Stale incarnations are ignored.
  void ReportFailure(int index, uint64_t incarnation, bool kill, absl::string_view reason);

  // (index, pid) of each worker process that runs: spawned and not yet reaped.
  std::vector<std::pair<int, pid_t>> WorkerPids() const;

  // OK, until no worker has come up yet and one has failed workers.max_failed_starts starts in a
  // row; from then on that failure (naming the worker and its error), and no more spawns.
  absl::Status start_failure() const;

  // No more spawns or pings; cancels the pings in flight and waits for them, stops the workers
  // (SIGTERM, then SIGKILL after workers.stop_timeout_s), ends the supervisor thread and removes
  // the sockets. No event is delivered after it returns. Idempotent.
  void Stop();

 private:
  struct Slot {
    WorkerSpec spec;
    std::string socket_path;
    enum class State { kDown, kSpawning, kStarting, kUp } state = State::kDown;
    pid_t pid = -1;
    uint64_t incarnation = 0;
    std::shared_ptr<rankd::worker::v1::Worker::Stub> stub;
    bool check_now = false;  // ReportFailure(kill=false): ping now, report kHealthy on success
    bool ping_in_flight = false;
    std::shared_ptr<grpc::ClientContext> ping_context;
    bool kill_sent = false;
    int crashes_in_a_row = 0;
    int failed_starts_in_a_row = 0;  // exits or launch failures before an answered first ping
    std::string kill_reason;         // why the supervisor killed the current incarnation
    int64_t spawns = 0;
    // rankd_prefix_cache_*{worker}: each answered ping's stats, by incarnation.
    std::unique_ptr<WorkerPrefixCacheMetrics> prefix_cache;
    std::chrono::steady_clock::time_point spawned_at, up_since, next_ping, next_spawn;
  };

  void Loop();
  void Spawn(int index);
  void ReapLocked(int index, const std::string& how);
  void KillLocked(Slot& slot, absl::string_view reason);
  // A start of worker `index` failed with `error`: counts it, and sets start_failure_ when it
  // is the workers.max_failed_starts-th in a row while no worker has come up yet.
  void FailedStartLocked(int index, const std::string& error);
  void StartPing(int index, uint64_t incarnation);
  void OnPingDone(int index, uint64_t incarnation, const grpc::Status& status,
                  const rankd::worker::v1::PingResponse& response);
  void StopWorkers();  // on the supervisor thread, at its end
  std::shared_ptr<rankd::worker::v1::Worker::Stub> MakeStub(const std::string& socket_path) const;

  const ServeConfig config_;
  const std::unique_ptr<WorkerLauncher> launcher_;
  ServerMetrics* const metrics_;
  const EventFn on_event_;
  std::string socket_dir_;
  std::unique_ptr<RunDirectoryLock> dir_lock_;  // held from Start on

  mutable std::mutex mu_;
  std::condition_variable cv_;       // supervisor wake-ups, outstanding-ping waits
  std::vector<Slot> slots_;          // the size and each spec and socket_path are fixed after Start
  std::vector<WorkerEvent> events_;  // not yet delivered
  uint64_t next_incarnation_ = 1;
  int pings_outstanding_ = 0;  // pings whose callbacks have not run yet
  bool any_up_ = false;        // some worker has answered its first ping
  absl::Status start_failure_;
  bool stopping_ = false;  // Stop: no spawns, no pings
  bool stop_thread_ = false;
  bool wake_ = false;  // wakes the supervisor before its next tick
  std::thread thread_;
  bool started_ = false;
  bool stopped_ = false;
};

}  // namespace rankd::server

#endif  // RANKD_SERVER_WORKER_SUPERVISOR_H_
