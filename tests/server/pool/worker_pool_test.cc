// WorkerPool: Work (what a worker call carries of the caller's request), and the pool's dispatch,
// retries, admission, drain and supervision against fake workers served in this process.
#include "rankd/server/pool/worker_pool.h"

#include <signal.h>

#include <algorithm>
#include <condition_variable>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rankd/common/field_error.h"
#include "rankd/protocol/protocol.h"

namespace rankd::server {
namespace {

rankd::v1::ScoreRequest Request(int items) {
  rankd::v1::ScoreRequest r;
  r.set_query("who wrote it");
  r.set_apply_sigmoid(true);
  r.set_priority(rankd::v1::PRIORITY_BATCH);
  r.set_request_id("req-1");
  r.set_depth(items - 1);
  for (int i = 0; i < items; ++i) r.add_items()->set_text(absl::StrCat("item ", i));
  return r;
}

void NoDone(const absl::Status&, Work&) {}

TEST(WorkTest, WholeRequestPointsAtTheCallersRequest) {
  const rankd::v1::ScoreRequest request = Request(10);
  {
    Work work(&request, 0, 9, true, WallTime::max(), Work::Carry::kWholeRequest, NoDone);
    EXPECT_EQ(&work.worker_item().request(), &request);
    EXPECT_EQ(work.worker_item().begin(), 0);
    EXPECT_EQ(work.worker_item().end(), 9);
    EXPECT_EQ(work.begin(), 0);
    EXPECT_EQ(work.end(), 9);
    EXPECT_EQ(work.num_items(), 9);
  }
  EXPECT_EQ(request.items_size(), 10);  // detached, not freed
}

TEST(WorkTest, OwnItemsCarriesOnlyItsItemsAndWhatTheWorkerReads) {
  rankd::v1::ScoreRequest request = Request(10);
  request.clear_query();
  request.add_query_ids(1);
  request.add_query_ids(7);
  {
    Work work(&request, 3, 6, false, WallTime::max(), Work::Carry::kOwnItems, NoDone);
    const rankd::worker::v1::WorkItem& sent = work.worker_item();
    EXPECT_EQ(sent.begin(), 0);
    EXPECT_EQ(sent.end(), 3);
    ASSERT_EQ(sent.request().items_size(), 3);
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(&sent.request().items(i), &request.items(3 + i));  // pointed at, not copied
    }
    EXPECT_EQ(sent.request().query_ids_size(), 2);
    EXPECT_EQ(sent.request().query_ids(1), 7);
    EXPECT_TRUE(sent.request().apply_sigmoid());
    EXPECT_EQ(sent.request().priority(), rankd::v1::PRIORITY_BATCH);
    EXPECT_EQ(work.begin(), 3);
    EXPECT_EQ(work.end(), 6);
    EXPECT_EQ(work.num_items(), 3);
    // What goes over the socket parses back to the same items.
    rankd::worker::v1::WorkItem parsed;
    ASSERT_TRUE(parsed.ParseFromString(sent.SerializeAsString()));
    ASSERT_EQ(parsed.request().items_size(), 3);
    EXPECT_EQ(parsed.request().items(2).text(), "item 5");
  }
  // The caller's items are detached again, not freed.
  ASSERT_EQ(request.items_size(), 10);
  EXPECT_EQ(request.items(4).text(), "item 4");
}

TEST(WorkTest, OwnItemsCopiesTheQuery) {
  const rankd::v1::ScoreRequest request = Request(4);
  Work work(&request, 0, 2, true, WallTime::max(), Work::Carry::kOwnItems, NoDone);
  EXPECT_EQ(work.worker_item().request().query(), "who wrote it");
  EXPECT_EQ(work.worker_item().request().items_size(), 2);
}

}  // namespace
}  // namespace rankd::server

// ---- WorkerPool against in-process fake workers ---------------------------------------------

namespace rankd::server {
namespace {

using rankd::worker::v1::PingRequest;
using rankd::worker::v1::PingResponse;
using rankd::worker::v1::WorkItem;
using rankd::worker::v1::WorkResult;
using std::chrono::milliseconds;
using ::testing::HasSubstr;

// Bound on every wait for an event (generous: a slow machine only makes the waits longer).
constexpr auto kEventTimeout = std::chrono::seconds(30);

// One fake worker process: a rankd.worker.v1.Worker service on the pool's socket, in this
// process. Score calls are answered with score = item index (kAnswer), held until the test
// releases them (kHold), or refused as a worker refuses an item over a token limit (kRefuseItem1:
// item 1 of the call's items, with its FieldError in the error details); pings are answered, or
// held (HangPings) so that they time out. "Exiting" (a crash, or the supervisor's SIGTERM /
// SIGKILL) answers every held call UNAVAILABLE, as a closed connection does, and shuts the server
// down.
class FakeWorker final : public rankd::worker::v1::Worker::CallbackService {
 public:
  enum class Mode { kAnswer, kHold, kRefuseItem1 };

