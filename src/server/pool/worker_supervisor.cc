#include "rankd/server/pool/worker_supervisor.h"

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
#include "absl/strings/str_join.h"
#include "rankd/common/logging.h"
#include "rankd/common/status.h"
#include "rankd/server/process.h"
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
// The fresh socket directory when workers.socket_dir is unset: /tmp/rankd-XXXXXX.
constexpr char kRunParent[] = "/tmp";
constexpr char kRunPrefix[] = "rankd-";

double Seconds(std::chrono::nanoseconds d) { return std::chrono::duration<double>(d).count(); }

std::chrono::nanoseconds FromSeconds(double s) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double>(s));
}

// The first line of the error file a worker left, "" when there is none.
std::string ReadWorkerError(const std::string& socket_path) {
  std::ifstream in(WorkerErrorPath(socket_path));
  std::string line;
  std::getline(in, line);
  return line;
}

}  // namespace

std::string WorkerErrorPath(absl::string_view socket_path) {
  return absl::StrCat(socket_path, ".error");
}

protocol::WorkerSetup WorkerSetupOf(const ServeConfig& config) {
  protocol::WorkerSetup setup;
  setup.model_name = config.model.name;
  setup.model_identity = config.model.identity;
  setup.engine = config.model.engine;
  setup.limits = config.limits;
  return setup;
}

// ---- ProcessLauncher ------------------------------------------------------------------------

ProcessLauncher::~ProcessLauncher() {
  std::error_code ec;
  if (!config_file_.empty()) std::filesystem::remove(config_file_, ec);
}

absl::Status ProcessLauncher::Prepare(const std::string& socket_dir) {
  namespace fs = std::filesystem;
  const std::string path = absl::StrCat(socket_dir, "/config.yaml");
  {
    std::ofstream out(path, std::ios::trunc);
    out << ServeConfigToYaml(config_);
    if (!out) return absl::InternalError(absl::StrCat("cannot write the workers' config ", path));
  }
  std::error_code ec;
  fs::permissions(path, fs::perms::owner_read | fs::perms::owner_write, ec);
  config_file_ = path;
  return absl::OkStatus();
}

absl::StatusOr<pid_t> ProcessLauncher::Launch(const WorkerSpec& spec,
                                              const std::string& socket_path) {
  return SpawnSelf(WorkerCommandLine(config_file_, spec, socket_path),
                   WorkerEnvironment(CurrentEnvironment(), config_, spec), spec.cpus);
}

void ProcessLauncher::Signal(pid_t pid, int signal) { ::kill(pid, signal); }

std::optional<std::string> ProcessLauncher::Reap(pid_t pid, bool wait) {
  int wait_status = 0;
  if (::waitpid(pid, &wait_status, wait ? 0 : WNOHANG) != pid) return std::nullopt;
  return DescribeWaitStatus(wait_status);
}

// ---- WorkerSupervisor -----------------------------------------------------------------------

WorkerSupervisor::WorkerSupervisor(const ServeConfig& config, std::vector<WorkerSpec> specs,
                                   std::unique_ptr<WorkerLauncher> launcher, ServerMetrics* metrics,
                                   EventFn on_event)
    : config_(config),
      launcher_(std::move(launcher)),
      metrics_(metrics),
      on_event_(std::move(on_event)) {
  slots_.resize(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    slots_[i].spec = std::move(specs[i]);
    slots_[i].prefix_cache =
        std::make_unique<WorkerPrefixCacheMetrics>(metrics_->registry, static_cast<int>(i));
  }
}

WorkerSupervisor::~WorkerSupervisor() { Stop(); }

