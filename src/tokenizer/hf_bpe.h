// The tokenizer.json BPE model (HF tokenizers' `models::bpe`): merges each pre-tokenized word into
// token ids; and WordCache, the cache of merged words in front of it.
#ifndef RANKD_TOKENIZER_HF_BPE_H_
#define RANKD_TOKENIZER_HF_BPE_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/hash/hash.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "hf_json.h"

namespace rankd::tokenizer {

// The vocabulary and merges of a `"type": "BPE"` model, with its options (ignore_merges,
// continuing_subword_prefix / end_of_word_suffix, unk_token, fuse_unk, byte_fallback).
// Immutable once built; Tokenize and Find are thread-safe.
class BpeModel {
 public:
  // The tokenizer.json `model` object `j` (errors name `model.<field>`), its vocab and merges
  // taken from `tables` when ParseTokenizer put them there, else from `j`.
  static absl::StatusOr<BpeModel> FromJson(const JsonFile& f, const Json& j, BpeTables tables = {});

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

// Words already merged -> their ids. Items repeat words, and merging is most of the BPE's cost;
// HF caches the same way. Sharded, each shard under its own lock, so that the threads of
// EncodeBatch rarely wait; a full shard is emptied and refills with the words now in use.
// Thread-safe: Lookup and Insert (const, the shards are mutable) may run on many threads at once.
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

}  // namespace rankd::tokenizer

#endif  // RANKD_TOKENIZER_HF_BPE_H_
