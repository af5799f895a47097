// ScorerService: rankd.v1.Scorer on the gRPC callback API. A call is validated, split into work
// (one item range for Score, chunks for ScoreStream), admitted by the WorkerPool and answered
// when its work completes. No reaction blocks: admission takes a short lock, the rest happens in
// completion callbacks.
#ifndef RANKD_SERVER_SCORER_SERVICE_H_
#define RANKD_SERVER_SCORER_SERVICE_H_

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include "rankd/server/config.h"
#include "rankd/server/depth_controller.h"
#include "rankd/server/metrics.h"
#include "rankd/server/result_cache.h"
#include "rankd/server/validation.h"
#include "rankd/server/worker_pool.h"
#include "rankd/v1/scorer.grpc.pb.h"

namespace rankd::server {

class ScorerService final : public rankd::v1::Scorer::CallbackService {
 public:
  ScorerService(const ServeConfig& config, ModelInfo model, WorkerPool* pool,
                ServerMetrics* metrics);
  ~ScorerService() override;

  grpc::ServerUnaryReactor* Score(grpc::CallbackServerContext* context,
                                  const rankd::v1::ScoreRequest* request,
                                  rankd::v1::ScoreResponse* response) override;

  grpc::ServerWriteReactor<rankd::v1::ScoreResponse>* ScoreStream(
      grpc::CallbackServerContext* context, const rankd::v1::ScoreRequest* request) override;

  // Shared by the reactors.
  const ServeConfig& config() const { return config_; }
  const ModelInfo& model() const { return model_; }
  WorkerPool* pool() const { return pool_; }
  ServerMetrics* metrics() const { return metrics_; }
  // The (query, item) -> score cache of Score and ScoreStream calls (result_cache in the config).
  ResultCache* cache() { return &cache_; }
  const std::string& cache_scope() const { return cache_scope_; }
  // Items to score of a call without its own depth: the depth controller's (0: all, when it is
  // off). A finished Score call's end-to-end seconds, for the controller's window.
  int default_depth() const { return default_depth_.load(std::memory_order_relaxed); }
  void RecordLatency(double seconds);

 private:
  const ServeConfig config_;
  const ModelInfo model_;
  WorkerPool* const pool_;
  ServerMetrics* const metrics_;
  const std::string cache_scope_;
  ResultCache cache_;
  // The depth controller (depth_control.enabled): a thread that updates it once a second.
  void ControlLoop();
  std::atomic<int> default_depth_{0};
  LatencyWindow latencies_;
  std::mutex control_mu_;
  std::condition_variable control_cv_;
  bool stop_control_ = false;
  std::thread control_;
};

// The largest message the gRPC transport accepts: above limits.max_message_bytes, so that a
// request somewhat over the limit is answered INVALID_ARGUMENT naming the limit (gRPC itself
// answers RESOURCE_EXHAUSTED above this).
int TransportMessageLimit(const Limits& limits);

}  // namespace rankd::server

#endif  // RANKD_SERVER_SCORER_SERVICE_H_