absl::Status WorkerSupervisor::Start() {
  namespace fs = std::filesystem;
  if (config_.workers.socket_dir.empty()) {
    // Those of front ends killed with SIGKILL first: they could not remove theirs.
    if (const int stale = RemoveStaleRunDirectories(kRunParent, kRunPrefix); stale > 0) {
      spdlog::info("removed {} socket director{} of rankd servers that are gone from {}", stale,
                   stale == 1 ? "y" : "ies", kRunParent);
    }
    RANKD_ASSIGN_OR_RETURN(socket_dir_, MakeRunDirectory(kRunParent, kRunPrefix));
  } else {
    socket_dir_ = config_.workers.socket_dir;
    std::error_code ec;
    fs::create_directories(socket_dir_, ec);
    if (ec) {
      return absl::InternalError(
          absl::StrCat("workers.socket_dir ", socket_dir_, ": ", ec.message()));
    }
  }
  // Before anything is written there: a second server on this directory stops here.
  absl::StatusOr<std::unique_ptr<RunDirectoryLock>> lock = RunDirectoryLock::Take(socket_dir_);
  if (!lock.ok()) {
    std::error_code ec;
    if (config_.workers.socket_dir.empty()) fs::remove_all(socket_dir_, ec);  // the fresh one
    return absl::Status(lock.status().code(),
                        absl::StrCat("workers.socket_dir: ", lock.status().message(),
                                     ": each rankd serve needs a socket directory of its own"));
  }
  dir_lock_ = std::move(*lock);
  for (size_t i = 0; i < slots_.size(); ++i) {
    slots_[i].socket_path = absl::StrCat(socket_dir_, "/worker-", i, ".sock");
    if (slots_[i].socket_path.size() >= sizeof(sockaddr_un::sun_path)) {
      return absl::InvalidArgumentError(absl::StrCat("workers.socket_dir: socket path ",
                                                     slots_[i].socket_path, " is longer than ",
                                                     sizeof(sockaddr_un::sun_path) - 1, " bytes"));
    }
  }
  RANKD_RETURN_IF_ERROR(launcher_->Prepare(socket_dir_));
  spdlog::info("worker sockets in {}", socket_dir_);
  started_ = true;
  thread_ = std::thread(&WorkerSupervisor::Loop, this);
  return absl::OkStatus();
}

std::shared_ptr<Worker::Stub> WorkerSupervisor::MakeStub(const std::string& socket_path) const {
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

void WorkerSupervisor::ReportFailure(int index, uint64_t incarnation, bool kill,
                                     absl::string_view reason) {
  std::lock_guard<std::mutex> lock(mu_);
  Slot& slot = slots_[index];
  if (slot.incarnation != incarnation || slot.pid <= 0) return;
  if (kill) {
    KillLocked(slot, reason);
  } else if (slot.state == Slot::State::kUp) {
    slot.check_now = true;
    wake_ = true;
    cv_.notify_all();
  }
}

void WorkerSupervisor::KillLocked(Slot& slot, absl::string_view reason) {
  if (slot.pid <= 0 || slot.kill_sent) return;
  spdlog::warn("worker {} (pid {}) {}: killing it", slot.spec.index, slot.pid, reason);
  launcher_->Signal(slot.pid, SIGKILL);
  slot.kill_sent = true;
  slot.kill_reason = std::string(reason);
}

void WorkerSupervisor::FailedStartLocked(int index, const std::string& error) {
  Slot& slot = slots_[index];
  ++slot.failed_starts_in_a_row;
  const int limit = config_.workers.max_failed_starts;
  if (any_up_ || limit == 0 || slot.failed_starts_in_a_row < limit || !start_failure_.ok()) {
    return;
  }
  start_failure_ = absl::FailedPreconditionError(absl::StrCat(
      "no worker came up: worker ", index, " failed ", slot.failed_starts_in_a_row,
      " starts in a row (workers.max_failed_starts=", limit, "); the last one: ", error));
  spdlog::error("{}", start_failure_.message());
  wake_ = true;
  cv_.notify_all();
}

std::vector<std::pair<int, pid_t>> WorkerSupervisor::WorkerPids() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::pair<int, pid_t>> pids;
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (slots_[i].pid > 0) pids.emplace_back(static_cast<int>(i), slots_[i].pid);
  }
  return pids;
}

absl::Status WorkerSupervisor::start_failure() const {
  std::lock_guard<std::mutex> lock(mu_);
  return start_failure_;
}

