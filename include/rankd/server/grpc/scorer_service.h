// ScorerService: rankd.v1.Scorer on the gRPC callback API. A call is validated, split into work
// (one item range for Score, chunks for ScoreStream), admitted by the WorkerPool and answered
// when its work completes. No reaction blocks: admission takes a short lock, the rest happens in
// completion callbacks. Tokenize is the TokenizeService's (tokenize_service.h).
//
// Its methods are raw (grpc::ByteBuffer in and out): the service parses each request itself, so
// that one that does not parse (bytes that are no ScoreRequest, a string field that is not UTF-8)
// is answered INVALID_ARGUMENT saying so and naming the field (gRPC's own parse would answer
// UNIMPLEMENTED with no message). Requests are parsed from the ByteBuffer's slices in place and
// answers serialized by gRPC's own SerializationTraits, as the generated typed methods do: the raw
// methods add no copy of the bytes.
#ifndef RANKD_SERVER_SCORER_SERVICE_H_
#define RANKD_SERVER_SCORER_SERVICE_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "rankd/server/call/answer_budget.h"
#include "rankd/server/config/config.h"
#include "rankd/server/call/depth_controller.h"
#include "rankd/server/metrics.h"
#include "rankd/server/call/result_cache.h"
#include "rankd/server/grpc/tokenize_service.h"
#include "rankd/server/call/validation.h"
#include "rankd/server/pool/worker_pool.h"
#include "rankd/v1/scorer.grpc.pb.h"

