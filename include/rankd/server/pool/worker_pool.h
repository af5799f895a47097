// WorkerPool: the front end's side of the worker processes. It queues admitted work by priority
// and sends it to the least-loaded worker over the worker's Unix domain socket. Work whose worker
// died is sent once more to another worker, or fails with UNAVAILABLE when none is left. The
// processes themselves (spawn, pings, reaping, restarts, stop) are the WorkerSupervisor's
// (worker_supervisor.h), which tells the pool when a worker comes up or goes down.
#ifndef RANKD_SERVER_WORKER_POOL_H_
#define RANKD_SERVER_WORKER_POOL_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "grpcpp/grpcpp.h"
#include "rankd/internal/worker.grpc.pb.h"
#include "rankd/server/config/config.h"
#include "rankd/server/pool/cost_estimator.h"
#include "rankd/server/metrics.h"
#include "rankd/server/pool/worker_plan.h"
#include "rankd/server/pool/worker_supervisor.h"

namespace rankd::server {

using SteadyTime = std::chrono::steady_clock::time_point;
using WallTime = std::chrono::system_clock::time_point;  // gRPC deadlines

// One worker call: items [begin, end) of a validated request. The request must stay alive and
// unchanged until `done` has run. `done` runs exactly once, after the last worker call of this
// work has finished, on a gRPC or supervisor thread (never under the pool's lock). Its status is
// the work's as the caller gets it: a worker's error about an item names the caller's item, in
// its message and in its FieldError (rankd/common/field_error.h), which the transports render.
class Work {
 public:
  using DoneFn = std::function<void(const absl::Status& status, Work& work)>;

  // What the worker call carries of the request.
  enum class Carry {
    // The whole request, which the worker call points at (nothing copied).
    kWholeRequest,
    // Only items [begin, end), which the worker call points at, and a copy of what the worker
    // reads besides the items (query, query_ids, apply_sigmoid, priority): a ScoreStream chunk
    // then costs its own items to send and parse, not the whole request's. Errors the worker
    // answers still name items by their index in the whole request.
    kOwnItems,
  };

  Work(const rankd::v1::ScoreRequest* request, int begin, int end, bool interactive,
       WallTime deadline, Carry carry, DoneFn done);
  // Carry::kOwnItems of the caller's items `items` (indices, ascending; e.g. the items of a Score
  // call that the result cache did not have): the worker call carries just those.
  Work(const rankd::v1::ScoreRequest* request, std::vector<int> items, bool interactive,
       WallTime deadline, DoneFn done);
  ~Work();
  Work(const Work&) = delete;
  Work& operator=(const Work&) = delete;

  // The span of the caller's items the work holds ([begin, end) for a range).
  int begin() const { return items_.empty() ? item_.begin() : items_.front(); }
  int end() const { return items_.empty() ? item_.end() : items_.back() + 1; }
  int num_items() const { return item_.end() - item_.begin(); }
  // What the worker call sends.
  const rankd::worker::v1::WorkItem& worker_item() const { return item_; }
  bool interactive() const { return interactive_; }
  // Valid in `done`: result() with an OK status; queue_seconds() with any status.
  const rankd::worker::v1::WorkResult& result() const { return result_; }
  double queue_seconds() const { return queue_seconds_; }

 private:
  friend class WorkerPool;
  enum class State { kNew, kQueued, kRunning, kDone };
  void CarryOwnItems(const rankd::v1::ScoreRequest& request);  // item_ from items_
  void CountInputs();                                          // inputs_ from item_
  // A worker's error (its FieldError naming item j of what it was sent) about the caller's item
  // instead, as the caller gets it: code, message and FieldError.
  absl::Status CallerStatus(const grpc::Status& worker_status) const;

  // Holds the caller's request, or with Carry::kOwnItems a request of its own whose items are the
  // caller's, without owning them.
  rankd::worker::v1::WorkItem item_;
  const Carry carry_;
  // With Carry::kOwnItems: the caller's index of each of item_'s items.
  std::vector<int> items_;
  WorkInputs inputs_;  // of item_'s items, for deadline admission's cost estimate
  rankd::worker::v1::WorkResult result_;
  const bool interactive_;
  const WallTime deadline_;
  DoneFn done_;

