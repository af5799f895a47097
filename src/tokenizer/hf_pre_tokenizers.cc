#include "hf_pre_tokenizers.h"

#include <algorithm>
#include <array>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "hf_regex.h"
#include "hf_unicode.h"
#include "rankd/common/status.h"

namespace rankd::tokenizer {
namespace {

// ToByteLevel's map, byte by byte.
const std::array<std::string, 256>& ByteLevelAlphabet() {
  static const std::array<std::string, 256> table = [] {
    std::array<bool, 256> direct{};
    for (int b = '!'; b <= '~'; ++b) direct[b] = true;
    for (int b = 0xA1; b <= 0xAC; ++b) direct[b] = true;
    for (int b = 0xAE; b <= 0xFF; ++b) direct[b] = true;
    std::array<std::string, 256> t;
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      unicode::AppendUtf8(direct[b] ? static_cast<char32_t>(b) : next++, &t[b]);
    }
    return t;
  }();
  return table;
}

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// Cuts `text` at `regex`'s matches as HF's NormalizedString::split does, appending the non-empty
// pieces to `out`. *starts_at_0 (when not null) is cleared unless the first piece appended starts
// at text[0].
absl::Status SplitText(const Regex& regex, SplitBehavior behavior, bool invert,
                       absl::string_view text, std::vector<std::string>* out,
                       bool* starts_at_0 = nullptr) {
  RANKD_ASSIGN_OR_RETURN(auto found, regex.FindAll(text));
  // The whole text as consecutive spans, each a match or not.
  struct Span {
    size_t begin, end;
    bool match;
  };
  std::vector<Span> spans;
  size_t prev = 0;
  for (const auto& [b, e] : found) {
    if (prev != b) spans.push_back({prev, b, invert});
    spans.push_back({b, e, !invert});
    prev = e;
  }
  if (prev != text.size()) spans.push_back({prev, text.size(), invert});

  // (span, removed) after applying the behavior.
  std::vector<std::pair<Span, bool>> pieces;
  bool prev_match = false;
  switch (behavior) {
    case SplitBehavior::kIsolated:
      for (const Span& s : spans) pieces.push_back({s, false});
      break;
    case SplitBehavior::kRemoved:
      for (const Span& s : spans) pieces.push_back({s, s.match});
      break;
    case SplitBehavior::kContiguous:
      for (const Span& s : spans) {
        if (!pieces.empty() && s.match == prev_match) {
          pieces.back().first.end = s.end;
        } else {
          pieces.push_back({s, false});
        }
        prev_match = s.match;
      }
      break;
    case SplitBehavior::kMergedWithPrevious:
      for (const Span& s : spans) {
        if (!pieces.empty() && s.match && !prev_match) {
          pieces.back().first.end = s.end;
        } else {
          pieces.push_back({s, false});
        }
        prev_match = s.match;
      }
      break;
    case SplitBehavior::kMergedWithNext:
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (!pieces.empty() && it->match && !prev_match) {
          pieces.back().first.begin = it->begin;
        } else {
          pieces.push_back({*it, false});
        }
        prev_match = it->match;
      }
      std::reverse(pieces.begin(), pieces.end());
      break;
  }
  bool first = true;
  for (const auto& [s, removed] : pieces) {
    if (removed || s.end == s.begin) continue;
    if (first && starts_at_0 != nullptr && s.begin != 0) *starts_at_0 = false;
    first = false;
    out->emplace_back(text.substr(s.begin, s.end - s.begin));
  }
  if (first && starts_at_0 != nullptr) *starts_at_0 = false;
  return absl::OkStatus();
}

class SplitPreTokenizer final : public PreTokenizer {
 public:
  SplitPreTokenizer(Regex regex, SplitBehavior behavior, bool invert)
      : regex_(std::move(regex)), behavior_(behavior), invert_(invert) {}

  absl::Status Apply(std::vector<std::string>* pieces, bool* first_at_origin) const override {
    std::vector<std::string> out;
    out.reserve(pieces->size() * 4);
    for (size_t i = 0; i < pieces->size(); ++i) {
      RANKD_RETURN_IF_ERROR(SplitText(regex_, behavior_, invert_, (*pieces)[i], &out,
                                      i == 0 ? first_at_origin : nullptr));
    }
    *pieces = std::move(out);
    return absl::OkStatus();
  }

