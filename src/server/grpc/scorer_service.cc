#include "rankd/server/grpc/scorer_service.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/stubs/common.h"
#include "google/protobuf/unknown_field_set.h"
#include "grpcpp/support/proto_buffer_reader.h"
#include "rankd/common/grpc_status.h"
#include "rankd/common/logging.h"
#include "rankd/common/status.h"
#include "rankd/common/trace_context.h"
#include "rankd/protocol/protocol.h"
#include "rankd/server/access_log.h"
#include "rankd/server/call/result_cache.h"
#include "spdlog/spdlog.h"

namespace rankd::server {
namespace {

using Clock = std::chrono::steady_clock;
using rankd::v1::ScoreRequest;
using rankd::v1::ScoreResponse;

bool Interactive(const ScoreRequest& request) {
  return request.priority() != rankd::v1::PRIORITY_BATCH;
}

}  // namespace

// The result cache's part in one call: the keys of its items below the depth and what the cache
// had for them (nothing when the cache is off or the call skips it).
class CachedItems {
 public:
  CachedItems(ScorerService* service, const ScoreRequest& request, int scored_end) {
    ResultCache* cache = service->cache();
    if (!cache->enabled() || request.skip_cache()) return;
    cache_ = cache;
    const ResultKeyBuilder keys(service->cache_scope(), request,
                                protocol::TruncatesAtEnd(request, service->config().limits));
    keys_.reserve(scored_end);
    scores_.reserve(scored_end);
    for (int i = 0; i < scored_end; ++i) {
      keys_.push_back(keys.ItemKey(request.items(i)));
      scores_.push_back(cache->Get(keys_.back()));
    }
  }

  // The items of [begin, end) (below the depth) that the cache did not have.
  std::vector<int> Misses(int begin, int end) const {
    std::vector<int> misses;
    for (int i = begin; i < end; ++i) {
      if (cache_ == nullptr || !scores_[i]) misses.push_back(i);
    }
    return misses;
  }

  // Appends the entries of items [begin, end) to `response`: those below `scored_end` are scored,
  // from the cache or else from `result`, whose scores are the misses' among them in order (null:
  // none missed); the rest come back unscored. The worker's scores fill the cache.
  void Append(const ScoreRequest& request, int begin, int end, int scored_end,
              const rankd::worker::v1::WorkResult* result, ScoreResponse* response) const {
    int next = 0;
    for (int i = begin; i < end; ++i) {
      rankd::v1::ItemScore* s = response->add_scores();
      if (i < scored_end) {
        s->set_scored(true);
        if (cache_ != nullptr && scores_[i]) {
          s->set_score(*scores_[i]);
          s->set_cached(true);
        } else {
          const float score = result->scores(next++);
          s->set_score(score);
          if (cache_ != nullptr) cache_->Put(keys_[i], score);
        }
      }
      if (!request.items(i).id().empty()) s->set_id(request.items(i).id());
    }
  }

