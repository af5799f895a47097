// rankd/engine: the engine (this header), its options (options.h: EngineOptions, the one
// definition of an engine's settings) and its prefix cache (prefix_cache.h). It knows the Backend
// interface only; the backend comes from the factory its creator passes in.
//
// Engine: text in, scores out. Owns a tokenizer and a backend; applies the model's templates,
// encodes the query prefix once and scores the items against it in batches of at most
// `backend.max_batch_tokens` item tokens. It scores a PreparedRequest as given; a ScoreRequest
// from a caller without a front end (`rankd score`, the tests) is checked and prepared once by
// Prepare.
#ifndef RANKD_ENGINE_ENGINE_H_
#define RANKD_ENGINE_ENGINE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "rankd/backend/backend.h"
#include "rankd/engine/options.h"
#include "rankd/engine/prefix_cache.h"
#include "rankd/engine/text_encoder.h"
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
  std::string query;                              // used unless query_ids is set
  std::optional<std::vector<int32_t>> query_ids;  // the whole prefix, verbatim (BOS included)
  std::vector<Item> items;
  bool apply_sigmoid = false;
};

// A request as the engine scores it: the prefix's ids and every item packed into one batch. It is
// prepared once, where the request is taken from its caller (the worker's PrepareWorkItem for the
// front end's work items, Engine::Prepare for a ScoreRequest), and then taken as given: Score and
// ScoreMany check nothing of it again; the backend asserts what memory safety needs (backend.h's
// ValidatePrefixIds, ValidateItemBatch).
struct PreparedRequest {
  std::vector<int32_t> prefix_ids;  // [P] the whole prefix: template applied, BOS included
  backend::ItemBatch items;         // the items in order: token ids, or embedding rows
  bool apply_sigmoid = false;
};

struct ScoreResult {
  std::vector<float> scores;  // one per item, in request order
  int prefix_tokens = 0;
  int64_t item_tokens = 0;
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

// One forward pass of ScoreGroupsInPasses.
struct PassInfo {
  size_t groups_done = 0;  // leading groups whose items are all scored after this pass
  int groups = 0;          // groups with items in this pass (a split group counts in each)
  int items = 0;
  int tokens = 0;  // item tokens
};

// Scores `groups` through backend.ScoreGroups in passes of at most `max_batch_tokens` item tokens:
// groups are packed in order, and a group that does not fit the rest of a pass is split (its
// first items in this pass, the others in the next); an item longer than the budget goes alone.
// `after_pass`, if set, runs after each pass with what it held and how many leading groups have all
// their items scored by then. The first failing pass ends it with that pass's error.
absl::Status ScoreGroupsInPasses(backend::Backend& backend,
                                 absl::Span<const backend::Backend::ScoreGroup> groups,
                                 int max_batch_tokens,
                                 const std::function<void(const PassInfo&)>& after_pass = {});

// An item's text as encoded (EncodeTexts): no tokens is an error about item `item` (".text:
// encodes to no tokens"), which no backend can score.
absl::Status CheckEncodedText(int item, absl::Span<const int32_t> ids);

// Parses a head spec. YES/NO may be token ids or tokenizer pieces (resolved via `tok`).
absl::StatusOr<backend::HeadSpec> ParseHeadSpec(absl::string_view spec,
                                                const model::ModelConfig& config,
                                                const tokenizer::Tokenizer* tok);

// Threading contract: Engine has no lock of its own.
//   - Score, ScoreMany and backend() (the mutable backend) are for one thread at a time: they
//     call the backend's EncodePrefix / ScoreGroups, which no backend supports overlapping (the
//     CUDA backend runs on one stream and one set of arenas; see cpu_backend.h for the CPU one).
//     The worker calls them from its single engine thread.
//   - The const methods (Prepare, EncodeQuery, EncodeItems, EncodeTexts, config, head,
//     tokenizer, prefix_cache_stats, the templates) may be called from any thread, also while
//     Score runs: the tokenizer is thread-safe, EncodeTexts tokenizes on threads it starts and
//     joins itself, and the prefix cache locks (prefix_cache.h). The worker prepares a work item
//     on its engine thread (PrepareWorkItem), between steps.
class Engine {
 public:
  // Loads the tokenizer and the settings, then makes the backend through `create_backend`
  // (rankd/backend/registry.h's CreateBackend where a program is assembled).
  static absl::StatusOr<std::unique_ptr<Engine>> Create(
      const EngineOptions& options, const backend::BackendFactory& create_backend);

  // What Create would fail on, without reading a weight: everything Create does before it makes
  // the backend (config.json, the settings, the tokenizer, the templates, the head), then every
  // shard's safetensors header (dtypes, data offsets within the file) and the tensors' names and
  // shapes against config.json (model::BindTensors, as the backends bind them). The tensors are
  // mapped, not read. `rankd serve` runs it before it starts workers.
  static absl::Status CheckModel(const EngineOptions& options);

  // The checks and the preparation of a request that reaches the engine from no front end (`rankd
  // score`, the tests), their one place: the prefix (query_ids as given, every id in the
  // vocabulary; or EncodeQuery), the items (EncodeItems: ids in the vocabulary, embedding values),
  // each item within the model's context after the prefix. Errors are INVALID_ARGUMENT naming the
  // field and the item (FieldError, rankd/common/field_error.h). The worker prepares the front
  // end's work items itself (rankd/worker/worker.h's PrepareWorkItem): the front end validated
  // them.
  absl::StatusOr<PreparedRequest> Prepare(const ScoreRequest& request) const;

