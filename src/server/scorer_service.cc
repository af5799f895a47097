#include "rankd/server/scorer_service.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/strings/str_cat.h"
#include "rankd/common/grpc_status.h"
#include "rankd/common/logging.h"
#include "rankd/server/result_cache.h"
#include "rankd/worker/protocol.h"
#include "spdlog/spdlog.h"

namespace rankd::server {
namespace {

using Clock = std::chrono::steady_clock;
using rankd::v1::ScoreRequest;
using rankd::v1::ScoreResponse;

bool Interactive(const ScoreRequest& request) {
  return request.priority() != rankd::v1::PRIORITY_BATCH;
}

// Appends the entries of items [begin, end) to `response`: those below `scored_end` take their
// score from `result` (whose scores start at item `result_begin`), the rest are unscored.
void AppendScores(const ScoreRequest& request, int begin, int end, int scored_end,
                  const rankd::worker::v1::WorkResult* result, int result_begin,
                  ScoreResponse* response) {
  for (int i = begin; i < end; ++i) {
    rankd::v1::ItemScore* s = response->add_scores();
    if (i < scored_end) {
      s->set_score(result->scores(i - result_begin));
      s->set_scored(true);
    }
    if (!request.items(i).id().empty()) s->set_id(request.items(i).id());
  }
}

// A caller's string for the log, bounded (the log formatter escapes whatever it holds).
absl::string_view ForLog(const std::string& s) { return absl::string_view(s).substr(0, 256); }

// Metrics and the access log of one finished call.
void RecordCall(ScorerService* service, const ScoreRequest& request, const grpc::Status& status,
                Clock::time_point start, absl::string_view rpc) {
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  service->metrics()->request_seconds->Observe(seconds);
  service->metrics()->CountRequest(status.error_code());
  const auto code = GrpcCodeName(status.error_code());
  if (status.error_code() == grpc::StatusCode::INTERNAL ||
      status.error_code() == grpc::StatusCode::UNKNOWN) {
    spdlog::error("{} request_id={} items={} {} in {:.1f} ms: {}", rpc,
                  ForLog(request.request_id()), request.items_size(), code, 1e3 * seconds,
                  ForLog(status.error_message()));
  } else if (service->config().logging.access_log) {
    spdlog::info("{} request_id={} items={} {} in {:.1f} ms{}{}", rpc, ForLog(request.request_id()),
                 request.items_size(), code, 1e3 * seconds, status.ok() ? "" : ": ",
                 ForLog(status.error_message()));
  }
}

class ScoreReactor final : public grpc::ServerUnaryReactor {
 public:
  ScoreReactor(ScorerService* service, grpc::CallbackServerContext* context,
               const ScoreRequest* request, ScoreResponse* response)
      : service_(service), request_(request), response_(response), start_(Clock::now()) {
    absl::Status s = ValidateScoreRequest(*request, service->config().limits, service->model());
    if (!s.ok()) {
      Done(ToGrpcStatus(s));
      return;
    }
    scored_end_ = ItemsToScore(*request, service->default_depth());
    ResultCache* cache = service->cache();
    if (cache->enabled() && !request->skip_cache()) {
      const ResultKeyBuilder keys(service->cache_scope(), *request,
                                  worker::TruncatesAtEnd(*request, service->config().limits));
      keys_.reserve(scored_end_);
      cached_.reserve(scored_end_);
      for (int i = 0; i < scored_end_; ++i) {
        keys_.push_back(keys.ItemKey(request->items(i)));
        cached_.push_back(cache->Get(keys_.back()));
        if (!cached_.back()) misses_.push_back(i);
      }
      if (misses_.empty()) {  // every item answered here: nothing queues
        Answer(nullptr);
        Done(grpc::Status::OK);
        return;
      }
      if (static_cast<int>(misses_.size()) == scored_end_) misses_.clear();  // all: one range
    }
    auto done = [this](const grpc::Status& status, Work& work) { OnWorkDone(status, work); };
    // The worker scores the misses alone (it names them by their index in this call), or the
    // whole range.
    work_ = misses_.empty()
                ? std::make_shared<Work>(request, 0, scored_end_, Interactive(*request),
                                         context->deadline(), Work::Carry::kWholeRequest, done)
                : std::make_shared<Work>(request, misses_, Interactive(*request),
                                         context->deadline(), done);
    s = service->pool()->Submit({work_});
    if (!s.ok()) Done(ToGrpcStatus(s));
  }

