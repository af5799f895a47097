// UTF-8 well-formedness, shared by the log escaper, the tokenizer's input check and the config
// parser.
#ifndef RANKD_COMMON_UTF8_H_
#define RANKD_COMMON_UTF8_H_

#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"

namespace rankd {

// Length of the well-formed UTF-8 sequence at the start of `s` (1..4), or 0 when it is not one
// (empty, a stray continuation byte, a truncated or overlong sequence, a surrogate, beyond
// U+10FFFF).
inline size_t Utf8SequenceLength(absl::string_view s) {
  if (s.empty()) return 0;
  const auto b = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char c = b(0);
  size_t n;
  uint32_t cp;
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
    cp = c & 0x1F;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    cp = c & 0x0F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    cp = c & 0x07;
  } else {
    return 0;
  }
  if (s.size() < n) return 0;
  for (size_t i = 1; i < n; ++i) {
    if ((b(i) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b(i) & 0x3F);
  }
  if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) || cp > 0x10FFFF ||
      (cp >= 0xD800 && cp <= 0xDFFF)) {
    return 0;
  }
  return n;
}

// Offset of the first byte of `text` that does not start a well-formed sequence, or npos.
inline size_t FindInvalidUtf8(absl::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    if (static_cast<unsigned char>(text[i]) < 0x80) {  // ASCII: the common case, no call
      ++i;
      continue;
    }
    const size_t len = Utf8SequenceLength(text.substr(i));
    if (len == 0) return i;
    i += len;
  }
  return absl::string_view::npos;
}

}  // namespace rankd

#endif  // RANKD_COMMON_UTF8_H_
