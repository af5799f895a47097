#include "hf_tokenizer.h"

#include <filesystem>

#include <algorithm>
#include <array>
#include <cstdint>
#include <fstream>
#include <mutex>
#include <optional>
#include <queue>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "hf_regex.h"
#include "hf_unicode.h"
#include "nlohmann/json.hpp"
#include "rankd/common/status.h"

namespace rankd::tokenizer {
namespace {

using Json = nlohmann::json;

// ---- reading the JSON files ------------------------------------------------------------------

// Errors name the file and the field (e.g. `tokenizer.json: pre_tokenizer.pretokenizers[0].type`).
class JsonFile {
 public:
  explicit JsonFile(std::string path) : path_(std::move(path)) {}

  const std::string& path() const { return path_; }

  absl::Status Error(absl::string_view field, absl::string_view why) const {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": ", field, ": ", why));
  }

  absl::StatusOr<Json> Parse() const {
    std::ifstream in(path_, std::ios::binary);
    if (!in) return absl::NotFoundError(absl::StrCat(path_, ": cannot open"));
    std::stringstream buf;
    buf << in.rdbuf();
    Json j = Json::parse(buf.str(), nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded())
      return absl::InvalidArgumentError(absl::StrCat(path_, ": not valid JSON"));
    if (!j.is_object()) return absl::InvalidArgumentError(absl::StrCat(path_, ": not an object"));
    return j;
  }

  absl::StatusOr<std::string> String(const Json& obj, const std::string& path,
                                     const char* key) const {
    auto it = obj.find(key);
    if (it == obj.end() || !it->is_string()) return Error(Join(path, key), "must be a string");
    return it->get<std::string>();
  }

  absl::StatusOr<bool> Bool(const Json& obj, const std::string& path, const char* key,
                            bool default_value) const {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return default_value;
    if (!it->is_boolean()) return Error(Join(path, key), "must be true or false");
    return it->get<bool>();
  }

  // An optional string field: null or absent gives nullopt.
  absl::StatusOr<std::optional<std::string>> OptString(const Json& obj, const std::string& path,
                                                       const char* key) const {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return std::nullopt;
    if (!it->is_string()) return Error(Join(path, key), "must be a string or null");
    return it->get<std::string>();
  }

  static std::string Join(const std::string& path, absl::string_view key) {
    return path.empty() ? std::string(key) : absl::StrCat(path, ".", key);
  }

 private:
  std::string path_;
};

// The `type` of a component object at `path`.
absl::StatusOr<std::string> TypeOf(const JsonFile& f, const Json& j, const std::string& path) {
  if (!j.is_object()) return f.Error(path, "must be an object");
  return f.String(j, path, "type");
}

// ---- byte-level alphabet ----------------------------------------------------------------------

// GPT-2's reversible byte -> printable character map, each character UTF-8 encoded: printable
// Latin-1 bytes map to themselves, the others to U+0100 onward (space -> "Ġ", '\n' -> "Ċ").
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

std::string ToByteLevel(absl::string_view text) {
  const auto& alphabet = ByteLevelAlphabet();
  std::string out;
  out.reserve(text.size() * 2);
  for (char c : text) out += alphabet[static_cast<unsigned char>(c)];
  return out;
}

// ---- normalizers ------------------------------------------------------------------------------

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual absl::StatusOr<std::string> Normalize(std::string text) const = 0;
};

class UnicodeNormalizer final : public Normalizer {
 public:
  explicit UnicodeNormalizer(unicode::Normalizer impl) : impl_(impl) {}
  absl::StatusOr<std::string> Normalize(std::string text) const override {
    return impl_.Normalize(std::move(text));
  }

