// Unicode helpers for the tokenizer.json pipeline: UTF-8 decoding and validation, the character
// classes that Hugging Face tokenizers tests with Rust's `regex` (\s, \w), and normalization
// (NFC and friends) through ICU.
#ifndef RANKD_TOKENIZER_HF_UNICODE_H_
#define RANKD_TOKENIZER_HF_UNICODE_H_

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "rankd/common/utf8.h"
#include "unicode/normalizer2.h"

namespace rankd::tokenizer::unicode {

// Byte offset of the first byte that does not start a well-formed UTF-8 sequence (overlong forms,
// surrogates and code points above U+10FFFF are ill-formed), or npos when `text` is valid.
using ::rankd::FindInvalidUtf8;

// Decodes the code point that starts at text[*pos] and advances *pos past it. `text` must be
// valid UTF-8 and *pos < text.size().
char32_t NextCodePoint(absl::string_view text, size_t* pos);
// Decodes the code point that ends at text[end - 1]; `end` > 0.
char32_t PreviousCodePoint(absl::string_view text, size_t end);

void AppendUtf8(char32_t c, std::string* out);

// Unicode White_Space (Rust's char::is_whitespace, regex \s, Oniguruma's \s).
bool IsWhiteSpace(char32_t c);
// Rust regex's Unicode \w: Alphabetic, marks, decimal digits, connector punctuation, Join_Control.
bool IsWordChar(char32_t c);

// A Unicode normalization form, backed by ICU's (immutable, thread-safe) normalizer data.
class Normalizer {
 public:
  enum class Form { kNfc, kNfd, kNfkc, kNfkd };
  static absl::StatusOr<Normalizer> Create(Form form);

  // `text` must be valid UTF-8.
  absl::StatusOr<std::string> Normalize(std::string text) const;

 private:
  explicit Normalizer(const icu::Normalizer2* impl) : impl_(impl) {}
  const icu::Normalizer2* impl_;  // owned by ICU
};

}  // namespace rankd::tokenizer::unicode

#endif  // RANKD_TOKENIZER_HF_UNICODE_H_