 private:
  ResultCache* cache_ = nullptr;  // null: no lookups were made
  std::vector<ResultKey> keys_;
  std::vector<std::optional<float>> scores_;
};

namespace {

// The work that scores `misses`, the items of [begin, end) that need a worker: the range when it
// is all of them (with `whole` the worker call points at the whole request), else just those.
std::shared_ptr<Work> MakeWork(const ScoreRequest* request, int begin, int end,
                               std::vector<int> misses, bool whole, WallTime deadline,
                               Work::DoneFn done) {
  if (static_cast<int>(misses.size()) == end - begin) {
    return std::make_shared<Work>(request, begin, end, Interactive(*request), deadline,
                                  whole ? Work::Carry::kWholeRequest : Work::Carry::kOwnItems,
                                  std::move(done));
  }
  return std::make_shared<Work>(request, std::move(misses), Interactive(*request), deadline,
                                std::move(done));
}

// The steps every Score and ScoreStream call begins with, in this order, one path for both: the
// transport's parse (`parsed`), validation, the bytes of the answer's `messages` messages
// reserved (`*answer`, held until the call is destroyed), the depth (`*scored_end`: items [0,
// scored_end) are scored) and the result cache's lookups below it (`*cached`). An error is the
// call's answer: nothing was queued.
absl::Status BeginScoreCall(ScorerService* service, const absl::Status& parsed,
                            const ScoreRequest& request, int messages, AnswerBudget::Hold* answer,
                            int* scored_end, std::unique_ptr<CachedItems>* cached) {
  RANKD_RETURN_IF_ERROR(parsed);
  RANKD_RETURN_IF_ERROR(ValidateScoreRequest(request, service->config().limits, service->model()));
  RANKD_ASSIGN_OR_RETURN(
      *answer, service->answers()->Reserve(AnswerBytes(request, service->model().name, messages)));
  *scored_end = ItemsToScore(request, service->default_depth());
  *cached = std::make_unique<CachedItems>(service, request, *scored_end);
  return absl::OkStatus();
}

// Metrics and the access log of one finished call of `items` items; `trace_id` (TraceIdOf the
// caller's traceparent, "" when none) names the caller's trace in the log line.
void RecordCall(ScorerService* service, absl::string_view request_id, int items,
                const grpc::Status& status, Clock::time_point start, absl::string_view rpc,
                absl::string_view trace_id) {
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  service->metrics()->request_seconds->Observe(seconds);
  service->metrics()->CountRequest(status.error_code());
  LogCall(service->config().logging.access_log,
          {.rpc = rpc,
           .request_id = request_id,
           .trace_id = trace_id,
           .unit = "items",
           .count = items,
           .seconds = seconds},
          status);
}

// The trace id of the call's `traceparent` metadata (W3C Trace Context), "" when none is valid.
std::string TraceIdOfCall(const grpc::CallbackServerContext* context) {
  const auto& metadata = context->client_metadata();
  const auto it = metadata.find(kTraceparentKey);
  if (it == metadata.end()) return "";
  return TraceIdOf(absl::string_view(it->second.data(), it->second.size())).value_or("");
}

// Failed parses in the log, at most this many a second (a flood of them is one client's doing).
constexpr int kParseFailuresLoggedPerSecond = 10;

// Why `bytes`, which do not parse as a `type`, do not: the path of the first string field (in it
// or in a message within) that holds invalid UTF-8, or of the first message within that is no
// valid encoding, e.g. "items[2].text is not valid UTF-8"; "" when neither is the reason. It
// runs on failed parses only.
std::string FindUnparseableField(const std::string& bytes, const google::protobuf::Descriptor& type,
                                 const std::string& path) {
  using google::protobuf::FieldDescriptor;
  using google::protobuf::UnknownField;
  google::protobuf::UnknownFieldSet fields;  // the wire format alone: no UTF-8 check
  if (!fields.ParseFromString(bytes)) {
    return path.empty() ? "" : absl::StrCat(path, " is not a valid protobuf encoding");
  }
  std::map<int, int> seen;  // occurrences by field number: the index in a repeated field
  for (int i = 0; i < fields.field_count(); ++i) {
    const UnknownField& f = fields.field(i);
    const FieldDescriptor* field = type.FindFieldByNumber(f.number());
    if (field == nullptr || f.type() != UnknownField::TYPE_LENGTH_DELIMITED) continue;
    std::string at = absl::StrCat(path, path.empty() ? "" : ".", field->name());
    if (field->is_repeated()) absl::StrAppend(&at, "[", seen[f.number()]++, "]");
    if (field->type() == FieldDescriptor::TYPE_STRING) {
      if (!google::protobuf::internal::IsStructurallyValidUTF8(f.length_delimited())) {
        return absl::StrCat(at, " is not valid UTF-8");
      }
    } else if (field->type() == FieldDescriptor::TYPE_MESSAGE) {
      std::string why = FindUnparseableField(f.length_delimited(), *field->message_type(), at);
      if (!why.empty()) return why;
    }
  }
  return "";
}

// Parses the request of a `rpc` call as the generated typed methods do (protobuf reads the
// ByteBuffer's slices in place; the copied ByteBuffer shares them). One that does not parse gets
// INVALID_ARGUMENT naming the reason, and a line in the log. Then the bytes go: gRPC would keep
// them until the call ends, which a client that does not read its answer puts off for good.
absl::Status ParseRequest(const grpc::ByteBuffer* raw, absl::string_view rpc,
                          google::protobuf::Message* request) {
  // The ByteBuffer is gRPC's own object, handed over as const; emptying it is what its owner
  // would do at the call's end.
  absl::Cleanup release = [raw] { const_cast<grpc::ByteBuffer*>(raw)->Clear(); };
  grpc::ByteBuffer buffer(*raw);
  grpc::ProtoBufferReader reader(&buffer);
  if (reader.status().ok() && request->ParseFromZeroCopyStream(&reader)) return absl::OkStatus();
  std::string bytes;
  grpc::ByteBuffer again(*raw);
  grpc::ProtoBufferReader all(&again);
  const void* data = nullptr;
  int size = 0;
  while (all.Next(&data, &size)) bytes.append(static_cast<const char*>(data), size);
  const std::string why = FindUnparseableField(bytes, *request->GetDescriptor(), "");
  const absl::Status status = absl::InvalidArgumentError(absl::StrCat(
      "the request could not be parsed as a ", request->GetTypeName(), ": ",
      why.empty() ? absl::StrCat(bytes.size(), " bytes that are not a valid protobuf encoding")
                  : why));
  static LogRateLimit limit(kParseFailuresLoggedPerSecond);
  if (int64_t suppressed = 0; limit.Allow(Clock::now(), &suppressed)) {
    spdlog::warn("{}: {}{}", rpc, status.message(),
                 suppressed > 0 ? absl::StrCat(" (", suppressed, " more not logged)") : "");
  }
  return status;
}

// An answer into `out` (emptied first: gRPC's serializer takes an empty buffer), as the generated
// typed methods serialize it.
template <typename Response>
grpc::Status SerializeResponse(const Response& response, grpc::ByteBuffer* out) {
  out->Clear();
  bool own_buffer = false;
  return grpc::SerializationTraits<Response>::Serialize(response, out, &own_buffer);
}

// gRPC's Score: the raw request parsed, the response serialized into gRPC's buffer.
class ScoreReactor final : public grpc::ServerUnaryReactor {
 public:
  ScoreReactor(ScorerService* service, grpc::CallbackServerContext* context,
               const grpc::ByteBuffer* raw_request, grpc::ByteBuffer* raw_response)
      : open_(service), call_(service, "Score") {
    call_.set_trace_id(TraceIdOfCall(context));
    call_.Start(
        ParseRequest(raw_request, "Score", call_.mutable_request()), context->deadline(),
        [raw_response](const ScoreResponse& response) {
          return FromGrpcStatus(SerializeResponse(response, raw_response));
        },
        [this](const absl::Status& status) { Finish(ToGrpcStatus(status)); });
  }

