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
  auto sa = Make(40), sb = Make(40), sc = Make(40);
  EXPECT_EQ(cache.Get(a), nullptr);
  cache.Put(a, sa);
  cache.Put(b, sb);
  EXPECT_EQ(cache.Get(a), sa);  // a is now the most recent
  cache.Put(c, sc);             // 120 > 100: evicts b, the least recent
  EXPECT_EQ(cache.Get(b), nullptr);
  EXPECT_EQ(cache.Get(a), sa);
  EXPECT_EQ(cache.Get(c), sc);
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

}  // namespace
}  // namespace rankd::engine
