// TokenizeService: rankd.v1.Scorer's Tokenize, answered by `rankd serve`'s front end with the
// engine's own TextEncoder (loaded without the weights), so that its ids are exactly what Score
// feeds the model. The gRPC method (ScorerService::Tokenize) and the HTTP route POST /tokenize
// (http_api.h) both call Tokenize here: validation (ValidateTokenizeRequest), the token limits,
// the metrics (rankd_tokenize_requests_total{code}, rankd_tokenize_duration_seconds) and the
// access log are this one place's.
//
// Threads: tokenizing is CPU work in proportion to the request's bytes (up to
// limits.max_message_bytes), so it runs on the service's own thread, never on a transport's
// (gRPC's callback threads, the HttpServer's loop): calls queue for it in arrival order, at most
// kMaxQueuedTokenizeCalls (RESOURCE_EXHAUSTED beyond; UNAVAILABLE once the destructor has
// begun). Calls are answered during a drain too (they need no worker). Tokenize may be called
// from any thread; `done` runs on the service's thread (or on the caller's, at once, for a
// refused call). The destructor answers the calls still queued, then joins the thread.
#ifndef RANKD_SERVER_TOKENIZE_SERVICE_H_
#define RANKD_SERVER_TOKENIZE_SERVICE_H_

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "rankd/engine/text_encoder.h"
#include "rankd/server/call/validation.h"
#include "rankd/server/config/config.h"
#include "rankd/server/metrics.h"
#include "rankd/v1/scorer.pb.h"

namespace rankd::server {

inline constexpr int kMaxQueuedTokenizeCalls = 256;

class TokenizeService {
 public:
  // `status` carries its FieldError (rankd/common/field_error.h) when it is about a field or a
  // text, for the transport to render.
  using DoneFn =
      std::function<void(const absl::Status& status, const rankd::v1::TokenizeResponse& response)>;

  TokenizeService(const ServeConfig& config, ModelInfo model,
                  std::unique_ptr<engine::TextEncoder> encoder, MetricsRegistry* registry);
  ~TokenizeService();
  TokenizeService(const TokenizeService&) = delete;
  TokenizeService& operator=(const TokenizeService&) = delete;

  // Answers `request` (parsed as `parsed` says: an error is the answer) through `done`, once.
  // `rpc` names the call in the access log ("Tokenize", "POST /tokenize").
  void Tokenize(const absl::Status& parsed, rankd::v1::TokenizeRequest request, std::string rpc,
                DoneFn done);

  // The answer of a valid request, on the calling thread (Tokenize's work).
  absl::StatusOr<rankd::v1::TokenizeResponse> Run(const rankd::v1::TokenizeRequest& request) const;

 private:
  struct Call;
  void Loop();
  void Answer(Call& call, const absl::Status& status, const rankd::v1::TokenizeResponse& response);

  const Limits limits_;
  const ModelInfo model_;
  const bool access_log_;
  const std::unique_ptr<engine::TextEncoder> encoder_;
  Histogram* const seconds_;
  MetricsRegistry* const registry_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Call>> queue_;  // guarded by mu_
  bool stop_ = false;                        // guarded by mu_
  std::thread thread_;
};

}  // namespace rankd::server

#endif  // RANKD_SERVER_TOKENIZE_SERVICE_H_
