#include "rankd/server/call/result_cache.h"

#include <openssl/evp.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace rankd::server {
namespace {

// SHA-256 fed field by field, each with its length in front (so ("ab", "c") != ("a", "bc")).
class Digest {
 public:
  Digest() : ctx_(EVP_MD_CTX_new()) { EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr); }
  ~Digest() { EVP_MD_CTX_free(ctx_); }
  Digest(const Digest&) = delete;
  Digest& operator=(const Digest&) = delete;

  void Bytes(const void* data, size_t size) {
    const uint64_t n = size;
    EVP_DigestUpdate(ctx_, &n, sizeof(n));
    if (size > 0) EVP_DigestUpdate(ctx_, data, size);
  }
  void Text(absl::string_view s) { Bytes(s.data(), s.size()); }
  void Tag(char t) { Bytes(&t, 1); }
  std::array<uint8_t, 32> Finish() {
    std::array<uint8_t, 32> out{};
    unsigned int len = 0;
    EVP_DigestFinal_ex(ctx_, out.data(), &len);
    return out;
  }

 private:
  EVP_MD_CTX* ctx_;
};

}  // namespace

std::string ResultCacheScope(const ServeConfig& config) {
  const engine::ModelSettings& ms = config.model.engine.settings;
  const std::vector<std::string> parts = {config.model.name,
                                          config.model.engine.model_dir,
                                          config.model.identity,
                                          ms.query_template.value_or(""),
                                          ms.item_template.value_or(""),
                                          ms.head.value_or(""),
                                          ms.preset.value_or(""),
                                          ms.instruction.value_or("")};
  std::string scope;
  for (const std::string& part : parts) {
    absl::StrAppend(&scope, part.size(), ":", part, ";");  // length-prefixed: no two alike
  }
  return scope;
}

ResultKeyBuilder::ResultKeyBuilder(absl::string_view scope, const rankd::v1::ScoreRequest& request,
                                   bool truncate_end) {
  Digest d;
  d.Text(scope);
  if (request.query_ids_size() > 0) {
    d.Tag('i');
    d.Bytes(request.query_ids().data(), sizeof(int32_t) * request.query_ids_size());
  } else {
    d.Tag('q');
    d.Text(request.query());
  }
  d.Tag(request.apply_sigmoid() ? 's' : 'r');
  d.Tag(truncate_end ? 'e' : 'n');
  prefix_digest_ = d.Finish();
}

ResultKey ResultKeyBuilder::ItemKey(const rankd::v1::Item& item) const {
  Digest d;
  d.Bytes(prefix_digest_.data(), prefix_digest_.size());
  switch (item.content_case()) {
    case rankd::v1::Item::kText:
      d.Tag('t');
      d.Text(item.text());
      break;
    case rankd::v1::Item::kTokenIds:
      d.Tag('i');
      d.Bytes(item.token_ids().ids().data(), sizeof(int32_t) * item.token_ids().ids_size());
      break;
    case rankd::v1::Item::kEmbedding: {
      d.Tag('e');
      const int32_t rows = item.embedding().rows();
      d.Bytes(&rows, sizeof(rows));
      d.Bytes(item.embedding().values().data(), sizeof(float) * item.embedding().values_size());
      break;
    }
    case rankd::v1::Item::CONTENT_NOT_SET:
      d.Tag('-');
      break;
  }
  const std::array<uint8_t, 32> full = d.Finish();
  ResultKey key;
  std::copy_n(full.begin(), key.bytes.size(), key.bytes.begin());
  return key;
}

ResultCache::ResultCache(Options options)
    : options_(std::move(options)),
      ttl_(std::chrono::duration_cast<Clock::duration>(
          std::chrono::duration<double>(std::max(0.0, options_.ttl_s)))),
      shard_capacity_entries_(std::max<int64_t>(0, options_.capacity_bytes) /
                              std::max(1, options_.shards) / kEntryBytes) {
  const int n = std::max(1, options_.shards);
  for (int i = 0; i < n; ++i) shards_.push_back(std::make_unique<Shard>());
}

ResultCache::Shard& ResultCache::ShardOf(const ResultKey& key) {
  // Bytes 8.. of the digest pick the shard; bytes 0..7 hash within it.
  uint32_t h = 0;
  for (int i = 8; i < 12; ++i) h = h << 8 | key.bytes[i];
  return *shards_[h % shards_.size()];
}

std::optional<float> ResultCache::Get(const ResultKey& key) {
  if (!enabled()) return std::nullopt;
  Shard& s = ShardOf(key);
  const Clock::time_point now = options_.now();
  std::lock_guard<std::mutex> lock(s.mu);
  ServerMetrics* m = options_.metrics;
  auto it = s.index.find(key);
  if (it == s.index.end()) {
    ++s.misses;
    if (m) m->result_cache_misses->Add();
    return std::nullopt;
  }
  if (it->second->expires <= now) {
    s.lru.erase(it->second);
    s.index.erase(it);
    ++s.expired;
    ++s.misses;
    if (m) {
      m->result_cache_misses->Add();
      m->result_cache_bytes->Add(-kEntryBytes);
    }
    return std::nullopt;
  }
  s.lru.splice(s.lru.begin(), s.lru, it->second);
  ++s.hits;
  if (m) m->result_cache_hits->Add();
  return it->second->score;
}

void ResultCache::Put(const ResultKey& key, float score) {
  if (!enabled() || shard_capacity_entries_ <= 0) return;
  Shard& s = ShardOf(key);
  const Clock::time_point expires = options_.now() + ttl_;
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.index.find(key);
  if (it != s.index.end()) {
    it->second->score = score;
    it->second->expires = expires;
    s.lru.splice(s.lru.begin(), s.lru, it->second);
    return;
  }
  s.lru.push_front(Entry{key, score, expires});
  s.index.emplace(key, s.lru.begin());
  int evicted = 0;
  while (static_cast<int64_t>(s.lru.size()) > shard_capacity_entries_) {
    s.index.erase(s.lru.back().key);
    s.lru.pop_back();
    ++evicted;
  }
  s.evictions += evicted;
  if (ServerMetrics* m = options_.metrics) {
    m->result_cache_bytes->Add(static_cast<double>((1 - evicted) * kEntryBytes));
    if (evicted > 0) m->result_cache_evictions->Add(evicted);
  }
}

ResultCache::Stats ResultCache::stats() const {
  Stats total;
  for (const auto& s : shards_) {
    std::lock_guard<std::mutex> lock(s->mu);
    total.hits += s->hits;
    total.misses += s->misses;
    total.evictions += s->evictions;
    total.expired += s->expired;
    total.entries += static_cast<int64_t>(s->lru.size());
  }
  total.bytes = total.entries * kEntryBytes;
  return total;
}

}  // namespace rankd::server
