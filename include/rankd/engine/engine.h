// Engine: text in, scores out. Owns a tokenizer and a backend; applies the model's templates,
// validates items, encodes the query prefix once and scores the items against it in batches of at
// most `max_batch_tokens` item tokens.
#ifndef RANKD_ENGINE_ENGINE_H_
#define RANKD_ENGINE_ENGINE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "rankd/engine/backend.h"
#include "rankd/engine/prefix_cache.h"
#include "rankd/model/config.h"
#include "rankd/tokenizer/tokenizer.h"

namespace rankd::engine {

// One candidate: text, token ids (used verbatim), or `rows` embedding vectors of hidden_size that
// stand in for its token embeddings.
struct Item {
  enum class Kind { kText, kIds, kEmbedding };
  Kind kind = Kind::kText;
  std::string text;
  std::vector<int32_t> ids;
  std::vector<float> embedding;  // [rows, hidden_size] row-major

  static Item Text(std::string text);
  static Item Ids(std::vector<int32_t> ids);
  static Item Embedding(std::vector<float> values);
};

struct ScoreRequest {
  std::string query;                        // used unless query_ids is set
  std::optional<std::vector<int32_t>> query_ids;  // the whole prefix, verbatim (BOS included)
  std::vector<Item> items;
  bool apply_sigmoid = false;
};

struct ScoreResult {
  std::vector<float> scores;  // one per item, in request order
  int prefix_tokens = 0;
  int64_t item_tokens = 0;
};

// Model-level prompt and head settings. Unset fields fall back to rankd.yaml beside the weights,
// then to the preset's (if a preset is named), then to the defaults: bare text templates; head
// classifier:0 for *ForSequenceClassification, yes_no:yes,no for *ForCausalLM.
struct ModelSettings {
  std::optional<std::string> query_template;  // contains {query}
  std::optional<std::string> item_template;   // contains {item}
  std::optional<std::string> head;            // "classifier[:INDEX]" | "yes_no:YES,NO"
  std::optional<std::string> preset;          // a PresetNames() entry, e.g. "qwen3-reranker"
  std::optional<std::string> instruction;     // the preset's task instruction, if it has one

  // Fields set in `over` replace those of *this.
  ModelSettings MergedWith(const ModelSettings& over) const;
  // Reads `<model_dir>/rankd.yaml` if present (keys: query_template, item_template, head, preset,
  // instruction).
  static absl::StatusOr<ModelSettings> FromModelDir(const std::string& model_dir);
};

// Ready prompt settings for known model families (src/engine/presets.cc).
//   qwen3-reranker: the Qwen3-Reranker chat prompt (system prompt, "<Instruct>: INSTRUCTION",
//                   "<Query>: {query}" | "<Document>: {item}", assistant/think suffix), head
//                   yes_no:yes,no; default instruction kQwen3RerankerInstruction.
std::vector<std::string> PresetNames();
inline constexpr char kQwen3RerankerInstruction[] =
    "Given a web search query, retrieve relevant passages that answer the query";
// The templates and head of `s.preset` with `s.instruction`, overridden by the templates and head
// that `s` sets itself. Without a preset, `s` unchanged (an instruction without one is an error).
absl::StatusOr<ModelSettings> ApplyPreset(const ModelSettings& s);

struct EngineOptions {
  std::string model_dir;
  BackendOptions backend;
  ModelSettings settings;     // overrides rankd.yaml
  int tokenizer_threads = 4;  // parallel item tokenization
  int max_batch_tokens = 8192;
  // Encoded prefixes kept for reuse (same query ids: no prefix pass); 0 turns the cache off.
  size_t prefix_cache_bytes = 256 << 20;
};

// Parses a head spec. YES/NO may be token ids or tokenizer pieces (resolved via `tok`).
absl::StatusOr<HeadSpec> ParseHeadSpec(absl::string_view spec, const model::ModelConfig& config,
                                       const tokenizer::Tokenizer* tok);

class Engine {
 public:
  static absl::StatusOr<std::unique_ptr<Engine>> Create(const EngineOptions& options);

  absl::StatusOr<ScoreResult> Score(const ScoreRequest& request);

  // The prefix ids of a query text (query template applied, BOS as the tokenizer adds it).
  absl::StatusOr<std::vector<int32_t>> EncodeQuery(absl::string_view query) const;
  // Packs items (text tokenized with the item template, no special tokens) into a batch; errors
  // name the item index and the field.
  absl::StatusOr<ItemBatch> EncodeItems(const std::vector<Item>& items) const;

  const model::ModelConfig& config() const { return backend_->config(); }
  const HeadSpec& head() const { return backend_->head(); }
  const tokenizer::Tokenizer& tokenizer() const { return *tokenizer_; }
  Backend& backend() { return *backend_; }
  PrefixCache::Stats prefix_cache_stats() const { return prefix_cache_->stats(); }
  const std::string& query_template() const { return query_template_; }
  const std::string& item_template() const { return item_template_; }

 private:
  Engine() = default;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
  std::unique_ptr<Backend> backend_;
  std::string query_template_;
  std::string item_template_;
  int tokenizer_threads_ = 1;
  int max_batch_tokens_ = 8192;
  std::unique_ptr<PrefixCache> prefix_cache_;
};

float Sigmoid(float x);

}  // namespace rankd::engine

#endif  // RANKD_ENGINE_ENGINE_H_