  void OnCancel() override {
    if (work_) service_->pool()->Cancel(work_);
  }
  void OnDone() override { delete this; }

 private:
  void OnWorkDone(const grpc::Status& status, Work& work) {
    if (status.ok()) Answer(&work);
    Done(status);
  }

  // The response: items below the depth from the cache or from `work`'s result (null: all
  // cached); the worker's scores fill the cache.
  void Answer(const Work* work) {
    const int n = request_->items_size();
    const int scored_end = scored_end_;
    const rankd::worker::v1::WorkResult* r = work ? &work->result() : nullptr;
    ResultCache* cache = service_->cache();
    size_t next_miss = 0;
    for (int i = 0; i < n; ++i) {
      rankd::v1::ItemScore* s = response_->add_scores();
      if (i < scored_end) {
        s->set_scored(true);
        if (!cached_.empty() && cached_[i]) {
          s->set_score(*cached_[i]);
          s->set_cached(true);
        } else {
          // The worker's scores are the misses' in order (or every item's, index for index).
          const int j = misses_.empty() ? i : static_cast<int>(next_miss++);
          s->set_score(r->scores(j));
          if (!keys_.empty()) cache->Put(keys_[i], r->scores(j));
        }
      }
      if (!request_->items(i).id().empty()) s->set_id(request_->items(i).id());
    }
    response_->set_depth(scored_end);
    response_->set_model(service_->model().name);
    response_->set_request_id(request_->request_id());
    if (r != nullptr) {
      response_->mutable_usage()->set_prefix_tokens(r->prefix_tokens());
      response_->mutable_usage()->set_item_tokens(r->item_tokens());
      response_->mutable_usage()->set_items_scored(work->num_items());
      response_->mutable_timing()->set_queue_seconds(work->queue_seconds());
      response_->mutable_timing()->set_compute_seconds(r->compute_seconds());
    }
  }

  void Done(const grpc::Status& status) {
    RecordCall(service_, *request_, status, start_, "Score");
    if (status.ok()) {
      service_->RecordLatency(std::chrono::duration<double>(Clock::now() - start_).count());
    }
    Finish(status);
  }