  FakeWorker(int index, pid_t pid, Mode mode) : index_(index), pid_(pid), mode_(mode) {}
  ~FakeWorker() override {
    if (exit_thread_.joinable()) exit_thread_.join();
  }

  absl::Status Listen(const std::string& socket_path) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort(absl::StrCat("unix:", socket_path), grpc::InsecureServerCredentials());
    builder.RegisterService(this);
    server_ = builder.BuildAndStart();
    if (server_ == nullptr) return absl::UnavailableError("cannot listen on " + socket_path);
    return absl::OkStatus();
  }

  grpc::ServerUnaryReactor* Score(grpc::CallbackServerContext* context, const WorkItem* request,
                                  WorkResult* response) override {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    std::unique_lock<std::mutex> lock(mu_);
    ++calls_;
    if (!exited_ && mode_ == Mode::kHold) {
      held_.push_back({reactor, request, response});
      cv_.notify_all();
      return reactor;
    }
    lock.unlock();
    if (exited_) {
      reactor->Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "exited"));
    } else if (mode_ == Mode::kRefuseItem1) {
      reactor->Finish(protocol::ToWorkerStatus(InvalidItemField(
          1, ".text", "at least 9 tokens exceeds max_item_tokens=8", "max_item_tokens")));
    } else {
      Answer(*request, response);
      reactor->Finish(grpc::Status::OK);
    }
    return reactor;
  }

  grpc::ServerUnaryReactor* Ping(grpc::CallbackServerContext* context, const PingRequest*,
                                 PingResponse* response) override {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    std::lock_guard<std::mutex> lock(mu_);
    if (hang_pings_ && !exited_) {
      held_pings_.push_back(reactor);
      return reactor;
    }
    response->set_model("fake");
    response->set_backend("fake");
    *response->mutable_prefix_cache() = prefix_cache_;
    reactor->Finish(exited_ ? grpc::Status(grpc::StatusCode::UNAVAILABLE, "exited")
                            : grpc::Status::OK);
    return reactor;
  }

  int index() const { return index_; }
  pid_t pid() const { return pid_; }

  void HangPings() {
    std::lock_guard<std::mutex> lock(mu_);
    hang_pings_ = true;
  }

  // What its pings report of its engine's prefix cache from now on (zeros until set).
  void SetPrefixCache(int64_t hits, int64_t misses, int64_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    prefix_cache_.set_hits(hits);
    prefix_cache_.set_misses(misses);
    prefix_cache_.set_bytes(bytes);
  }

  // Waits until `n` calls are held; false after kEventTimeout.
  bool WaitHeld(size_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, kEventTimeout, [&] { return held_.size() >= n; });
  }
  size_t held() {
    std::lock_guard<std::mutex> lock(mu_);
    return held_.size();
  }
  int calls() {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }

  // Answers every held call.
  void ReleaseAll() {
    std::vector<Held> held;
    {
      std::lock_guard<std::mutex> lock(mu_);
      held.swap(held_);
    }
    for (Held& h : held) {
      Answer(*h.request, h.response);
      h.reactor->Finish(grpc::Status::OK);
    }
  }

  // The process ends `how` (the launcher's description): held calls and pings fail UNAVAILABLE,
  // the server stops (on a thread of its own: Signal must not block). Once only.
  void Exit(std::string how) {
    std::vector<Held> held;
    std::vector<grpc::ServerUnaryReactor*> pings;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (exited_) return;
      exited_ = true;
      how_ = std::move(how);
      held.swap(held_);
      pings.swap(held_pings_);
    }
    const grpc::Status closed(grpc::StatusCode::UNAVAILABLE, "the worker's connection closed");
    for (Held& h : held) h.reactor->Finish(closed);
    for (auto* reactor : pings) reactor->Finish(closed);
    exit_thread_ = std::thread([this] {
      if (server_) server_->Shutdown(std::chrono::system_clock::now() + milliseconds(100));
      std::lock_guard<std::mutex> lock(mu_);
      shut_down_ = true;
      cv_.notify_all();
    });
  }

  // How it ended, once its server has stopped; with `wait`, waits for that.
  std::optional<std::string> Ended(bool wait) {
    std::unique_lock<std::mutex> lock(mu_);
    if (wait) cv_.wait(lock, [this] { return shut_down_; });
    if (!shut_down_) return std::nullopt;
    return how_;
  }

 private:
  struct Held {
    grpc::ServerUnaryReactor* reactor;
    const WorkItem* request;
    WorkResult* response;
  };

  static void Answer(const WorkItem& request, WorkResult* response) {
    for (int i = request.begin(); i < request.end(); ++i) response->add_scores(i);
    response->set_compute_seconds(0.001);
  }

  const int index_;
  const pid_t pid_;
  const Mode mode_;
  std::unique_ptr<grpc::Server> server_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Held> held_;
  std::vector<grpc::ServerUnaryReactor*> held_pings_;
  bool hang_pings_ = false;
  rankd::worker::v1::PrefixCacheStats prefix_cache_;
  int calls_ = 0;
  bool exited_ = false;
  bool shut_down_ = false;
  std::string how_;
  std::thread exit_thread_;
};