  // Guarded by the pool's mutex.
  State state_ = State::kNew;
  bool cancelled_ = false;
  absl::Status cancel_status_;  // why, when cancelled_
  int attempts_ = 0;
  uint64_t incarnation_ = 0;  // worker incarnation of the current / last call (retries avoid it)
  std::shared_ptr<grpc::ClientContext> context_;
  SteadyTime enqueued_at_;
  double estimate_seconds_ = 0;  // its compute, as estimated at admission
  double queue_seconds_ = 0;
  bool deferred_ = false;  // batch work held back by traffic shaping (counted once)
};

// Dispatch order (traffic shaping, config `shaping`): batch work that has waited
// shaping.batch_max_wait_s (admitted anyway: no starvation), then interactive work, then batch
// work while the interactive load is at most shaping.busy_threshold and no interactive work
// waits. Batch calls hold at most max_inflight - 1 calls of a worker (all, when max_inflight is
// 1), so that an interactive call arriving meets a free slot, not a queue behind batch work.
//
// Threads: Submit, Cancel, ready, SetReadinessCallback and WorkerPids run on any thread (gRPC
// reactor threads, the HTTP server's) and never block (a short lock); Start, ReportNotReady,
// StartDrain, WaitIdle, Shutdown and the destructor on the owner's thread. While batch work waits,
// a shaping thread dispatches again every few milliseconds (the load falls with time, not only with
// events). Call completions run on gRPC threads, the supervisor's events (workers up and down) on
// the supervisor thread; both may finish work, so `done` callbacks run on either. No gRPC call, no
// supervisor call and no `done` callback runs under the pool's lock.
class WorkerPool {
 public:
  // Workers are `rankd worker` processes.
  WorkerPool(const ServeConfig& config, std::vector<WorkerSpec> specs, ServerMetrics* metrics);
  // Workers are whatever `launcher` starts (tests: in-process fake workers).
  WorkerPool(const ServeConfig& config, std::vector<WorkerSpec> specs, ServerMetrics* metrics,
             std::unique_ptr<WorkerLauncher> launcher);
  ~WorkerPool();  // Shutdown()

  // Makes the socket directory and starts the supervisor, which spawns the workers.
  absl::Status Start();

  // Admits all of `works` or none. UNAVAILABLE when no worker is up or the pool is draining,
  // RESOURCE_EXHAUSTED when the queue has no room (or, for interactive work, the work ahead would
  // take longer than server.max_queue_wait_s), DEADLINE_EXCEEDED when the deadline cannot be met:
  // the estimated compute of the work ahead (queued, and held by the workers) spread over the
  // workers up, plus the works' own, exceeds the time left (CostEstimator; while the workers are
  // idle a call refused so may run as its probe). After OK, every work completes through its
  // `done`.
  absl::Status Submit(const std::vector<std::shared_ptr<Work>>& works);

  // The caller went away: queued work completes with CANCELLED at once, running work once its
  // worker call is cancelled.
  void Cancel(const std::shared_ptr<Work>& work);

  // Health readiness: workers up >= min_ready and not stopping (ReportNotReady, StartDrain).
  // `fn` runs on the supervisor thread (and in ReportNotReady, StartDrain and Shutdown) whenever
  // that changes, with the new value.
  void SetReadinessCallback(std::function<void(bool)> fn);
  bool ready() const;
  // WorkerSupervisor::WorkerPids: (index, pid) of each worker process that runs.
  std::vector<std::pair<int, pid_t>> WorkerPids() const { return supervisor_.WorkerPids(); }
  // WorkerSupervisor::start_failure: set once the workers failed to start and will not be
  // started again.
  absl::Status start_failure() const { return supervisor_.start_failure(); }

  // Reports not ready from now on (health NOT_SERVING, /readyz 503) while still admitting work:
  // the start of a stop, so that balancers take this server out before StartDrain refuses calls.
  void ReportNotReady();
  // Refuses new work from now on (and reports not ready); queued and running work continues.
  void StartDrain();
  // Waits until no work is queued or running, or `timeout` passes; true when idle.
  bool WaitIdle(std::chrono::milliseconds timeout);
  // Fails queued work and cancels running work (UNAVAILABLE), waits for every outstanding call,
  // stops the workers (SIGTERM, then SIGKILL after workers.stop_timeout_s) and removes the
  // sockets. Idempotent.
  void Shutdown();

