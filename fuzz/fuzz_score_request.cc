// Fuzz target: the bytes of a rankd.v1.ScoreRequest as the gRPC port receives them, through
// protobuf's parser, the front end's validation and the result cache's keys. An error or an
// accepted request; never a crash.
#include <cstddef>
#include <cstdint>

#include "rankd/server/call/result_cache.h"
#include "rankd/server/call/validation.h"
#include "rankd/v1/scorer.pb.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  rankd::v1::ScoreRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return 0;
  static const rankd::server::Limits limits = [] {
    rankd::server::Limits l;
    l.max_items = 64;  // small limits: the fuzzer reaches past them
    l.max_query_tokens = 32;
    l.max_item_tokens = 32;
    l.max_request_tokens = 512;
    return l;
  }();
  static const rankd::server::ModelInfo model{"fuzz", 1024, 8, 128};
  if (!rankd::server::ValidateScoreRequest(request, limits, model).ok()) return 0;
  (void)rankd::server::ItemsToScore(request, 3);
  const rankd::server::ResultKeyBuilder keys("scope", request, /*truncate_end=*/false);
  for (const rankd::v1::Item& item : request.items()) (void)keys.ItemKey(item);
  return 0;
}