// Every fake worker the pool has launched, in launch order (restarts included); outlives the pool.
class FakeFleet {
 public:
  // How workers launched from now on answer Score calls, by worker index (default kAnswer).
  void SetMode(int index, FakeWorker::Mode mode) {
    std::lock_guard<std::mutex> lock(mu_);
    modes_[index] = mode;
  }

  // Launches of worker `index` from now on fail as a worker that cannot load its model does:
  // it writes `error` to its error file (WorkerErrorPath) and exits 1 without listening.
  void FailStarts(int index, std::string error) {
    std::lock_guard<std::mutex> lock(mu_);
    start_errors_[index] = std::move(error);
  }

  // The n-th launch (0-based) of worker `index`, once it has happened; nullptr after
  // kEventTimeout.
  FakeWorker* WaitLaunch(int index, int n) {
    std::unique_lock<std::mutex> lock(mu_);
    FakeWorker* found = nullptr;
    cv_.wait_for(lock, kEventTimeout, [&] {
      int seen = 0;
      for (auto& w : workers_) {
        if (w->index() == index && seen++ == n) found = w.get();
      }
      return found != nullptr;
    });
    return found;
  }

  // When each launch of worker `index` happened.
  std::vector<std::chrono::steady_clock::time_point> LaunchTimes(int index) {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::chrono::steady_clock::time_point> times;
    for (size_t i = 0; i < workers_.size(); ++i) {
      if (workers_[i]->index() == index) times.push_back(launched_at_[i]);
    }
    return times;
  }

  // The signals the supervisor sent, as (pid, signal).
  std::vector<std::pair<pid_t, int>> signals() {
    std::lock_guard<std::mutex> lock(mu_);
    return signals_;
  }

  class Launcher final : public WorkerLauncher {
   public:
    explicit Launcher(FakeFleet* fleet) : fleet_(fleet) {}
    absl::StatusOr<pid_t> Launch(const WorkerSpec& spec, const std::string& socket_path) override {
      return fleet_->Launch(spec.index, socket_path);
    }
    void Signal(pid_t pid, int signal) override { fleet_->Signal(pid, signal); }
    std::optional<std::string> Reap(pid_t pid, bool wait) override {
      return fleet_->Find(pid)->Ended(wait);
    }

   private:
    FakeFleet* const fleet_;
  };

 private:
  absl::StatusOr<pid_t> Launch(int index, const std::string& socket_path) {
    std::lock_guard<std::mutex> lock(mu_);
    const pid_t pid = 1000 + static_cast<pid_t>(workers_.size());
    auto mode = modes_.find(index);
    workers_.push_back(std::make_unique<FakeWorker>(
        index, pid, mode == modes_.end() ? FakeWorker::Mode::kAnswer : mode->second));
    launched_at_.push_back(std::chrono::steady_clock::now());
    cv_.notify_all();
    if (auto error = start_errors_.find(index); error != start_errors_.end()) {
      std::ofstream(WorkerErrorPath(socket_path)) << error->second << "\n";
      workers_.back()->Exit("exited with status 1");
      return pid;
    }
    return workers_.back()->Listen(socket_path).ok() ? absl::StatusOr<pid_t>(pid)
                                                     : absl::InternalError("listen failed");
  }

  void Signal(pid_t pid, int signal) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      signals_.emplace_back(pid, signal);
    }
    Find(pid)->Exit(signal == SIGTERM ? "exited with status 0" : "killed by signal 9 (Killed)");
  }

  FakeWorker* Find(pid_t pid) {
    std::lock_guard<std::mutex> lock(mu_);
    return workers_.at(pid - 1000).get();
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<FakeWorker>> workers_;
  std::vector<std::chrono::steady_clock::time_point> launched_at_;
  std::map<int, FakeWorker::Mode> modes_;
  std::map<int, std::string> start_errors_;
  std::vector<std::pair<pid_t, int>> signals_;
};

// Work completions, by the order the works were made.
class Completions {
 public:
  std::shared_ptr<Work> Make(const rankd::v1::ScoreRequest* request, bool interactive = true) {
    std::lock_guard<std::mutex> lock(mu_);
    const size_t id = statuses_.size();
    statuses_.emplace_back();
    return std::make_shared<Work>(request, 0, request->items_size(), interactive, WallTime::max(),
                                  Work::Carry::kWholeRequest,
                                  [this, id](const absl::Status& s, Work&) {
                                    std::lock_guard<std::mutex> lock(mu_);
                                    statuses_[id] = s;
                                    cv_.notify_all();
                                  });
  }

  // The status of work `id`, once done; nullopt after kEventTimeout.
  std::optional<absl::Status> Wait(size_t id) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, kEventTimeout, [&] { return statuses_[id].has_value(); });
    return statuses_[id];
  }
  bool done(size_t id) {
    std::lock_guard<std::mutex> lock(mu_);
    return statuses_[id].has_value();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::optional<absl::Status>> statuses_;
};