 private:
  unicode::Normalizer impl_;
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

// Null gives nullptr (no normalizer).
absl::StatusOr<std::unique_ptr<Normalizer>> ParseNormalizer(const JsonFile& f, const Json& j,
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
  if (type == "Sequence") {
    const std::string list_path = JsonFile::Join(path, "normalizers");
    auto it = j.find("normalizers");
    if (it == j.end() || !it->is_array()) return f.Error(list_path, "must be a list");
    std::vector<std::unique_ptr<Normalizer>> parts;
    for (size_t i = 0; i < it->size(); ++i) {
      RANKD_ASSIGN_OR_RETURN(auto part,
                             ParseNormalizer(f, (*it)[i], absl::StrCat(list_path, "[", i, "]")));
      if (part != nullptr) parts.push_back(std::move(part));
    }
    return std::make_unique<SequenceNormalizer>(std::move(parts));
  }
  return f.Error(
      JsonFile::Join(path, "type"),
      absl::StrCat("normalizer '", type, "' is not supported (NFC, NFD, NFKC, NFKD, Sequence)"));
}

// ---- pre-tokenizers ---------------------------------------------------------------------------

// A pre-tokenizer replaces each piece of text by the words it cuts it into (none empty).
class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  virtual absl::Status Apply(std::vector<std::string>* pieces) const = 0;
};

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

// Null gives nullptr (each piece is one word). Sets *byte_level when a ByteLevel step is present.
absl::StatusOr<std::unique_ptr<PreTokenizer>> ParsePreTokenizer(const JsonFile& f, const Json& j,
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
          ParsePreTokenizer(f, (*it)[i], absl::StrCat(list_path, "[", i, "]"), byte_level));
      if (part != nullptr) parts.push_back(std::move(part));
    }
    return std::make_unique<SequencePreTokenizer>(std::move(parts));
  }
  return f.Error(
      JsonFile::Join(path, "type"),
      absl::StrCat("pre-tokenizer '", type, "' is not supported (Split, ByteLevel, Sequence)"));
}

// ---- the BPE model ----------------------------------------------------------------------------

class BpeModel {
 public:
  static absl::StatusOr<BpeModel> Parse(const JsonFile& f, const Json& j);

  // Appends the ids of one pre-tokenized word.
  void Tokenize(absl::string_view word, std::vector<int32_t>* out) const;

  std::optional<int32_t> Find(absl::string_view token) const {
    auto it = vocab_.find(token);
    if (it == vocab_.end()) return std::nullopt;
    return it->second;
  }
  int32_t max_id() const { return max_id_; }

 private:
  struct Merge {
    int32_t rank;
    int32_t new_id;
  };
  static uint64_t PairKey(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  const Merge* FindMerge(int32_t a, int32_t b) const {
    auto it = merges_.find(PairKey(a, b));
    return it == merges_.end() ? nullptr : &it->second;
  }

  // The id of the single-character token of each code point below kCharIdsSize (-1: none), so
  // that splitting a word into characters needs no hashing (the byte-level alphabet lies below
  // U+0144). Empty when characters carry a subword prefix or suffix.
  static constexpr char32_t kCharIdsSize = 0x800;
  std::vector<int32_t> char_ids_;
  absl::flat_hash_map<std::string, int32_t> vocab_;
  absl::flat_hash_map<uint64_t, Merge> merges_;  // (left id, right id) -> rank, merged id
  int32_t max_id_ = -1;
  bool ignore_merges_ = false;
  bool byte_fallback_ = false;
  bool fuse_unk_ = false;
  std::optional<int32_t> unk_id_;
  std::string continuing_subword_prefix_;
  std::string end_of_word_suffix_;
};

absl::StatusOr<BpeModel> BpeModel::Parse(const JsonFile& f, const Json& j) {
  const std::string path = "model";
  if (!j.is_object()) return f.Error(path, "must be an object");
  if (auto t = j.find("type");
      t != j.end() && (!t->is_string() || t->get<std::string>() != "BPE")) {
    return f.Error("model.type",
                   absl::StrCat("model '", t->is_string() ? t->get<std::string>() : t->dump(),
                                "' is not supported (BPE)"));
  }
  BpeModel m;
  if (auto d = j.find("dropout");
      d != j.end() && !d->is_null() && !(d->is_number() && d->get<double>() == 0.0)) {
    return f.Error("model.dropout", "BPE dropout is not supported (must be null)");
  }
  RANKD_ASSIGN_OR_RETURN(m.ignore_merges_, f.Bool(j, path, "ignore_merges", false));
  RANKD_ASSIGN_OR_RETURN(m.byte_fallback_, f.Bool(j, path, "byte_fallback", false));
  RANKD_ASSIGN_OR_RETURN(m.fuse_unk_, f.Bool(j, path, "fuse_unk", false));
  RANKD_ASSIGN_OR_RETURN(auto prefix, f.OptString(j, path, "continuing_subword_prefix"));
  RANKD_ASSIGN_OR_RETURN(auto suffix, f.OptString(j, path, "end_of_word_suffix"));
  m.continuing_subword_prefix_ = prefix.value_or("");
  m.end_of_word_suffix_ = suffix.value_or("");

  auto vocab = j.find("vocab");
  if (vocab == j.end() || !vocab->is_object()) {
    return f.Error("model.vocab", "must be an object {token: id}");
  }
  m.vocab_.reserve(vocab->size());
  for (auto it = vocab->begin(); it != vocab->end(); ++it) {
    if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > INT32_MAX) {
      return f.Error(absl::StrCat("model.vocab[\"", it.key(), "\"]"),
                     "must be a non-negative integer id");
    }
    const auto id = it->get<int32_t>();
    m.vocab_[it.key()] = id;
    m.max_id_ = std::max(m.max_id_, id);
  }

