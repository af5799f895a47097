// PrefixCache: encoded prefixes (their K/V) kept by token ids, least recently used out first, under
// a byte budget. A ranking service sends the same query for several pages of candidates, and a
// batch caller sends the same instruction prefix again and again: a hit skips the prefix pass.
//
// The budget bounds what the prefixes occupy, not only what the cache still lists: an entry
// evicted while in-flight work still holds its state (the engine's step prepares every request's
// prefix before it scores them) keeps counting until the last holder lets go, so that a step of
// many distinct queries cannot hold the budget in the cache and as much again in evicted states.
// Each state counts PrefixState::bytes(), which a backend reports as its allocator holds it.
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
  // Inserts (or refreshes) an entry, evicting the least recently used ones until it fits beside
  // what is cached and what evicted states still in use hold. A state that does not fit even
  // then (larger than the budget, or the budget taken by states in use) is not kept.
  void Put(absl::Span<const int32_t> ids, std::shared_ptr<const backend::PrefixState> state);

  struct Stats {
    int64_t hits = 0, misses = 0, evictions = 0;
    // bytes: the cached entries' plus those of evicted states still in use (at most the budget,
    // but for a state in use when the budget shrank below it: each Put evicts to make room).
    size_t bytes = 0, entries = 0;
  };
  Stats stats() const;

 private:
  using Key = std::vector<int32_t>;
  using Entry = std::pair<Key, std::shared_ptr<const backend::PrefixState>>;
  // An evicted state, counted while someone still holds it.
  struct Retired {
    std::weak_ptr<const backend::PrefixState> state;
    size_t bytes;
  };
  void EvictOneLocked();
  // Forgets the retired states nobody holds any more; returns the bytes of those left, but for
  // `uncounted` (a state being put back).
  size_t PruneRetiredLocked(const backend::PrefixState* uncounted = nullptr) const;

  const size_t capacity_;
  mutable std::mutex mu_;
  std::list<Entry> lru_;  // front: most recently used
  absl::flat_hash_map<Key, std::list<Entry>::iterator> index_;
  mutable std::vector<Retired> retired_;  // evicted or replaced; pruned as they are let go
  size_t cached_bytes_ = 0;
  Stats stats_;  // bytes and entries are not kept here: stats() computes them
};

}  // namespace rankd::engine

#endif  // RANKD_ENGINE_PREFIX_CACHE_H_
