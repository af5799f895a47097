#include "hf_normalizers.h"

#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "hf_regex.h"
#include "hf_unicode.h"
#include "rankd/common/status.h"
#include "unicode/ustring.h"

namespace rankd::tokenizer {
namespace {

// NFC, NFD, NFKC, NFKD.
class UnicodeNormalizer final : public Normalizer {
 public:
  explicit UnicodeNormalizer(unicode::Normalizer impl) : impl_(impl) {}
  absl::StatusOr<std::string> Normalize(std::string text) const override {
    return impl_.Normalize(std::move(text));
  }

 private:
  unicode::Normalizer impl_;
};

// Prepend: `prepend` before a non-empty text (HF leaves an empty one empty).
class PrependNormalizer final : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prepend) : prepend_(std::move(prepend)) {}
  absl::StatusOr<std::string> Normalize(std::string text) const override {
    if (text.empty()) return text;
    return absl::StrCat(prepend_, text);
  }

 private:
  std::string prepend_;
};

// Replace: every non-overlapping match of a String or Regex pattern, leftmost first, by `content`.
class ReplaceNormalizer final : public Normalizer {
 public:
  ReplaceNormalizer(Regex pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  absl::StatusOr<std::string> Normalize(std::string text) const override {
    RANKD_ASSIGN_OR_RETURN(const auto found, pattern_.FindAll(text));
    if (found.empty()) return text;
    std::string out;
    out.reserve(text.size() + found.size() * content_.size());
    size_t prev = 0;
    for (const auto& [b, e] : found) {
      out.append(text, prev, b - prev);
      out += content_;
      prev = e;
    }
    out.append(text, prev, std::string::npos);
    return out;
  }

 private:
  Regex pattern_;
  std::string content_;
};

// Strip: Unicode White_Space (Rust's char::is_whitespace) off the left and / or right end.
class StripNormalizer final : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  absl::StatusOr<std::string> Normalize(std::string text) const override {
    size_t begin = 0, end = text.size();
    if (left_) {
      for (size_t pos = begin; pos < end;) {
        if (!unicode::IsWhiteSpace(unicode::NextCodePoint(text, &pos))) break;
        begin = pos;
      }
    }
    if (right_) {
      while (end > begin && unicode::IsWhiteSpace(unicode::PreviousCodePoint(text, end))) {
        size_t start = end - 1;
        while (start > begin && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
        end = start;
      }
    }
    return text.substr(begin, end - begin);
  }

 private:
  bool left_;
  bool right_;
};

// Lowercase: each character by itself to its full lowercase mapping, as HF's
// NormalizedString::lowercase does with Rust's char::to_lowercase (no context: "Σ" is always "σ";
// "İ" becomes "i" + U+0307). ICU's root-locale mapping of a single character is the same.
class LowercaseNormalizer final : public Normalizer {
 public:
  absl::StatusOr<std::string> Normalize(std::string text) const override {
    std::string out;
    out.reserve(text.size());
    for (size_t pos = 0; pos < text.size();) {
      const size_t start = pos;
      const char32_t c = unicode::NextCodePoint(text, &pos);
      if (c < 0x80) {
        out += static_cast<char>(c >= 'A' && c <= 'Z' ? c + ('a' - 'A') : c);
        continue;
      }
      UChar in[2], lower[8];
      int32_t in_len = 0;
      U16_APPEND_UNSAFE(in, in_len, static_cast<UChar32>(c));
      UErrorCode err = U_ZERO_ERROR;
      const int32_t n = u_strToLower(lower, 8, in, in_len, "", &err);
      if (U_FAILURE(err)) {
        out.append(text, start, pos - start);  // no mapping fits: the character stays
        continue;
      }
      for (int32_t i = 0; i < n;) {
        UChar32 l;
        U16_NEXT_UNSAFE(lower, i, l);
        unicode::AppendUtf8(static_cast<char32_t>(l), &out);
      }
    }
    return out;
  }
};

class SequenceNormalizer final : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> parts)
      : parts_(std::move(parts)) {}
  absl::StatusOr<std::string> Normalize(std::string text) const override {
    for (const auto& p : parts_) {
      RANKD_ASSIGN_OR_RETURN(text, p->Normalize(std::move(text)));
    }
    return text;
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Normalizer>> NormalizerFromJson(const JsonFile& f, const Json& j,
                                                               const std::string& path) {
  if (j.is_null()) return nullptr;
  RANKD_ASSIGN_OR_RETURN(const std::string type, TypeOf(f, j, path));
  using Form = unicode::Normalizer::Form;
  std::optional<Form> form;
  if (type == "NFC") form = Form::kNfc;
  if (type == "NFD") form = Form::kNfd;
  if (type == "NFKC") form = Form::kNfkc;
  if (type == "NFKD") form = Form::kNfkd;
  if (form) {
    RANKD_ASSIGN_OR_RETURN(auto impl, unicode::Normalizer::Create(*form));
    return std::make_unique<UnicodeNormalizer>(impl);
  }
  if (type == "Prepend") {
    RANKD_ASSIGN_OR_RETURN(std::string prepend, f.String(j, path, "prepend"));
    return std::make_unique<PrependNormalizer>(std::move(prepend));
  }
  if (type == "Replace") {
    RANKD_ASSIGN_OR_RETURN(Regex pattern, PatternFromJson(f, j, path));
    RANKD_ASSIGN_OR_RETURN(std::string content, f.String(j, path, "content"));
    return std::make_unique<ReplaceNormalizer>(std::move(pattern), std::move(content));
  }
  if (type == "Strip") {
    RANKD_ASSIGN_OR_RETURN(const bool left, f.Bool(j, path, "strip_left", true));
    RANKD_ASSIGN_OR_RETURN(const bool right, f.Bool(j, path, "strip_right", true));
    return std::make_unique<StripNormalizer>(left, right);
  }
  if (type == "Lowercase") return std::make_unique<LowercaseNormalizer>();
  if (type == "Sequence") {
    const std::string list_path = JsonFile::Join(path, "normalizers");
    auto it = j.find("normalizers");
    if (it == j.end() || !it->is_array()) return f.Error(list_path, "must be a list");
    std::vector<std::unique_ptr<Normalizer>> parts;
    for (size_t i = 0; i < it->size(); ++i) {
      RANKD_ASSIGN_OR_RETURN(auto part,
                             NormalizerFromJson(f, (*it)[i], absl::StrCat(list_path, "[", i, "]")));
      if (part != nullptr) parts.push_back(std::move(part));
    }
    return std::make_unique<SequenceNormalizer>(std::move(parts));
  }
  return f.Error(
      JsonFile::Join(path, "type"),
      absl::StrCat("normalizer '", type,
                   "' is not supported (NFC, NFD, NFKC, NFKD, Prepend, Replace, Strip, Lowercase, "
                   "Sequence)"));
}

}  // namespace rankd::tokenizer
