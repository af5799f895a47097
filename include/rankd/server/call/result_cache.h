// ResultCache: the front end's (query, item) -> score cache (issue 12). A ranking service sends the
// same candidates for the same queries again and again; a hit is answered without a worker.
//
// Keys are 128 bits of SHA-256 over everything that determines a score: the server's scope (model
// name and identity, templates, head: ResultCacheScope), the prefix exactly as the worker will see
// it (query text, or query_ids), apply_sigmoid, the request's truncation mode (a too-long item
// scored cut must not answer a call that has it refused), and the item's kind and content (text,
// token ids, or the embedding's rows and raw float bytes), every field length-prefixed so that no
// two different inputs share a byte string. A collision needs 2^64 entries: far past any capacity.
//
// Bounded by bytes (an estimate per entry, kEntryBytes), least recently used first out, each entry
// valid for ttl after its Put. Sharded by key: a lookup locks one shard's mutex, never a global
// one.
//
// A cached score is exactly the one computed when the item was first scored, and a score depends
// in its last bits on the other items of the pass that computed it: the CPU backend's GEMMs
// (OpenBLAS) sum in an order that depends on how many token rows the pass holds, so a (query,
// item) scored alone and among other items differs by a few float32 ulps. A hit can thus differ
// from a fresh score by as much: measured on the CPU backend (llama-cls, 2026-12-02), 63 of 80
// scores moved with their neighbours, by at most 6.9e-7 relative to max(1, |score|);
// BatchNeighbourTest (tests/server/serve_limits_e2e_test.cc) holds it within 1e-5. On the CUDA
// backend, the GEMMs' algorithms are chosen by a pass's shape too: there the bound is bf16
// rounding (its backend test bounds batch composition at 1e-2 relative, and measured no
// difference on the test models). Items whose scores lie closer than that may rank differently in
// a cached and a fresh answer.
//
// Threading contract: every method may be called from any thread at any time.
#ifndef RANKD_SERVER_RESULT_CACHE_H_
#define RANKD_SERVER_RESULT_CACHE_H_

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "rankd/server/config/config.h"
#include "rankd/server/metrics.h"
#include "rankd/v1/scorer.pb.h"

namespace rankd::server {

struct ResultKey {
  std::array<uint8_t, 16> bytes{};

  bool operator==(const ResultKey&) const = default;
  template <typename H>
  friend H AbslHashValue(H h, const ResultKey& k) {
    uint64_t first = 0;  // the bytes are a digest already: 8 of them are a good hash
    for (int i = 0; i < 8; ++i) first = first << 8 | k.bytes[i];
    return H::combine(std::move(h), first);
  }
};

// What fixes a score besides the request, the `scope` of ResultKeyBuilder: the served model (its
// name, directory and identity: a directory rewritten with other weights is another model) and
// its prompt and head settings.
std::string ResultCacheScope(const ServeConfig& config);

// The keys of one request's items: the request-level part (scope, prefix, sigmoid, truncation) is
// digested once. `truncate_end`: the request's effective mode (rankd/protocol/protocol.h's
// TruncatesAtEnd).
class ResultKeyBuilder {
 public:
  ResultKeyBuilder(absl::string_view scope, const rankd::v1::ScoreRequest& request,
                   bool truncate_end);
  ResultKey ItemKey(const rankd::v1::Item& item) const;

 private:
  std::array<uint8_t, 32> prefix_digest_{};
};

class ResultCache {
 public:
  using Clock = std::chrono::steady_clock;
  struct Options {
    int64_t capacity_bytes = int64_t{256} << 20;  // 0: off (Get misses, Put keeps nothing)
    double ttl_s = 600;
    int shards = 16;
    std::function<Clock::time_point()> now = [] { return Clock::now(); };  // tests set a clock
    // If set, hits, misses, evictions and bytes are counted there too (rankd_result_cache_*).
    ServerMetrics* metrics = nullptr;
  };
  struct Stats {
    int64_t hits = 0;
    int64_t misses = 0;
    int64_t evictions = 0;  // pushed out by the byte bound
    int64_t expired = 0;    // found past their TTL (and dropped)
    int64_t entries = 0;
    int64_t bytes = 0;
  };

  explicit ResultCache(Options options);

  bool enabled() const { return options_.capacity_bytes > 0; }
  // The score stored under `key`, if it is there and younger than the TTL (it becomes the most
  // recently used); counts a hit or a miss.
  std::optional<float> Get(const ResultKey& key);
  // Stores (or refreshes) `score` under `key`, evicting the least recently used entries of its
  // shard while the shard is over its share of the capacity.
  void Put(const ResultKey& key, float score);
  Stats stats() const;

 private:
  struct Entry {
    ResultKey key;
    float score = 0;
    Clock::time_point expires;
  };
  struct Shard {
    mutable std::mutex mu;
    std::list<Entry> lru;  // front: most recently used
    absl::flat_hash_map<ResultKey, std::list<Entry>::iterator> index;
    int64_t hits = 0, misses = 0, evictions = 0, expired = 0;
  };

 public:
  // What one entry costs: the list node (entry and two links) and the index slot, plus the
  // allocator's header of the node. An estimate, stated so that the bound means something.
  static constexpr int64_t kEntryBytes =
      sizeof(Entry) + 2 * sizeof(void*) + 16 + sizeof(ResultKey) + sizeof(void*) + 8;

 private:
  Shard& ShardOf(const ResultKey& key);

  const Options options_;
  const Clock::duration ttl_;
  const int64_t shard_capacity_entries_;
  std::vector<std::unique_ptr<Shard>> shards_;
};

}  // namespace rankd::server

#endif  // RANKD_SERVER_RESULT_CACHE_H_