void WorkerSupervisor::ReapLocked(int index, const std::string& how) {
  Slot& slot = slots_[index];
  const Clock::time_point now = Clock::now();
  if (stopping_) {
    spdlog::info("worker {} (pid {}) {}", index, slot.pid, how);
  } else if (slot.state == Slot::State::kStarting) {
    // Why it never came up: its own error (a model it cannot load or must not serve), or why it
    // was killed.
    const std::string error = ReadWorkerError(slot.socket_path);
    const std::string failure = absl::StrCat(how, ": ",
                                             !error.empty()              ? error
                                             : !slot.kill_reason.empty() ? slot.kill_reason
                                                                         : "no error reported");
    spdlog::warn("worker {} (pid {}) {}", index, slot.pid, failure);
    FailedStartLocked(index, failure);
  } else {
    spdlog::warn("worker {} (pid {}) {}", index, slot.pid, how);
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
  slot.check_now = false;
  slot.prefix_cache->Down();
  events_.push_back({WorkerEvent::Kind::kDown, index, slot.incarnation, nullptr});
  if (!stopping_ && start_failure_.ok()) {
    spdlog::info("worker {}: restart in {:.2f} s", index, backoff);
  }
}

void WorkerSupervisor::Spawn(int index) {
  const Slot& fixed = slots_[index];  // spec and socket_path do not change after Start
  ::unlink(fixed.socket_path.c_str());
  ::unlink(WorkerErrorPath(fixed.socket_path).c_str());
  absl::StatusOr<pid_t> pid = launcher_->Launch(fixed.spec, fixed.socket_path);
  std::lock_guard<std::mutex> lock(mu_);
  Slot& slot = slots_[index];
  const Clock::time_point now = Clock::now();
  if (!pid.ok()) {
    spdlog::error("worker {}: {}", index, pid.status().message());
    slot.state = Slot::State::kDown;
    ++slot.crashes_in_a_row;
    slot.next_spawn = now + FromSeconds(config_.workers.restart_backoff_max_s);
    FailedStartLocked(index, std::string(pid.status().message()));
    return;
  }
  slot.state = Slot::State::kStarting;
  slot.pid = *pid;
  slot.incarnation = next_incarnation_++;
  slot.spawned_at = now;
  slot.next_ping = now;
  slot.stub.reset();
  slot.check_now = false;
  slot.ping_in_flight = false;
  slot.kill_sent = false;
  slot.kill_reason.clear();
  if (slot.spawns++ > 0) metrics_->worker_restarts->Add();
  spdlog::info(
      "worker {} started: pid {}{}{}", index, slot.pid,
      slot.spec.gpu >= 0 ? absl::StrCat(", gpu ", slot.spec.gpu) : "",
      slot.spec.cpus.empty() ? "" : absl::StrCat(", cpus ", absl::StrJoin(slot.spec.cpus, ",")));
}

void WorkerSupervisor::StartPing(int index, uint64_t incarnation) {
  struct PingCall {
    grpc::ClientContext context;
    rankd::worker::v1::PingRequest request;
    rankd::worker::v1::PingResponse response;
  };
  // The context is shared with the slot so that a reap and Stop can cancel it.
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
    ++pings_outstanding_;
  }
  call->context.set_deadline(WallClock::now() + std::chrono::duration_cast<WallClock::duration>(
                                                    FromSeconds(config_.workers.ping_timeout_s)));
  stub->async()->Ping(&call->context, &call->request, &call->response,
                      [this, call, index, incarnation](grpc::Status s) {
                        OnPingDone(index, incarnation, s, call->response);
                      });
}

void WorkerSupervisor::OnPingDone(int index, uint64_t incarnation, const grpc::Status& status,
                                  const rankd::worker::v1::PingResponse& response) {
  std::lock_guard<std::mutex> lock(mu_);
  --pings_outstanding_;
  cv_.notify_all();
  Slot& slot = slots_[index];
  if (slot.incarnation != incarnation ||
      (slot.state != Slot::State::kStarting && slot.state != Slot::State::kUp)) {
    return;  // an earlier incarnation's ping
  }
  slot.ping_in_flight = false;
  slot.ping_context.reset();
  const Clock::time_point now = Clock::now();
  if (status.ok()) {
    const rankd::worker::v1::PrefixCacheStats& cache = response.prefix_cache();
    slot.prefix_cache->Update(incarnation, {.hits = cache.hits(),
                                            .misses = cache.misses(),
                                            .evictions = cache.evictions(),
                                            .bytes = cache.bytes(),
                                            .entries = cache.entries()});
    if (slot.state == Slot::State::kStarting) {
      slot.state = Slot::State::kUp;
      slot.up_since = now;
      slot.failed_starts_in_a_row = 0;
      any_up_ = true;
      spdlog::info("worker {} (pid {}) is up after {:.2f} s: model {}, backend {}", index, slot.pid,
                   Seconds(now - slot.spawned_at), response.model(), response.backend());
      events_.push_back({WorkerEvent::Kind::kUp, index, incarnation, slot.stub});
      wake_ = true;
    } else if (slot.check_now) {
      events_.push_back({WorkerEvent::Kind::kHealthy, index, incarnation, nullptr});
      wake_ = true;
    }
    slot.check_now = false;
    slot.next_ping = now + FromSeconds(config_.workers.ping_interval_s);
  } else if (slot.state == Slot::State::kStarting) {
    slot.next_ping = now + kStartupPingRetry;
  } else {
    KillLocked(slot,
               absl::StrCat("did not answer a ping within workers.ping_timeout_s=",
                            config_.workers.ping_timeout_s, " s (", status.error_message(), ")"));
  }
}

