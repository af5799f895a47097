#include "hf_regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <string>

#include "absl/strings/str_cat.h"

namespace rankd::tokenizer {

struct Regex::Code {
  pcre2_code* code = nullptr;
  ~Code() { pcre2_code_free(code); }
};

namespace {

std::string Pcre2Error(int code) {
  PCRE2_UCHAR buf[256];
  if (pcre2_get_error_message(code, buf, sizeof(buf)) < 0) return absl::StrCat("error ", code);
  return std::string(reinterpret_cast<const char*>(buf));
}

// \s -> \p{White_Space}, \S -> \P{White_Space}; other escapes (\\s included) are copied as is.
std::string RewriteSpaceClasses(absl::string_view pattern) {
  std::string out;
  out.reserve(pattern.size() + 32);
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '\\' || i + 1 == pattern.size()) {
      out += pattern[i];
      continue;
    }
    const char next = pattern[++i];
    if (next == 's') {
      out += "\\p{White_Space}";
    } else if (next == 'S') {
      out += "\\P{White_Space}";
    } else {
      out += '\\';
      out += next;
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<Regex> Regex::Compile(absl::string_view pattern, bool literal) {
  const std::string source = literal ? std::string(pattern) : RewriteSpaceClasses(pattern);
  // PCRE2_LITERAL admits no UCP (a literal has no classes for it to change).
  const uint32_t options = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
  int error = 0;
  PCRE2_SIZE error_offset = 0;
  auto code = std::make_shared<Code>();
  code->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(source.data()), source.size(), options,
                             &error, &error_offset, nullptr);
  if (code->code == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("regex /", pattern, "/: ", Pcre2Error(error), " at offset ", error_offset));
  }
  // JIT is an optimization: without it (an unsupported CPU) pcre2_match interprets.
  pcre2_jit_compile(code->code, PCRE2_JIT_COMPLETE);
  return Regex(std::move(code));
}

absl::StatusOr<std::vector<std::pair<size_t, size_t>>> Regex::FindAll(
    absl::string_view text) const {
  std::vector<std::pair<size_t, size_t>> out;
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> md(
      pcre2_match_data_create_from_pattern(code_->code, nullptr), &pcre2_match_data_free);
  if (md == nullptr) return absl::ResourceExhaustedError("pcre2: out of memory");
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  while (pos < text.size()) {
    // The caller validated the UTF-8 once; checking it again on every call would be quadratic.
    int rc =
        pcre2_match(code_->code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, md.get(), nullptr);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
      // A long backtracking run overflowed the JIT's stack; the interpreter keeps its own on the
      // heap.
      rc = pcre2_match(code_->code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT,
                       md.get(), nullptr);
    }
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) return absl::InternalError(absl::StrCat("pcre2_match: ", Pcre2Error(rc)));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
    const size_t start = ov[0], end = ov[1];
    if (end > start) {
      out.emplace_back(start, end);
      pos = end;
    } else {
      // Empty match: step over one code point and search again.
      pos = start + 1;
      while (pos < text.size() && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80) ++pos;
    }
  }
  return out;
}

absl::StatusOr<Regex> PatternFromJson(const JsonFile& f, const Json& j, const std::string& path) {
  const std::string pattern_path = JsonFile::Join(path, "pattern");
  auto pat = j.find("pattern");
  if (pat == j.end() || !pat->is_object() || pat->size() != 1 ||
      !(pat->contains("Regex") || pat->contains("String")) || !pat->begin()->is_string()) {
    return f.Error(pattern_path, "must be {\"Regex\": str} or {\"String\": str}");
  }
  auto regex = Regex::Compile(pat->begin()->get<std::string>(), pat->contains("String"));
  if (!regex.ok()) return f.Error(pattern_path, regex.status().message());
  return *std::move(regex);
}

}  // namespace rankd::tokenizer