namespace rankd::server {

class ScorerService final
    : public rankd::v1::Scorer::WithRawCallbackMethod_Score<
          rankd::v1::Scorer::WithRawCallbackMethod_ScoreStream<
              rankd::v1::Scorer::WithRawCallbackMethod_Tokenize<rankd::v1::Scorer::Service>>> {
 public:
  // `tokenize` answers Tokenize; it must outlive the service.
  ScorerService(const ServeConfig& config, ModelInfo model, WorkerPool* pool,
                ServerMetrics* metrics, TokenizeService* tokenize);
  ~ScorerService() override;

  // `request` holds a rankd.v1.ScoreRequest, `response` gets a rankd.v1.ScoreResponse.
  grpc::ServerUnaryReactor* Score(grpc::CallbackServerContext* context,
                                  const grpc::ByteBuffer* request,
                                  grpc::ByteBuffer* response) override;

  // `request` holds a rankd.v1.ScoreRequest; each message written is a rankd.v1.ScoreResponse.
  grpc::ServerWriteReactor<grpc::ByteBuffer>* ScoreStream(grpc::CallbackServerContext* context,
                                                          const grpc::ByteBuffer* request) override;

  // `request` holds a rankd.v1.TokenizeRequest, `response` gets a rankd.v1.TokenizeResponse.
  grpc::ServerUnaryReactor* Tokenize(grpc::CallbackServerContext* context,
                                     const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override;

  // Shared by the reactors.
  const ServeConfig& config() const { return config_; }
  const ModelInfo& model() const { return model_; }
  WorkerPool* pool() const { return pool_; }
  ServerMetrics* metrics() const { return metrics_; }
  TokenizeService* tokenize() const { return tokenize_; }
  // The (query, item) -> score cache of Score and ScoreStream calls (result_cache in the config).
  ResultCache* cache() { return &cache_; }
  // What the answers of Score and ScoreStream calls in progress hold.
  AnswerBudget* answers() { return &answers_; }
  const std::string& cache_scope() const { return cache_scope_; }
  // Items to score of a call without its own depth: the depth controller's (0: all, when it is
  // off). A finished Score call's end-to-end seconds, for the controller's window.
  int default_depth() const { return default_depth_.load(std::memory_order_relaxed); }
  void RecordLatency(double seconds);

  // A gRPC call whose reactor has not seen OnDone yet (its answer not yet sent by gRPC): each
  // reactor holds one. The stop waits for none to be left before it ends the client connections,
  // so that an answer handed to gRPC is not cut off by them.
  class OpenCall {
   public:
    explicit OpenCall(ScorerService* service) : service_(service) {
      service_->open_calls_.fetch_add(1, std::memory_order_relaxed);
    }
    ~OpenCall() { service_->open_calls_.fetch_sub(1, std::memory_order_release); }
    OpenCall(const OpenCall&) = delete;
    OpenCall& operator=(const OpenCall&) = delete;

   private:
    ScorerService* const service_;
  };
  int open_calls() const { return open_calls_.load(std::memory_order_acquire); }

 private:
  std::atomic<int> open_calls_{0};
  const ServeConfig config_;
  const ModelInfo model_;
  WorkerPool* const pool_;
  ServerMetrics* const metrics_;
  TokenizeService* const tokenize_;
  const std::string cache_scope_;
  ResultCache cache_;
  AnswerBudget answers_;
  // The depth controller (depth_control.enabled): a thread that updates it once a second.
  void ControlLoop();
  std::atomic<int> default_depth_{0};
  LatencyWindow latencies_;
  std::mutex control_mu_;
  std::condition_variable control_cv_;
  bool stop_control_ = false;
  std::thread control_;
};

class CachedItems;  // scorer_service.cc

// One Score call, whichever transport carries it (gRPC's Score, the HTTP routes of http_api.h):
// validation, its answer's bytes reserved (AnswerBudget, until the call is destroyed), the result
// cache, the depth, admission to the pool, the response, then the metrics, the access log and the
// depth controller's latency. The transport fills mutable_request(), Starts it, encodes the
// response in `encode` and answers in `finish`; the request and the response are emptied between
// the two. ScoreStream's calls begin on the same path (validation, budget, depth, cache), then
// dispatch in chunks of their own.
//
// Threads: Start on the transport's thread, once; `encode` then `finish` run once, on that thread
// (answered at once: an error, or every item from the cache) or on a pool completion thread.
// `finish` is the last thing the call does: it may destroy the ScoreCall. Cancel may run on any
// thread from Start until `finish` has run.
class ScoreCall {
 public:
  // Encodes the final response (the transport's bytes); its status is the call's from then on.
  using EncodeFn = std::function<absl::Status(const rankd::v1::ScoreResponse& response)>;
  // The call's status: an error about a field or an item carries it as data (its FieldError,
  // rankd/common/field_error.h) beside the message, for the transport to render.
  using FinishFn = std::function<void(const absl::Status& status)>;

  // `rpc` names the call in the access log ("Score", "POST /v1/rerank").
  ScoreCall(ScorerService* service, std::string rpc);
  ~ScoreCall();
  ScoreCall(const ScoreCall&) = delete;
  ScoreCall& operator=(const ScoreCall&) = delete;

  rankd::v1::ScoreRequest* mutable_request() { return &request_; }
  // The trace id of the caller's W3C traceparent (TraceIdOf), for the access log; before Start.
  void set_trace_id(std::string trace_id) { trace_id_ = std::move(trace_id); }
  const rankd::v1::ScoreRequest& request() const { return request_; }  // until `encode` returns

  // `parsed`: how the transport's parse into mutable_request() went; an error is the answer.
  // `deadline`: the call's (queue admission and dispatch honour it).
  void Start(const absl::Status& parsed, std::chrono::system_clock::time_point deadline,
             EncodeFn encode, FinishFn finish);
  // The caller went away: the work leaves the queue (or its worker call is cancelled).
  void Cancel();

 private:
  void OnWorkDone(const absl::Status& status, Work& work);
  void Answer(const Work* work);  // null: every item from the cache
  void Done(absl::Status status);

  ScorerService* const service_;
  const std::string rpc_;
  const std::chrono::steady_clock::time_point start_;
  std::string trace_id_;
  rankd::v1::ScoreRequest request_;
  rankd::v1::ScoreResponse response_;
  int scored_end_ = 0;  // items [0, scored_end_) are scored (the depth: pinned or the controller's)
  std::unique_ptr<CachedItems> cached_;
  std::shared_ptr<Work> work_;
  AnswerBudget::Hold answer_;  // from validation until the call is destroyed
  EncodeFn encode_;
  FinishFn finish_;
};

// The largest message the gRPC transport accepts: above limits.max_message_bytes, so that a
// request somewhat over the limit is answered INVALID_ARGUMENT naming the limit (gRPC itself
// answers RESOURCE_EXHAUSTED above this).
int TransportMessageLimit(const Limits& limits);

}  // namespace rankd::server

#endif  // RANKD_SERVER_SCORER_SERVICE_H_
