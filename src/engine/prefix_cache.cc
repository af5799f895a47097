#include "rankd/engine/prefix_cache.h"

#include <algorithm>

namespace rankd::engine {

std::shared_ptr<const backend::PrefixState> PrefixCache::Get(absl::Span<const int32_t> ids) {
  std::lock_guard<std::mutex> lock(mu_);
  if (capacity_ == 0) return nullptr;
  auto it = index_.find(Key(ids.begin(), ids.end()));
  if (it == index_.end()) {
    ++stats_.misses;
    return nullptr;
  }
  ++stats_.hits;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->second;
}

void PrefixCache::Put(absl::Span<const int32_t> ids,
                      std::shared_ptr<const backend::PrefixState> state) {
  std::lock_guard<std::mutex> lock(mu_);
  if (capacity_ == 0 || state == nullptr || state->bytes() > capacity_) return;
  Key key(ids.begin(), ids.end());
  if (auto it = index_.find(key); it != index_.end()) {
    const size_t bytes = it->second->second->bytes();
    cached_bytes_ -= bytes;
    retired_.push_back({it->second->second, bytes});  // a replaced state may be in use too
    lru_.erase(it->second);
    index_.erase(it);
  }
  // A retired state that is put back counts once: as cached if it is kept, else as retired.
  const size_t need = state->bytes();
  size_t in_use = PruneRetiredLocked(state.get());
  while (cached_bytes_ + in_use + need > capacity_ && !lru_.empty()) {
    EvictOneLocked();
    in_use = PruneRetiredLocked(state.get());
  }
  if (cached_bytes_ + in_use + need > capacity_) return;
  std::erase_if(retired_, [&](const Retired& r) { return r.state.lock() == state; });
  cached_bytes_ += need;
  lru_.emplace_front(key, std::move(state));
  index_.emplace(std::move(key), lru_.begin());
}

void PrefixCache::EvictOneLocked() {
  Entry& victim = lru_.back();
  const size_t bytes = victim.second->bytes();
  cached_bytes_ -= bytes;
  retired_.push_back({victim.second, bytes});
  index_.erase(victim.first);
  lru_.pop_back();  // frees the state unless in-flight work holds it
  ++stats_.evictions;
}

size_t PrefixCache::PruneRetiredLocked(const backend::PrefixState* uncounted) const {
  size_t bytes = 0;
  std::erase_if(retired_, [&](const Retired& r) {
    const std::shared_ptr<const backend::PrefixState> held = r.state.lock();
    if (held == nullptr) return true;
    if (held.get() != uncounted) bytes += r.bytes;
    return false;
  });
  return bytes;
}

PrefixCache::Stats PrefixCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  Stats s = stats_;
  s.bytes = cached_bytes_ + PruneRetiredLocked();
  s.entries = index_.size();
  return s;
}

}  // namespace rankd::engine
