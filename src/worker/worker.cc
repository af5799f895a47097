#include "rankd/worker/worker.h"

#include <malloc.h>
#include <unistd.h>

#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "grpcpp/grpcpp.h"
#include "rankd/backend/registry.h"
#include "rankd/common/field_error.h"
#include "rankd/common/grpc_status.h"
#include "rankd/common/logging.h"
#include "rankd/common/moving_rate.h"
#include "rankd/common/status.h"
#include "rankd/internal/worker.grpc.pb.h"
#include "rankd/model/identity.h"
#include "rankd/model/input_checks.h"
#include "rankd/protocol/protocol.h"
#include "rankd/worker/step_scheduler.h"
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

// TRUNCATE_END's byte cut: the longest prefix of valid UTF-8 `text` of at most `max_bytes` bytes
// that ends on a character boundary.
absl::string_view Utf8Prefix(absl::string_view text, int64_t max_bytes) {
  if (static_cast<int64_t>(text.size()) <= max_bytes) return text;
  size_t n = static_cast<size_t>(max_bytes);
  while (n > 0 && (static_cast<unsigned char>(text[n]) & 0xC0) == 0x80) --n;
  return text.substr(0, n);
}

// Work items with more text than this give the memory freed by their preparation back to the
// system (malloc_trim) once prepared: glibc would keep it in its arenas, resident in every worker
// that once served a large request.
constexpr size_t kTrimAfterTextBytes = size_t{1} << 20;

}  // namespace

absl::Status CheckModelIdentity(const protocol::WorkerSetup& setup) {
  RANKD_ASSIGN_OR_RETURN(const std::string found, model::ModelIdentity(setup.engine.model_dir));
  if (found == setup.model_identity) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "model.dir ", setup.engine.model_dir, " now holds model ", found, ", not ",
      setup.model_identity,
      ", the one rankd serve started with (the directory was rewritten while serving): refusing "
      "to serve it beside the workers that serve the other; restart rankd serve to serve the new "
      "model"));
}

engine::EngineOptions WorkerEngineOptions(const protocol::WorkerSetup& setup) {
  engine::EngineOptions o = setup.engine;
  o.backend.device = 0;
  return o;
}