 private:
  // The pool's view of one worker, from the supervisor's events and its own calls.
  struct Slot {
    bool up = false;
    uint64_t incarnation = 0;  // of the worker up, or of the last one that was
    std::shared_ptr<rankd::worker::v1::Worker::Stub> stub;  // while up
    std::vector<std::shared_ptr<Work>> running;
    bool suspect = false;  // a call failed at the transport: no new work until a ping answers
    Gauge* calls_gauge = nullptr;  // rankd_worker_calls_in_flight{worker}
    Gauge* up_gauge = nullptr;     // rankd_worker_up{worker}
  };

  // Deferred effects of a locked section, run after the lock is released.
  struct Actions {
    struct Call {
      std::shared_ptr<Work> work;
      std::shared_ptr<rankd::worker::v1::Worker::Stub> stub;
      int slot;
      uint64_t incarnation;
    };
    struct Failure {  // for WorkerSupervisor::ReportFailure
      int slot;
      uint64_t incarnation;
      bool kill;
      std::string reason;
    };
    std::vector<Call> calls;
    std::vector<std::pair<std::shared_ptr<Work>, absl::Status>> finished;
    std::vector<std::shared_ptr<grpc::ClientContext>> cancels;
    std::vector<Failure> failures;
  };
  void Run(Actions& actions);

  void OnWorkerEvent(const WorkerEvent& event);
  void PublishReadiness();
  void StartCall(const Actions::Call& call);
  void OnCallDone(const std::shared_ptr<Work>& work, int index, uint64_t incarnation,
                  const grpc::Status& status);

  void ShapingLoop();

  // Locked helpers.
  void DispatchLocked(Actions& actions);
  // Dispatches the works of `queue` for which `eligible` holds, in order, while a worker has room
  // for work of their priority; expired work on the way fails DEADLINE_EXCEEDED.
  template <typename Eligible>
  void DispatchQueueLocked(std::deque<std::shared_ptr<Work>>& queue, Eligible eligible,
                           WallTime wall_now, SteadyTime now, Actions& actions);
  // The interactive load that shaping.busy_threshold is compared with: the larger of the share of
  // workers up busy with interactive calls (running or queued, per worker up, at most 1) and its
  // moving average (time constant kLoadTimeConstant). Advances the average to `now`.
  double InteractiveLoadLocked(SteadyTime now);
  void FinishLocked(const std::shared_ptr<Work>& work, absl::Status status, Actions& actions);
  void FailQueuedLocked(const absl::Status& status, Actions& actions);
  int WorkersUpLocked() const;
  bool ReadyLocked() const;
  void UpdateGaugesLocked();

  const ServeConfig config_;
  ServerMetrics* const metrics_;

  mutable std::mutex mu_;
  std::condition_variable cv_;  // idle and outstanding-call waits
  std::vector<Slot> slots_;
  std::deque<std::shared_ptr<Work>> interactive_queue_, batch_queue_;
  int running_ = 0;
  int outstanding_ = 0;      // worker calls whose callbacks have not run yet
  int round_robin_ = 0;      // where the least-loaded search starts, to spread ties
  CostEstimator cost_;       // deadline admission's estimate of each work's compute
  double load_share_ = 0;    // interactive share of the workers since load_at_
  double load_average_ = 0;  // its moving average, at load_at_
  SteadyTime load_at_ = std::chrono::steady_clock::now();
  std::condition_variable shaping_cv_;  // batch work queued, or stopping
  std::thread shaping_;
  bool unready_ = false;  // ReportNotReady: not ready, still admitting
  bool draining_ = false;
  bool stopping_ = false;  // Shutdown: no new calls
  bool published_ready_ = false;
  std::mutex publish_mu_;  // orders readiness callbacks
  std::function<void(bool)> on_readiness_;
  bool started_ = false;
  bool shut_down_ = false;
  // Last: its events reach the members above until it has stopped.
  WorkerSupervisor supervisor_;
};

}  // namespace rankd::server

#endif  // RANKD_SERVER_WORKER_POOL_H_