  RANKD_ASSIGN_OR_RETURN(auto unk, f.OptString(j, path, "unk_token"));
  if (unk) {
    auto id = m.Find(*unk);
    if (!id) return f.Error("model.unk_token", absl::StrCat("'", *unk, "' is not in model.vocab"));
    m.unk_id_ = *id;
  }

  auto merges = j.find("merges");
  if (merges == j.end() || !merges->is_array()) return f.Error("model.merges", "must be a list");
  m.merges_.reserve(merges->size());
  for (size_t i = 0; i < merges->size(); ++i) {
    const Json& e = (*merges)[i];
    const std::string field = absl::StrCat("model.merges[", i, "]");
    std::string a, b;
    if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      a = e[0].get<std::string>();
      b = e[1].get<std::string>();
    } else if (e.is_string()) {
      // The older form: "a b" (byte-level tokens never hold a space).
      const std::string s = e.get<std::string>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
        return f.Error(field, absl::StrCat("'", s, "' is not two tokens separated by one space"));
      }
      a = s.substr(0, space);
      b = s.substr(space + 1);
    } else {
      return f.Error(field, "must be [\"a\", \"b\"] or \"a b\"");
    }
    auto a_id = m.Find(a), b_id = m.Find(b);
    if (!a_id || !b_id) {
      return f.Error(field, absl::StrCat("'", a_id ? b : a, "' is not in model.vocab"));
    }
    // With a continuing-subword prefix, the right part carries it and the merged token does not
    // repeat it.
    if (!m.continuing_subword_prefix_.empty() &&
        absl::string_view(b).substr(0, m.continuing_subword_prefix_.size()) ==
            m.continuing_subword_prefix_) {
      b.erase(0, m.continuing_subword_prefix_.size());
    }
    const std::string merged = a + b;
    auto merged_id = m.Find(merged);
    if (!merged_id) {
      return f.Error(field, absl::StrCat("merged token '", merged, "' is not in model.vocab"));
    }
    // A repeated pair takes its last rank, as HF's map does.
    m.merges_.insert_or_assign(PairKey(*a_id, *b_id), Merge{static_cast<int32_t>(i), *merged_id});
  }
  if (m.continuing_subword_prefix_.empty() && m.end_of_word_suffix_.empty()) {
    m.char_ids_.assign(kCharIdsSize, -1);
    std::string ch;
    for (char32_t c = 0; c < kCharIdsSize; ++c) {
      ch.clear();
      unicode::AppendUtf8(c, &ch);
      if (auto id = m.Find(ch)) m.char_ids_[c] = *id;
    }
  }
  return m;
}

