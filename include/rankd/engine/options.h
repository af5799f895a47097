// EngineOptions: everything that shapes one engine (model directory, backend, prompt settings,
// tokenizer threads, prefix cache), defined once. `rankd score` fills it from flags; `rankd serve`
// keeps one in its config (ServeConfig::model.engine, YAML section `model`) and each worker builds
// its engine from that. Plain structs, so that the front end can hold them without the engine.
#ifndef RANKD_ENGINE_OPTIONS_H_
#define RANKD_ENGINE_OPTIONS_H_

#include <cstddef>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "rankd/backend/backend.h"

namespace rankd::engine {

// The placeholders a query template and an item template must hold (tokenizer::ApplyTemplate
// replaces them), checked where a template is set (the serve config's key table) and where the
// engine takes one (TextEncoder::Load), both from here.
inline constexpr absl::string_view kQueryPlaceholder = "{query}";
inline constexpr absl::string_view kItemPlaceholder = "{item}";

// Model-level prompt and head settings. Unset fields fall back to rankd.yaml beside the weights,
// then to the preset's (if a preset is named), then to the defaults: bare text templates; head
// classifier:0 for *ForSequenceClassification, yes_no:yes,no for *ForCausalLM.
struct ModelSettings {
  std::optional<std::string> query_template;  // contains kQueryPlaceholder
  std::optional<std::string> item_template;   // contains kItemPlaceholder
  std::optional<std::string> head;         // "classifier[:INDEX]" | "yes_no:YES,NO" | "logit:TOKEN"
  std::optional<std::string> preset;       // a PresetNames() entry, e.g. "qwen3-reranker"
  std::optional<std::string> instruction;  // the preset's task instruction, if it has one

  // Fields set in `over` replace those of *this.
  ModelSettings MergedWith(const ModelSettings& over) const;
  // Reads `<model_dir>/rankd.yaml` if present (keys: query_template, item_template, head, preset,
  // instruction).
  static absl::StatusOr<ModelSettings> FromModelDir(const std::string& model_dir);

  bool operator==(const ModelSettings&) const = default;
};

struct EngineOptions {
  std::string model_dir;  // Hugging Face model directory
  // The backend, and with it the one item-token budget of a forward pass
  // (backend.max_batch_tokens), which the engine's batching and the worker's scheduler also use.
  backend::BackendOptions backend;
  ModelSettings settings;     // overrides rankd.yaml
  int tokenizer_threads = 4;  // parallel item tokenization
  // Encoded prefixes kept for reuse (same query ids: no prefix pass); 0 turns the cache off. Bounds
  // every encoded prefix held, cached or evicted and still in use (prefix_cache.h).
  size_t prefix_cache_bytes = 256 << 20;

  bool operator==(const EngineOptions&) const = default;
};

}  // namespace rankd::engine

#endif  // RANKD_ENGINE_OPTIONS_H_
