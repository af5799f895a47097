// include/rankd/tokenizer holds the tokenizer's public interface, this header; its implementations
// live in src/tokenizer.
//
// Tokenizer: text -> token ids. Two implementations, chosen by what the model directory holds:
// sentencepiece (`tokenizer.model`) and Hugging Face `tokenizer.json` (BPE: byte-level, or
// sentencepiece-style with byte fallback).
#ifndef RANKD_TOKENIZER_TOKENIZER_H_
#define RANKD_TOKENIZER_TOKENIZER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace rankd::tokenizer {

// Threading: a Tokenizer does not change once loaded, so any method (Encode, EncodeBatch,
// PieceToId, ...) may be called on one instance from many threads at once, without outside locks,
// and the ids never depend on timing or on the thread. Its one mutable state is the tokenizer.json
// BPE word cache (word -> merged ids): 64 shards, each behind its own mutex, held for one hash
// lookup or insert, so concurrent Encode calls wait on each other only when their words fall in
// the same shard; a hit or a miss gives the same ids. sentencepiece's Encode is thread-safe. The
// Load functions below are thread-safe too (the sentencepiece shim is dlopened once, under
// std::call_once). A Tokenizer must outlive every call running on it.
class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Encodes `text`. With `add_special_tokens` the tokenizer's own decorations are added (the BOS of
  // a sentencepiece Llama model, a tokenizer.json post-processor's template); the query prefix is
  // encoded with them, items never are.
  virtual absl::StatusOr<std::vector<int32_t>> Encode(absl::string_view text,
                                                      bool add_special_tokens) const = 0;

  // The id of a piece (token string) such as "yes", or NotFound.
  virtual absl::StatusOr<int32_t> PieceToId(absl::string_view piece) const = 0;

  // Number of ids the tokenizer can produce (may be smaller than the model's vocab_size).
  virtual int vocab_size() const = 0;

  // The BOS id that Encode(…, true) prepends, if any.
  virtual std::optional<int32_t> bos_id() const = 0;

  virtual absl::string_view kind() const = 0;  // "sentencepiece" or "tokenizer.json"

  // Encode(text, /*add_special_tokens=*/false) with the work bounded by `max_tokens` (> 0): all
  // the ids when they are `max_tokens` or fewer; else more than `max_tokens` ids (the count seen
  // when encoding stopped), the first ones of the whole encoding, after encoding a prefix of the
  // text only. The prefixes tried are cut at word boundaries (NextWordCut), starting at
  // kBoundedFirstBytesPerToken bytes per token allowed and doubling until the prefix gives more
  // than `max_tokens` ids or is the whole text, so the work is at most about twice the bytes that
  // max_tokens + 1 tokens span (the whole text when it has no word boundary).
  //
  // Exact: a cut is made only before an ASCII space that follows an ASCII letter or digit, where
  // both tokenizers' words end: sentencepiece pieces never cross whitespace (split_by_whitespace,
  // every Llama / T5 model), and the GPT-2, Llama 3 and Qwen pre-tokenizer regexes end every word
  // at a letter or digit followed by a space, so the prefix's ids are the first ids of the whole
  // text. A sentencepiece-style tokenizer.json (Llama 2, Gemma) merges the whole text as one word,
  // and stays exact because no token of their vocabs holds an ASCII letter or digit followed by
  // "▁", so no merge crosses the cut (real_tokenizers_test checks it on the real files). A
  // tokenizer.json whose Split regex looks further ahead than one character (none known), or
  // whose vocab has such a token, could differ in the last word before the cut.
  absl::StatusOr<std::vector<int32_t>> EncodeBounded(absl::string_view text,
                                                     int64_t max_tokens) const;

  // Encodes many texts on up to `num_threads` threads; result i belongs to texts[i]. The first
  // error (by index) is returned, annotated with its index. `max_tokens` > 0 encodes each text
  // with EncodeBounded (no special tokens then).
  absl::StatusOr<std::vector<std::vector<int32_t>>> EncodeBatch(absl::Span<const std::string> texts,
                                                                bool add_special_tokens,
                                                                int num_threads,
                                                                int64_t max_tokens = 0) const;
};

// EncodeBounded's first prefix: this many bytes per token allowed (natural text averages 3-6 bytes
// per token, so one or two tries usually suffice).
inline constexpr int64_t kBoundedFirstBytesPerToken = 8;

// The first word boundary EncodeBounded may cut `text` at, at or after byte `from`: a position
// whose byte is an ASCII space and whose previous byte an ASCII letter or digit. npos: none.
size_t NextWordCut(absl::string_view text, size_t from);

// Loads the tokenizer of a HF model directory: `tokenizer.json` if present, else
// `tokenizer.model` (sentencepiece).
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizer(absl::string_view model_dir);

// Loads a sentencepiece model file. `add_bos` decides whether Encode(…, true) prepends BOS.
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadSentencePiece(const std::string& path, bool add_bos);

// Substitutes `{name}` in `tmpl` by `value` (all occurrences); `{{` and `}}` stand for braces.
std::string ApplyTemplate(absl::string_view tmpl, absl::string_view name, absl::string_view value);

}  // namespace rankd::tokenizer

#endif  // RANKD_TOKENIZER_TOKENIZER_H_