void BpeModel::Tokenize(absl::string_view word, std::vector<int32_t>* out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    if (auto id = Find(word)) {
      out->push_back(*id);
      return;
    }
  }
  // Initial symbols: one per character (with prefix / suffix decorations), as a linked list over
  // `symbols`; len == 0 marks a symbol merged into its left neighbour.
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
    int32_t len;  // bytes of `word` covered
  };
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  auto add = [&](int32_t id, int32_t len) {
    const auto n = static_cast<int32_t>(symbols.size());
    symbols.push_back({id, n - 1, n + 1, len});
  };
  int32_t unk_bytes = 0;  // bytes of the pending unk symbol (0: none pending)
  std::string decorated;
  for (size_t pos = 0; pos < word.size();) {
    const size_t start = pos;
    const char32_t c = unicode::NextCodePoint(word, &pos);
    const auto byte_len = static_cast<int32_t>(pos - start);
    if (c < char_ids_.size() && char_ids_[c] >= 0) {
      if (unk_bytes > 0) add(*unk_id_, unk_bytes);
      unk_bytes = 0;
      add(char_ids_[c], byte_len);
      continue;
    }
    absl::string_view ch = word.substr(start, pos - start);
    if (!continuing_subword_prefix_.empty() || !end_of_word_suffix_.empty()) {
      decorated.clear();
      if (start > 0) decorated += continuing_subword_prefix_;
      decorated.append(ch.data(), ch.size());
      if (pos == word.size()) decorated += end_of_word_suffix_;
      ch = decorated;
    }
    if (auto id = Find(ch)) {
      if (unk_bytes > 0) add(*unk_id_, unk_bytes);
      unk_bytes = 0;
      add(*id, byte_len);
      continue;
    }
    if (byte_fallback_) {
      std::vector<int32_t> bytes;
      for (unsigned char b : ch) {
        static constexpr char kHex[] = "0123456789ABCDEF";
        const char name[] = {'<', '0', 'x', kHex[b >> 4], kHex[b & 15], '>'};
        auto id = Find(absl::string_view(name, sizeof(name)));
        if (!id) break;
        bytes.push_back(*id);
      }
      if (bytes.size() == ch.size()) {
        for (int32_t id : bytes) add(id, 1);
        continue;
      }
    }
    if (unk_id_) {
      if (unk_bytes > 0 && !fuse_unk_) {
        add(*unk_id_, unk_bytes);
        unk_bytes = 0;
      }
      unk_bytes += byte_len;
    }
    // Without unk_token an unknown character is dropped, as HF does.
  }
  if (unk_bytes > 0) add(*unk_id_, unk_bytes);
  if (symbols.empty()) return;
  symbols.back().next = -1;

  // Merge the lowest-ranked adjacent pair first (the leftmost on ties), as HF's Word::merge_all.
  struct Candidate {
    int32_t pos;
    int32_t rank;
    int32_t new_id;
    bool operator<(const Candidate& o) const {  // priority_queue pops the "largest"
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate> queue;
  for (size_t i = 0; i + 1 < symbols.size(); ++i) {
    if (const Merge* mg = FindMerge(symbols[i].id, symbols[i + 1].id)) {
      queue.push({static_cast<int32_t>(i), mg->rank, mg->new_id});
    }
  }
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& cur = symbols[top.pos];
    if (cur.len == 0 || cur.next == -1) continue;
    const int32_t right_pos = cur.next;
    const Symbol right = symbols[right_pos];
    const Merge* mg = FindMerge(cur.id, right.id);
    if (mg == nullptr || mg->new_id != top.new_id) continue;  // stale entry
    cur.id = top.new_id;
    cur.len += right.len;
    cur.next = right.next;
    symbols[right_pos].len = 0;
    if (right.next != -1) symbols[right.next].prev = top.pos;
    if (cur.prev >= 0) {
      if (const Merge* m = FindMerge(symbols[cur.prev].id, cur.id)) {
        queue.push({cur.prev, m->rank, m->new_id});
      }
    }
    if (cur.next != -1) {
      if (const Merge* m = FindMerge(cur.id, symbols[cur.next].id)) {
        queue.push({top.pos, m->rank, m->new_id});
      }
    }
  }
  for (const Symbol& s : symbols) {
    if (s.len != 0) out->push_back(s.id);
  }
}