absl::StatusOr<engine::PreparedRequest> PrepareWorkItem(const engine::Engine& engine,
                                                        const WorkItem& work,
                                                        const protocol::Limits& limits) {
  const rankd::v1::ScoreRequest& request = work.request();
  const int begin = work.begin(), end = work.end();
  if (begin < 0 || end > request.items_size() || begin >= end) {
    return absl::InvalidArgumentError(absl::StrCat("work item range [", begin, ", ", end,
                                                   ") is outside the request's ",
                                                   request.items_size(), " items"));
  }
  engine::PreparedRequest prepared;
  prepared.apply_sigmoid = request.apply_sigmoid();
  // TRUNCATE_END: what is over a limit is cut here, the one place for every query and item kind
  // (the front end lets it through); else refused.
  const bool cut = protocol::TruncatesAtEnd(request, limits);
  const bool from_ids = request.query_ids_size() > 0;
  std::vector<int32_t>& prefix = prepared.prefix_ids;
  if (from_ids) {
    prefix.assign(request.query_ids().begin(), request.query_ids().end());
  } else {
    // The front end refused a query over its byte limit unless cut: then only its first bytes
    // are tokenized.
    const absl::string_view query =
        cut ? Utf8Prefix(request.query(), limits.QueryByteLimit()) : request.query();
    RANKD_ASSIGN_OR_RETURN(prefix, engine.EncodeQuery(query));
  }
  if (cut && static_cast<int64_t>(prefix.size()) > limits.max_query_tokens) {
    if (from_ids) {
      prefix.resize(limits.max_query_tokens);  // no template: the first ids
    } else if (auto kept = engine.CutQuery(prefix, limits.max_query_tokens)) {
      prefix = *std::move(kept);
    }
  }
  // A text query's tokens are known only now (the front end checked query_ids).
  if (!from_ids && static_cast<int64_t>(prefix.size()) > limits.max_query_tokens) {
    return InvalidField("query",
                        absl::StrCat(prefix.size(),
                                     " tokens (template and BOS included) exceeds "
                                     "max_query_tokens=",
                                     limits.max_query_tokens),
                        "max_query_tokens");
  }
  // The texts, tokenized once, in parallel. Tokenization stops once an item is over
  // max_item_tokens (EncodeBounded): its entry then holds its first ids, which is all that
  // cutting keeps and all that refusing needs.
  std::vector<int> text_item;  // encoded[t] is of item text_item[t] of the request
  absl::StatusOr<std::vector<std::vector<int32_t>>> encoded;
  {
    std::vector<std::string> texts;
    size_t text_bytes = request.query().size();
    for (int i = begin; i < end; ++i) {
      const Item& it = request.items(i);
      if (it.content_case() != Item::kText) continue;
      // As the query: text over its byte limit came through only to be cut.
      texts.emplace_back(cut ? Utf8Prefix(it.text(), limits.ItemByteLimit()) : it.text());
      text_item.push_back(i);
      text_bytes += it.text().size();
    }
    encoded = engine.EncodeTexts(texts, limits.max_item_tokens);
    texts = {};
    // After a request with much text, the memory its tokenization freed goes back to the system.
    if (text_bytes > kTrimAfterTextBytes) malloc_trim(0);
  }
  RANKD_RETURN_IF_ERROR(encoded.status());
  for (size_t t = 0; t < encoded->size(); ++t) {
    RANKD_RETURN_IF_ERROR(engine::CheckEncodedText(text_item[t], (*encoded)[t]));
  }
  // What a cut item keeps: max_item_tokens, and no more than the model's context leaves after the
  // prefix (a prefix that leaves nothing cuts nothing for it: the context check refuses the item).
  int64_t keep = limits.max_item_tokens;
  const int64_t context = engine.config().max_position_embeddings;
  const int64_t left = context - static_cast<int64_t>(prefix.size());
  if (context > 0 && left > 0) keep = std::min(keep, left);
  const int hidden = engine.config().hidden_size;
  // Every item packed once, from the request's own ids and values (the front end checked them
  // against the vocabulary and the hidden size); a text's ids as tokenized, and cut.
  backend::ItemBatch& items = prepared.items;
  size_t next_text = 0;
  for (int i = begin; i < end; ++i) {
    const Item& it = request.items(i);
    switch (it.content_case()) {
      case Item::kText: {
        std::vector<int32_t>& ids = (*encoded)[next_text++];
        if (cut && static_cast<int64_t>(ids.size()) > keep) {
          if (auto kept = engine.CutTextItem(ids, keep)) ids = *std::move(kept);
        }
        // A text's tokens are known only now (the front end checked its bytes); the count is of
        // the tokens seen before its tokenization stopped.
        if (static_cast<int64_t>(ids.size()) > limits.max_item_tokens) {
          return InvalidItemField(
              i, ".text",
              absl::StrCat("at least ", ids.size(),
                           " tokens exceeds max_item_tokens=", limits.max_item_tokens),
              "max_item_tokens");
        }
        items.AddIds(ids);
        break;
      }
      case Item::kTokenIds: {  // no template: a cut keeps the first ids
        const auto ids =
            absl::MakeConstSpan(it.token_ids().ids().data(), it.token_ids().ids_size());
        items.AddIds(cut ? ids.first(std::min<int64_t>(ids.size(), keep)) : ids);
        break;
      }
      case Item::kEmbedding: {  // a cut keeps the first rows
        const auto values =
            absl::MakeConstSpan(it.embedding().values().data(), it.embedding().values_size());
        items.AddEmbeddings(
            cut ? values.first(std::min<int64_t>(values.size(), keep * hidden)) : values, hidden);
        break;
      }
      case Item::CONTENT_NOT_SET:
        return InvalidItemField(i, "", "no content");
    }
  }
  if (items.num_tokens() > limits.max_request_tokens) {
    return InvalidField("items",
                        absl::StrCat(items.num_tokens(), " tokens exceeds max_request_tokens=",
                                     limits.max_request_tokens),
                        "max_request_tokens");
  }
  // The model's context, for every item whose length beside the prefix the front end could not
  // know: a text's, any item's after a text query, any item's with TRUNCATE_END (validation.cc
  // checks token ids and embedding rows after query_ids).
  for (int j = 0; j < items.num_items(); ++j) {
    if (from_ids && !cut && request.items(begin + j).content_case() != Item::kText) continue;
    RANKD_RETURN_IF_ERROR(
        AtItem(begin + j, model::CheckContextLength(static_cast<int64_t>(prefix.size()),
                                                    items.item_length(j), context, "")));
  }
  return prepared;
}