  void OnCancel() override { call_.Cancel(); }
  void OnDone() override { delete this; }

 private:
  ScorerService::OpenCall open_;
  ScoreCall call_;
};

// gRPC's Tokenize: the raw request parsed, then answered by the TokenizeService (on its thread).
class TokenizeReactor final : public grpc::ServerUnaryReactor {
 public:
  TokenizeReactor(ScorerService* service, const grpc::ByteBuffer* raw_request,
                  grpc::ByteBuffer* raw_response)
      : open_(service) {
    TokenizeService* tokenize = service->tokenize();
    rankd::v1::TokenizeRequest request;
    const absl::Status parsed = ParseRequest(raw_request, "Tokenize", &request);
    tokenize->Tokenize(
        parsed, std::move(request), "Tokenize",
        [this, raw_response](const absl::Status& status,
                             const rankd::v1::TokenizeResponse& response) {
          Finish(status.ok() ? SerializeResponse(response, raw_response) : ToGrpcStatus(status));
        });
  }

  void OnDone() override { delete this; }

 private:
  ScorerService::OpenCall open_;
};

// Answers in chunks of consecutive items, in order, each as soon as it and those before it are
// scored. Chunks are scored in parallel on the workers.
class ScoreStreamReactor final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  ScoreStreamReactor(ScorerService* service, grpc::CallbackServerContext* context,
                     const grpc::ByteBuffer* raw_request)
      : service_(service), open_(service), start_(Clock::now()), trace_id_(TraceIdOfCall(context)) {
    const absl::Status parsed = ParseRequest(raw_request, "ScoreStream", &request_message_);
    request_id_ = request_->request_id();
    items_ = request_->items_size();
    const int n = items_;
    const int chunk = service->config().server.stream_chunk_items;
    absl::Status s = BeginScoreCall(service, parsed, *request_, (n + chunk - 1) / chunk, &answer_,
                                    &scored_end_, &cached_);
    if (!s.ok()) {
      status_ = ToGrpcStatus(s);
      remaining_ = 0;
      MaybeFinish();
      return;
    }
    std::vector<std::shared_ptr<Work>> works;
    for (int b = 0; b < n; b += chunk) {
      Chunk c;
      c.begin = b;
      c.end = std::min(n, b + chunk);
      const int k = static_cast<int>(chunks_.size());
      std::vector<int> misses = cached_->Misses(b, std::min(c.end, scored_end_));
      if (!misses.empty()) {
        // Each chunk's worker call carries its own items only: with the whole request, a stream
        // of n items in chunks of c would send and parse n * n / c items.
        c.work = MakeWork(
            request_, b, std::min(c.end, scored_end_), std::move(misses), /*whole=*/false,
            context->deadline(),
            [this, k](const absl::Status& status, Work& work) { OnWorkDone(k, status, work); });
        works.push_back(c.work);
      } else {
        c.ready = true;  // nothing for a worker in it: cached, or past the depth
      }
      chunks_.push_back(std::move(c));
    }
    remaining_ = static_cast<int>(works.size());
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (Chunk& c : chunks_) {
        if (c.ready) cached_->Append(*request_, c.begin, c.end, scored_end_, nullptr, &c.response);
      }
      if (remaining_ == 0) ReleaseRequestLocked();
    }
    s = works.empty() ? absl::OkStatus() : service->pool()->Submit(works);
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
  // OnWorkDone runs on pool threads, outside gRPC's reactions: gRPC may call OnDone while one is
  // still inside (it finished the call, another thread wrote the last chunk and Finished). The
  // reactor goes with whichever of OnDone and the last running OnWorkDone comes last.
  void OnDone() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
      if (running_ > 0) return;
    }
    delete this;
  }

 private:
  struct Chunk {
    int begin = 0, end = 0;
    std::shared_ptr<Work> work;  // null when no item of the chunk is scored
    bool ready = false;
    ScoreResponse response;
  };

  void OnWorkDone(int k, const absl::Status& status, Work& work) {
    bool failed_now = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++running_;  // before remaining_ lets the call finish
      --remaining_;
      Chunk& c = chunks_[k];
      if (status.ok()) {
        const auto& r = work.result();
        cached_->Append(*request_, c.begin, c.end, scored_end_, &r, &c.response);
        c.response.set_offset(c.begin);
        c.response.mutable_timing()->set_queue_seconds(work.queue_seconds());
        c.response.mutable_timing()->set_compute_seconds(r.compute_seconds());
        prefix_tokens_ = r.prefix_tokens();
        item_tokens_ += r.item_tokens();
        items_scored_ += work.num_items();
        c.ready = true;
      } else if (status_.ok()) {
        status_ = ToGrpcStatus(status);
        failed_now = true;
      }
      if (remaining_ == 0) ReleaseRequestLocked();
    }
    if (failed_now) CancelAll();
    MaybeWrite();
    MaybeFinish();
    bool last = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      --running_;
      last = done_ && running_ == 0;
    }
    if (last) delete this;
  }

  // Every work has ended: the answer's chunks are made, and the request goes now rather than once
  // a client that may never read has read them (the works' pointers into it are not read again).
  void ReleaseRequestLocked() { ScoreRequest().Swap(&request_message_); }

  void CancelAll() {
    for (Chunk& c : chunks_) {
      if (c.work) service_->pool()->Cancel(c.work);
    }
  }

  void MaybeWrite() {
    ScoreResponse* message = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (writing_ || finished_ || !status_.ok() || next_ >= chunks_.size() ||
          !chunks_[next_].ready) {
        return;
      }
      ScoreResponse& r = chunks_[next_].response;
      r.set_offset(chunks_[next_].begin);
      r.set_depth(scored_end_);
      r.set_model(service_->model().name);
      r.set_request_id(request_id_);
      if (next_ + 1 == chunks_.size()) {
        // Every chunk before the last is done (they were written in order): usage is complete.
        r.mutable_usage()->set_prefix_tokens(prefix_tokens_);
        r.mutable_usage()->set_item_tokens(item_tokens_);
        r.mutable_usage()->set_items_scored(items_scored_);
      }
      writing_ = true;
      message = &r;
    }
    // One write at a time (writing_): the buffer is free again by now.
    const grpc::Status serialized = SerializeResponse(*message, &write_buffer_);
    // The chunk is in the buffer: its message goes (no other thread touches a ready chunk).
    ScoreResponse().Swap(message);
    if (!serialized.ok()) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        writing_ = false;
        status_ = serialized;
      }
      CancelAll();
      MaybeFinish();
      return;
    }
    StartWrite(&write_buffer_);
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
    RecordCall(service_, request_id_, items_, status, start_, "ScoreStream", trace_id_);
    Finish(status);
  }

  ScorerService* const service_;
  ScorerService::OpenCall open_;
  ScoreRequest request_message_;  // emptied once every work has ended (ReleaseRequestLocked)
  const ScoreRequest* const request_ = &request_message_;
  std::string request_id_;  // of the request, which goes before the answer
  int items_ = 0;
  AnswerBudget::Hold answer_;
  const Clock::time_point start_;
  const std::string trace_id_;         // the caller's traceparent's, for the access log
  int scored_end_ = 0;                 // items [0, scored_end_) are scored
  std::unique_ptr<CachedItems> cached_;  // fixed after the constructor

  std::mutex mu_;
  std::vector<Chunk> chunks_;  // fixed after the constructor
  int remaining_ = 0;          // works not done yet
  size_t next_ = 0;            // next chunk to write
  bool writing_ = false;
  grpc::ByteBuffer write_buffer_;  // the message being written (while writing_)
  bool finished_ = false;
  int running_ = 0;      // OnWorkDone calls in progress
  bool done_ = false;    // OnDone has run
  grpc::Status status_;  // the first failure
  int prefix_tokens_ = 0;
  int64_t item_tokens_ = 0;
  int items_scored_ = 0;
};

}  // namespace

