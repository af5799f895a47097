#include "rankd/server/worker_pool.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "rankd/common/logging.h"
#include "rankd/server/process.h"
#include "rankd/worker/protocol.h"
#include "spdlog/spdlog.h"

namespace rankd::server {
namespace {

using Clock = std::chrono::steady_clock;
using WallClock = std::chrono::system_clock;
using rankd::worker::v1::Worker;

// How often the supervisor reaps, spawns and schedules pings when nothing wakes it earlier.
constexpr auto kTick = std::chrono::milliseconds(20);
// Ping retry interval while a started worker's socket exists but does not answer yet.
constexpr auto kStartupPingRetry = std::chrono::milliseconds(100);
// A worker that stayed up this long has its crash count (and restart backoff) reset.
constexpr auto kStableUptime = std::chrono::seconds(60);
// Weight of the newest measurement in the moving average of seconds per item.
constexpr double kCostSmoothing = 0.2;

double Seconds(std::chrono::nanoseconds d) { return std::chrono::duration<double>(d).count(); }

std::chrono::nanoseconds FromSeconds(double s) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double>(s));
}

}  // namespace

Work::Work(const rankd::v1::ScoreRequest* request, int begin, int end, bool interactive,
           WallTime deadline, Carry carry, DoneFn done)
    : carry_(carry), interactive_(interactive), deadline_(deadline), done_(std::move(done)) {
  // The wrapper points at the caller's request (or items) for serialization and never owns or
  // changes them; the destructor detaches them again.
  if (carry == Carry::kWholeRequest) {
    item_.unsafe_arena_set_allocated_request(const_cast<rankd::v1::ScoreRequest*>(request));
    item_.set_begin(begin);
    item_.set_end(end);
    return;
  }
  // What PrepareWorkItem (src/worker/worker.cc) reads of the request, besides the items.
  rankd::v1::ScoreRequest* own = item_.mutable_request();
  own->set_query(request->query());
  *own->mutable_query_ids() = request->query_ids();
  own->set_apply_sigmoid(request->apply_sigmoid());
  own->set_priority(request->priority());
  own->mutable_items()->Reserve(end - begin);
  for (int i = begin; i < end; ++i) {
    own->mutable_items()->UnsafeArenaAddAllocated(const_cast<rankd::v1::Item*>(&request->items(i)));
  }
  item_offset_ = begin;
  item_.set_begin(0);
  item_.set_end(end - begin);
}

Work::~Work() {
  if (carry_ == Carry::kWholeRequest) {
    item_.unsafe_arena_release_request();
  } else {
    auto* items = item_.mutable_request()->mutable_items();
    items->UnsafeArenaExtractSubrange(0, items->size(), nullptr);
  }
}

WorkerPool::WorkerPool(const ServeConfig& config, std::vector<WorkerSpec> specs,
                       ServerMetrics* metrics)
    : config_(config),
      metrics_(metrics),
      seconds_per_item_(config.server.initial_seconds_per_item) {
  slots_.resize(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    slots_[i].spec = std::move(specs[i]);
    slots_[i].calls_gauge = metrics_->WorkerCallsInFlight(static_cast<int>(i));
    slots_[i].up_gauge = metrics_->WorkerUp(static_cast<int>(i));
  }
  metrics_->workers_configured->Set(static_cast<double>(slots_.size()));
}

WorkerPool::~WorkerPool() { Shutdown(); }