namespace {

// Deadline slack kept free when sizing an engine step (StepBuilder).
constexpr auto kDeadlineMargin = std::chrono::milliseconds(5);

// The Worker service: Score calls are queued for the engine thread (Run), pings answered at once.
class WorkerService final : public rankd::worker::v1::Worker::CallbackService {
 public:
  WorkerService(engine::Engine* engine, const WorkerOptions& options)
      : engine_(engine),
        options_(options),
        token_budget_(std::max(1, options.setup.engine.backend.max_batch_tokens)) {}

  grpc::ServerUnaryReactor* Score(grpc::CallbackServerContext* context, const WorkItem* request,
                                  WorkResult* response) override {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    Job job;
    job.context = context;
    job.request = request;
    job.response = response;
    job.reactor = reactor;
    job.enqueued_at = Clock::now();
    job.deadline = SteadyDeadline(context->deadline(), job.enqueued_at);
    job.interactive = request->request().priority() != rankd::v1::PRIORITY_BATCH;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!stopping_) {
        const bool interactive = job.interactive;
        queue_.Push(std::move(job), interactive);
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
    response->set_model(options_.setup.model_name);
    response->set_backend(std::string(engine_->backend().name()));
    const engine::PrefixCache::Stats cache = engine_->prefix_cache_stats();  // any thread
    rankd::worker::v1::PrefixCacheStats* out = response->mutable_prefix_cache();
    out->set_hits(cache.hits);
    out->set_misses(cache.misses);
    out->set_evictions(cache.evictions);
    out->set_bytes(static_cast<int64_t>(cache.bytes));
    out->set_entries(static_cast<int64_t>(cache.entries));
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

  // The engine thread: one engine step at a time until Stop.
  void Run() {
    while (true) {
      std::vector<Job> step = TakeStep();
      if (step.empty()) break;
      RunStep(step);
    }
    // Stopping: whatever still waits is answered, so that the server can shut down.
    std::vector<Job> left;
    {
      std::lock_guard<std::mutex> lock(mu_);
      while (std::optional<Job> job = queue_.Pop()) left.push_back(std::move(*job));
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
    Clock::time_point deadline;  // the call's gRPC deadline on this clock
    bool interactive = true;
    // Once prepared (a job that did not fit a step keeps it for the next).
    std::optional<engine::PreparedRequest> prepared;
    int64_t tokens = 0;  // prefix and item tokens of `prepared`
    int items = 0;
    std::vector<int64_t> item_tokens;  // [items] tokens (or embedding rows) of each
    // This step's part: items [next, slice_end) and their tokens with the prefix's. All that is
    // left, or for a batch job over the token budget a slice (SliceEnd); the scores of earlier
    // slices are in `response` already.
    int next = 0, slice_end = 0;
    int64_t slice_tokens = 0;
    bool started = false;        // a slice was scored (wait_seconds is set)
    double compute_seconds = 0;  // of the slices so far
  };

  // The engine request of the job's slice: the prepared request itself when the slice is all
  // of it, else the prefix and a batch of the slice's items.
  engine::PreparedRequest TakeSlice(Job& job) const {
    if (job.next == 0 && job.slice_end == job.items) return std::move(*job.prepared);
    engine::PreparedRequest slice;
    slice.prefix_ids = job.prepared->prefix_ids;
    slice.items = job.prepared->items.Slice(job.next, job.slice_end, engine_->config().hidden_size);
    slice.apply_sigmoid = job.prepared->apply_sigmoid;
    return slice;
  }

  static Clock::time_point SteadyDeadline(std::chrono::system_clock::time_point deadline,
                                          Clock::time_point now) {
    const auto left = deadline - std::chrono::system_clock::now();
    if (left > std::chrono::hours(24)) return now + std::chrono::hours(24);  // none set
    return now + std::chrono::duration_cast<Clock::duration>(left);
  }

  // Answers a job the engine thread has taken.
  static void Finish(Job& job, const grpc::Status& status) { job.reactor->Finish(status); }

  // Waits for work and gathers one engine step: queued jobs, interactive first, while
  // StepBuilder says yes. Jobs cancelled, past their deadline or invalid are answered on the way.
  // Empty when stopping.
  std::vector<Job> TakeStep() {
    std::vector<Job> step;
    StepBuilder builder(token_budget_, seconds_per_token_, kDeadlineMargin);
    while (true) {
      Job job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        if (step.empty()) {
          cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
        }
        if (stopping_ && step.empty()) return step;
        std::optional<Job> next = queue_.Pop();
        if (!next) break;
        job = std::move(*next);
      }
      const Clock::time_point now = Clock::now();
      if (job.context->IsCancelled()) {
        Finish(job, grpc::Status(grpc::StatusCode::CANCELLED, "cancelled before scoring"));
        continue;
      }
      if (now >= job.deadline) {
        Finish(job, grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                                 "deadline exceeded in the worker's queue"));
        continue;
      }
      if (!job.prepared) {
        absl::StatusOr<engine::PreparedRequest> prepared =
            PrepareWorkItem(*engine_, *job.request, options_.setup.limits);
        if (!prepared.ok()) {
          Finish(job, protocol::ToWorkerStatus(prepared.status()));
          continue;
        }
        const backend::ItemBatch& items = prepared->items;
        job.items = items.num_items();
        job.item_tokens.reserve(job.items);
        for (int j = 0; j < job.items; ++j) job.item_tokens.push_back(items.item_length(j));
        job.tokens = static_cast<int64_t>(prepared->prefix_ids.size()) + items.num_tokens();
        job.prepared = *std::move(prepared);
      }
      // A sliced job's slice fills what the step has left of the budget (all of it in a step of
      // its own); one that does not fit beside the step's other jobs waits for the next step.
      const auto prefix_tokens = static_cast<int64_t>(job.prepared->prefix_ids.size());
      const bool sliced = !job.interactive && job.tokens > token_budget_;
      const int64_t budget_left = token_budget_ - builder.tokens();
      job.slice_end =
          sliced ? SliceEnd(job.item_tokens, job.next, prefix_tokens, budget_left) : job.items;
      job.slice_tokens = prefix_tokens;
      for (int j = job.next; j < job.slice_end; ++j) job.slice_tokens += job.item_tokens[j];
      if ((sliced && builder.jobs() > 0 && job.slice_tokens > budget_left) ||
          !builder.TryAdd(job.slice_tokens, job.deadline, now)) {
        // Not in this step: back to the head of its queue, prepared.
        std::lock_guard<std::mutex> lock(mu_);
        const bool interactive = job.interactive;
        queue_.PushFront(std::move(job), interactive);
        break;
      }
      step.push_back(std::move(job));
      if (builder.full()) break;
    }
    return step;
  }

