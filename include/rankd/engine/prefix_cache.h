// PrefixCache: encoded prefixes (their K/V) kept by token ids, least recently used out first, under
// a byte budget. A ranking service sends the same query for several pages of candidates, and a
// batch caller sends the same instruction prefix again and again: a hit skips the prefix pass.
//
// Threading contract: every method may be called from any thread at once; one mutex (mu_) guards
// the whole cache, held for the length of each call (no forward pass runs under it). States are
// immutable and shared: one that Get returned stays valid after it is evicted. A Get that misses
// and the Put that follows it are two calls, so two threads that miss on the same ids both encode
// them (the second Put replaces the first).
#ifndef RANKD_ENGINE_PREFIX_CACHE_H_
#define RANKD_ENGINE_PREFIX_CACHE_H_

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/types/span.h"
#include "rankd/backend/backend.h"

namespace rankd::engine {

class PrefixCache {
 public:
  // capacity_bytes == 0 disables the cache.
  explicit PrefixCache(size_t capacity_bytes) : capacity_(capacity_bytes) {}

  // The cached state for exactly these ids, or null.
  std::shared_ptr<const backend::PrefixState> Get(absl::Span<const int32_t> ids);
  // Inserts (or refreshes) an entry, evicting the least recently used ones until it fits. A state
  // larger than the whole budget is not kept.
  void Put(absl::Span<const int32_t> ids, std::shared_ptr<const backend::PrefixState> state);

  struct Stats {
    int64_t hits = 0, misses = 0, evictions = 0;
    size_t bytes = 0, entries = 0;
  };
  Stats stats() const;

 private:
  using Key = std::vector<int32_t>;
  using Entry = std::pair<Key, std::shared_ptr<const backend::PrefixState>>;
  void EvictOneLocked();

  const size_t capacity_;
  mutable std::mutex mu_;
  std::list<Entry> lru_;  // front: most recently used
  absl::flat_hash_map<Key, std::list<Entry>::iterator> index_;
  Stats stats_;  // entries is not kept here: stats() reads it off index_
};

}  // namespace rankd::engine

#endif  // RANKD_ENGINE_PREFIX_CACHE_H_
