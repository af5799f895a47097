// Checks a ScoreRequest against the configured limits and the served model before it is queued.
// Errors are INVALID_ARGUMENT (NOT_FOUND for an unknown model) with a message that names the
// field and the limit, e.g. "items[2].embedding.values: 100 values for rows=2, expected rows x
// hidden_size = 2 x 64 = 128", and carry the field, the item and the limit as data too
// (rankd/common/field_error.h), from which the HTTP routes name their own lists. Text is checked
// against its byte limit (max_item_bytes, max_query_bytes, derived from the token limits by
// default: Limits::ItemByteLimit), so that no text is queued whose tokenization alone would be
// costly; token counts of text are only known after tokenization, and the worker checks those
// against the token limits. With TRUNCATE_END (rankd/protocol/protocol.h's TruncatesAtEnd) lengths
// over max_query_tokens, max_item_tokens, the byte limits or the model's context are not refused
// here: the worker cuts every query and item kind (its PrepareWorkItem is the one place that cuts),
// and max_request_tokens counts the ids and rows that the cut keeps of each item.
#ifndef RANKD_SERVER_VALIDATION_H_
#define RANKD_SERVER_VALIDATION_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "rankd/server/config/config.h"
#include "rankd/v1/scorer.pb.h"

namespace rankd::server {

// How messages name a request's list (FieldErrorStatus's `list`): a ScoreRequest's items, a
// TokenizeRequest's texts ("texts[3]: empty"). Their FieldErrors hold the index as data.
inline constexpr absl::string_view kScoreItems = "items";
inline constexpr absl::string_view kTokenizeTexts = "texts";

// What validation needs to know of the served model.
struct ModelInfo {
  // What answers report: server.served_model_names' first (ServedModel).
  std::string name;
  int vocab_size = 0;
  int hidden_size = 0;
  int max_position_embeddings = 0;  // 0: the model's config.json gives none
  // The names a request's `model` may give with `strict_name` (server.served_model_names); without
  // it any name is accepted (server.strict_model_name). Empty: {name}.
  std::vector<std::string> names = {};
  bool strict_name = false;
};

// The ModelInfo names of `config` (finalized): name, names and strict_name; the sizes are the
// model directory's, for the caller to fill.
ModelInfo ServedModel(const ServeConfig& config);

absl::Status ValidateScoreRequest(const rankd::v1::ScoreRequest& request, const Limits& limits,
                                  const ModelInfo& model);

// A TokenizeRequest's limits before it is tokenized (the list, each text's bytes; the template's
// value), in scorer.proto's TokenizeRequest terms; token counts are TokenizeService's to check.
absl::Status ValidateTokenizeRequest(const rankd::v1::TokenizeRequest& request,
                                     const Limits& limits, const ModelInfo& model);

// Items to score: request.depth when set (and smaller than the list), else `default_depth` (the
// depth controller's, when it runs; 0: all), else all.
int ItemsToScore(const rankd::v1::ScoreRequest& request, int default_depth = 0);

}  // namespace rankd::server

#endif  // RANKD_SERVER_VALIDATION_H_