absl::Status WorkerPool::Start() {
  namespace fs = std::filesystem;
  if (config_.workers.socket_dir.empty()) {
    char dir[] = "/tmp/rankd-XXXXXX";
    if (mkdtemp(dir) == nullptr) {
      return absl::InternalError(
          absl::StrCat("mkdtemp(/tmp/rankd-XXXXXX): ", std::strerror(errno)));
    }
    socket_dir_ = dir;
    own_socket_dir_ = true;
  } else {
    socket_dir_ = config_.workers.socket_dir;
    std::error_code ec;
    fs::create_directories(socket_dir_, ec);
    if (ec) {
      return absl::InternalError(
          absl::StrCat("workers.socket_dir ", socket_dir_, ": ", ec.message()));
    }
  }
  for (size_t i = 0; i < slots_.size(); ++i) {
    slots_[i].socket_path = absl::StrCat(socket_dir_, "/worker-", i, ".sock");
    if (slots_[i].socket_path.size() >= sizeof(sockaddr_un::sun_path)) {
      return absl::InvalidArgumentError(absl::StrCat("workers.socket_dir: socket path ",
                                                     slots_[i].socket_path, " is longer than ",
                                                     sizeof(sockaddr_un::sun_path) - 1, " bytes"));
    }
  }
  // The workers' start-up config: the front end's finalized config, one file for all of them
  // (owner-only: later configs may carry secrets).
  config_file_ = absl::StrCat(socket_dir_, "/config.yaml");
  {
    std::ofstream out(config_file_, std::ios::trunc);
    out << ServeConfigToYaml(config_);
    if (!out) return absl::InternalError(absl::StrCat("cannot write ", config_file_));
  }
  fs::permissions(config_file_, fs::perms::owner_read | fs::perms::owner_write);
  spdlog::info("worker sockets and config in {}", socket_dir_);
  started_ = true;
  supervisor_ = std::thread(&WorkerPool::SupervisorLoop, this);
  return absl::OkStatus();
}

void WorkerPool::SetReadinessCallback(std::function<void(bool)> fn) {
  std::lock_guard<std::mutex> lock(publish_mu_);
  on_readiness_ = std::move(fn);
}

bool WorkerPool::ready() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ReadyLocked();
}

int WorkerPool::WorkersUpLocked() const {
  int up = 0;
  for (const Slot& s : slots_) up += s.state == Slot::State::kUp;
  return up;
}

bool WorkerPool::ReadyLocked() const {
  const int needed = std::min<int>(config_.workers.min_ready, static_cast<int>(slots_.size()));
  return !draining_ && !stopping_ && WorkersUpLocked() >= needed;
}

void WorkerPool::PublishReadiness() {
  std::lock_guard<std::mutex> publish(publish_mu_);
  bool ready;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ready = ReadyLocked();
    if (ready == published_ready_) return;
    published_ready_ = ready;
  }
  spdlog::info("readiness: {}", ready ? "SERVING" : "NOT_SERVING");
  metrics_->ready->Set(ready ? 1 : 0);
  if (on_readiness_) on_readiness_(ready);
}

void WorkerPool::UpdateGaugesLocked() {
  metrics_->queue_depth->Set(static_cast<double>(interactive_queue_.size() + batch_queue_.size()));
  metrics_->running->Set(running_);
  metrics_->workers_up->Set(WorkersUpLocked());
  for (const Slot& slot : slots_) {
    slot.calls_gauge->Set(static_cast<double>(slot.running.size()));
    slot.up_gauge->Set(slot.state == Slot::State::kUp ? 1 : 0);
  }
}

std::shared_ptr<Worker::Stub> WorkerPool::MakeStub(const std::string& socket_path) const {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  // Each incarnation gets its own connection, and reconnects quickly while it starts.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 50);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 50);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 500);
  auto channel = grpc::CreateCustomChannel(absl::StrCat("unix:", socket_path),
                                           grpc::InsecureChannelCredentials(), args);
  return std::shared_ptr<Worker::Stub>(Worker::NewStub(channel));
}

// ---- admission and dispatch -----------------------------------------------------------------

