#include "rankd/worker/worker.h"

#include <unistd.h>

#include <climits>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "grpcpp/grpcpp.h"
#include "rankd/common/logging.h"
#include "rankd/common/status.h"
#include "rankd/v1/worker.grpc.pb.h"
#include "spdlog/spdlog.h"

namespace rankd::worker {
namespace {

using Clock = std::chrono::steady_clock;
using rankd::v1::Item;
using rankd::worker::v1::WorkItem;
using rankd::worker::v1::WorkResult;

double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// The engine names items by their index in the list it was given ("items[3].text: ..."); a work
// item's list starts at `begin` of the request.
absl::Status ShiftItemIndex(const absl::Status& s, int begin) {
  absl::string_view rest = s.message();
  if (begin == 0 || !absl::ConsumePrefix(&rest, "items[")) return s;
  const size_t close = rest.find(']');
  int index = 0;
  if (close == absl::string_view::npos || !absl::SimpleAtoi(rest.substr(0, close), &index)) {
    return s;
  }
  return absl::Status(s.code(), absl::StrCat("items[", index + begin, rest.substr(close)));
}

absl::Status Invalid(absl::string_view field, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", why));
}

}  // namespace

absl::StatusOr<WorkResult> ScoreWorkItem(engine::Engine& engine, const WorkItem& work,
                                         const TokenLimits& limits) {
  const Clock::time_point start = Clock::now();
  const rankd::v1::ScoreRequest& request = work.request();
  const int begin = work.begin(), end = work.end();
  if (begin < 0 || end > request.items_size() || begin >= end) {
    return absl::InvalidArgumentError(absl::StrCat("work item range [", begin, ", ", end,
                                                   ") is outside the request's ",
                                                   request.items_size(), " items"));
  }
  engine::ScoreRequest scoring;
  std::vector<int32_t> prefix;
  if (request.query_ids_size() > 0) {
    prefix.assign(request.query_ids().begin(), request.query_ids().end());
  } else {
    RANKD_ASSIGN_OR_RETURN(prefix, engine.EncodeQuery(request.query()));
  }
  if (static_cast<int64_t>(prefix.size()) > limits.max_query_tokens) {
    return Invalid(request.query_ids_size() > 0 ? "query_ids" : "query",
                   absl::StrCat(prefix.size(),
                                " tokens (template and BOS included) exceeds "
                                "max_query_tokens=",
                                limits.max_query_tokens));
  }
  std::vector<engine::Item> items;
  items.reserve(end - begin);
  for (int i = begin; i < end; ++i) {
    const Item& it = request.items(i);
    switch (it.content_case()) {
      case Item::kText:
        items.push_back(engine::Item::Text(it.text()));
        break;
      case Item::kTokenIds:
        items.push_back(engine::Item::Ids(
            std::vector<int32_t>(it.token_ids().ids().begin(), it.token_ids().ids().end())));
        break;
      case Item::kEmbedding:
        items.push_back(engine::Item::Embedding(
            std::vector<float>(it.embedding().values().begin(), it.embedding().values().end())));
        break;
      case Item::CONTENT_NOT_SET:
        return Invalid(absl::StrCat("items[", i, "]"), "no content");
    }
  }
  // Tokenize once to check the limits, then hand the engine the ids.
  absl::StatusOr<engine::ItemBatch> batch = engine.EncodeItems(items);
  if (!batch.ok()) return ShiftItemIndex(batch.status(), begin);
  if (batch->num_tokens() > limits.max_request_tokens) {
    return Invalid("items", absl::StrCat(batch->num_tokens(), " tokens exceeds max_request_tokens=",
                                         limits.max_request_tokens));
  }
  for (int j = 0; j < batch->num_items(); ++j) {
    if (batch->item_length(j) > limits.max_item_tokens) {
      const char* field = items[j].kind == engine::Item::Kind::kText  ? ".text"
                          : items[j].kind == engine::Item::Kind::kIds ? ".token_ids"
                                                                      : ".embedding";
      return Invalid(absl::StrCat("items[", begin + j, "]", field),
                     absl::StrCat(batch->item_length(j),
                                  " tokens exceeds max_item_tokens=", limits.max_item_tokens));
    }
    if (items[j].kind == engine::Item::Kind::kText) {
      const int32_t* t = batch->tokens.data() + batch->offsets[j];
      items[j] = engine::Item::Ids(std::vector<int32_t>(t, t + batch->item_length(j)));
    }
  }
  scoring.query_ids = std::move(prefix);
  scoring.items = std::move(items);
  scoring.apply_sigmoid = request.apply_sigmoid();
  absl::StatusOr<engine::ScoreResult> scored = engine.Score(scoring);
  if (!scored.ok()) return ShiftItemIndex(scored.status(), begin);
  WorkResult result;
  result.mutable_scores()->Add(scored->scores.begin(), scored->scores.end());
  result.set_prefix_tokens(scored->prefix_tokens);
  result.set_item_tokens(scored->item_tokens);
  result.set_compute_seconds(SecondsSince(start));
  return result;
}

namespace {

// The Worker service: Score calls are queued for the engine thread (Run), pings answered at once.
class WorkerService final : public rankd::worker::v1::Worker::CallbackService {
 public:
  WorkerService(engine::Engine* engine, const WorkerOptions& options)
      : engine_(engine), options_(options) {}