class WorkerPoolTest : public ::testing::Test {
 protected:
  WorkerPoolTest() : metrics_(&registry_) {
    config_.workers.max_inflight = 4;
    config_.workers.ping_interval_s = 0.05;
    config_.workers.restart_backoff_s = 0.2;
    config_.workers.restart_backoff_max_s = 0.4;
    config_.workers.stop_timeout_s = 5;
    request_ = Request(3);
  }
  ~WorkerPoolTest() override { pool_.reset(); }

  // Starts a pool of `workers` fake workers and waits until `up` of them are up.
  void StartPool(int workers, int up) {
    std::vector<WorkerSpec> specs(workers);
    for (int i = 0; i < workers; ++i) specs[i].index = i;
    pool_ = std::make_unique<WorkerPool>(config_, specs, &metrics_,
                                         std::make_unique<FakeFleet::Launcher>(&fleet_));
    pool_->SetReadinessCallback([this](bool ready) {
      std::lock_guard<std::mutex> lock(mu_);
      readiness_.push_back(ready);
      cv_.notify_all();
    });
    ASSERT_TRUE(pool_->Start().ok());
    ASSERT_TRUE(WaitUp(up));
  }

  bool WaitUp(int up) {
    return WaitFor([&] { return metrics_.workers_up->value() == up; });
  }

  // Waits (polling: the pool's gauges have no notification) until `pred` holds.
  template <typename Pred>
  static bool WaitFor(Pred pred) {
    const auto deadline = std::chrono::steady_clock::now() + kEventTimeout;
    while (!pred()) {
      if (std::chrono::steady_clock::now() >= deadline) return false;
      std::this_thread::sleep_for(milliseconds(5));
    }
    return true;
  }

  // Waits until the readiness callback has been called `n` times; returns its values.
  std::vector<bool> WaitReadiness(size_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, kEventTimeout, [&] { return readiness_.size() >= n; });
    return readiness_;
  }

  // The first of `workers` that holds a call, once one does; nullptr after kEventTimeout.
  static FakeWorker* WaitHolder(const std::vector<FakeWorker*>& workers) {
    FakeWorker* holder = nullptr;
    WaitFor([&] {
      for (FakeWorker* w : workers) {
        if (w->held() > 0) holder = w;
      }
      return holder != nullptr;
    });
    return holder;
  }

  ServeConfig config_;
  MetricsRegistry registry_;
  ServerMetrics metrics_;
  FakeFleet fleet_;  // outlives pool_
  Completions completions_;
  rankd::v1::ScoreRequest request_;
  std::unique_ptr<WorkerPool> pool_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<bool> readiness_;
};

TEST_F(WorkerPoolTest, AnswersThroughAWorker) {
  StartPool(1, 1);
  auto work = completions_.Make(&request_);
  ASSERT_TRUE(pool_->Submit({work}).ok());
  std::optional<absl::Status> status = completions_.Wait(0);
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(status->ok()) << *status;
  ASSERT_EQ(work->result().scores_size(), 3);
  EXPECT_EQ(work->result().scores(2), 2);
  EXPECT_EQ(metrics_.items_scored->value(), 3);
}

// A worker's error about item j of the items it was sent reaches the work's `done` about the
// caller's item: in the message and as data (its FieldError), for ScoreCall's transports to render.
TEST_F(WorkerPoolTest, AWorkersItemErrorNamesTheCallersItemAsData) {
  fleet_.SetMode(0, FakeWorker::Mode::kRefuseItem1);
  StartPool(1, 1);
  const rankd::v1::ScoreRequest request = Request(10);
  std::mutex mu;
  std::condition_variable cv;
  std::optional<absl::Status> done;
  // The caller's items 4, 6 and 9 (a Score call's cache misses): the worker's item 1 is item 6.
  auto work = std::make_shared<Work>(&request, std::vector<int>{4, 6, 9}, /*interactive=*/true,
                                     WallTime::max(), [&](const absl::Status& s, Work&) {
                                       std::lock_guard<std::mutex> lock(mu);
                                       done = s;
                                       cv.notify_all();
                                     });
  ASSERT_TRUE(pool_->Submit({work}).ok());
  std::unique_lock<std::mutex> lock(mu);
  ASSERT_TRUE(cv.wait_for(lock, kEventTimeout, [&] { return done.has_value(); }));
  EXPECT_EQ(done->code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(done->message(), "items[6].text: at least 9 tokens exceeds max_item_tokens=8");
  const std::optional<FieldError> error = GetFieldError(*done);
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->item, 6);
  EXPECT_EQ(error->field, ".text");
  EXPECT_EQ(error->limit, "max_item_tokens");
}