// Words already merged -> their ids. Items repeat words, and merging is most of the BPE's cost;
// HF caches the same way. Sharded, each shard under its own lock, so that the threads of
// EncodeBatch rarely wait; a full shard is emptied and refills with the words now in use.
class WordCache {
 public:
  static constexpr size_t kMaxWordBytes = 64;  // longer words are rare and not worth the memory

  // Appends the ids of `word` and returns true if it is cached.
  bool Lookup(absl::string_view word, std::vector<int32_t>* out) const {
    if (word.size() > kMaxWordBytes) return false;
    Shard& shard = shards_[ShardOf(word)];
    std::lock_guard<std::mutex> lock(shard.mu);
    auto it = shard.words.find(word);
    if (it == shard.words.end()) return false;
    out->insert(out->end(), it->second.begin(), it->second.end());
    return true;
  }

  void Insert(absl::string_view word, const int32_t* ids, size_t n) const {
    if (word.size() > kMaxWordBytes) return;
    Shard& shard = shards_[ShardOf(word)];
    std::lock_guard<std::mutex> lock(shard.mu);
    if (shard.words.size() >= kWordsPerShard) shard.words.clear();
    shard.words.try_emplace(word, ids, ids + n);
  }

 private:
  static constexpr size_t kShards = 64;
  static constexpr size_t kWordsPerShard = 1024;  // 64k words, a few MiB at most
  // The hash's top bits: the maps inside probe with its low bits.
  static size_t ShardOf(absl::string_view word) {
    return static_cast<uint64_t>(absl::HashOf(word)) >> 58;
  }
  struct Shard {
    std::mutex mu;
    absl::flat_hash_map<std::string, std::vector<int32_t>> words;
  };
  mutable std::array<Shard, kShards> shards_;
};

// ---- added tokens -----------------------------------------------------------------------------

struct AddedToken {
  std::string content;
  int32_t id = 0;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
};

// A piece of text [begin, end): an added token's id, or -1 for text to tokenize.
struct Segment {
  size_t begin;
  size_t end;
  int32_t id;
};