void WorkerSupervisor::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_thread_) {
    std::vector<std::shared_ptr<grpc::ClientContext>> cancels;
    std::vector<std::pair<int, uint64_t>> pings;  // slot, incarnation
    std::vector<int> to_spawn;
    const Clock::time_point now = Clock::now();
    for (size_t i = 0; i < slots_.size(); ++i) {
      Slot& slot = slots_[i];
      if (slot.pid <= 0) continue;
      if (std::optional<std::string> how = launcher_->Reap(slot.pid, /*wait=*/false)) {
        if (slot.ping_context) cancels.push_back(slot.ping_context);
        ReapLocked(static_cast<int>(i), *how);
      }
    }
    for (size_t i = 0; i < slots_.size(); ++i) {
      Slot& slot = slots_[i];
      switch (slot.state) {
        case Slot::State::kDown:
          if (!stopping_ && start_failure_.ok() && now >= slot.next_spawn) {
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
              (now >= slot.next_ping || slot.check_now)) {
            slot.ping_in_flight = true;
            pings.emplace_back(static_cast<int>(i), slot.incarnation);
          }
          break;
      }
    }
    std::vector<WorkerEvent> events;
    events.swap(events_);
    lock.unlock();
    for (auto& context : cancels) context->TryCancel();
    for (const WorkerEvent& event : events) on_event_(event);
    for (int i : to_spawn) Spawn(i);
    for (auto [index, incarnation] : pings) StartPing(index, incarnation);
    lock.lock();
    cv_.wait_for(lock, kTick, [this] { return stop_thread_ || wake_; });
    wake_ = false;
  }
  lock.unlock();
  StopWorkers();
}

void WorkerSupervisor::StopWorkers() {
  std::vector<std::pair<int, pid_t>> alive;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < slots_.size(); ++i) {
      if (slots_[i].pid > 0) alive.emplace_back(static_cast<int>(i), slots_[i].pid);
    }
  }
  for (auto [index, pid] : alive) launcher_->Signal(pid, SIGTERM);
  const Clock::time_point deadline = Clock::now() + FromSeconds(config_.workers.stop_timeout_s);
  for (auto remaining = alive; !remaining.empty();) {
    for (auto it = remaining.begin(); it != remaining.end();) {
      if (std::optional<std::string> how = launcher_->Reap(it->second, /*wait=*/false)) {
        spdlog::info("worker {} (pid {}) stopped: {}", it->first, it->second, *how);
        it = remaining.erase(it);
      } else {
        ++it;
      }
    }
    if (remaining.empty()) break;
    if (Clock::now() >= deadline) {
      for (auto [index, pid] : remaining) {
        spdlog::warn("worker {} (pid {}) did not stop within workers.stop_timeout_s: killing it",
                     index, pid);
        launcher_->Signal(pid, SIGKILL);
        launcher_->Reap(pid, /*wait=*/true);
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::vector<WorkerEvent> events;
  {
    std::lock_guard<std::mutex> lock(mu_);
    events.swap(events_);
    for (auto [index, pid] : alive) {
      events.push_back({WorkerEvent::Kind::kDown, index, slots_[index].incarnation, nullptr});
    }
    for (Slot& slot : slots_) {
      slot.state = Slot::State::kDown;
      slot.pid = -1;
      slot.stub.reset();
      slot.prefix_cache->Down();
    }
  }
  for (const WorkerEvent& event : events) on_event_(event);
}

void WorkerSupervisor::Stop() {
  std::vector<std::shared_ptr<grpc::ClientContext>> cancels;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!started_ || stopped_) return;
    stopped_ = true;
    stopping_ = true;
    for (Slot& slot : slots_) {
      if (slot.ping_context) cancels.push_back(slot.ping_context);
    }
  }
  for (auto& context : cancels) context->TryCancel();
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return pings_outstanding_ == 0; });
    stop_thread_ = true;
  }
  cv_.notify_all();
  thread_.join();
  std::error_code ec;
  for (const Slot& slot : slots_) {
    std::filesystem::remove(slot.socket_path, ec);
    std::filesystem::remove(WorkerErrorPath(slot.socket_path), ec);
  }
  // The fresh directory goes with its owner file; a given one keeps its owner file (removing it
  // could let two later servers lock two files of one name).
  if (config_.workers.socket_dir.empty()) std::filesystem::remove_all(socket_dir_, ec);
}

}  // namespace rankd::server
