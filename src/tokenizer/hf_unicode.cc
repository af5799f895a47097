#include "hf_unicode.h"

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "rankd/common/utf8.h"
#include "unicode/bytestream.h"
#include "unicode/uchar.h"

namespace rankd::tokenizer::unicode {

char32_t NextCodePoint(absl::string_view text, size_t* pos) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data()) + *pos;
  const unsigned char b = s[0];
  if (b < 0x80) {
    *pos += 1;
    return b;
  }
  if ((b & 0xE0) == 0xC0) {
    *pos += 2;
    return (char32_t{b & 0x1Fu} << 6) | (s[1] & 0x3F);
  }
  if ((b & 0xF0) == 0xE0) {
    *pos += 3;
    return (char32_t{b & 0x0Fu} << 12) | (char32_t{s[1] & 0x3Fu} << 6) | (s[2] & 0x3F);
  }
  *pos += 4;
  return (char32_t{b & 0x07u} << 18) | (char32_t{s[1] & 0x3Fu} << 12) |
         (char32_t{s[2] & 0x3Fu} << 6) | (s[3] & 0x3F);
}

char32_t PreviousCodePoint(absl::string_view text, size_t end) {
  size_t start = end - 1;
  while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
  return NextCodePoint(text, &start);
}

void AppendUtf8(char32_t c, std::string* out) {
  if (c < 0x80) {
    out->push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (c >> 6)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (c >> 12)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (c >> 18)));
    out->push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

bool IsWhiteSpace(char32_t c) { return u_isUWhiteSpace(static_cast<UChar32>(c)); }

bool IsWordChar(char32_t c) {
  const auto u = static_cast<UChar32>(c);
  if (u_hasBinaryProperty(u, UCHAR_ALPHABETIC) || u_hasBinaryProperty(u, UCHAR_JOIN_CONTROL)) {
    return true;
  }
  switch (u_charType(u)) {
    case U_NON_SPACING_MARK:
    case U_ENCLOSING_MARK:
    case U_COMBINING_SPACING_MARK:
    case U_DECIMAL_DIGIT_NUMBER:
    case U_CONNECTOR_PUNCTUATION:
      return true;
    default:
      return false;
  }
}

absl::StatusOr<Normalizer> Normalizer::Create(Form form) {
  UErrorCode err = U_ZERO_ERROR;
  const icu::Normalizer2* impl = nullptr;
  switch (form) {
    case Form::kNfc:
      impl = icu::Normalizer2::getNFCInstance(err);
      break;
    case Form::kNfd:
      impl = icu::Normalizer2::getNFDInstance(err);
      break;
    case Form::kNfkc:
      impl = icu::Normalizer2::getNFKCInstance(err);
      break;
    case Form::kNfkd:
      impl = icu::Normalizer2::getNFKDInstance(err);
      break;
  }
  if (U_FAILURE(err) || impl == nullptr) {
    return absl::InternalError(absl::StrCat("ICU normalizer unavailable: ", u_errorName(err)));
  }
  return Normalizer(impl);
}

absl::StatusOr<std::string> Normalizer::Normalize(std::string text) const {
  bool ascii = true;
  for (char ch : text) ascii &= static_cast<unsigned char>(ch) < 0x80;
  if (ascii) return text;  // every normalization form leaves ASCII unchanged
  if (text.size() > INT32_MAX) return absl::InvalidArgumentError("text longer than 2 GiB");
  std::string out;
  out.reserve(text.size());
  icu::StringByteSink<std::string> sink(&out);
  UErrorCode err = U_ZERO_ERROR;
  impl_->normalizeUTF8(0, icu::StringPiece(text.data(), static_cast<int32_t>(text.size())), sink,
                       nullptr, err);
  if (U_FAILURE(err)) {
    return absl::InternalError(absl::StrCat("ICU normalization failed: ", u_errorName(err)));
  }
  return out;
}

}  // namespace rankd::tokenizer::unicode
