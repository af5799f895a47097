// PrefixCache: hits, misses, LRU eviction under the byte budget, and the budget's bound on what
// evicted states that are still in use hold.
#include "rankd/engine/prefix_cache.h"

#include <gtest/gtest.h>

namespace rankd::engine {
namespace {

class FakePrefix : public backend::PrefixState {
 public:
  explicit FakePrefix(size_t bytes) : bytes_(bytes) {}
  int num_tokens() const override { return 0; }
  size_t bytes() const override { return bytes_; }

 private:
  size_t bytes_;
};

std::shared_ptr<const backend::PrefixState> Make(size_t bytes) {
  return std::make_shared<FakePrefix>(bytes);
}

TEST(PrefixCacheTest, HitsMissesAndLruEviction) {
  PrefixCache cache(100);
  const std::vector<int32_t> a = {1, 2}, b = {1, 3}, c = {7};
  // The cache holds the only reference to each state (none is in use elsewhere).
  EXPECT_EQ(cache.Get(a), nullptr);
  cache.Put(a, Make(40));
  cache.Put(b, Make(40));
  EXPECT_NE(cache.Get(a), nullptr);  // a is now the most recent
  cache.Put(c, Make(40));            // 120 > 100: evicts b, the least recent
  EXPECT_EQ(cache.Get(b), nullptr);
  EXPECT_NE(cache.Get(a), nullptr);
  EXPECT_NE(cache.Get(c), nullptr);
  const auto st = cache.stats();
  EXPECT_EQ(st.hits, 3);
  EXPECT_EQ(st.misses, 2);
  EXPECT_EQ(st.evictions, 1);
  EXPECT_EQ(st.bytes, 80u);
  EXPECT_EQ(st.entries, 2u);
}

TEST(PrefixCacheTest, ReplacesOversizedAndDisabled) {
  PrefixCache cache(100);
  cache.Put(std::vector<int32_t>{1}, Make(30));
  auto fresh = Make(50);
  cache.Put(std::vector<int32_t>{1}, fresh);  // refresh replaces, bytes re-counted
  EXPECT_EQ(cache.Get(std::vector<int32_t>{1}), fresh);
  EXPECT_EQ(cache.stats().bytes, 50u);
  cache.Put(std::vector<int32_t>{2}, Make(101));  // larger than the budget: not kept
  EXPECT_EQ(cache.Get(std::vector<int32_t>{2}), nullptr);
  EXPECT_EQ(cache.Get(std::vector<int32_t>{1}), fresh);
  PrefixCache off(0);
  off.Put(std::vector<int32_t>{1}, Make(1));
  EXPECT_EQ(off.Get(std::vector<int32_t>{1}), nullptr);
}

// An evicted state that in-flight work still holds keeps counting against the budget until it is
// let go, so the cache evicts further to make room beside it.
TEST(PrefixCacheTest, EvictedStatesInUseKeepCounting) {
  PrefixCache cache(100);
  const std::vector<int32_t> a = {1}, b = {2}, c = {3};
  auto in_use = Make(40);
  cache.Put(a, in_use);
  cache.Put(b, Make(40));
  EXPECT_NE(cache.Get(b), nullptr);  // a is the least recent
  cache.Put(c, Make(40));            // evicts a (still held: 40 stay counted), then b, to fit c
  EXPECT_EQ(cache.Get(a), nullptr);
  EXPECT_EQ(cache.Get(b), nullptr);
  EXPECT_NE(cache.Get(c), nullptr);
  auto st = cache.stats();
  EXPECT_EQ(st.evictions, 2);
  EXPECT_EQ(st.entries, 1u);
  EXPECT_EQ(st.bytes, 80u);  // c, and the evicted a that is still in use
  in_use.reset();
  EXPECT_EQ(cache.stats().bytes, 40u);
}

// States in use can take the whole budget: a new one is not kept until they are let go.
TEST(PrefixCacheTest, StatesInUseCanLeaveNoRoom) {
  PrefixCache cache(100);
  const std::vector<int32_t> a = {1}, b = {2};
  auto in_use = Make(60);
  cache.Put(a, in_use);
  cache.Put(b, Make(60));  // evicts a, which still holds 60: 60 + 60 > 100
  EXPECT_EQ(cache.Get(b), nullptr);
  EXPECT_EQ(cache.stats().bytes, 60u);
  EXPECT_EQ(cache.stats().entries, 0u);
  in_use.reset();
  cache.Put(b, Make(60));
  EXPECT_NE(cache.Get(b), nullptr);
  EXPECT_EQ(cache.stats().bytes, 60u);
}

// A replaced state that is still in use counts like an evicted one; putting it back counts it once.
TEST(PrefixCacheTest, ReplacedStatesInUseCountOnce) {
  PrefixCache cache(100);
  const std::vector<int32_t> a = {1};
  auto first = Make(30);
  cache.Put(a, first);
  cache.Put(a, Make(50));
  EXPECT_EQ(cache.stats().bytes, 80u);
  cache.Put(a, first);  // back in the cache: no longer retired, and the 50 let go
  EXPECT_EQ(cache.Get(a), first);
  EXPECT_EQ(cache.stats().bytes, 30u);
  // Evicted while in use, then put back: it moves from retired to cached, counted once.
  auto big = Make(80);
  cache.Put(std::vector<int32_t>{2}, big);  // evicts a (first, in use): 30 + 80 > 100, not kept
  EXPECT_EQ(cache.stats().bytes, 30u);
  EXPECT_EQ(cache.stats().entries, 0u);
  cache.Put(a, first);
  EXPECT_EQ(cache.Get(a), first);
  EXPECT_EQ(cache.stats().bytes, 30u);
  EXPECT_EQ(cache.stats().entries, 1u);
}

}  // namespace
}  // namespace rankd::engine