int TransportMessageLimit(const Limits& limits) {
  return rankd::protocol::TransportMessageLimit(limits.max_message_bytes);  // the workers' too
}

ScorerService::ScorerService(const ServeConfig& config, ModelInfo model, WorkerPool* pool,
                             ServerMetrics* metrics, TokenizeService* tokenize)
    : config_(config),
      model_(std::move(model)),
      pool_(pool),
      metrics_(metrics),
      tokenize_(tokenize),
      cache_scope_(ResultCacheScope(config)),
      cache_(ResultCache::Options{.capacity_bytes = config.result_cache.capacity_mb << 20,
                                  .ttl_s = config.result_cache.ttl_s,
                                  .metrics = metrics}),
      answers_(config.limits.max_answer_bytes, config.server.max_buffered_answer_bytes,
               metrics->answer_bytes),
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

ScoreCall::ScoreCall(ScorerService* service, std::string rpc)
    : service_(service), rpc_(std::move(rpc)), start_(Clock::now()) {}

ScoreCall::~ScoreCall() = default;

void ScoreCall::Start(const absl::Status& parsed, WallTime deadline, EncodeFn encode,
                      FinishFn finish) {
  encode_ = std::move(encode);
  finish_ = std::move(finish);
  absl::Status s =
      BeginScoreCall(service_, parsed, request_, /*messages=*/1, &answer_, &scored_end_, &cached_);
  if (!s.ok()) {
    Done(std::move(s));
    return;
  }
  std::vector<int> misses = cached_->Misses(0, scored_end_);
  if (misses.empty()) {  // every item answered here: nothing queues
    Answer(nullptr);
    Done(absl::OkStatus());
    return;
  }
  work_ = MakeWork(&request_, 0, scored_end_, std::move(misses), /*whole=*/true, deadline,
                   [this](const absl::Status& status, Work& work) { OnWorkDone(status, work); });
  s = service_->pool()->Submit({work_});
  if (!s.ok()) Done(std::move(s));
}

