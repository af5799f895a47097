// The regular expressions of tokenizer.json pre-tokenizers (Split, ByteLevel), run by PCRE2 with
// UTF and Unicode properties (\p{L}, \p{N}, (?i:...), look-ahead). Hugging Face tokenizers runs
// them with Oniguruma, whose \s is Unicode White_Space; PCRE2's \s differs in one code point
// (U+180E), so \s and \S are rewritten to \p{White_Space} and \P{White_Space}.
#ifndef RANKD_TOKENIZER_HF_REGEX_H_
#define RANKD_TOKENIZER_HF_REGEX_H_

#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "hf_json.h"

namespace rankd::tokenizer {

class Regex {
 public:
  // `literal`: `pattern` is plain text to find (Split's {"String": ...} pattern).
  static absl::StatusOr<Regex> Compile(absl::string_view pattern, bool literal);

  // The non-overlapping matches [start, end) of `text`, leftmost first, each search starting where
  // the previous match ended; empty matches are skipped. `text` must be valid UTF-8. Thread-safe.
  absl::StatusOr<std::vector<std::pair<size_t, size_t>>> FindAll(absl::string_view text) const;

 private:
  struct Code;
  explicit Regex(std::shared_ptr<const Code> code) : code_(std::move(code)) {}
  std::shared_ptr<const Code> code_;  // immutable once compiled
};

// The `pattern` field of component `j` at `path` (Split, Replace): {"Regex": str} or
// {"String": str}, compiled; errors name `path`.pattern.
absl::StatusOr<Regex> PatternFromJson(const JsonFile& f, const Json& j, const std::string& path);

}  // namespace rankd::tokenizer

#endif  // RANKD_TOKENIZER_HF_REGEX_H_
