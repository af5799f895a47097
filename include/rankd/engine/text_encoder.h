// TextEncoder: the text-encoding part of the engine, loadable without the model's weights: the
// tokenizer, the query and item templates (rankd.yaml, the preset and the caller's settings
// resolved) and the special-token rules. The Engine encodes with one, and so do the front end's
// Tokenize (rankd serve's main process) and `rankd tokenize`, so that their ids are exactly the
// ids Score feeds the model.
//
// Special tokens: a query is encoded with them (the tokenizer's BOS, a post-processor's
// template), an item never is.
//
// Threading contract: a TextEncoder does not change once loaded; every method may be called from
// any number of threads at once (the tokenizer is thread-safe, tokenizer.h).
#ifndef RANKD_ENGINE_TEXT_ENCODER_H_
#define RANKD_ENGINE_TEXT_ENCODER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "rankd/engine/options.h"
#include "rankd/tokenizer/tokenizer.h"

namespace rankd::engine {

// Which of the model's templates a text is wrapped in before it is tokenized.
enum class TextTemplate { kNone, kQuery, kItem };
// "none", "query", "item" (the names of `rankd tokenize --template`).
absl::StatusOr<TextTemplate> ParseTextTemplate(absl::string_view name);

class TextEncoder {
 public:
  // Loads the tokenizer of options.model_dir and resolves options.settings over rankd.yaml
  // beside it and the preset (ApplyPreset). Reads no weight. Errors: the tokenizer's, a bad
  // rankd.yaml or preset, a template without its {query} / {item}.
  static absl::StatusOr<std::unique_ptr<TextEncoder>> Load(const EngineOptions& options);

  // The ids of `text` in template `t`: with `add_special_tokens` the tokenizer's decorations are
  // added. kQuery with special tokens is EncodeQuery (a Score call's prefix); kItem is an item's
  // ids and takes no special tokens (INVALID_ARGUMENT when asked for them). `max_tokens` > 0
  // bounds the work (Tokenizer::EncodeBounded) when no special tokens are added: an encoding
  // longer than that then holds more than `max_tokens` ids, the first ones, not all.
  absl::StatusOr<std::vector<int32_t>> Encode(absl::string_view text, TextTemplate t,
                                              bool add_special_tokens,
                                              int64_t max_tokens = 0) const;

  // The special-token rule: INVALID_ARGUMENT naming add_special_tokens for kItem with them.
  static absl::Status CheckSpecialTokens(TextTemplate t, bool add_special_tokens);

  // The prefix ids of a query text (query template applied, special tokens added).
  absl::StatusOr<std::vector<int32_t>> EncodeQuery(absl::string_view query) const;
  // Item texts on up to `num_threads` threads (item template, no special tokens); `max_tokens`
  // as in Encode. Errors name the text's index.
  absl::StatusOr<std::vector<std::vector<int32_t>>> EncodeItems(absl::Span<const std::string> texts,
                                                                int num_threads,
                                                                int64_t max_tokens = 0) const;

  // TRUNCATE_END of text (Engine::CutQuery / CutTextItem say how).
  std::optional<std::vector<int32_t>> CutQuery(absl::Span<const int32_t> ids, int64_t limit) const;
  std::optional<std::vector<int32_t>> CutTextItem(absl::Span<const int32_t> ids,
                                                  int64_t limit) const;

  const tokenizer::Tokenizer& tokenizer() const { return *tokenizer_; }
  const std::string& query_template() const { return query_template_; }
  const std::string& item_template() const { return item_template_; }
  // The resolved settings (rankd.yaml, preset and the caller's), the head's included.
  const ModelSettings& settings() const { return settings_; }

 private:
  // What TRUNCATE_END keeps of a template's encodings (computed once, in Load).
  struct TemplateEnds {
    std::vector<int32_t> tail;  // the tokens every cut encoding ends with
    int64_t empty = 0;          // tokens of the template around an empty value
  };
  static absl::StatusOr<TemplateEnds> FindTemplateEnds(const tokenizer::Tokenizer& tok,
                                                       const std::string& tmpl,
                                                       absl::string_view name,
                                                       bool add_special_tokens);
  static std::optional<std::vector<int32_t>> Cut(absl::Span<const int32_t> ids, int64_t limit,
                                                 const TemplateEnds& ends);
  TextEncoder() = default;
  // `text` wrapped in template `t`.
  std::string Apply(absl::string_view text, TextTemplate t) const;

  std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
  ModelSettings settings_;
  std::string query_template_;
  std::string item_template_;
  TemplateEnds query_ends_;
  TemplateEnds item_ends_;
};

}  // namespace rankd::engine

#endif  // RANKD_ENGINE_TEXT_ENCODER_H_
