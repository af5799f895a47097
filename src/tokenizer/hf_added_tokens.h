// tokenizer.json added tokens (HF tokenizers' `AddedVocabulary`): the `added_tokens` list, and the
// matchers that cut them out of text, leftmost-longest, before the model sees it.
#ifndef RANKD_TOKENIZER_HF_ADDED_TOKENS_H_
#define RANKD_TOKENIZER_HF_ADDED_TOKENS_H_

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "hf_json.h"
#include "hf_normalizers.h"

namespace rankd::tokenizer {

// One entry of `added_tokens`.
struct AddedToken {
  std::string content;
  int32_t id = 0;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;  // matched in normalized text (else in the raw text)
};

// A piece of text [begin, end): an added token's id, or -1 for text to tokenize.
struct Segment {
  size_t begin;
  size_t end;
  int32_t id;
};

// Finds added tokens in text, leftmost-longest, the way HF's AddedVocabulary::find_matches uses
// its Aho-Corasick automaton, honoring each token's single_word / lstrip / rstrip.
// Add and Finish build it; then it is immutable and Split is thread-safe.
class AddedTokenMatcher {
 public:
  // `token` is found where `pattern` occurs (its content, or its normalized form).
  void Add(std::string pattern, AddedToken token) {
    if (pattern.empty()) return;
    by_first_byte_[static_cast<unsigned char>(pattern[0])].push_back(
        {std::move(pattern), std::move(token)});
  }
  void Finish() {
    for (auto& bucket : by_first_byte_) {
      std::stable_sort(bucket.begin(), bucket.end(), [](const Entry& a, const Entry& b) {
        return a.pattern.size() > b.pattern.size();
      });
    }
  }
  bool empty() const {
    return std::all_of(by_first_byte_.begin(), by_first_byte_.end(),
                       [](const auto& b) { return b.empty(); });
  }

  // Cuts `s` (valid UTF-8) into segments that cover it.
  void Split(absl::string_view s, std::vector<Segment>* out) const;

 private:
  struct Entry {
    std::string pattern;
    AddedToken token;
  };
  const Entry* LongestAt(absl::string_view s, size_t i) const {
    for (const Entry& e : by_first_byte_[static_cast<unsigned char>(s[i])]) {
      if (s.substr(i, e.pattern.size()) == e.pattern) return &e;
    }
    return nullptr;
  }
  std::array<std::vector<Entry>, 256> by_first_byte_;
};

// The added tokens of a tokenizer. Immutable once built; thread-safe.
class AddedVocabulary {
 public:
  // The tokenizer.json `added_tokens` list `j` (null: none; errors name `added_tokens[i]`).
  // Tokens with `normalized` are matched by their form under `normalizer` (may be null).
  static absl::StatusOr<AddedVocabulary> FromJson(const JsonFile& f, const Json& j,
                                                  const Normalizer* normalizer);

  // The id of the token whose content is `content` (the last one listed wins).
  std::optional<int32_t> Find(absl::string_view content) const {
    auto it = ids_.find(content);
    if (it == ids_.end()) return std::nullopt;
    return it->second;
  }
  int32_t max_id() const { return max_id_; }  // -1 without tokens

  // Cuts raw text around the tokens with normalized == false.
  void SplitRaw(absl::string_view text, std::vector<Segment>* out) const { raw_.Split(text, out); }
  // Cuts normalized text around the others.
  void SplitNormalized(absl::string_view text, std::vector<Segment>* out) const;

 private:
  absl::flat_hash_map<std::string, int32_t> ids_;
  int32_t max_id_ = -1;
  AddedTokenMatcher raw_;
  AddedTokenMatcher normalized_;
};

}  // namespace rankd::tokenizer

#endif  // RANKD_TOKENIZER_HF_ADDED_TOKENS_H_