TEST_F(WorkerPoolTest, DispatchesToTheLeastLoadedWorker) {
  // Worker 0 holds its calls, worker 1 answers at once: with least-loaded dispatch worker 0 gets
  // at most one of the calls sent one after another (round robin would give it half).
  fleet_.SetMode(0, FakeWorker::Mode::kHold);
  StartPool(2, 2);
  FakeWorker* holder = fleet_.WaitLaunch(0, 0);
  FakeWorker* answerer = fleet_.WaitLaunch(1, 0);
  constexpr int kWorks = 8;
  std::vector<std::shared_ptr<Work>> works;
  for (int i = 0; i < kWorks; ++i) {
    // Answered by worker 1, or held by worker 0.
    const size_t held = holder->held();
    works.push_back(completions_.Make(&request_));
    ASSERT_TRUE(pool_->Submit({works.back()}).ok());
    ASSERT_TRUE(WaitFor([&] { return completions_.done(i) || holder->held() > held; }))
        << i << " held " << holder->held() << " answered " << answerer->calls();
  }
  EXPECT_LE(holder->held(), 1u);
  EXPECT_GE(answerer->calls(), kWorks - 1);
  holder->ReleaseAll();
  for (int i = 0; i < kWorks; ++i) EXPECT_TRUE(completions_.Wait(i)->ok()) << i;
}

TEST_F(WorkerPoolTest, CallsOfAWorkerThatDiesGoOnceToAnotherThenFailRetryable) {
  for (int i = 0; i < 3; ++i) fleet_.SetMode(i, FakeWorker::Mode::kHold);
  config_.workers.restart_backoff_s = config_.workers.restart_backoff_max_s = 60;  // stay down
  StartPool(3, 3);
  std::vector<FakeWorker*> workers = {fleet_.WaitLaunch(0, 0), fleet_.WaitLaunch(1, 0),
                                      fleet_.WaitLaunch(2, 0)};
  ASSERT_TRUE(pool_->Submit({completions_.Make(&request_)}).ok());
  FakeWorker* first = WaitHolder(workers);
  ASSERT_NE(first, nullptr);
  first->Exit("killed by signal 11 (Segmentation fault)");
  workers.erase(std::find(workers.begin(), workers.end(), first));
  FakeWorker* second = WaitHolder(workers);  // the retry
  ASSERT_NE(second, nullptr);
  EXPECT_FALSE(completions_.done(0));
  EXPECT_EQ(metrics_.retries->value(), 1);
  // The third worker is up, but a call is sent again only once.
  second->Exit("killed by signal 11 (Segmentation fault)");
  std::optional<absl::Status> status = completions_.Wait(0);
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(status->code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(status->message()), HasSubstr("this was the retry"));
  workers.erase(std::find(workers.begin(), workers.end(), second));
  EXPECT_EQ(workers[0]->calls(), 0);
  EXPECT_EQ(metrics_.retries->value(), 1);
}

TEST_F(WorkerPoolTest, TheLastWorkerDyingFailsItsCallsRetryable) {
  fleet_.SetMode(0, FakeWorker::Mode::kHold);
  config_.workers.restart_backoff_s = config_.workers.restart_backoff_max_s = 60;
  StartPool(1, 1);
  FakeWorker* worker = fleet_.WaitLaunch(0, 0);
  ASSERT_TRUE(pool_->Submit({completions_.Make(&request_)}).ok());
  ASSERT_TRUE(worker->WaitHeld(1));
  worker->Exit("killed by signal 9 (Killed)");
  std::optional<absl::Status> status = completions_.Wait(0);
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(status->code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(status->message()), HasSubstr("no other worker is up"));
  ASSERT_TRUE(WaitUp(0));
  absl::Status refused = pool_->Submit({completions_.Make(&request_)});
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable) << refused;
}

TEST_F(WorkerPoolTest, AFullQueueRefusesAtOnce) {
  fleet_.SetMode(0, FakeWorker::Mode::kHold);
  config_.workers.max_inflight = 1;
  config_.server.queue_size = 1;
  StartPool(1, 1);
  FakeWorker* worker = fleet_.WaitLaunch(0, 0);
  ASSERT_TRUE(pool_->Submit({completions_.Make(&request_)}).ok());  // running
  ASSERT_TRUE(worker->WaitHeld(1));
  ASSERT_TRUE(pool_->Submit({completions_.Make(&request_)}).ok());  // queued
  absl::Status full = pool_->Submit({completions_.Make(&request_)});
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted) << full;
  EXPECT_THAT(std::string(full.message()), HasSubstr("queue full"));
  EXPECT_EQ(metrics_.queue_depth->value(), 1);
  // All or none: two works with one place left in the queue are refused together.
  worker->ReleaseAll();
  ASSERT_TRUE(completions_.Wait(0)->ok());
  ASSERT_TRUE(worker->WaitHeld(1));  // the queued one
  EXPECT_EQ(pool_->Submit({completions_.Make(&request_), completions_.Make(&request_)}).code(),
            absl::StatusCode::kResourceExhausted);
  worker->ReleaseAll();
  EXPECT_TRUE(completions_.Wait(1)->ok());
}

