// The checks of model inputs that more than one layer applies (the front end before queueing, the
// engine for `rankd score`, each backend at its boundary): one function and one message each, so
// that a caller sees the same words for the same mistake whichever layer catches it. Their errors
// carry the field as data (rankd/common/field_error.h): called for one item with the field under
// it (".ids"), AtItem makes the error about the item.
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

// The largest magnitude of an embedding item's value. Models' inputs are small: the rows of their
// token embedding tables stay below 1 in magnitude (Llama, Qwen, Mistral) or, scaled by
// sqrt(hidden_size) as Gemma's are, below about 100; the bound is 100 times that. A value beyond
// it is no model input but a mistake (a unit or scale mix-up, an unnormalised vector), and far
// beyond it the arithmetic fails without a word: the first RMSNorm squares the values, and the
// squares (float32 on the GPU) or their mean (the CPU backend's) overflow above about 1.8e19, so
// the row normalises to zeros (an item of 1e20s scored exactly 0.0). Up to the bound, every
// backend computes in range (float32 sums of squares, bf16 activations).
inline constexpr float kMaxEmbeddingMagnitude = 1e4f;

// OK when every value is finite and of magnitude at most kMaxEmbeddingMagnitude; else
// InvalidArgument "FIELD[j]: is nan (row r, column c); values must be finite, of magnitude at most
// 10000", where `values` holds rows of `hidden_size` floats (an item's embedding rows) and j
// indexes the flat list.
absl::Status CheckEmbeddingValues(absl::Span<const float> values, absl::string_view field,
                                  int hidden_size);

// OK when the prefix and one item fit the model's context (max_position_embeddings of config.json;
// 0: not given, no limit); else InvalidArgument "FIELD: prefix P + item I tokens = S exceeds the
// model's max_position_embeddings=M". Every scoring path puts an item right after the prefix, so
// this is the longest sequence the model sees.
absl::Status CheckContextLength(int64_t prefix_tokens, int64_t item_tokens,
                                int max_position_embeddings, absl::string_view field);

}  // namespace rankd::model

#endif  // RANKD_MODEL_INPUT_CHECKS_H_