  ScorerService* const service_;
  const ScoreRequest* const request_;
  ScoreResponse* const response_;
  const Clock::time_point start_;
  int scored_end_ = 0;  // items [0, scored_end_) are scored (the depth: pinned or the controller's)
  std::shared_ptr<Work> work_;
  // With the result cache: the keys and cached scores of items [0, depth), and the items that
  // missed (empty when none hit: then the whole range goes to the worker).
  std::vector<ResultKey> keys_;
  std::vector<std::optional<float>> cached_;
  std::vector<int> misses_;
};

// Answers in chunks of consecutive items, in order, each as soon as it and those before it are
// scored. Chunks are scored in parallel on the workers.
class ScoreStreamReactor final : public grpc::ServerWriteReactor<ScoreResponse> {
 public:
  ScoreStreamReactor(ScorerService* service, grpc::CallbackServerContext* context,
                     const ScoreRequest* request)
      : service_(service), request_(request), start_(Clock::now()) {
    absl::Status s = ValidateScoreRequest(*request, service->config().limits, service->model());
    if (!s.ok()) {
      status_ = ToGrpcStatus(s);
      remaining_ = 0;
      MaybeFinish();
      return;
    }
    const int n = request->items_size();
    const int scored_end = ItemsToScore(*request);
    const int chunk = service->config().server.stream_chunk_items;
    std::vector<std::shared_ptr<Work>> works;
    for (int b = 0; b < n; b += chunk) {
      Chunk c;
      c.begin = b;
      c.end = std::min(n, b + chunk);
      const int k = static_cast<int>(chunks_.size());
      if (b < scored_end) {
        // Each chunk's worker call carries its own items only: with the whole request, a stream
        // of n items in chunks of c would send and parse n * n / c items.
        c.work = std::make_shared<Work>(
            request, b, std::min(c.end, scored_end), Interactive(*request), context->deadline(),
            Work::Carry::kOwnItems,
            [this, k](const grpc::Status& status, Work& work) { OnWorkDone(k, status, work); });
        works.push_back(c.work);
      } else {
        c.ready = true;  // nothing to score in it
      }
      chunks_.push_back(std::move(c));
    }
    remaining_ = static_cast<int>(works.size());
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (Chunk& c : chunks_) {
        if (c.ready) AppendScores(*request_, c.begin, c.end, 0, nullptr, 0, &c.response);
      }
    }
    s = service->pool()->Submit(works);
    if (!s.ok()) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        status_ = ToGrpcStatus(s);
        remaining_ = 0;
      }
      MaybeFinish();
      return;
    }
    MaybeWrite();
  }

  void OnWriteDone(bool ok) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      writing_ = false;
      ++next_;
      if (!ok && status_.ok()) {
        status_ = grpc::Status(grpc::StatusCode::CANCELLED, "the client went away");
      }
    }
    if (!ok) CancelAll();
    MaybeWrite();
    MaybeFinish();
  }

  void OnCancel() override { CancelAll(); }
  void OnDone() override { delete this; }

 private:
  struct Chunk {
    int begin = 0, end = 0;
    std::shared_ptr<Work> work;  // null when no item of the chunk is scored
    bool ready = false;
    ScoreResponse response;
  };

  void OnWorkDone(int k, const grpc::Status& status, Work& work) {
    bool failed_now = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      --remaining_;
      Chunk& c = chunks_[k];
      if (status.ok()) {
        const auto& r = work.result();
        AppendScores(*request_, c.begin, c.end, work.end(), &r, work.begin(), &c.response);
        c.response.set_offset(c.begin);
        c.response.mutable_timing()->set_queue_seconds(work.queue_seconds());
        c.response.mutable_timing()->set_compute_seconds(r.compute_seconds());
        prefix_tokens_ = r.prefix_tokens();
        item_tokens_ += r.item_tokens();
        items_scored_ += work.num_items();
        c.ready = true;
      } else if (status_.ok()) {
        status_ = status;
        failed_now = true;
      }
    }
    if (failed_now) CancelAll();
    MaybeWrite();
    MaybeFinish();
  }

  void CancelAll() {
    for (Chunk& c : chunks_) {
      if (c.work) service_->pool()->Cancel(c.work);
    }
  }

  void MaybeWrite() {
    const ScoreResponse* message = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (writing_ || finished_ || !status_.ok() || next_ >= chunks_.size() ||
          !chunks_[next_].ready) {
        return;
      }
      ScoreResponse& r = chunks_[next_].response;
      r.set_offset(chunks_[next_].begin);
      r.set_model(service_->model().name);
      r.set_request_id(request_->request_id());
      if (next_ + 1 == chunks_.size()) {
        // Every chunk before the last is done (they were written in order): usage is complete.
        r.mutable_usage()->set_prefix_tokens(prefix_tokens_);
        r.mutable_usage()->set_item_tokens(item_tokens_);
        r.mutable_usage()->set_items_scored(items_scored_);
      }
      writing_ = true;
      message = &r;
    }
    StartWrite(message);
  }

  void MaybeFinish() {
    grpc::Status status;
    {
      std::lock_guard<std::mutex> lock(mu_);
      const bool all_written = next_ == chunks_.size();
      if (finished_ || remaining_ > 0 || writing_ || (status_.ok() && !all_written)) return;
      finished_ = true;
      status = status_;
    }
    RecordCall(service_, *request_, status, start_, "ScoreStream");
    Finish(status);
  }

  ScorerService* const service_;
  const ScoreRequest* const request_;
  const Clock::time_point start_;

  std::mutex mu_;
  std::vector<Chunk> chunks_;  // fixed after the constructor
  int remaining_ = 0;          // works not done yet
  size_t next_ = 0;            // next chunk to write
  bool writing_ = false;
  bool finished_ = false;
  grpc::Status status_;  // the first failure
  int prefix_tokens_ = 0;
  int64_t item_tokens_ = 0;
  int items_scored_ = 0;
};

}  // namespace