TEST_F(WorkerPoolTest, CancelEndsQueuedWorkAtOnceAndRunningWorkByCancellingTheCall) {
  fleet_.SetMode(0, FakeWorker::Mode::kHold);
  config_.workers.max_inflight = 1;
  StartPool(1, 1);
  FakeWorker* worker = fleet_.WaitLaunch(0, 0);
  auto running = completions_.Make(&request_);
  auto queued = completions_.Make(&request_);
  ASSERT_TRUE(pool_->Submit({running}).ok());
  ASSERT_TRUE(worker->WaitHeld(1));
  ASSERT_TRUE(pool_->Submit({queued}).ok());
  pool_->Cancel(queued);
  ASSERT_TRUE(completions_.done(1));  // at once, on this thread
  EXPECT_EQ(completions_.Wait(1)->code(), absl::StatusCode::kCancelled);
  pool_->Cancel(running);
  std::optional<absl::Status> status = completions_.Wait(0);
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(status->code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(status->message(), "cancelled by the client");
  EXPECT_TRUE(pool_->WaitIdle(kEventTimeout));
  EXPECT_EQ(metrics_.retries->value(), 0);
}

TEST_F(WorkerPoolTest, DrainRefusesNewWorkAndWaitIdleWaitsForTheRunningWork) {
  fleet_.SetMode(0, FakeWorker::Mode::kHold);
  StartPool(1, 1);
  FakeWorker* worker = fleet_.WaitLaunch(0, 0);
  EXPECT_EQ(WaitReadiness(1), std::vector<bool>{true});
  ASSERT_TRUE(pool_->Submit({completions_.Make(&request_)}).ok());
  ASSERT_TRUE(worker->WaitHeld(1));
  pool_->StartDrain();
  EXPECT_FALSE(pool_->ready());
  EXPECT_EQ(WaitReadiness(2), (std::vector<bool>{true, false}));
  absl::Status refused = pool_->Submit({completions_.Make(&request_)});
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(refused.message()), HasSubstr("draining"));
  EXPECT_FALSE(pool_->WaitIdle(milliseconds(0)));
  worker->ReleaseAll();
  EXPECT_TRUE(pool_->WaitIdle(kEventTimeout));
  EXPECT_TRUE(completions_.Wait(0)->ok());
}

// ---- traffic shaping -------------------------------------------------------------------------

// One worker that holds its calls, busy with an interactive call (work 0); batch work waits at
// most `batch_max_wait_s`.
class ShapingTest : public WorkerPoolTest {
 protected:
  FakeWorker* StartBusy(double batch_max_wait_s) {
    fleet_.SetMode(0, FakeWorker::Mode::kHold);
    config_.shaping.batch_max_wait_s = batch_max_wait_s;
    StartPool(1, 1);
    FakeWorker* worker = fleet_.WaitLaunch(0, 0);
    EXPECT_TRUE(pool_->Submit({completions_.Make(&request_, /*interactive=*/true)}).ok());
    EXPECT_TRUE(worker->WaitHeld(1));
    return worker;
  }
};

TEST_F(ShapingTest, BatchWorkWaitsWhileInteractiveWorkRunsThenRunsWhenIdle) {
  FakeWorker* worker = StartBusy(600);
  // The one worker is busy with interactive work (load 1 > busy_threshold 0.5): the batch work
  // waits although the worker has free slots, for as long as the interactive call runs.
  auto batch = completions_.Make(&request_, /*interactive=*/false);
  ASSERT_TRUE(pool_->Submit({batch}).ok());
  EXPECT_EQ(metrics_.batch_deferred->value(), 1);
  std::this_thread::sleep_for(milliseconds(200));  // the shaping thread ticks every 10 ms
  EXPECT_EQ(worker->held(), 1u);
  EXPECT_EQ(metrics_.queue_depth->value(), 1);
  EXPECT_GT(metrics_.interactive_load->value(), 0.5);
  // Idle: the batch work goes without any other event.
  worker->ReleaseAll();
  ASSERT_TRUE(completions_.Wait(0)->ok());
  ASSERT_TRUE(worker->WaitHeld(1));
  worker->ReleaseAll();
  ASSERT_TRUE(completions_.Wait(1)->ok());
  EXPECT_EQ(metrics_.batch_deferred->value(), 1);  // once per work
  EXPECT_EQ(metrics_.batch_wait_seconds->Read().count, 1u);
  EXPECT_GE(batch->queue_seconds(), 0.2);
}

TEST_F(ShapingTest, BatchWorkPastBatchMaxWaitIsAdmittedAnyway) {
  FakeWorker* worker = StartBusy(0.3);
  auto batch = completions_.Make(&request_, /*interactive=*/false);
  ASSERT_TRUE(pool_->Submit({batch}).ok());
  // The interactive call never ends, yet the batch work is sent once it has waited 0.3 s.
  ASSERT_TRUE(worker->WaitHeld(2));
  EXPECT_FALSE(completions_.done(0));
  worker->ReleaseAll();
  EXPECT_TRUE(completions_.Wait(0)->ok());
  ASSERT_TRUE(completions_.Wait(1)->ok());
  EXPECT_GE(batch->queue_seconds(), 0.3);  // read once done (Work::queue_seconds)
}