// Finds added tokens in text, leftmost-longest, the way HF's AddedVocabulary::find_matches uses
// its Aho-Corasick automaton.
class AddedTokenMatcher {
 public:
  void Add(std::string pattern, const AddedToken* token) {
    if (pattern.empty()) return;
    by_first_byte_[static_cast<unsigned char>(pattern[0])].push_back({std::move(pattern), token});
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

  // Cuts `s` into segments that cover it.
  void Split(absl::string_view s, std::vector<Segment>* out) const;

 private:
  struct Entry {
    std::string pattern;
    const AddedToken* token;
  };
  const Entry* LongestAt(absl::string_view s, size_t i) const {
    for (const Entry& e : by_first_byte_[static_cast<unsigned char>(s[i])]) {
      if (s.substr(i, e.pattern.size()) == e.pattern) return &e;
    }
    return nullptr;
  }
  std::array<std::vector<Entry>, 256> by_first_byte_;
};

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
    const AddedToken& t = *e->token;
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

// ---- post-processing --------------------------------------------------------------------------

// The ids that Encode(…, add_special_tokens=true) puts around the text's ids.
struct Decorations {
  std::vector<int32_t> prefix;
  std::vector<int32_t> suffix;
};

absl::Status ParsePostProcessor(const JsonFile& f, const Json& j, const std::string& path,
                                Decorations* d) {
  if (j.is_null()) return absl::OkStatus();
  RANKD_ASSIGN_OR_RETURN(const std::string type, TypeOf(f, j, path));
  if (type == "ByteLevel") return absl::OkStatus();  // only trims offsets
  if (type == "Sequence") {
    const std::string list_path = JsonFile::Join(path, "processors");
    auto it = j.find("processors");
    if (it == j.end() || !it->is_array()) return f.Error(list_path, "must be a list");
    for (size_t i = 0; i < it->size(); ++i) {
      RANKD_RETURN_IF_ERROR(
          ParsePostProcessor(f, (*it)[i], absl::StrCat(list_path, "[", i, "]"), d));
    }
    return absl::OkStatus();
  }
  if (type == "TemplateProcessing") {
    const std::string single_path = JsonFile::Join(path, "single");
    auto single = j.find("single");
    if (single == j.end() || !single->is_array()) return f.Error(single_path, "must be a list");
    auto specials = j.find("special_tokens");
    std::vector<int32_t> before, after;
    bool seen_sequence = false;
    for (size_t i = 0; i < single->size(); ++i) {
      const Json& piece = (*single)[i];
      const std::string piece_path = absl::StrCat(single_path, "[", i, "]");
      if (piece.is_object() && piece.contains("Sequence")) {
        const Json& seq = piece["Sequence"];
        if (!seq.is_object() || seq.value("id", "") != "A" || seen_sequence) {
          return f.Error(piece_path, "a single-sequence template holds sequence A once");
        }
        seen_sequence = true;
      } else if (piece.is_object() && piece.contains("SpecialToken")) {
        const Json& st = piece["SpecialToken"];
        if (!st.is_object() || !st.contains("id") || !st["id"].is_string()) {
          return f.Error(piece_path, "SpecialToken needs a string id");
        }
        const std::string name = st["id"].get<std::string>();
        if (specials == j.end() || !specials->is_object() || !specials->contains(name)) {
          return f.Error(JsonFile::Join(path, "special_tokens"),
                         absl::StrCat("'", name, "' is missing"));
        }
        const Json& ids = (*specials)[name]["ids"];
        if (!ids.is_array() || ids.empty()) {
          return f.Error(absl::StrCat(path, ".special_tokens[\"", name, "\"].ids"),
                         "must be a non-empty list of ids");
        }
        for (const Json& id : ids) {
          if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
            return f.Error(absl::StrCat(path, ".special_tokens[\"", name, "\"].ids"),
                           "must hold non-negative integer ids");
          }
          (seen_sequence ? after : before).push_back(id.get<int32_t>());
        }
      } else {
        return f.Error(piece_path, "must be {\"Sequence\": ...} or {\"SpecialToken\": ...}");
      }
    }
    if (!seen_sequence) return f.Error(single_path, "has no sequence A");
    d->prefix.insert(d->prefix.begin(), before.begin(), before.end());
    d->suffix.insert(d->suffix.end(), after.begin(), after.end());
    return absl::OkStatus();
  }
  return f.Error(JsonFile::Join(path, "type"),
                 absl::StrCat("post-processor '", type,
                              "' is not supported (TemplateProcessing, ByteLevel, Sequence)"));
}

// ---- the tokenizer ----------------------------------------------------------------------------

class HfTokenizer final : public Tokenizer {
 public:
  static absl::StatusOr<std::unique_ptr<HfTokenizer>> Load(const std::string& json_path,
                                                           const std::string& config_path);

  absl::StatusOr<std::vector<int32_t>> Encode(absl::string_view text,
                                              bool add_special_tokens) const override;