absl::Status WorkerPool::Submit(const std::vector<std::shared_ptr<Work>>& works) {
  Actions actions;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (draining_ || stopping_) {
      return absl::UnavailableError("the server is draining (shutting down); retry elsewhere");
    }
    const int up = WorkersUpLocked();
    if (up == 0) {
      return absl::UnavailableError(
          absl::StrCat("not ready: none of the ", slots_.size(), " workers is up"));
    }
    int free_slots = 0;
    for (const Slot& s : slots_) {
      if (s.state == Slot::State::kUp && !s.suspect) {
        free_slots +=
            std::max(0, config_.workers.max_inflight - static_cast<int>(s.running.size()));
      }
    }
    const int queued = static_cast<int>(interactive_queue_.size() + batch_queue_.size());
    const int n = static_cast<int>(works.size());
    if (queued + std::max(0, n - free_slots) > config_.server.queue_size) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "queue full: ", queued, " waiting for a worker (queue_size=", config_.server.queue_size,
          "); retry later"));
    }
    if (!works.empty() && works[0]->deadline_ != WallTime::max()) {
      int64_t items = 0;
      for (const auto& w : works) items += w->num_items();
      // Ahead of it: the front end's queue and the calls the workers hold (with max_inflight > 1
      // they queue inside the workers too).
      int64_t ahead = queued_items_;
      for (const Slot& s : slots_) {
        for (const auto& w : s.running) ahead += w->num_items();
      }
      const double left = Seconds(works[0]->deadline_ - WallClock::now());
      const double needed = seconds_per_item_ * (static_cast<double>(ahead) / up +
                                                 static_cast<double>(items) / std::min(n, up));
      if (needed > left) {
        return absl::DeadlineExceededError(absl::StrFormat(
            "deadline cannot be met: %.0f ms left, about %.0f ms needed (%d items queued ahead, "
            "%d workers up)",
            1e3 * left, 1e3 * needed, ahead, up));
      }
    }
    const SteadyTime now = Clock::now();
    for (const auto& w : works) {
      w->state_ = Work::State::kQueued;
      w->enqueued_at_ = now;
      (w->interactive() ? interactive_queue_ : batch_queue_).push_back(w);
      queued_items_ += w->num_items();
    }
    DispatchLocked(actions);
    UpdateGaugesLocked();
  }
  Run(actions);
  return absl::OkStatus();
}

void WorkerPool::DispatchLocked(Actions& actions) {
  if (stopping_) return;
  const int max_inflight = config_.workers.max_inflight;
  const int n = static_cast<int>(slots_.size());
  // The least-loaded usable worker for `w`, or -1. A retry avoids the worker that failed it.
  auto pick = [&](const Work& w, bool* any_free) {
    int best = -1;
    *any_free = false;
    for (int k = 1; k <= n; ++k) {
      const int i = (round_robin_ + k) % n;
      const Slot& s = slots_[i];
      if (s.state != Slot::State::kUp || s.suspect ||
          static_cast<int>(s.running.size()) >= max_inflight) {
        continue;
      }
      *any_free = true;
      if (w.attempts_ > 0 && s.incarnation == w.incarnation_) continue;
      if (best < 0 || s.running.size() < slots_[best].running.size()) best = i;
    }
    return best;
  };
  const WallTime wall_now = WallClock::now();
  const SteadyTime now = Clock::now();
  for (auto* queue : {&interactive_queue_, &batch_queue_}) {
    for (auto it = queue->begin(); it != queue->end();) {
      std::shared_ptr<Work> w = *it;
      if (wall_now >= w->deadline_) {
        it = queue->erase(it);
        queued_items_ -= w->num_items();
        FinishLocked(w,
                     grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                                  absl::StrFormat("deadline exceeded after %.0f ms in the queue",
                                                  1e3 * Seconds(now - w->enqueued_at_))),
                     actions);
        continue;
      }
      bool any_free = false;
      const int best = pick(*w, &any_free);
      if (!any_free) return;
      if (best < 0) {
        ++it;
        continue;
      }
      it = queue->erase(it);
      queued_items_ -= w->num_items();
      round_robin_ = best;
      Slot& slot = slots_[best];
      slot.running.push_back(w);
      w->state_ = Work::State::kRunning;
      w->incarnation_ = slot.incarnation;
      if (++w->attempts_ == 1) {
        w->queue_seconds_ = Seconds(now - w->enqueued_at_);
        metrics_->queue_seconds->Observe(w->queue_seconds_);
      }
      w->result_.Clear();
      auto context = std::make_shared<grpc::ClientContext>();
      context->set_deadline(
          std::min(w->deadline_, wall_now + std::chrono::duration_cast<WallClock::duration>(
                                                FromSeconds(config_.workers.call_timeout_s))));
      w->context_ = context;
      ++running_;
      ++outstanding_;
      actions.calls.push_back({w, slot.stub, best, slot.incarnation});
    }
  }
}

void WorkerPool::StartCall(const Actions::Call& call) {
  Work* w = call.work.get();
  call.stub->async()->Score(
      w->context_.get(), &w->item_, &w->result_,
      [this, work = call.work, slot = call.slot, incarnation = call.incarnation](grpc::Status s) {
        OnCallDone(work, slot, incarnation, s);
      });
}

