#include "hf_bpe.h"

#include <algorithm>
#include <queue>

#include "absl/strings/str_cat.h"
#include "hf_unicode.h"
#include "rankd/common/status.h"

namespace rankd::tokenizer {

absl::StatusOr<BpeModel> BpeModel::FromJson(const JsonFile& f, const Json& j, BpeTables tables) {
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

  if (!tables.has_vocab) {
    auto vocab = j.find("vocab");
    if (vocab == j.end() || !vocab->is_object()) {
      return f.Error("model.vocab", "must be an object {token: id}");
    }
    tables.vocab.reserve(vocab->size());
    for (auto it = vocab->begin(); it != vocab->end(); ++it) {
      tables.vocab.emplace_back(it.key(), it->is_number_integer() ? it->get<int64_t>() : -1);
    }
  }
  m.vocab_.reserve(tables.vocab.size());
  for (auto& [token, id] : tables.vocab) {
    if (id < 0 || id > INT32_MAX) {
      return f.Error(absl::StrCat("model.vocab[\"", token, "\"]"),
                     "must be a non-negative integer id");
    }
    m.max_id_ = std::max(m.max_id_, static_cast<int32_t>(id));
    m.vocab_.insert_or_assign(std::move(token), static_cast<int32_t>(id));
  }

  RANKD_ASSIGN_OR_RETURN(auto unk, f.OptString(j, path, "unk_token"));
  if (unk) {
    auto id = m.Find(*unk);
    if (!id) return f.Error("model.unk_token", absl::StrCat("'", *unk, "' is not in model.vocab"));
    m.unk_id_ = *id;
  }

  using Form = BpeTables::Merge::Form;
  if (!tables.has_merges) {
    auto merges = j.find("merges");
    if (merges == j.end() || !merges->is_array()) return f.Error("model.merges", "must be a list");
    tables.merges.reserve(merges->size());
    for (const Json& e : *merges) {
      if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
        tables.merges.push_back({Form::kPair, e[0].get<std::string>(), e[1].get<std::string>()});
      } else if (e.is_string()) {
        tables.merges.push_back({Form::kString, e.get<std::string>(), ""});
      } else {
        tables.merges.push_back({});
      }
    }
  }
  // Each merge's left part, right part and merged token, as views into its entry, which is
  // rearranged so that the merged token is contiguous: "a b" becomes " ab", ["a", "b"] "ab" + "b".
  struct Keys {
    absl::string_view a, b, merged;
  };
  std::vector<Keys> keys(tables.merges.size());
  // Merged tokens that drop b's continuing-subword prefix (reserved: the views need stable
  // addresses).
  std::vector<std::string> unprefixed;
  if (!m.continuing_subword_prefix_.empty()) unprefixed.reserve(tables.merges.size());
  auto field = [](size_t i) { return absl::StrCat("model.merges[", i, "]"); };
  for (size_t i = 0; i < tables.merges.size(); ++i) {
    BpeTables::Merge& e = tables.merges[i];
    Keys& k = keys[i];
    if (e.form == Form::kPair) {
      const size_t a_len = e.a.size();
      e.a += e.b;
      k.a = absl::string_view(e.a).substr(0, a_len);
      k.b = e.b;
      k.merged = e.a;
    } else if (e.form == Form::kString) {
      // The older form: "a b" (byte-level tokens never hold a space).
      const size_t space = e.a.find(' ');
      if (space == std::string::npos || e.a.find(' ', space + 1) != std::string::npos) {
        return f.Error(field(i),
                       absl::StrCat("'", e.a, "' is not two tokens separated by one space"));
      }
      std::rotate(e.a.begin(), e.a.begin() + space, e.a.begin() + space + 1);
      const absl::string_view s = e.a;
      k.a = s.substr(1, space);
      k.b = s.substr(space + 1);
      k.merged = s.substr(1);
    } else {
      return f.Error(field(i), "must be [\"a\", \"b\"] or \"a b\"");
    }
    // With a continuing-subword prefix, the right part carries it and the merged token does not
    // repeat it.
    const std::string& prefix = m.continuing_subword_prefix_;
    if (!prefix.empty() && k.b.substr(0, prefix.size()) == prefix) {
      unprefixed.push_back(absl::StrCat(k.a, k.b.substr(prefix.size())));
      k.merged = unprefixed.back();
    }
  }
  // The lookups miss the caches (Gemma: 1.7M of them in a 256k-token table, then 580k inserts):
  // each is prefetched a few merges ahead.
  constexpr size_t kAhead = 16;
  struct Ids {
    uint64_t pair;
    int32_t merged;
  };
  std::vector<Ids> ids(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    if (i + kAhead < keys.size()) {
      const Keys& next = keys[i + kAhead];
      m.vocab_.prefetch(next.a);
      m.vocab_.prefetch(next.b);
      m.vocab_.prefetch(next.merged);
    }
    const Keys& k = keys[i];
    auto a_id = m.Find(k.a), b_id = m.Find(k.b);
    if (!a_id || !b_id) {
      return f.Error(field(i), absl::StrCat("'", a_id ? k.b : k.a, "' is not in model.vocab"));
    }
    auto merged_id = m.Find(k.merged);
    if (!merged_id) {
      return f.Error(field(i), absl::StrCat("merged token '", k.merged, "' is not in model.vocab"));
    }
    ids[i] = {PairKey(*a_id, *b_id), *merged_id};
  }
  m.merges_.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i + kAhead < ids.size()) m.merges_.prefetch(ids[i + kAhead].pair);
    // A repeated pair takes its last rank, as HF's map does.
    m.merges_.insert_or_assign(ids[i].pair, Merge{static_cast<int32_t>(i), ids[i].merged});
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

}  // namespace rankd::tokenizer