  // Scores one engine step and answers each job as soon as its scores are ready.
  void RunStep(std::vector<Job>& step) {
    const Clock::time_point start = Clock::now();
    std::vector<engine::PreparedRequest> requests;
    int64_t step_tokens = 0;
    requests.reserve(step.size());
    for (Job& job : step) {
      requests.push_back(TakeSlice(job));
      step_tokens += job.slice_tokens;
    }
    std::vector<Clock::time_point> answered_at(step.size());
    bool scored_any = false;
    std::vector<size_t> unfinished;            // sliced jobs with items left
    std::vector<engine::PassInfo> unreported;  // passes not yet attached to an answer
    auto on_pass = [&](const engine::PassInfo& pass) { unreported.push_back(pass); };
    auto on_done = [&](size_t i, absl::StatusOr<engine::ScoreResult> scored) {
      Job& job = step[i];
      answered_at[i] = Clock::now();
      if (!scored.ok()) {
        // The engine takes the prepared request as given: its errors are the backend's and the
        // device's, about no item of the caller's.
        Finish(job, protocol::ToWorkerStatus(scored.status()));
        return;
      }
      scored_any = true;
      WorkResult& result = *job.response;
      result.mutable_scores()->Add(scored->scores.begin(), scored->scores.end());
      result.set_prefix_tokens(scored->prefix_tokens);
      result.set_item_tokens(result.item_tokens() + scored->item_tokens);
      if (!job.started) {
        result.set_wait_seconds(std::chrono::duration<double>(start - job.enqueued_at).count());
        job.started = true;
      }
      for (const engine::PassInfo& pass : unreported) {
        result.add_pass_requests(pass.groups);
        result.add_pass_items(pass.items);
      }
      unreported.clear();
      // The step's time by tokens so far (the answer cannot wait for the whole step's).
      job.compute_seconds += std::chrono::duration<double>(answered_at[i] - start).count() *
                             static_cast<double>(job.slice_tokens) /
                             static_cast<double>(std::max<int64_t>(1, TokensUpTo(step, i)));
      result.set_compute_seconds(job.compute_seconds);
      job.next = job.slice_end;
      if (job.next < job.items) {
        unfinished.push_back(i);
        return;
      }
      Finish(job, grpc::Status::OK);
    };
    engine_->ScoreMany(requests, on_done, on_pass);
    if (!unfinished.empty()) {
      // Back to the head of the batch queue, in their order: interactive work goes first.
      std::lock_guard<std::mutex> lock(mu_);
      for (auto i = unfinished.rbegin(); i != unfinished.rend(); ++i) {
        queue_.PushFront(std::move(step[*i]), /*interactive=*/false);
      }
    }
    const double seconds = SecondsSince(start);
    if (scored_any && step_tokens > 0) {
      seconds_per_token_ =
          UpdateRate(seconds_per_token_, seconds / static_cast<double>(step_tokens));
    }
  }