 private:
  Regex regex_;
  SplitBehavior behavior_;
  bool invert_;
};

// GPT-2's word regex, which ByteLevel uses when `use_regex` is set.
constexpr absl::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

enum class PrependScheme { kAlways, kFirst, kNever };

// Metaspace: spaces become `replacement` ("▁"), which is prepended to a piece that does not start
// with it (prepend_scheme "always"; "first": only to the piece at the start of the text; "never");
// with `split`, each piece is then cut before every replacement (MergedWithNext), as HF's
// pre_tokenizers::metaspace does.
class MetaspacePreTokenizer final : public PreTokenizer {
 public:
  MetaspacePreTokenizer(std::string replacement, PrependScheme scheme, std::optional<Regex> split)
      : replacement_(std::move(replacement)), scheme_(scheme), split_(std::move(split)) {}

  absl::Status Apply(std::vector<std::string>* pieces, bool* first_at_origin) const override {
    std::vector<std::string> out;
    out.reserve(pieces->size() * 4);
    for (size_t i = 0; i < pieces->size(); ++i) {
      const std::string& p = (*pieces)[i];
      std::string w;
      w.reserve(p.size() + replacement_.size() * 4);
      const bool prepend = scheme_ == PrependScheme::kAlways ||
                           (scheme_ == PrependScheme::kFirst && i == 0 && *first_at_origin);
      if (prepend && !p.empty() && p[0] != ' ' &&
          absl::string_view(p).substr(0, replacement_.size()) != replacement_) {
        w = replacement_;
      }
      for (char c : p) {
        if (c == ' ') {
          w += replacement_;
        } else {
          w += c;
        }
      }
      if (split_) {
        RANKD_RETURN_IF_ERROR(SplitText(*split_, SplitBehavior::kMergedWithNext, false, w, &out));
      } else if (!w.empty()) {
        out.push_back(std::move(w));
      }
    }
    *pieces = std::move(out);
    return absl::OkStatus();
  }

 private:
  std::string replacement_;
  PrependScheme scheme_;
  std::optional<Regex> split_;  // the replacement, literal, when `split`
};

class ByteLevelPreTokenizer final : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, std::optional<Regex> regex)
      : add_prefix_space_(add_prefix_space), regex_(std::move(regex)) {}

  absl::Status Apply(std::vector<std::string>* pieces, bool* /*first_at_origin*/) const override {
    std::vector<std::string> words;
    words.reserve(pieces->size() * 4);
    for (std::string& p : *pieces) {
      if (p.empty()) continue;
      if (add_prefix_space_ && p[0] != ' ') p.insert(p.begin(), ' ');
      if (regex_) {
        RANKD_RETURN_IF_ERROR(SplitText(*regex_, SplitBehavior::kIsolated, false, p, &words));
      } else {
        words.push_back(std::move(p));
      }
    }
    for (std::string& w : words) w = ToByteLevel(w);
    *pieces = std::move(words);
    return absl::OkStatus();
  }

 private:
  bool add_prefix_space_;
  std::optional<Regex> regex_;
};

