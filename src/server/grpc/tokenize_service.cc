// rankd.v1.Scorer's Tokenize in the front end (rankd/server/grpc/tokenize_service.h).
#include "rankd/server/grpc/tokenize_service.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "rankd/common/field_error.h"
#include "rankd/common/grpc_status.h"
#include "rankd/common/logging.h"
#include "rankd/common/status.h"
#include "rankd/server/access_log.h"

namespace rankd::server {
namespace {

using Clock = std::chrono::steady_clock;
using rankd::v1::TokenizeRequest;
using rankd::v1::TokenizeResponse;

engine::TextTemplate ToEngine(rankd::v1::Template t) {
  switch (t) {
    case rankd::v1::TEMPLATE_QUERY:
      return engine::TextTemplate::kQuery;
    case rankd::v1::TEMPLATE_ITEM:
      return engine::TextTemplate::kItem;
    default:
      return engine::TextTemplate::kNone;
  }
}

}  // namespace

struct TokenizeService::Call {
  absl::Status parsed;
  TokenizeRequest request;
  std::string rpc;
  DoneFn done;
  Clock::time_point start = Clock::now();
};

TokenizeService::TokenizeService(const ServeConfig& config, ModelInfo model,
                                 std::unique_ptr<engine::TextEncoder> encoder,
                                 MetricsRegistry* registry)
    : limits_(config.limits),
      model_(std::move(model)),
      access_log_(config.logging.access_log),
      encoder_(std::move(encoder)),
      seconds_(registry->GetHistogram("rankd_tokenize_duration_seconds",
                                      "Time from a Tokenize call's arrival to its answer.",
                                      DurationBuckets())),
      registry_(registry),
      thread_(&TokenizeService::Loop, this) {}

TokenizeService::~TokenizeService() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void TokenizeService::Tokenize(const absl::Status& parsed, TokenizeRequest request, std::string rpc,
                               DoneFn done) {
  auto call = std::make_unique<Call>();
  call->parsed = parsed;
  call->request = std::move(request);
  call->rpc = std::move(rpc);
  call->done = std::move(done);
  bool stopping = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping = stop_;
    if (!stopping && queue_.size() < static_cast<size_t>(kMaxQueuedTokenizeCalls)) {
      queue_.push_back(std::move(call));
      cv_.notify_one();
      return;
    }
  }
  Answer(*call,
         stopping ? absl::UnavailableError("the server is stopping")
                  : absl::ResourceExhaustedError(absl::StrCat("the Tokenize queue is full (",
                                                              kMaxQueuedTokenizeCalls,
                                                              " calls); retry with backoff")),
         TokenizeResponse());
}

void TokenizeService::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stop_, and every queued call answered
    std::unique_ptr<Call> call = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    absl::Status s = call->parsed;
    if (s.ok()) s = ValidateTokenizeRequest(call->request, limits_, model_);
    absl::StatusOr<TokenizeResponse> response = s.ok() ? Run(call->request) : s;
    Answer(*call, response.status(), response.ok() ? *response : TokenizeResponse());
    lock.lock();
  }
}

void TokenizeService::Answer(Call& call, const absl::Status& status,
                             const TokenizeResponse& response) {
  const double seconds = std::chrono::duration<double>(Clock::now() - call.start).count();
  seconds_->Observe(seconds);
  const std::string code = absl::StatusCodeToString(status.code());
  registry_
      ->GetCounter("rankd_tokenize_requests_total", "Tokenize calls answered, by status code.",
                   {{"code", code}})
      ->Add();
  LogCall(access_log_,
          {.rpc = call.rpc,
           .request_id = call.request.request_id(),
           .unit = "texts",
           .count = call.request.texts_size(),
           .seconds = seconds},
          ToGrpcStatus(status));
  call.done(status, response);
}

absl::StatusOr<TokenizeResponse> TokenizeService::Run(const TokenizeRequest& request) const {
  const engine::TextTemplate t = ToEngine(request.template_());
  const bool query = t == engine::TextTemplate::kQuery;
  const int64_t limit = query ? limits_.max_query_tokens : limits_.max_item_tokens;
  const char* key = query ? "max_query_tokens" : "max_item_tokens";
  // Without special tokens the encoding stops once over the limit (EncodeBounded): its count is
  // then of the tokens seen so far.
  const bool bounded = !request.add_special_tokens();
  RANKD_RETURN_IF_ERROR(engine::TextEncoder::CheckSpecialTokens(t, request.add_special_tokens()));
  TokenizeResponse response;
  response.set_model(model_.name);
  response.set_request_id(request.request_id());
  int64_t total = 0;
  for (int i = 0; i < request.texts_size(); ++i) {
    absl::StatusOr<std::vector<int32_t>> ids =
        encoder_->Encode(request.texts(i), t, request.add_special_tokens(), limit);
    if (!ids.ok()) {
      return FieldErrorStatus(
          ids.status().code(),
          {.item = i, .field = "", .limit = "", .what = std::string(ids.status().message())},
          kTokenizeTexts);
    }
    const int64_t n = static_cast<int64_t>(ids->size());
    if (n > limit) {
      return FieldErrorStatus(absl::StatusCode::kInvalidArgument,
                              {.item = i,
                               .field = "",
                               .limit = key,
                               .what = absl::StrCat(bounded ? "at least " : "", n,
                                                    " tokens exceeds ", key, "=", limit)},
                              kTokenizeTexts);
    }
    total += n;
    rankd::v1::TokenizedText* out = response.add_texts();
    out->mutable_ids()->Add(ids->begin(), ids->end());
    out->set_count(static_cast<int32_t>(n));
  }
  if (total > limits_.max_request_tokens) {
    return InvalidField(
        std::string(kTokenizeTexts),
        absl::StrCat(total, " tokens exceeds max_request_tokens=", limits_.max_request_tokens),
        "max_request_tokens");
  }
  return response;
}

}  // namespace rankd::server
