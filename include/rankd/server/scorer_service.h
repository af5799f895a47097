// ScorerService: rankd.v1.Scorer on the gRPC callback API. A call is validated, split into work
// (one item range for Score, chunks for ScoreStream), admitted by the WorkerPool and answered
// when its work completes. No reaction blocks: admission takes a short lock, the rest happens in
// completion callbacks.
#ifndef RANKD_SERVER_SCORER_SERVICE_H_
#define RANKD_SERVER_SCORER_SERVICE_H_

#include "rankd/server/config.h"
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
  // The (query, item) -> score cache of Score calls (result_cache in the config).
  ResultCache* cache() { return &cache_; }
  const std::string& cache_scope() const { return cache_scope_; }

 private:
  const ServeConfig config_;
  const ModelInfo model_;
  WorkerPool* const pool_;
  ServerMetrics* const metrics_;
  const std::string cache_scope_;
  ResultCache cache_;
};

// The largest message the gRPC transport accepts: above limits.max_message_bytes, so that a
// request somewhat over the limit is answered INVALID_ARGUMENT naming the limit (gRPC itself
// answers RESOURCE_EXHAUSTED above this).
int TransportMessageLimit(const Limits& limits);

}  // namespace rankd::server

#endif  // RANKD_SERVER_SCORER_SERVICE_H_
