#include "rankd/model/input_checks.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "rankd/common/field_error.h"

namespace rankd::model {

absl::Status CheckTokenId(int32_t id, absl::string_view field, int vocab_size) {
  if (id >= 0 && id < vocab_size) return absl::OkStatus();
  return InvalidField(std::string(field),
                      absl::StrCat(id, " is outside [0, vocab_size=", vocab_size, ")"));
}

absl::Status CheckTokenIds(absl::Span<const int32_t> ids, absl::string_view field, int vocab_size) {
  for (size_t j = 0; j < ids.size(); ++j) {
    if (ids[j] < 0 || ids[j] >= vocab_size) {
      return CheckTokenId(ids[j], absl::StrCat(field, "[", j, "]"), vocab_size);
    }
  }
  return absl::OkStatus();
}

absl::Status CheckEmbeddingValues(absl::Span<const float> values, absl::string_view field,
                                  int hidden_size) {
  for (size_t j = 0; j < values.size(); ++j) {
    // !(|x| <= bound) holds for NaN too.
    if (!(std::fabs(values[j]) <= kMaxEmbeddingMagnitude)) {
      return InvalidField(
          absl::StrCat(field, "[", j, "]"),
          absl::StrCat("is ", values[j], " (row ", j / hidden_size, ", column ", j % hidden_size,
                       "); values must be finite, of magnitude at most ", kMaxEmbeddingMagnitude));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckContextLength(int64_t prefix_tokens, int64_t item_tokens,
                                int max_position_embeddings, absl::string_view field) {
  const int64_t total = prefix_tokens + item_tokens;
  if (max_position_embeddings <= 0 || total <= max_position_embeddings) return absl::OkStatus();
  return InvalidField(std::string(field),
                      absl::StrCat("prefix ", prefix_tokens, " + item ", item_tokens, " tokens = ",
                                   total, " exceeds the model's max_position_embeddings=",
                                   max_position_embeddings),
                      "max_position_embeddings");
}

}  // namespace rankd::model