  absl::StatusOr<int32_t> PieceToId(absl::string_view piece) const override {
    if (auto it = added_ids_.find(piece); it != added_ids_.end()) return it->second;
    if (auto id = model_->Find(piece)) return *id;
    // A piece given as plain text (" yes") is also looked up in its byte-level form ("Ġyes").
    if (byte_level_) {
      if (auto id = model_->Find(ToByteLevel(piece))) return *id;
    }
    return absl::NotFoundError(absl::StrCat("piece '", piece, "' is not in ", path_));
  }

  int vocab_size() const override { return vocab_size_; }
  std::optional<int32_t> bos_id() const override {
    if (decorations_.prefix.empty()) return std::nullopt;
    return decorations_.prefix.front();
  }
  absl::string_view kind() const override { return "tokenizer.json"; }

 private:
  // Appends the ids of a text piece that holds no added token (before normalization).
  absl::Status EncodeText(absl::string_view text, std::vector<int32_t>* ids) const;

  std::string path_;
  std::vector<AddedToken> added_;
  absl::flat_hash_map<std::string, int32_t> added_ids_;
  AddedTokenMatcher raw_matcher_;         // added tokens with normalized == false
  AddedTokenMatcher normalized_matcher_;  // the others, matched in normalized text
  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::optional<BpeModel> model_;
  WordCache cache_;
  Decorations decorations_;
  bool byte_level_ = false;
  int vocab_size_ = 0;
};

absl::Status HfTokenizer::EncodeText(absl::string_view text, std::vector<int32_t>* ids) const {
  std::string normalized;
  if (normalizer_ != nullptr) {
    RANKD_ASSIGN_OR_RETURN(normalized, normalizer_->Normalize(std::string(text)));
  } else {
    normalized = std::string(text);
  }
  std::vector<Segment> segments;
  if (normalized_matcher_.empty()) {
    if (!normalized.empty()) segments.push_back({0, normalized.size(), -1});
  } else {
    normalized_matcher_.Split(normalized, &segments);
  }
  std::vector<std::string> words;
  for (const Segment& seg : segments) {
    if (seg.id >= 0) {
      ids->push_back(seg.id);
      continue;
    }
    words.clear();
    words.emplace_back(normalized, seg.begin, seg.end - seg.begin);
    if (pre_tokenizer_ != nullptr) RANKD_RETURN_IF_ERROR(pre_tokenizer_->Apply(&words));
    for (const std::string& w : words) {
      if (cache_.Lookup(w, ids)) continue;
      const size_t first = ids->size();
      model_->Tokenize(w, ids);
      cache_.Insert(w, ids->data() + first, ids->size() - first);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int32_t>> HfTokenizer::Encode(absl::string_view text,
                                                         bool add_special_tokens) const {
  if (const size_t bad = unicode::FindInvalidUtf8(text); bad != absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat("text is not valid UTF-8 (byte ", bad, ")"));
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 8);
  if (add_special_tokens) ids = decorations_.prefix;
  std::vector<Segment> segments;
  raw_matcher_.Split(text, &segments);
  for (const Segment& seg : segments) {
    if (seg.id >= 0) {
      ids.push_back(seg.id);
    } else {
      RANKD_RETURN_IF_ERROR(EncodeText(text.substr(seg.begin, seg.end - seg.begin), &ids));
    }
  }
  if (add_special_tokens) {
    ids.insert(ids.end(), decorations_.suffix.begin(), decorations_.suffix.end());
  }
  return ids;
}

// A bos_token / eos_token entry of tokenizer_config.json: a string, {"content": str}, or null.
absl::StatusOr<std::optional<std::string>> ConfigToken(const JsonFile& f, const Json& config,
                                                       const char* key) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
    return (*it)["content"].get<std::string>();
  }
  return f.Error(key, "must be a string, {\"content\": str} or null");
}

