// Tokenizer: text -> token ids. Two implementations, chosen by what the model directory holds:
// sentencepiece (`tokenizer.model`) and Hugging Face `tokenizer.json` (byte-level BPE).
#ifndef RANKD_TOKENIZER_TOKENIZER_H_
#define RANKD_TOKENIZER_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace rankd::tokenizer {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Encodes `text`. With `add_special_tokens` the tokenizer's own decorations are added (the BOS of
  // a sentencepiece Llama model, a tokenizer.json post-processor's template); the query prefix is
  // encoded with them, items never are. Thread-safe.
  virtual absl::StatusOr<std::vector<int32_t>> Encode(absl::string_view text,
                                                      bool add_special_tokens) const = 0;

  // The id of a piece (token string) such as "yes", or NotFound.
  virtual absl::StatusOr<int32_t> PieceToId(absl::string_view piece) const = 0;

  // Number of ids the tokenizer can produce (may be smaller than the model's vocab_size).
  virtual int vocab_size() const = 0;

  // The BOS id that Encode(…, true) prepends, if any.
  virtual std::optional<int32_t> bos_id() const = 0;

  virtual absl::string_view kind() const = 0;  // "sentencepiece" or "tokenizer.json"

  // Encodes many texts on up to `num_threads` threads; result i belongs to texts[i]. The first
  // error (by index) is returned, annotated with its index.
  absl::StatusOr<std::vector<std::vector<int32_t>>> EncodeBatch(
      absl::Span<const std::string> texts, bool add_special_tokens, int num_threads) const;
};

// Loads the tokenizer of a HF model directory: `tokenizer.json` if present, else
// `tokenizer.model` (sentencepiece).
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizer(absl::string_view model_dir);

// Loads a sentencepiece model file. `add_bos` decides whether Encode(…, true) prepends BOS.
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadSentencePiece(const std::string& path,
                                                              bool add_bos);

// Substitutes `{name}` in `tmpl` by `value` (all occurrences); `{{` and `}}` stand for braces.
std::string ApplyTemplate(absl::string_view tmpl, absl::string_view name, absl::string_view value);

}  // namespace rankd::tokenizer

#endif  // RANKD_TOKENIZER_TOKENIZER_H_