TEST_F(WorkerPoolTest, AnInteractiveCallMeetsAFreeSlotBehindABatchBacklog) {
  fleet_.SetMode(0, FakeWorker::Mode::kHold);
  StartPool(1, 1);  // max_inflight 4
  FakeWorker* worker = fleet_.WaitLaunch(0, 0);
  constexpr int kBatch = 6;
  for (int i = 0; i < kBatch; ++i) {
    ASSERT_TRUE(pool_->Submit({completions_.Make(&request_, /*interactive=*/false)}).ok());
  }
  // No interactive load: batch work takes the worker, but one slot stays free.
  ASSERT_TRUE(worker->WaitHeld(3));
  std::this_thread::sleep_for(milliseconds(100));
  EXPECT_EQ(worker->held(), 3u);
  EXPECT_EQ(metrics_.queue_depth->value(), kBatch - 3);
  EXPECT_EQ(metrics_.batch_deferred->value(), 0);
  // An interactive call goes straight to that slot, ahead of the batch backlog.
  auto interactive = completions_.Make(&request_, /*interactive=*/true);
  ASSERT_TRUE(pool_->Submit({interactive}).ok());
  EXPECT_EQ(metrics_.queue_depth->value(), kBatch - 3);  // sent within Submit, not queued
  ASSERT_TRUE(worker->WaitHeld(4));
  // The backlog drains; nothing is lost.
  ASSERT_TRUE(WaitFor([&] {
    worker->ReleaseAll();
    for (int i = 0; i <= kBatch; ++i) {
      if (!completions_.done(i)) return false;
    }
    return true;
  }));
  for (int i = 0; i <= kBatch; ++i) EXPECT_TRUE(completions_.Wait(i)->ok()) << i;
}

// Deadline admission counts for interactive work only the interactive work queued ahead of it
// (a batch backlog does not make its deadline look unmeetable), besides what the workers hold.
TEST_F(WorkerPoolTest, DeadlineAdmissionOfInteractiveWorkIgnoresTheBatchBacklog) {
  fleet_.SetMode(0, FakeWorker::Mode::kHold);
  config_.workers.max_inflight = 2;  // batch: one call at a time
  config_.server.initial_seconds_per_item = 0.001;
  StartPool(1, 1);
  FakeWorker* worker = fleet_.WaitLaunch(0, 0);
  const rankd::v1::ScoreRequest big = Request(1000);  // 1 s of work each at 1 ms an item
  for (int i = 0; i < 6; ++i) {
    ASSERT_TRUE(pool_->Submit({completions_.Make(&big, /*interactive=*/false)}).ok());
  }
  ASSERT_TRUE(worker->WaitHeld(1));
  // 1 s running and 5 s of batch work queued; 3 s left is enough for interactive work.
  const WallTime deadline = std::chrono::system_clock::now() + std::chrono::seconds(3);
  auto interactive = std::make_shared<Work>(&request_, 0, 3, /*interactive=*/true, deadline,
                                            Work::Carry::kWholeRequest, NoDone);
  EXPECT_TRUE(pool_->Submit({interactive}).ok());
  // Batch work with that deadline is behind the backlog: refused at once.
  auto batch = std::make_shared<Work>(&request_, 0, 3, /*interactive=*/false, deadline,
                                      Work::Carry::kWholeRequest, NoDone);
  EXPECT_EQ(pool_->Submit({batch}).code(), absl::StatusCode::kDeadlineExceeded);
  ASSERT_TRUE(WaitFor([&] {
    worker->ReleaseAll();
    for (int i = 0; i < 6; ++i) {
      if (!completions_.done(i)) return false;
    }
    return true;
  }));
}

TEST_F(WorkerPoolTest, ReadinessFollowsTheWorkersUp) {
  config_.workers.min_ready = 2;
  StartPool(2, 2);
  EXPECT_EQ(WaitReadiness(1), std::vector<bool>{true});
  EXPECT_TRUE(pool_->ready());
  fleet_.WaitLaunch(1, 0)->Exit("killed by signal 9 (Killed)");
  // NOT_SERVING while worker 1 is down, SERVING again once its restart is up.
  EXPECT_EQ(WaitReadiness(3), (std::vector<bool>{true, false, true}));
  ASSERT_NE(fleet_.WaitLaunch(1, 1), nullptr);
  EXPECT_TRUE(pool_->ready());
}

TEST_F(WorkerPoolTest, RestartsACrashedWorkerWithBackoff) {
  StartPool(1, 1);
  // Two crashes in a row: restarted after restart_backoff_s, then after twice that (capped by
  // restart_backoff_max_s).
  fleet_.WaitLaunch(0, 0)->Exit("killed by signal 11 (Segmentation fault)");
  FakeWorker* second = fleet_.WaitLaunch(0, 1);
  ASSERT_NE(second, nullptr);
  ASSERT_TRUE(WaitUp(1));
  second->Exit("killed by signal 11 (Segmentation fault)");
  ASSERT_NE(fleet_.WaitLaunch(0, 2), nullptr);
  ASSERT_TRUE(WaitUp(1));
  const auto times = fleet_.LaunchTimes(0);
  ASSERT_EQ(times.size(), 3u);
  EXPECT_GE(times[1] - times[0], milliseconds(200));
  EXPECT_GE(times[2] - times[1], milliseconds(400));
  EXPECT_EQ(metrics_.worker_exits->value(), 2);
  EXPECT_EQ(metrics_.worker_restarts->value(), 2);
  // The restarted worker serves.
  ASSERT_TRUE(pool_->Submit({completions_.Make(&request_)}).ok());
  EXPECT_TRUE(completions_.Wait(0)->ok());
}