void WorkerPool::OnCallDone(const std::shared_ptr<Work>& work, int index, uint64_t incarnation,
                            const grpc::Status& status) {
  Actions actions;
  {
    std::lock_guard<std::mutex> lock(mu_);
    --running_;
    --outstanding_;
    Slot& slot = slots_[index];
    if (slot.incarnation == incarnation) {
      auto it = std::find(slot.running.begin(), slot.running.end(), work);
      if (it != slot.running.end()) slot.running.erase(it);
    }
    const grpc::StatusCode code = status.error_code();
    const auto& result = work->result_;
    if (status.ok() && result.scores_size() != work->num_items()) {
      FinishLocked(work,
                   grpc::Status(grpc::StatusCode::INTERNAL,
                                absl::StrCat("worker ", index, " returned ", result.scores_size(),
                                             " scores for ", work->num_items(), " items")),
                   actions);
    } else if (status.ok()) {
      if (work->num_items() > 0) {
        seconds_per_item_ +=
            kCostSmoothing * (result.compute_seconds() / work->num_items() - seconds_per_item_);
      }
      metrics_->compute_seconds->Observe(result.compute_seconds());
      metrics_->batch_items->Observe(work->num_items());
      metrics_->batch_tokens->Observe(static_cast<double>(result.item_tokens()));
      metrics_->worker_queue_seconds->Observe(result.wait_seconds());
      for (int p = 0; p < result.pass_requests_size(); ++p) {  // each pass once
        metrics_->worker_pass_requests->Observe(result.pass_requests(p));
        metrics_->worker_pass_items->Observe(p < result.pass_items_size() ? result.pass_items(p)
                                                                          : 0);
      }
      metrics_->items_scored->Add(work->num_items());
      metrics_->prefix_tokens->Add(result.prefix_tokens());
      metrics_->item_tokens->Add(static_cast<double>(result.item_tokens()));
      FinishLocked(work, grpc::Status::OK, actions);
    } else if (work->cancelled_) {
      FinishLocked(work, work->cancel_status_, actions);
    } else if (WallClock::now() >= work->deadline_) {
      FinishLocked(
          work,
          grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "deadline exceeded while scoring"),
          actions);
    } else if (code == grpc::StatusCode::UNAVAILABLE || code == grpc::StatusCode::CANCELLED ||
               code == grpc::StatusCode::DEADLINE_EXCEEDED) {
      // The worker died (its connection broke, or the supervisor cancelled the call after reaping
      // it) or hung (the call outlived workers.call_timeout_s).
      if (slot.incarnation == incarnation) {
        if (code == grpc::StatusCode::DEADLINE_EXCEEDED) {
          KillLocked(slot, absl::StrCat("a call took longer than workers.call_timeout_s=",
                                        config_.workers.call_timeout_s, " s"));
        } else if (code == grpc::StatusCode::UNAVAILABLE && slot.state == Slot::State::kUp) {
          slot.suspect = true;  // until a ping answers (or the supervisor reaps it)
          wake_ = true;
          cv_.notify_all();
        }
      }
      bool other_up = false;
      for (const Slot& s : slots_) {
        other_up |= s.state == Slot::State::kUp && s.incarnation != incarnation;
      }
      if (!stopping_ && work->attempts_ < 2 && other_up) {
        spdlog::warn("worker {} failed a call ({}: {}); sending its items again to another worker",
                     index, absl::StatusCodeToString(static_cast<absl::StatusCode>(code)),
                     status.error_message());
        metrics_->retries->Add();
        work->state_ = Work::State::kQueued;
        (work->interactive() ? interactive_queue_ : batch_queue_).push_front(work);
        queued_items_ += work->num_items();
      } else {
        FinishLocked(
            work,
            grpc::Status(
                grpc::StatusCode::UNAVAILABLE,
                absl::StrCat("worker ", index, " failed (", status.error_message(), ") and ",
                             work->attempts_ >= 2 ? "this was the retry" : "no other worker is up",
                             "; retry the request")),
            actions);
      }
    } else {
      // The worker's own verdict, e.g. a token limit. It names items by their index in the items
      // it was sent, which start at item_offset_ of the caller's request.
      FinishLocked(
          work,
          grpc::Status(status.error_code(),
                       rankd::worker::ShiftItemIndex(status.error_message(), work->item_offset_),
                       status.error_details()),
          actions);
    }
    DispatchLocked(actions);
    UpdateGaugesLocked();
    cv_.notify_all();
  }
  Run(actions);
}

