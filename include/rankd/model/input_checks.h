// The checks of model inputs that more than one layer applies (the front end before queueing, the
// engine for `rankd score`, each backend at its boundary): one function and one message each, so
// that a caller sees the same words for the same mistake whichever layer catches it.
#ifndef RANKD_MODEL_INPUT_CHECKS_H_
#define RANKD_MODEL_INPUT_CHECKS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace rankd::model {

// OK when 0 <= id < vocab_size; else InvalidArgument "FIELD: ID is outside [0, vocab_size=V)".
// `field` names the id itself, e.g. "items[3].token_ids.ids[7]".
absl::Status CheckTokenId(int32_t id, absl::string_view field, int vocab_size);

// CheckTokenId of every ids[j], the field named "FIELD[j]".
absl::Status CheckTokenIds(absl::Span<const int32_t> ids, absl::string_view field, int vocab_size);

// OK when every value is finite; else InvalidArgument
// "FIELD[j]: is nan (row r, column c); values must be finite", where `values` holds rows of
// `hidden_size` floats (an item's embedding rows) and j indexes the flat list.
absl::Status CheckFiniteEmbedding(absl::Span<const float> values, absl::string_view field,
                                  int hidden_size);

// OK when the prefix and one item fit the model's context (max_position_embeddings of config.json;
// 0: not given, no limit); else InvalidArgument "FIELD: prefix P + item I tokens = S exceeds the
// model's max_position_embeddings=M". Every scoring path puts an item right after the prefix, so
// this is the longest sequence the model sees.
absl::Status CheckContextLength(int64_t prefix_tokens, int64_t item_tokens,
                                int max_position_embeddings, absl::string_view field);

}  // namespace rankd::model

#endif  // RANKD_MODEL_INPUT_CHECKS_H_