absl::StatusOr<std::unique_ptr<HfTokenizer>> HfTokenizer::Load(const std::string& json_path,
                                                               const std::string& config_path) {
  JsonFile f(json_path);
  RANKD_ASSIGN_OR_RETURN(const Json j, f.Parse());
  auto tok = std::unique_ptr<HfTokenizer>(new HfTokenizer());
  tok->path_ = json_path;

  auto model = j.find("model");
  if (model == j.end()) return f.Error("model", "is missing");
  RANKD_ASSIGN_OR_RETURN(tok->model_, BpeModel::Parse(f, *model));
  tok->vocab_size_ = tok->model_->max_id() + 1;

  static const Json kNull;
  auto member = [&](const char* key) -> const Json& {
    auto it = j.find(key);
    return it == j.end() ? kNull : *it;
  };
  RANKD_ASSIGN_OR_RETURN(tok->normalizer_, ParseNormalizer(f, member("normalizer"), "normalizer"));
  RANKD_ASSIGN_OR_RETURN(
      tok->pre_tokenizer_,
      ParsePreTokenizer(f, member("pre_tokenizer"), "pre_tokenizer", &tok->byte_level_));

  const Json& added = member("added_tokens");
  if (!added.is_null() && !added.is_array()) return f.Error("added_tokens", "must be a list");
  tok->added_.reserve(added.is_array() ? added.size() : 0);
  for (size_t i = 0; added.is_array() && i < added.size(); ++i) {
    const Json& a = added[i];
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
    tok->vocab_size_ = std::max(tok->vocab_size_, t.id + 1);
    tok->added_.push_back(std::move(t));
  }
  for (const AddedToken& t : tok->added_) {
    tok->added_ids_[t.content] = t.id;
    if (t.normalized) {
      // A normalized token is matched by its normalized form.
      std::string pattern = t.content;
      if (tok->normalizer_ != nullptr && unicode::FindInvalidUtf8(pattern) == std::string::npos) {
        RANKD_ASSIGN_OR_RETURN(pattern, tok->normalizer_->Normalize(std::move(pattern)));
      }
      tok->normalized_matcher_.Add(std::move(pattern), &t);
    } else {
      tok->raw_matcher_.Add(t.content, &t);
    }
  }
  tok->raw_matcher_.Finish();
  tok->normalized_matcher_.Finish();

  // transformers 5 rebuilds the post-processor from tokenizer_config.json when that file sets
  // add_bos_token or add_eos_token, or when tokenizer.json has none.
  std::optional<Json> config;
  if (std::filesystem::exists(config_path)) {
    JsonFile cf(config_path);
    RANKD_ASSIGN_OR_RETURN(config, cf.Parse());
  }
  const bool from_config =
      config && (config->contains("add_bos_token") || config->contains("add_eos_token"));
  if (from_config || member("post_processor").is_null()) {
    JsonFile cf(config_path);
    for (const char* which : {"bos", "eos"}) {
      if (!config) break;
      const std::string add_key = absl::StrCat("add_", which, "_token");
      const std::string token_key = absl::StrCat(which, "_token");
      RANKD_ASSIGN_OR_RETURN(const bool add, cf.Bool(*config, "", add_key.c_str(), false));
      RANKD_ASSIGN_OR_RETURN(auto token, ConfigToken(cf, *config, token_key.c_str()));
      if (!add || !token) continue;  // no token to add: transformers turns the flag off
      auto id = tok->PieceToId(*token);
      if (!id.ok()) return cf.Error(token_key, absl::StrCat("'", *token, "' is not a token"));
      (which[0] == 'b' ? tok->decorations_.prefix : tok->decorations_.suffix).push_back(*id);
    }
  } else {
    RANKD_RETURN_IF_ERROR(
        ParsePostProcessor(f, member("post_processor"), "post_processor", &tok->decorations_));
  }
  return tok;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadHfTokenizer(const std::string& json_path,
                                                           const std::string& config_path) {
  RANKD_ASSIGN_OR_RETURN(auto tok, HfTokenizer::Load(json_path, config_path));
  return std::unique_ptr<Tokenizer>(std::move(tok));
}

}  // namespace rankd::tokenizer