void WorkerPool::Cancel(const std::shared_ptr<Work>& work) {
  Actions actions;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const grpc::Status cancelled(grpc::StatusCode::CANCELLED, "cancelled by the client");
    if (work->state_ == Work::State::kQueued) {
      for (auto* queue : {&interactive_queue_, &batch_queue_}) {
        auto it = std::find(queue->begin(), queue->end(), work);
        if (it != queue->end()) queue->erase(it);
      }
      queued_items_ -= work->num_items();
      FinishLocked(work, cancelled, actions);
    } else if (work->state_ == Work::State::kRunning && !work->cancelled_) {
      work->cancelled_ = true;
      work->cancel_status_ = cancelled;
      if (work->context_) actions.cancels.push_back(work->context_);
    }
    UpdateGaugesLocked();
    cv_.notify_all();
  }
  Run(actions);
}

void WorkerPool::FinishLocked(const std::shared_ptr<Work>& work, grpc::Status status,
                              Actions& actions) {
  work->state_ = Work::State::kDone;
  actions.finished.emplace_back(work, std::move(status));
}

void WorkerPool::FailQueuedLocked(const grpc::Status& status, Actions& actions) {
  for (auto* queue : {&interactive_queue_, &batch_queue_}) {
    for (auto& w : *queue) FinishLocked(w, status, actions);
    queue->clear();
  }
  queued_items_ = 0;
}

void WorkerPool::Run(Actions& actions) {
  // Answers first: a finished call is not kept waiting behind the next one's start.
  for (auto& [work, status] : actions.finished) work->done_(status, *work);
  for (auto& context : actions.cancels) context->TryCancel();
  for (auto& [slot, incarnation] : actions.pings) StartPing(slot, incarnation);
  for (auto& call : actions.calls) StartCall(call);
}

// ---- supervision ----------------------------------------------------------------------------

void WorkerPool::KillLocked(Slot& slot, absl::string_view reason) {
  if (slot.pid <= 0 || slot.kill_sent) return;
  spdlog::warn("worker {} (pid {}) {}: killing it", slot.spec.index, slot.pid, reason);
  ::kill(slot.pid, SIGKILL);
  slot.kill_sent = true;
}

void WorkerPool::Reap(int index, int wait_status, Actions& actions) {
  Slot& slot = slots_[index];
  const SteadyTime now = Clock::now();
  if (stopping_) {
    spdlog::info("worker {} (pid {}) {}", index, slot.pid, DescribeWaitStatus(wait_status));
  } else {
    spdlog::warn("worker {} (pid {}) {}", index, slot.pid, DescribeWaitStatus(wait_status));
  }
  metrics_->worker_exits->Add();
  const bool was_stable = slot.state == Slot::State::kUp && now - slot.up_since >= kStableUptime;
  slot.crashes_in_a_row = was_stable ? 1 : slot.crashes_in_a_row + 1;
  const double backoff =
      std::min(config_.workers.restart_backoff_max_s,
               config_.workers.restart_backoff_s * std::pow(2.0, slot.crashes_in_a_row - 1));
  slot.next_spawn = now + FromSeconds(backoff);
  slot.state = Slot::State::kDown;
  slot.pid = -1;
  slot.stub.reset();
  slot.suspect = false;
  for (auto& w : slot.running) {
    if (w->context_) actions.cancels.push_back(w->context_);
  }
  slot.running.clear();
  if (slot.ping_context) actions.cancels.push_back(slot.ping_context);
  if (!stopping_) {
    spdlog::info("worker {}: restart in {:.2f} s", index, backoff);
  }
}