  // Tokens of jobs [0, i] of the step (their slices).
  static int64_t TokensUpTo(const std::vector<Job>& step, size_t i) {
    int64_t t = 0;
    for (size_t k = 0; k <= i; ++k) t += step[k].slice_tokens;
    return t;
  }

  engine::Engine* const engine_;
  const WorkerOptions& options_;
  const int64_t token_budget_;
  double seconds_per_token_ = 0;  // engine thread only; 0 until the first step is measured
  std::mutex mu_;
  std::condition_variable cv_;
  JobQueue<Job> queue_;
  bool stopping_ = false;
};

}  // namespace

absl::Status RunWorker(const WorkerOptions& options) {
  const Clock::time_point start = Clock::now();
  // Before and after the load: the directory may be rewritten while the weights are read.
  RANKD_RETURN_IF_ERROR(CheckModelIdentity(options.setup));
  RANKD_ASSIGN_OR_RETURN(
      std::unique_ptr<engine::Engine> engine,
      engine::Engine::Create(WorkerEngineOptions(options.setup), backend::CreateBackend));
  {
    // Warm-up: the first call pays for lazy initialization (thread pools, allocations).
    engine::ScoreRequest warm;
    warm.query = "warm up";
    warm.items.push_back(engine::Item::Text("warm up"));
    absl::StatusOr<engine::ScoreResult> r = engine->Score(warm);
    if (!r.ok()) return Annotate(r.status(), "warm-up");
  }
  RANKD_RETURN_IF_ERROR(CheckModelIdentity(options.setup));
  WorkerService service(engine.get(), options);
  ::unlink(options.socket_path.c_str());
  grpc::ServerBuilder builder;
  builder.AddListeningPort(absl::StrCat("unix:", options.socket_path),
                           grpc::InsecureServerCredentials());
  builder.SetMaxReceiveMessageSize(protocol::TransportMessageLimit(options.setup.limits.max_message_bytes));
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
