#include "rankd/server/pool/worker_pool.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "rankd/common/field_error.h"
#include "rankd/common/grpc_status.h"
#include "rankd/common/status.h"
#include "rankd/protocol/protocol.h"
#include "spdlog/spdlog.h"

namespace rankd::server {
namespace {

using Clock = std::chrono::steady_clock;
using WallClock = std::chrono::system_clock;
// Time constant of the interactive load's moving average (traffic shaping).
constexpr std::chrono::seconds kLoadTimeConstant(1);

double Seconds(std::chrono::nanoseconds d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

Work::Work(const rankd::v1::ScoreRequest* request, int begin, int end, bool interactive,
           WallTime deadline, Carry carry, DoneFn done)
    : carry_(carry), interactive_(interactive), deadline_(deadline), done_(std::move(done)) {
  if (carry == Carry::kOwnItems) {
    for (int i = begin; i < end; ++i) items_.push_back(i);
    CarryOwnItems(*request);
  } else {
    // The wrapper points at the caller's request for serialization and never owns or changes it;
    // the destructor detaches it again.
    item_.unsafe_arena_set_allocated_request(const_cast<rankd::v1::ScoreRequest*>(request));
    item_.set_begin(begin);
    item_.set_end(end);
  }
  CountInputs();
}

Work::Work(const rankd::v1::ScoreRequest* request, std::vector<int> items, bool interactive,
           WallTime deadline, DoneFn done)
    : carry_(Carry::kOwnItems),
      items_(std::move(items)),
      interactive_(interactive),
      deadline_(deadline),
      done_(std::move(done)) {
  CarryOwnItems(*request);
  CountInputs();
}

void Work::CountInputs() {
  const rankd::v1::ScoreRequest& request = item_.request();
  if (request.query_ids_size() > 0) {
    inputs_.prefix_known_tokens = request.query_ids_size();
  } else {
    inputs_.prefix_text_bytes = static_cast<int64_t>(request.query().size());
  }
  for (int i = item_.begin(); i < item_.end(); ++i) {
    const rankd::v1::Item& item = request.items(i);
    switch (item.content_case()) {
      case rankd::v1::Item::kText:
        inputs_.item_text_bytes += static_cast<int64_t>(item.text().size());
        break;
      case rankd::v1::Item::kTokenIds:
        inputs_.item_known_tokens += item.token_ids().ids_size();
        break;
      case rankd::v1::Item::kEmbedding:
        inputs_.item_known_tokens += item.embedding().rows();
        break;
      case rankd::v1::Item::CONTENT_NOT_SET:
        break;
    }
  }
  inputs_.items = num_items();
}

absl::Status Work::CallerStatus(const grpc::Status& worker_status) const {
  absl::Status status = rankd::protocol::FromWorkerStatus(worker_status);
  if (!items_.empty()) {
    status = MapItem(status, [this](int j) {
      return j >= 0 && j < static_cast<int>(items_.size()) ? items_[j] : j;
    });
  }
  return status;
}

void Work::CarryOwnItems(const rankd::v1::ScoreRequest& request) {
  // What PrepareWorkItem (src/worker/worker.cc) reads of the request besides the items, and the
  // caller's items items_, pointed at, not copied (the destructor detaches them again).
  rankd::v1::ScoreRequest* own = item_.mutable_request();
  own->set_query(request.query());
  *own->mutable_query_ids() = request.query_ids();
  own->set_apply_sigmoid(request.apply_sigmoid());
  own->set_priority(request.priority());
  own->set_truncate(request.truncate());
  own->mutable_items()->Reserve(static_cast<int>(items_.size()));
  for (int i : items_) {
    own->mutable_items()->UnsafeArenaAddAllocated(const_cast<rankd::v1::Item*>(&request.items(i)));
  }
  item_.set_begin(0);
  item_.set_end(static_cast<int>(items_.size()));
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
    : WorkerPool(config, std::move(specs), metrics, std::make_unique<ProcessLauncher>(config)) {}

WorkerPool::WorkerPool(const ServeConfig& config, std::vector<WorkerSpec> specs,
                       ServerMetrics* metrics, std::unique_ptr<WorkerLauncher> launcher)
    : config_(config),
      metrics_(metrics),
      slots_(specs.size()),
      cost_(config.server.initial_seconds_per_item),
      supervisor_(config, std::move(specs), std::move(launcher), metrics,
                  [this](const WorkerEvent& event) { OnWorkerEvent(event); }) {
  for (size_t i = 0; i < slots_.size(); ++i) {
    slots_[i].calls_gauge = metrics_->WorkerCallsInFlight(static_cast<int>(i));
    slots_[i].up_gauge = metrics_->WorkerUp(static_cast<int>(i));
  }
  metrics_->workers_configured->Set(static_cast<double>(slots_.size()));
}

WorkerPool::~WorkerPool() { Shutdown(); }

absl::Status WorkerPool::Start() {
  RANKD_RETURN_IF_ERROR(supervisor_.Start());
  std::lock_guard<std::mutex> lock(mu_);
  started_ = true;
  shaping_ = std::thread(&WorkerPool::ShapingLoop, this);
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
  for (const Slot& s : slots_) up += s.up;
  return up;
}

bool WorkerPool::ReadyLocked() const {
  const int needed = std::min<int>(config_.workers.min_ready, static_cast<int>(slots_.size()));
  return !unready_ && !draining_ && !stopping_ && WorkersUpLocked() >= needed;
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
    slot.up_gauge->Set(slot.up ? 1 : 0);
  }
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
      if (s.up && !s.suspect) {
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
    const double max_wait = config_.server.max_queue_wait_s;
    const bool interactive = !works.empty() && works[0]->interactive();
    const SteadyTime now = Clock::now();
    double own = 0;  // the works' own compute, estimated
    for (const auto& w : works) {
      w->estimate_seconds_ = cost_.Seconds(cost_.Size(w->inputs_));
      own += w->estimate_seconds_;
    }
    if (!works.empty() &&
        (works[0]->deadline_ != WallTime::max() || (interactive && max_wait > 0))) {
      // Ahead of it: the front end's queue (of interactive work only, for interactive work) and
      // the calls the workers hold (with max_inflight > 1 they queue inside the workers too).
      int64_t ahead = 0;   // items
      double ahead_s = 0;  // their compute, estimated
      for (const auto* queue : {&interactive_queue_, &batch_queue_}) {
        if (interactive && queue == &batch_queue_) continue;
        for (const auto& w : *queue) {
          ahead += w->num_items();
          ahead_s += w->estimate_seconds_;
        }
      }
      for (const Slot& s : slots_) {
        for (const auto& w : s.running) {
          ahead += w->num_items();
          ahead_s += w->estimate_seconds_;
        }
      }
      const double wait = ahead_s / up;
      // Batch work waits for idle time by design (shaping); the wait bound is interactive work's.
      if (interactive && max_wait > 0 && wait > max_wait) {
        return absl::ResourceExhaustedError(absl::StrFormat(
            "overloaded: about %.0f ms of queued work ahead (%d items, %d workers up) is over "
            "server.max_queue_wait_s (%.0f ms); retry later",
            1e3 * wait, ahead, up, 1e3 * max_wait));
      }
      const double left = Seconds(works[0]->deadline_ - WallClock::now());
      const double needed = wait + own / std::min(n, up);
      // A call refused on the estimate may run as its probe while the workers are idle: it then
      // delays no one.
      const bool idle = running_ == 0 && queued == 0;
      if (works[0]->deadline_ != WallTime::max() && needed > left &&
          !(idle && cost_.Probe(cost_.Size(works[0]->inputs_), needed, left, now))) {
        return absl::DeadlineExceededError(absl::StrFormat(
            "deadline cannot be met: %.0f ms left, about %.0f ms needed (%d items queued ahead, "
            "%d workers up)",
            1e3 * left, 1e3 * needed, ahead, up));
      }
    }
    for (const auto& w : works) {
      w->state_ = Work::State::kQueued;
      w->enqueued_at_ = now;
      (w->interactive() ? interactive_queue_ : batch_queue_).push_back(w);
    }
    DispatchLocked(actions);
    UpdateGaugesLocked();
    if (!batch_queue_.empty()) shaping_cv_.notify_one();
  }
  Run(actions);
  return absl::OkStatus();
}

double WorkerPool::InteractiveLoadLocked(SteadyTime now) {
  int up = 0;
  int64_t interactive = static_cast<int64_t>(interactive_queue_.size());
  for (const Slot& s : slots_) {
    if (!s.up) continue;
    ++up;
    for (const auto& w : s.running) interactive += w->interactive();
  }
  // The share held since the last update, folded into the average over the time it was held.
  const double decay = std::exp(-Seconds(now - load_at_) / Seconds(kLoadTimeConstant));
  load_average_ = decay * load_average_ + (1 - decay) * load_share_;
  load_at_ = now;
  load_share_ = up == 0 ? 0 : std::min(1.0, static_cast<double>(interactive) / up);
  const double load = std::max(load_share_, load_average_);
  metrics_->interactive_load->Set(load);
  return load;
}

template <typename Eligible>
void WorkerPool::DispatchQueueLocked(std::deque<std::shared_ptr<Work>>& queue, Eligible eligible,
                                     WallTime wall_now, SteadyTime now, Actions& actions) {
  const int max_inflight = config_.workers.max_inflight;
  // Batch calls leave one of a worker's slots to interactive work.
  const int batch_inflight = std::max(1, max_inflight - 1);
  const int n = static_cast<int>(slots_.size());
  // The least-loaded usable worker for `w`, or -1; `any_room`: some worker has room for work of
  // w's priority. A retry avoids the worker that failed it.
  auto pick = [&](const Work& w, bool* any_room) {
    int best = -1;
    *any_room = false;
    for (int k = 1; k <= n; ++k) {
      const int i = (round_robin_ + k) % n;
      const Slot& s = slots_[i];
      if (!s.up || s.suspect || static_cast<int>(s.running.size()) >= max_inflight) continue;
      if (!w.interactive() && std::count_if(s.running.begin(), s.running.end(), [](const auto& r) {
                                return !r->interactive();
                              }) >= batch_inflight) {
        continue;
      }
      *any_room = true;
      if (w.attempts_ > 0 && s.incarnation == w.incarnation_) continue;
      if (best < 0 || s.running.size() < slots_[best].running.size()) best = i;
    }
    return best;
  };
  for (auto it = queue.begin(); it != queue.end();) {
    std::shared_ptr<Work> w = *it;
    if (wall_now >= w->deadline_) {
      it = queue.erase(it);
      FinishLocked(w,
                   absl::DeadlineExceededError(
                       absl::StrFormat("deadline exceeded after %.0f ms in the queue",
                                       1e3 * Seconds(now - w->enqueued_at_))),
                   actions);
      continue;
    }
    if (!eligible(*w)) {
      ++it;
      continue;
    }
    bool any_room = false;
    const int best = pick(*w, &any_room);
    if (!any_room) return;
    if (best < 0) {
      ++it;
      continue;
    }
    it = queue.erase(it);
    round_robin_ = best;
    Slot& slot = slots_[best];
    slot.running.push_back(w);
    w->state_ = Work::State::kRunning;
    w->incarnation_ = slot.incarnation;
    if (++w->attempts_ == 1) {
      w->queue_seconds_ = Seconds(now - w->enqueued_at_);
      metrics_->queue_seconds->Observe(w->queue_seconds_);
      if (!w->interactive()) metrics_->batch_wait_seconds->Observe(w->queue_seconds_);
    }
    w->result_.Clear();
    auto context = std::make_shared<grpc::ClientContext>();
    context->set_deadline(
        std::min(w->deadline_,
                 wall_now + std::chrono::duration_cast<WallClock::duration>(
                                std::chrono::duration<double>(config_.workers.call_timeout_s))));
    w->context_ = context;
    ++running_;
    ++outstanding_;
    actions.calls.push_back({w, slot.stub, best, slot.incarnation});
  }
}

void WorkerPool::DispatchLocked(Actions& actions) {
  if (stopping_) return;
  const WallTime wall_now = WallClock::now();
  const SteadyTime now = Clock::now();
  const double load = InteractiveLoadLocked(now);
  const auto max_wait = std::chrono::duration<double>(config_.shaping.batch_max_wait_s);
  auto overdue = [&](const Work& w) { return now - w.enqueued_at_ >= max_wait; };
  DispatchQueueLocked(batch_queue_, overdue, wall_now, now, actions);
  DispatchQueueLocked(
      interactive_queue_, [](const Work&) { return true; }, wall_now, now, actions);
  const bool busy = load > config_.shaping.busy_threshold || !interactive_queue_.empty();
  DispatchQueueLocked(
      batch_queue_,
      [&](Work& w) {
        if (!busy) return true;
        if (!w.deferred_) {
          w.deferred_ = true;
          metrics_->batch_deferred->Add();
        }
        return false;
      },
      wall_now, now, actions);
}

void WorkerPool::ShapingLoop() {
  // How soon batch work notices that the load fell below shaping.busy_threshold.
  constexpr auto kTick = std::chrono::milliseconds(10);
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    if (batch_queue_.empty()) {
      shaping_cv_.wait(lock, [this] { return stopping_ || !batch_queue_.empty(); });
    } else {
      shaping_cv_.wait_for(lock, kTick, [this] { return stopping_; });
    }
    if (stopping_) break;
    Actions actions;
    DispatchLocked(actions);
    UpdateGaugesLocked();
    lock.unlock();
    Run(actions);
    lock.lock();
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
      FinishLocked(
          work,
          absl::InternalError(absl::StrCat("worker ", index, " returned ", result.scores_size(),
                                           " scores for ", work->num_items(), " items")),
          actions);
    } else if (status.ok()) {
      cost_.Observe(work->inputs_,
                    {.prefix_tokens = result.prefix_tokens(),
                     .item_tokens = result.item_tokens(),
                     .items = work->num_items()},
                    result.compute_seconds(), Clock::now());
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
      FinishLocked(work, absl::OkStatus(), actions);
    } else if (work->cancelled_) {
      FinishLocked(work, work->cancel_status_, actions);
    } else if (WallClock::now() >= work->deadline_) {
      FinishLocked(work, absl::DeadlineExceededError("deadline exceeded while scoring"), actions);
    } else if (code == grpc::StatusCode::UNAVAILABLE || code == grpc::StatusCode::CANCELLED ||
               code == grpc::StatusCode::DEADLINE_EXCEEDED) {
      // The worker died (its connection broke, or the supervisor cancelled the call after reaping
      // it) or hung (the call outlived workers.call_timeout_s).
      if (slot.incarnation == incarnation) {
        if (code == grpc::StatusCode::DEADLINE_EXCEEDED) {
          actions.failures.push_back(
              {index, incarnation, /*kill=*/true,
               absl::StrCat("a call took longer than workers.call_timeout_s=",
                            config_.workers.call_timeout_s, " s")});
        } else if (code == grpc::StatusCode::UNAVAILABLE && slot.up) {
          slot.suspect = true;  // until a ping answers (kHealthy) or the worker is reaped
          actions.failures.push_back({index, incarnation, /*kill=*/false, ""});
        }
      }
      bool other_up = false;
      for (const Slot& s : slots_) other_up |= s.up && s.incarnation != incarnation;
      if (!stopping_ && work->attempts_ < 2 && other_up) {
        spdlog::warn("worker {} failed a call ({}: {}); sending its items again to another worker",
                     index, GrpcCodeName(code), status.error_message());
        metrics_->retries->Add();
        work->state_ = Work::State::kQueued;
        (work->interactive() ? interactive_queue_ : batch_queue_).push_front(work);
      } else {
        FinishLocked(work,
                     absl::UnavailableError(absl::StrCat(
                         "worker ", index, " failed (", status.error_message(), ") and ",
                         work->attempts_ >= 2 ? "this was the retry" : "no other worker is up",
                         "; retry the request")),
                     actions);
      }
    } else {
      // The worker's own verdict, e.g. a token limit. It names items by their index in the items
      // it was sent: with Carry::kOwnItems, renamed to the caller's.
      FinishLocked(work, work->CallerStatus(status), actions);
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
    const absl::Status cancelled = absl::CancelledError("cancelled by the client");
    if (work->state_ == Work::State::kQueued) {
      for (auto* queue : {&interactive_queue_, &batch_queue_}) {
        auto it = std::find(queue->begin(), queue->end(), work);
        if (it != queue->end()) queue->erase(it);
      }
      FinishLocked(work, cancelled, actions);
      InteractiveLoadLocked(Clock::now());
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

void WorkerPool::FinishLocked(const std::shared_ptr<Work>& work, absl::Status status,
                              Actions& actions) {
  work->state_ = Work::State::kDone;
  actions.finished.emplace_back(work, std::move(status));
}

void WorkerPool::FailQueuedLocked(const absl::Status& status, Actions& actions) {
  for (auto* queue : {&interactive_queue_, &batch_queue_}) {
    for (auto& w : *queue) FinishLocked(w, status, actions);
    queue->clear();
  }
}

void WorkerPool::Run(Actions& actions) {
  // Answers first: a finished call is not kept waiting behind the next one's start.
  for (auto& [work, status] : actions.finished) work->done_(status, *work);
  for (auto& context : actions.cancels) context->TryCancel();
  for (const auto& f : actions.failures) {
    supervisor_.ReportFailure(f.slot, f.incarnation, f.kill, f.reason);
  }
  for (auto& call : actions.calls) StartCall(call);
}

// ---- workers up and down --------------------------------------------------------------------

void WorkerPool::OnWorkerEvent(const WorkerEvent& event) {
  Actions actions;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Slot& slot = slots_[event.index];
    switch (event.kind) {
      case WorkerEvent::Kind::kUp:
        slot.up = true;
        slot.incarnation = event.incarnation;
        slot.stub = event.stub;
        slot.suspect = false;
        break;
      case WorkerEvent::Kind::kHealthy:
        if (slot.incarnation == event.incarnation) slot.suspect = false;
        break;
      case WorkerEvent::Kind::kDown:
        if (slot.incarnation == event.incarnation) {
          // Its calls fail at the transport (or are cancelled here) and are retried elsewhere.
          slot.up = false;
          slot.stub.reset();
          slot.suspect = false;
          for (auto& w : slot.running) {
            if (w->context_) actions.cancels.push_back(w->context_);
          }
          slot.running.clear();
        }
        if (WorkersUpLocked() == 0) {
          FailQueuedLocked(absl::UnavailableError("no worker is up; retry the request"), actions);
        }
        break;
    }
    DispatchLocked(actions);
    UpdateGaugesLocked();
    cv_.notify_all();
  }
  Run(actions);
  PublishReadiness();
}

// ---- drain and shutdown ---------------------------------------------------------------------

void WorkerPool::ReportNotReady() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    unready_ = true;
  }
  PublishReadiness();
}

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
    const absl::Status stopping =
        absl::UnavailableError("the server is shutting down; retry elsewhere");
    FailQueuedLocked(stopping, actions);
    for (Slot& slot : slots_) {
      for (auto& w : slot.running) {
        w->cancelled_ = true;
        w->cancel_status_ = stopping;
        if (w->context_) actions.cancels.push_back(w->context_);
      }
    }
  }
  shaping_cv_.notify_all();
  shaping_.join();
  Run(actions);
  PublishReadiness();
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return outstanding_ == 0; });
  }
  supervisor_.Stop();
}

}  // namespace rankd::server
