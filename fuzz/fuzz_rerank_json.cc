// Fuzz target: a POST /v1/rerank, /v2/rerank or /rerank body (the first byte picks the shape),
// through the rerank JSON parser, the front end's validation, and the answer made from made-up
// scores. An error naming the field or an answer; never a crash.
#include <cstddef>
#include <cstdint>

#include "rankd/server/http/rerank_json.h"
#include "rankd/server/call/validation.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  constexpr rankd::server::RerankShape kShapes[] = {rankd::server::RerankShape::kCohere,
                                                    rankd::server::RerankShape::kTei,
                                                    rankd::server::RerankShape::kCohereV2};
  const auto shape = kShapes[data[0] % 3];
  const absl::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);
  static const rankd::server::Limits limits = [] {
    rankd::server::Limits l;
    l.max_items = 64;  // small limits: the fuzzer reaches past them
    l.max_query_tokens = 32;
    l.max_item_tokens = 32;
    return l;
  }();
  static const rankd::server::ModelInfo model{"fuzz", 1024, 8, 128};
  rankd::v1::ScoreRequest request;
  rankd::server::RerankOptions options;
  if (!rankd::server::ParseRerankRequest(shape, body, limits.max_items, &request, &options).ok()) {
    return 0;
  }
  if (!rankd::server::ValidateScoreRequest(request, limits, model).ok()) return 0;
  rankd::v1::ScoreResponse response;
  for (int i = 0; i < request.items_size(); ++i) {
    auto* s = response.add_scores();
    s->set_scored(i % 5 != 4);
    s->set_score(static_cast<float>((i * 7919) % 13) - 6.0f);
  }
  (void)rankd::server::RerankResponseJson(shape, request, options, response, "fuzz");
  return 0;
}