  absl::StatusOr<ScoreResult> Score(const PreparedRequest& request);
  absl::StatusOr<ScoreResult> Score(const ScoreRequest& request);  // Prepare, then Score

  // Scores several requests together: each prefix comes from the prefix cache or is encoded, and
  // all their items go through Backend::ScoreGroups in passes of at most max_batch_tokens item
  // tokens (ScoreGroupsInPasses, requests in the given order). `done(i, result)` runs once per
  // request, on the calling thread: for a request whose prefix fails to encode, before any pass;
  // for the others in index order as soon as the pass holding their last item has finished.
  // When a pass fails, the requests not yet answered are scored again one by one, so that a
  // backend error fails only the request that causes it.
  // `on_pass`, if set, runs after each forward pass, before the answers that pass completes.
  using ScoreDoneFn = std::function<void(size_t index, absl::StatusOr<ScoreResult> result)>;
  void ScoreMany(absl::Span<const PreparedRequest> requests, const ScoreDoneFn& done,
                 const std::function<void(const PassInfo&)>& on_pass = {});
  std::vector<absl::StatusOr<ScoreResult>> ScoreMany(absl::Span<const PreparedRequest> requests);
  // Each request Prepared on its own (one that fails does so alone, not its batch-mates), then
  // the others scored together.
  std::vector<absl::StatusOr<ScoreResult>> ScoreMany(absl::Span<const ScoreRequest> requests);

  // The prefix ids of a query text (query template applied, BOS as the tokenizer adds it).
  absl::StatusOr<std::vector<int32_t>> EncodeQuery(absl::string_view query) const {
    return text_->EncodeQuery(query);
  }
  // Packs items (text tokenized with the item template, no special tokens) into a batch, checking
  // their ids against the vocabulary and their embedding values (model/input_checks.h): Prepare's
  // items. Errors name the item index and the field.
  absl::StatusOr<backend::ItemBatch> EncodeItems(const std::vector<Item>& items) const;
  // Item texts tokenized (item template, no special tokens) on the engine's tokenizer threads;
  // `max_tokens` > 0 bounds each text's tokenization (Tokenizer::EncodeBounded): an encoding
  // longer than that holds the first ids only. Callers check each with CheckEncodedText.
  absl::StatusOr<std::vector<std::vector<int32_t>>> EncodeTexts(absl::Span<const std::string> texts,
                                                                int64_t max_tokens = 0) const;

  const model::ModelConfig& config() const { return backend_->config(); }
  const backend::HeadSpec& head() const { return backend_->head(); }
  const tokenizer::Tokenizer& tokenizer() const { return text_->tokenizer(); }
  // The tokenizer, templates and special-token rules (Tokenize's too).
  const TextEncoder& text_encoder() const { return *text_; }
  backend::Backend& backend() { return *backend_; }
  PrefixCache::Stats prefix_cache_stats() const { return prefix_cache_->stats(); }
  const std::string& query_template() const { return text_->query_template(); }
  const std::string& item_template() const { return text_->item_template(); }

  // TRUNCATE_END for text (ScoreRequest.truncate; the worker decides when to cut): `ids`, an
  // encoding longer than `limit` of a templated query (EncodeQuery) or of a text item (its entry
  // in EncodeItems' batch), cut to `limit` tokens: its first (limit - T) tokens, then the T tokens
  // of the template's tail (the tokens every encoding of the template ends with whatever the
  // value: those of the text after {query} / {item}, and for the query the special tokens the
  // tokenizer appends), so that the template's head and tail stay and the content loses its end.
  // Nullopt when the template around an empty value encodes to `limit` tokens or more (nothing of
  // the content would be left).
  std::optional<std::vector<int32_t>> CutQuery(absl::Span<const int32_t> ids, int64_t limit) const {
    return text_->CutQuery(ids, limit);
  }
  std::optional<std::vector<int32_t>> CutTextItem(absl::Span<const int32_t> ids,
                                                  int64_t limit) const {
    return text_->CutTextItem(ids, limit);
  }

 private:
  // A request of ScoreMany on its way through the backend: its prefix state and result to fill.
  struct Scoring {
    size_t index = 0;
    const PreparedRequest* request = nullptr;
    std::shared_ptr<const backend::PrefixState> prefix;
    ScoreResult result;
  };

  Engine() = default;
  // Create's steps before the backend: loads the text encoder, returns the head.
  absl::StatusOr<backend::HeadSpec> InitBeforeBackend(const EngineOptions& options,
                                                      const model::ModelConfig& config);
  // The prefix state of `ids`: from the prefix cache, or encoded (and cached).
  absl::StatusOr<std::shared_ptr<const backend::PrefixState>> PrefixFor(
      const std::vector<int32_t>& ids);
  std::unique_ptr<TextEncoder> text_;
  std::unique_ptr<backend::Backend> backend_;
  int tokenizer_threads_ = 1;
  int max_batch_tokens_ = 8192;
  std::unique_ptr<PrefixCache> prefix_cache_;
};

float Sigmoid(float x);

}  // namespace rankd::engine

#endif  // RANKD_ENGINE_ENGINE_H_