void ScoreCall::Cancel() {
  if (work_) service_->pool()->Cancel(work_);
}

void ScoreCall::OnWorkDone(const absl::Status& status, Work& work) {
  if (status.ok()) Answer(&work);
  Done(status);
}

void ScoreCall::Answer(const Work* work) {
  const rankd::worker::v1::WorkResult* r = work ? &work->result() : nullptr;
  cached_->Append(request_, 0, request_.items_size(), scored_end_, r, &response_);
  response_.set_depth(scored_end_);
  response_.set_model(service_->model().name);
  response_.set_request_id(request_.request_id());
  if (r != nullptr) {
    response_.mutable_usage()->set_prefix_tokens(r->prefix_tokens());
    response_.mutable_usage()->set_item_tokens(r->item_tokens());
    response_.mutable_usage()->set_items_scored(work->num_items());
    response_.mutable_timing()->set_queue_seconds(work->queue_seconds());
    response_.mutable_timing()->set_compute_seconds(r->compute_seconds());
  }
}

void ScoreCall::Done(absl::Status status) {
  if (status.ok()) status = encode_(response_);
  RecordCall(service_, request_.request_id(), request_.items_size(), ToGrpcStatus(status), start_,
             rpc_, trace_id_);
  if (status.ok()) {
    service_->RecordLatency(std::chrono::duration<double>(Clock::now() - start_).count());
  }
  // The transport holds the encoded answer now: the request and the response go at once, not
  // once a client that may never read has read it (the work's pointers into the request are not
  // read again).
  ScoreRequest().Swap(&request_);
  ScoreResponse().Swap(&response_);
  // Moved out first: `finish` may destroy this call, and the function with it.
  const FinishFn finish = std::move(finish_);
  finish(status);
}

grpc::ServerUnaryReactor* ScorerService::Score(grpc::CallbackServerContext* context,
                                               const grpc::ByteBuffer* request,
                                               grpc::ByteBuffer* response) {
  return new ScoreReactor(this, context, request, response);
}

grpc::ServerUnaryReactor* ScorerService::Tokenize(grpc::CallbackServerContext* /*context*/,
                                                  const grpc::ByteBuffer* request,
                                                  grpc::ByteBuffer* response) {
  return new TokenizeReactor(this, request, response);
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* ScorerService::ScoreStream(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request) {
  return new ScoreStreamReactor(this, context, request);
}

}  // namespace rankd::server