TEST_F(WorkerPoolTest, WorkersThatNeverComeUpEndTheStartWithTheLastErrorAfterMaxFailedStarts) {
  config_.workers.max_failed_starts = 3;
  fleet_.FailStarts(0, "model.safetensors: truncated");
  StartPool(1, 0);
  ASSERT_TRUE(WaitFor([&] { return !pool_->start_failure().ok(); }));
  EXPECT_EQ(pool_->start_failure().message(),
            "no worker came up: worker 0 failed 3 starts in a row (workers.max_failed_starts=3); "
            "the last one: exited with status 1: model.safetensors: truncated");
  // No start after the last failed one.
  EXPECT_EQ(fleet_.LaunchTimes(0).size(), 3u);
  EXPECT_FALSE(pool_->ready());
}

TEST_F(WorkerPoolTest, AWorkerThatCameUpOnceIsRestartedWhateverItsFailedStarts) {
  config_.workers.max_failed_starts = 1;
  config_.workers.restart_backoff_s = config_.workers.restart_backoff_max_s = 0;
  StartPool(1, 1);
  fleet_.FailStarts(0, "out of memory");
  fleet_.WaitLaunch(0, 0)->Exit("killed by signal 9 (Killed)");
  ASSERT_NE(fleet_.WaitLaunch(0, 3), nullptr);
  EXPECT_TRUE(pool_->start_failure().ok());
}

TEST_F(WorkerPoolTest, AWorkerThatStopsAnsweringPingsIsKilledAndRestarted) {
  config_.workers.ping_timeout_s = 0.5;
  StartPool(1, 1);
  FakeWorker* hung = fleet_.WaitLaunch(0, 0);
  hung->HangPings();
  FakeWorker* restarted = fleet_.WaitLaunch(0, 1);
  ASSERT_NE(restarted, nullptr);
  const auto signals = fleet_.signals();
  ASSERT_EQ(signals.size(), 1u);
  EXPECT_EQ(signals[0], std::make_pair(hung->pid(), SIGKILL));
  ASSERT_TRUE(WaitUp(1));
  ASSERT_TRUE(pool_->Submit({completions_.Make(&request_)}).ok());
  EXPECT_TRUE(completions_.Wait(0)->ok());
  EXPECT_EQ(restarted->calls(), 1);
}

// The pings' prefix cache stats become rankd_prefix_cache_*{worker}: a restarted worker counts
// from 0 again, and its counts add to its predecessor's.
TEST_F(WorkerPoolTest, PingsCarryThePrefixCacheStatsIntoCountersThatSurviveARestart) {
  StartPool(1, 1);
  const Labels worker = {{"worker", "0"}};
  Counter* hits = registry_.GetCounter("rankd_prefix_cache_hits_total", "", worker);
  Counter* misses = registry_.GetCounter("rankd_prefix_cache_misses_total", "", worker);
  Gauge* bytes = registry_.GetGauge("rankd_prefix_cache_bytes", "", worker);
  FakeWorker* first = fleet_.WaitLaunch(0, 0);
  first->SetPrefixCache(5, 2, 4096);
  ASSERT_TRUE(WaitFor([&] { return hits->value() == 5 && bytes->value() == 4096; }));
  first->SetPrefixCache(9, 3, 8192);
  ASSERT_TRUE(WaitFor([&] { return hits->value() == 9 && bytes->value() == 8192; }));
  EXPECT_EQ(misses->value(), 3);
  first->Exit("killed by signal 11 (Segmentation fault)");
  FakeWorker* second = fleet_.WaitLaunch(0, 1);
  ASSERT_NE(second, nullptr);
  second->SetPrefixCache(2, 1, 512);
  ASSERT_TRUE(WaitFor([&] { return hits->value() == 11 && bytes->value() == 512; }));
  EXPECT_EQ(misses->value(), 4);
}

TEST_F(WorkerPoolTest, ShutdownStopsTheWorkersWithSigterm) {
  StartPool(2, 2);
  pool_->Shutdown();
  EXPECT_EQ(metrics_.workers_up->value(), 0);
  const auto signals = fleet_.signals();
  ASSERT_EQ(signals.size(), 2u);
  for (const auto& [pid, signal] : signals) EXPECT_EQ(signal, SIGTERM) << pid;
  EXPECT_EQ(pool_->Submit({completions_.Make(&request_)}).code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace rankd::server
