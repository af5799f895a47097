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
// pieces to `out`.
absl::Status SplitText(const Regex& regex, SplitBehavior behavior, bool invert,
                       absl::string_view text, std::vector<std::string>* out) {
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
  for (const auto& [s, removed] : pieces) {
    if (!removed && s.end > s.begin) out->emplace_back(text.substr(s.begin, s.end - s.begin));
  }
  return absl::OkStatus();
}

class SplitPreTokenizer final : public PreTokenizer {
 public:
  SplitPreTokenizer(Regex regex, SplitBehavior behavior, bool invert)
      : regex_(std::move(regex)), behavior_(behavior), invert_(invert) {}

  absl::Status Apply(std::vector<std::string>* pieces) const override {
    std::vector<std::string> out;
    out.reserve(pieces->size() * 4);
    for (const std::string& p : *pieces) {
      RANKD_RETURN_IF_ERROR(SplitText(regex_, behavior_, invert_, p, &out));
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

class ByteLevelPreTokenizer final : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, std::optional<Regex> regex)
      : add_prefix_space_(add_prefix_space), regex_(std::move(regex)) {}

  absl::Status Apply(std::vector<std::string>* pieces) const override {
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
  absl::Status Apply(std::vector<std::string>* pieces) const override {
    for (const auto& p : parts_) RANKD_RETURN_IF_ERROR(p->Apply(pieces));
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
    const std::string pattern_path = JsonFile::Join(path, "pattern");
    auto pat = j.find("pattern");
    if (pat == j.end() || !pat->is_object() || pat->size() != 1 ||
        !(pat->contains("Regex") || pat->contains("String")) || !pat->begin()->is_string()) {
      return f.Error(pattern_path, "must be {\"Regex\": str} or {\"String\": str}");
    }
    const bool literal = pat->contains("String");
    auto regex = Regex::Compile(pat->begin()->get<std::string>(), literal);
    if (!regex.ok()) return f.Error(pattern_path, regex.status().message());
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
    return std::make_unique<SplitPreTokenizer>(*std::move(regex), behavior, invert);
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
  return f.Error(
      JsonFile::Join(path, "type"),
      absl::StrCat("pre-tokenizer '", type, "' is not supported (Split, ByteLevel, Sequence)"));
}

std::string ToByteLevel(absl::string_view text) {
  const auto& alphabet = ByteLevelAlphabet();
  std::string out;
  out.reserve(text.size() * 2);
  for (char c : text) out += alphabet[static_cast<unsigned char>(c)];
  return out;
}

}  // namespace rankd::tokenizer
