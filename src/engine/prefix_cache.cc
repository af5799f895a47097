#include "rankd/engine/prefix_cache.h"

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
    stats_.bytes -= it->second->second->bytes();
    lru_.erase(it->second);
    index_.erase(it);
  }
  while (stats_.bytes + state->bytes() > capacity_ && !lru_.empty()) EvictOneLocked();
  stats_.bytes += state->bytes();
  lru_.emplace_front(key, std::move(state));
  index_.emplace(std::move(key), lru_.begin());
}

void PrefixCache::EvictOneLocked() {
  Entry& victim = lru_.back();
  stats_.bytes -= victim.second->bytes();
  index_.erase(victim.first);
  lru_.pop_back();
  ++stats_.evictions;
}

PrefixCache::Stats PrefixCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  Stats s = stats_;
  s.entries = index_.size();
  return s;
}

}  // namespace rankd::engine