void WorkerPool::Spawn(int index) {
  const Slot& fixed = slots_[index];  // spec and socket_path do not change after Start
  ::unlink(fixed.socket_path.c_str());
  const auto argv = WorkerCommandLine(config_file_, fixed.spec, fixed.socket_path);
  const auto env = WorkerEnvironment(CurrentEnvironment(), config_, fixed.spec);
  absl::StatusOr<pid_t> pid = SpawnSelf(argv, env, fixed.spec.cpus);
  std::lock_guard<std::mutex> lock(mu_);
  Slot& slot = slots_[index];
  const SteadyTime now = Clock::now();
  if (!pid.ok()) {
    spdlog::error("worker {}: {}", index, pid.status().message());
    slot.state = Slot::State::kDown;
    ++slot.crashes_in_a_row;
    slot.next_spawn = now + FromSeconds(config_.workers.restart_backoff_max_s);
    return;
  }
  slot.state = Slot::State::kStarting;
  slot.pid = *pid;
  slot.incarnation = next_incarnation_++;
  slot.spawned_at = now;
  slot.next_ping = now;
  slot.stub.reset();
  slot.suspect = false;
  slot.ping_in_flight = false;
  slot.kill_sent = false;
  if (slot.spawns++ > 0) metrics_->worker_restarts->Add();
  spdlog::info(
      "worker {} started: pid {}{}{}", index, slot.pid,
      slot.spec.gpu >= 0 ? absl::StrCat(", gpu ", slot.spec.gpu) : "",
      slot.spec.cpus.empty() ? "" : absl::StrCat(", cpus ", absl::StrJoin(slot.spec.cpus, ",")));
}

void WorkerPool::StartPing(int index, uint64_t incarnation) {
  struct PingCall {
    grpc::ClientContext context;
    rankd::worker::v1::PingRequest request;
    rankd::worker::v1::PingResponse response;
  };
  // The context is shared with the slot so that Reap and Shutdown can cancel it.
  auto call = std::make_shared<PingCall>();
  std::shared_ptr<grpc::ClientContext> context(call, &call->context);
  std::shared_ptr<Worker::Stub> stub;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Slot& slot = slots_[index];
    if (slot.incarnation != incarnation || !slot.stub || stopping_) {
      slot.ping_in_flight = false;
      return;
    }
    stub = slot.stub;
    slot.ping_context = context;
    ++outstanding_;
  }
  call->context.set_deadline(WallClock::now() + std::chrono::duration_cast<WallClock::duration>(
                                                    FromSeconds(config_.workers.ping_timeout_s)));
  stub->async()->Ping(
      &call->context, &call->request, &call->response,
      [this, call, index, incarnation](grpc::Status s) { OnPingDone(index, incarnation, s); });
}

void WorkerPool::OnPingDone(int index, uint64_t incarnation, const grpc::Status& status) {
  Actions actions;
  {
    std::lock_guard<std::mutex> lock(mu_);
    --outstanding_;
    cv_.notify_all();
    Slot& slot = slots_[index];
    if (slot.incarnation != incarnation ||
        (slot.state != Slot::State::kStarting && slot.state != Slot::State::kUp)) {
      return;  // an earlier incarnation's ping
    }
    slot.ping_in_flight = false;
    slot.ping_context.reset();
    const SteadyTime now = Clock::now();
    if (status.ok()) {
      if (slot.state == Slot::State::kStarting) {
        slot.state = Slot::State::kUp;
        slot.up_since = now;
        spdlog::info("worker {} (pid {}) is up after {:.2f} s", index, slot.pid,
                     Seconds(now - slot.spawned_at));
      }
      slot.suspect = false;
      slot.next_ping = now + FromSeconds(config_.workers.ping_interval_s);
      DispatchLocked(actions);
      UpdateGaugesLocked();
    } else if (slot.state == Slot::State::kStarting) {
      slot.next_ping = now + kStartupPingRetry;
    } else {
      KillLocked(slot,
                 absl::StrCat("did not answer a ping within workers.ping_timeout_s=",
                              config_.workers.ping_timeout_s, " s (", status.error_message(), ")"));
    }
  }
  Run(actions);
}