  grpc::ServerUnaryReactor* Score(grpc::CallbackServerContext* context, const WorkItem* request,
                                  WorkResult* response) override {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!stopping_) {
        queue_.push_back({context, request, response, reactor, Clock::now()});
        cv_.notify_one();
        return reactor;
      }
    }
    reactor->Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "the worker is stopping"));
    return reactor;
  }

  grpc::ServerUnaryReactor* Ping(grpc::CallbackServerContext* context,
                                 const rankd::worker::v1::PingRequest*,
                                 rankd::worker::v1::PingResponse* response) override {
    response->set_pid(getpid());
    response->set_model(options_.model_name);
    response->set_backend(std::string(engine_->backend().name()));
    {
      std::lock_guard<std::mutex> lock(mu_);
      response->set_pending(static_cast<int>(queue_.size()) + (busy_ ? 1 : 0));
      response->set_scored_requests(scored_);
    }
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

  // The engine thread: one work item at a time until Stop.
  void Run() {
    while (true) {
      Job job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
        if (stopping_) break;
        job = queue_.front();
        queue_.pop_front();
        busy_ = true;
      }
      grpc::Status status;
      if (job.context->IsCancelled()) {
        status = grpc::Status(grpc::StatusCode::CANCELLED, "cancelled before scoring");
      } else {
        const double waited = SecondsSince(job.enqueued_at);
        absl::StatusOr<WorkResult> result = ScoreWorkItem(*engine_, *job.request, options_.limits);
        if (result.ok()) {
          *job.response = std::move(*result);
          job.response->set_wait_seconds(waited);
        } else {
          status = grpc::Status(static_cast<grpc::StatusCode>(result.status().code()),
                                std::string(result.status().message()));
        }
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        busy_ = false;
        ++scored_;
      }
      job.reactor->Finish(status);
    }
    // Stopping: whatever still waits is answered, so that the server can shut down.
    std::deque<Job> left;
    {
      std::lock_guard<std::mutex> lock(mu_);
      left.swap(queue_);
    }
    for (Job& job : left) {
      job.reactor->Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "the worker is stopping"));
    }
  }

  void Stop() {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    cv_.notify_all();
  }

 private:
  struct Job {
    grpc::CallbackServerContext* context = nullptr;
    const WorkItem* request = nullptr;
    WorkResult* response = nullptr;
    grpc::ServerUnaryReactor* reactor = nullptr;
    Clock::time_point enqueued_at;
  };

  engine::Engine* const engine_;
  const WorkerOptions& options_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> queue_;
  bool busy_ = false;
  bool stopping_ = false;
  int64_t scored_ = 0;
};

}  // namespace

absl::Status RunWorker(const WorkerOptions& options) {
  const Clock::time_point start = Clock::now();
  RANKD_ASSIGN_OR_RETURN(std::unique_ptr<engine::Engine> engine,
                         engine::Engine::Create(options.engine));
  {
    // Warm-up: the first call pays for lazy initialization (thread pools, allocations).
    engine::ScoreRequest warm;
    warm.query = "warm up";
    warm.items.push_back(engine::Item::Text("warm up"));
    absl::StatusOr<engine::ScoreResult> r = engine->Score(warm);
    if (!r.ok()) return Annotate(r.status(), "warm-up");
  }
  WorkerService service(engine.get(), options);
  ::unlink(options.socket_path.c_str());
  grpc::ServerBuilder builder;
  builder.AddListeningPort(absl::StrCat("unix:", options.socket_path),
                           grpc::InsecureServerCredentials());
  builder.SetMaxReceiveMessageSize(
      static_cast<int>(std::min<int64_t>(INT_MAX, 2 * options.max_message_bytes + (1 << 20))));
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot listen on unix:", options.socket_path));
  }
  std::thread engine_thread([&service] { service.Run(); });
  spdlog::info("worker {} ready on {} ({:.2f} s)", options.index, options.socket_path,
               SecondsSince(start));
  const pid_t parent = getppid();
  while (!options.wait_for_stop(std::chrono::milliseconds(500))) {
    if (getppid() != parent) {
      spdlog::warn("the front end (pid {}) is gone: stopping", parent);
      break;
    }
  }
  service.Stop();
  engine_thread.join();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  ::unlink(options.socket_path.c_str());
  spdlog::info("worker {} stopped", options.index);
  return absl::OkStatus();
}

}  // namespace rankd::worker