class SequencePreTokenizer final : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> parts)
      : parts_(std::move(parts)) {}
  absl::Status Apply(std::vector<std::string>* pieces, bool* first_at_origin) const override {
    for (const auto& p : parts_) RANKD_RETURN_IF_ERROR(p->Apply(pieces, first_at_origin));
    return absl::OkStatus();
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<PreTokenizer>> PreTokenizerFromJson(const JsonFile& f, const Json& j,
                                                                   const std::string& path,
                                                                   bool* byte_level) {
  if (j.is_null()) return nullptr;
  RANKD_ASSIGN_OR_RETURN(const std::string type, TypeOf(f, j, path));
  if (type == "Split") {
    RANKD_ASSIGN_OR_RETURN(Regex regex, PatternFromJson(f, j, path));
    RANKD_ASSIGN_OR_RETURN(const std::string b, f.String(j, path, "behavior"));
    SplitBehavior behavior;
    if (b == "Removed") {
      behavior = SplitBehavior::kRemoved;
    } else if (b == "Isolated") {
      behavior = SplitBehavior::kIsolated;
    } else if (b == "MergedWithPrevious") {
      behavior = SplitBehavior::kMergedWithPrevious;
    } else if (b == "MergedWithNext") {
      behavior = SplitBehavior::kMergedWithNext;
    } else if (b == "Contiguous") {
      behavior = SplitBehavior::kContiguous;
    } else {
      return f.Error(JsonFile::Join(path, "behavior"), absl::StrCat("unknown behavior '", b, "'"));
    }
    RANKD_ASSIGN_OR_RETURN(const bool invert, f.Bool(j, path, "invert", false));
    return std::make_unique<SplitPreTokenizer>(std::move(regex), behavior, invert);
  }
  if (type == "Metaspace") {
    RANKD_ASSIGN_OR_RETURN(std::string replacement, f.String(j, path, "replacement"));
    size_t one_char = 0;
    const bool valid =
        !replacement.empty() && unicode::FindInvalidUtf8(replacement) == absl::string_view::npos;
    if (valid) unicode::NextCodePoint(replacement, &one_char);
    if (!valid || one_char != replacement.size()) {
      return f.Error(JsonFile::Join(path, "replacement"), "must be one character");
    }
    // HF's MetaspaceHelper: prepend_scheme defaults to "always"; the older add_prefix_space: false
    // means "never".
    RANKD_ASSIGN_OR_RETURN(auto scheme_name, f.OptString(j, path, "prepend_scheme"));
    RANKD_ASSIGN_OR_RETURN(const bool add_prefix_space, f.Bool(j, path, "add_prefix_space", true));
    PrependScheme scheme = add_prefix_space ? PrependScheme::kAlways : PrependScheme::kNever;
    if (scheme_name) {
      if (*scheme_name == "always") {
        scheme = PrependScheme::kAlways;
      } else if (*scheme_name == "first") {
        scheme = PrependScheme::kFirst;
      } else if (*scheme_name == "never") {
        scheme = PrependScheme::kNever;
      } else {
        return f.Error(JsonFile::Join(path, "prepend_scheme"),
                       absl::StrCat("unknown scheme '", *scheme_name, "' (always, first, never)"));
      }
      if (!add_prefix_space && scheme != PrependScheme::kNever) {
        return f.Error(JsonFile::Join(path, "add_prefix_space"),
                       "false does not match prepend_scheme");
      }
    }
    RANKD_ASSIGN_OR_RETURN(const bool split, f.Bool(j, path, "split", true));
    std::optional<Regex> split_regex;
    if (split) {
      RANKD_ASSIGN_OR_RETURN(split_regex, Regex::Compile(replacement, /*literal=*/true));
    }
    return std::make_unique<MetaspacePreTokenizer>(std::move(replacement), scheme,
                                                   std::move(split_regex));
  }
  if (type == "ByteLevel") {
    RANKD_ASSIGN_OR_RETURN(const bool add_prefix_space, f.Bool(j, path, "add_prefix_space", true));
    RANKD_ASSIGN_OR_RETURN(const bool use_regex, f.Bool(j, path, "use_regex", true));
    std::optional<Regex> regex;
    if (use_regex) {
      RANKD_ASSIGN_OR_RETURN(regex, Regex::Compile(kGpt2Pattern, /*literal=*/false));
    }
    *byte_level = true;
    return std::make_unique<ByteLevelPreTokenizer>(add_prefix_space, std::move(regex));
  }
  if (type == "Sequence") {
    const std::string list_path = JsonFile::Join(path, "pretokenizers");
    auto it = j.find("pretokenizers");
    if (it == j.end() || !it->is_array()) return f.Error(list_path, "must be a list");
    std::vector<std::unique_ptr<PreTokenizer>> parts;
    for (size_t i = 0; i < it->size(); ++i) {
      RANKD_ASSIGN_OR_RETURN(
          auto part,
          PreTokenizerFromJson(f, (*it)[i], absl::StrCat(list_path, "[", i, "]"), byte_level));
      if (part != nullptr) parts.push_back(std::move(part));
    }
    return std::make_unique<SequencePreTokenizer>(std::move(parts));
  }
  return f.Error(JsonFile::Join(path, "type"),
                 absl::StrCat("pre-tokenizer '", type,
                              "' is not supported (Split, Metaspace, ByteLevel, Sequence)"));
}

std::string ToByteLevel(absl::string_view text) {
  const auto& alphabet = ByteLevelAlphabet();
  std::string out;
  out.reserve(text.size() * 2);
  for (char c : text) out += alphabet[static_cast<unsigned char>(c)];
  return out;
}

}  // namespace rankd::tokenizer