int TransportMessageLimit(const Limits& limits) {
  return rankd::worker::TransportMessageLimit(limits.max_message_bytes);  // the workers' too
}

namespace {

// What fixes a score besides the request: the model and its prompt and head settings.
std::string CacheScope(const ServeConfig& config) {
  const engine::ModelSettings& ms = config.model.engine.settings;
  const std::vector<std::string> parts = {config.model.name,
                                          config.model.engine.model_dir,
                                          ms.query_template.value_or(""),
                                          ms.item_template.value_or(""),
                                          ms.head.value_or(""),
                                          ms.preset.value_or(""),
                                          ms.instruction.value_or("")};
  std::string scope;
  for (const std::string& part : parts) {
    absl::StrAppend(&scope, part.size(), ":", part, ";");  // length-prefixed: no two alike
  }
  return scope;
}

}  // namespace

ScorerService::ScorerService(const ServeConfig& config, ModelInfo model, WorkerPool* pool,
                             ServerMetrics* metrics)
    : config_(config),
      model_(std::move(model)),
      pool_(pool),
      metrics_(metrics),
      cache_scope_(CacheScope(config)),
      cache_(ResultCache::Options{.capacity_bytes = config.result_cache.capacity_mb << 20,
                                  .ttl_s = config.result_cache.ttl_s,
                                  .metrics = metrics}),
      latencies_(config.depth_control.window_s) {
  if (config_.depth_control.enabled) {
    default_depth_ = config_.depth_control.max_depth;
    metrics_->depth->Set(default_depth_);
    control_ = std::thread(&ScorerService::ControlLoop, this);
  }
}

ScorerService::~ScorerService() {
  {
    std::lock_guard<std::mutex> lock(control_mu_);
    stop_control_ = true;
  }
  control_cv_.notify_all();
  if (control_.joinable()) control_.join();
}

void ScorerService::RecordLatency(double seconds) {
  if (config_.depth_control.enabled) latencies_.Record(seconds, Clock::now());
}

void ScorerService::ControlLoop() {
  constexpr auto kPeriod = std::chrono::seconds(1);
  const DepthControlSection& dc = config_.depth_control;
  DepthController controller(DepthControlOptions{.target_p99_s = dc.target_p99_s,
                                                 .min_depth = dc.min_depth,
                                                 .max_depth = dc.max_depth,
                                                 .kp = dc.kp,
                                                 .ki = dc.ki,
                                                 .kd = dc.kd});
  Clock::time_point last = Clock::now();
  std::unique_lock<std::mutex> lock(control_mu_);
  while (!control_cv_.wait_for(lock, kPeriod, [this] { return stop_control_; })) {
    const Clock::time_point now = Clock::now();
    const std::optional<double> p99 = latencies_.P99(now);
    const int depth = controller.Update(p99, std::chrono::duration<double>(now - last).count());
    last = now;
    default_depth_.store(depth, std::memory_order_relaxed);
    metrics_->depth->Set(depth);
    if (p99) metrics_->latency_p99->Set(*p99);
  }
}

grpc::ServerUnaryReactor* ScorerService::Score(grpc::CallbackServerContext* context,
                                               const ScoreRequest* request,
                                               ScoreResponse* response) {
  return new ScoreReactor(this, context, request, response);
}

grpc::ServerWriteReactor<ScoreResponse>* ScorerService::ScoreStream(
    grpc::CallbackServerContext* context, const ScoreRequest* request) {
  return new ScoreStreamReactor(this, context, request);
}

}  // namespace rankd::server