void WorkerPool::SupervisorLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_supervisor_) {
    Actions actions;
    const SteadyTime now = Clock::now();
    for (size_t i = 0; i < slots_.size(); ++i) {
      Slot& slot = slots_[i];
      if (slot.pid <= 0) continue;
      int wait_status = 0;
      if (::waitpid(slot.pid, &wait_status, WNOHANG) == slot.pid) {
        Reap(static_cast<int>(i), wait_status, actions);
      }
    }
    std::vector<int> to_spawn;
    for (size_t i = 0; i < slots_.size(); ++i) {
      Slot& slot = slots_[i];
      switch (slot.state) {
        case Slot::State::kDown:
          if (!stopping_ && now >= slot.next_spawn) {
            slot.state = Slot::State::kSpawning;
            to_spawn.push_back(static_cast<int>(i));
          }
          break;
        case Slot::State::kSpawning:
          break;
        case Slot::State::kStarting:
          if (now - slot.spawned_at > FromSeconds(config_.workers.startup_timeout_s)) {
            KillLocked(slot, absl::StrCat("did not come up within workers.startup_timeout_s=",
                                          config_.workers.startup_timeout_s, " s"));
            break;
          }
          // The worker binds its socket once its engine is loaded and warm.
          if (!slot.stub && ::access(slot.socket_path.c_str(), F_OK) == 0) {
            slot.stub = MakeStub(slot.socket_path);
          }
          [[fallthrough]];
        case Slot::State::kUp:
          if (slot.stub && !slot.ping_in_flight && !stopping_ &&
              (now >= slot.next_ping || slot.suspect)) {
            slot.ping_in_flight = true;
            actions.pings.emplace_back(static_cast<int>(i), slot.incarnation);
          }
          break;
      }
    }
    if (WorkersUpLocked() == 0) {
      FailQueuedLocked(
          grpc::Status(grpc::StatusCode::UNAVAILABLE, "no worker is up; retry the request"),
          actions);
    }
    UpdateGaugesLocked();
    lock.unlock();
    for (int i : to_spawn) Spawn(i);
    PublishReadiness();
    Run(actions);
    lock.lock();
    cv_.wait_for(lock, kTick, [this] { return stop_supervisor_ || wake_; });
    wake_ = false;
  }
  lock.unlock();
  StopWorkers();
}

void WorkerPool::StopWorkers() {
  std::vector<std::pair<int, pid_t>> alive;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < slots_.size(); ++i) {
      if (slots_[i].pid > 0) alive.emplace_back(static_cast<int>(i), slots_[i].pid);
    }
  }
  for (auto [index, pid] : alive) ::kill(pid, SIGTERM);
  const SteadyTime deadline = Clock::now() + FromSeconds(config_.workers.stop_timeout_s);
  while (!alive.empty()) {
    for (auto it = alive.begin(); it != alive.end();) {
      int wait_status = 0;
      if (::waitpid(it->second, &wait_status, WNOHANG) == it->second) {
        spdlog::info("worker {} (pid {}) stopped: {}", it->first, it->second,
                     DescribeWaitStatus(wait_status));
        it = alive.erase(it);
      } else {
        ++it;
      }
    }
    if (alive.empty()) break;
    if (Clock::now() >= deadline) {
      for (auto [index, pid] : alive) {
        spdlog::warn("worker {} (pid {}) did not stop within workers.stop_timeout_s: killing it",
                     index, pid);
        ::kill(pid, SIGKILL);
        int wait_status = 0;
        ::waitpid(pid, &wait_status, 0);
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (Slot& slot : slots_) {
    slot.state = Slot::State::kDown;
    slot.pid = -1;
    slot.stub.reset();
  }
  UpdateGaugesLocked();
}

// ---- drain and shutdown ---------------------------------------------------------------------

void WorkerPool::StartDrain() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    draining_ = true;
  }
  PublishReadiness();
}

bool WorkerPool::WaitIdle(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, timeout, [this] {
    return interactive_queue_.empty() && batch_queue_.empty() && running_ == 0;
  });
}

void WorkerPool::Shutdown() {
  Actions actions;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!started_ || shut_down_) return;
    shut_down_ = true;
    stopping_ = true;
    const grpc::Status stopping(grpc::StatusCode::UNAVAILABLE,
                                "the server is shutting down; retry elsewhere");
    FailQueuedLocked(stopping, actions);
    for (Slot& slot : slots_) {
      for (auto& w : slot.running) {
        w->cancelled_ = true;
        w->cancel_status_ = stopping;
        if (w->context_) actions.cancels.push_back(w->context_);
      }
      if (slot.ping_context) actions.cancels.push_back(slot.ping_context);
    }
  }
  Run(actions);
  PublishReadiness();
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return outstanding_ == 0; });
    stop_supervisor_ = true;
  }
  cv_.notify_all();
  supervisor_.join();
  std::error_code ec;
  for (const Slot& slot : slots_) std::filesystem::remove(slot.socket_path, ec);
  std::filesystem::remove(config_file_, ec);
  if (own_socket_dir_) std::filesystem::remove(socket_dir_, ec);
}

}  // namespace rankd::server
