#include "hf_added_tokens.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "hf_unicode.h"
#include "rankd/common/status.h"

namespace rankd::tokenizer {

void AddedTokenMatcher::Split(absl::string_view s, std::vector<Segment>* out) const {
  out->clear();
  size_t start_offset = 0;
  for (size_t i = 0; i < s.size();) {
    const Entry* e = LongestAt(s, i);
    if (e == nullptr) {
      ++i;
      continue;
    }
    size_t start = i;
    size_t stop = i + e->pattern.size();
    i = stop;  // the automaton resumes after the raw match whatever happens to it below
    const AddedToken& t = e->token;
    if (t.single_word) {
      size_t after = stop;
      const bool start_ok =
          start == 0 || !unicode::IsWordChar(unicode::PreviousCodePoint(s, start));
      const bool stop_ok =
          stop == s.size() || !unicode::IsWordChar(unicode::NextCodePoint(s, &after));
      if (!start_ok || !stop_ok) continue;
    }
    if (t.lstrip) {
      size_t new_start = start;
      while (new_start > 0) {
        size_t p = new_start - 1;
        while (p > 0 && (static_cast<unsigned char>(s[p]) & 0xC0) == 0x80) --p;
        size_t q = p;
        if (!unicode::IsWhiteSpace(unicode::NextCodePoint(s, &q))) break;
        new_start = p;
      }
      start = std::max(new_start, start_offset);
    }
    if (t.rstrip) {
      while (stop < s.size()) {
        size_t q = stop;
        if (!unicode::IsWhiteSpace(unicode::NextCodePoint(s, &q))) break;
        stop = q;
      }
    }
    if (start_offset < start) out->push_back({start_offset, start, -1});
    out->push_back({start, stop, t.id});
    start_offset = stop;
  }
  if (start_offset < s.size()) out->push_back({start_offset, s.size(), -1});
}

absl::StatusOr<AddedVocabulary> AddedVocabulary::FromJson(const JsonFile& f, const Json& j,
                                                          const Normalizer* normalizer) {
  if (!j.is_null() && !j.is_array()) return f.Error("added_tokens", "must be a list");
  std::vector<AddedToken> tokens;
  tokens.reserve(j.is_array() ? j.size() : 0);
  for (size_t i = 0; j.is_array() && i < j.size(); ++i) {
    const Json& a = j[i];
    const std::string path = absl::StrCat("added_tokens[", i, "]");
    if (!a.is_object()) return f.Error(path, "must be an object");
    AddedToken t;
    RANKD_ASSIGN_OR_RETURN(t.content, f.String(a, path, "content"));
    auto id = a.find("id");
    if (id == a.end() || !id->is_number_integer() || id->get<int64_t>() < 0 ||
        id->get<int64_t>() > INT32_MAX) {
      return f.Error(JsonFile::Join(path, "id"), "must be a non-negative integer");
    }
    t.id = id->get<int32_t>();
    RANKD_ASSIGN_OR_RETURN(const bool special, f.Bool(a, path, "special", false));
    RANKD_ASSIGN_OR_RETURN(t.single_word, f.Bool(a, path, "single_word", false));
    RANKD_ASSIGN_OR_RETURN(t.lstrip, f.Bool(a, path, "lstrip", false));
    RANKD_ASSIGN_OR_RETURN(t.rstrip, f.Bool(a, path, "rstrip", false));
    // HF's default: special tokens match the raw text, others the normalized text.
    RANKD_ASSIGN_OR_RETURN(t.normalized, f.Bool(a, path, "normalized", !special));
    tokens.push_back(std::move(t));
  }
  AddedVocabulary v;
  for (const AddedToken& t : tokens) {
    v.ids_[t.content] = t.id;
    v.max_id_ = std::max(v.max_id_, t.id);
    if (t.normalized) {
      // A normalized token is matched by its normalized form.
      std::string pattern = t.content;
      if (normalizer != nullptr && unicode::FindInvalidUtf8(pattern) == std::string::npos) {
        RANKD_ASSIGN_OR_RETURN(pattern, normalizer->Normalize(std::move(pattern)));
      }
      v.normalized_.Add(std::move(pattern), t);
    } else {
      v.raw_.Add(t.content, t);
    }
  }
  v.raw_.Finish();
  v.normalized_.Finish();
  return v;
}

void AddedVocabulary::SplitNormalized(absl::string_view text, std::vector<Segment>* out) const {
  if (normalized_.empty()) {
    out->clear();
    if (!text.empty()) out->push_back({0, text.size(), -1});
  } else {
    normalized_.Split(text, out);
  }
}

}  // namespace rankd::tokenizer
