// ResultCache and its keys: hits return the stored bits, the byte bound evicts least recently used
// first, the TTL expires, and a key changes with every input that changes a score.
#include "rankd/server/call/result_cache.h"

#include <cmath>
#include <cstring>
#include <set>
#include <string>
#include <thread>

#include "gtest/gtest.h"

namespace rankd::server {
namespace {

using Clock = ResultCache::Clock;

rankd::v1::ScoreRequest Request(const std::string& query) {
  rankd::v1::ScoreRequest r;
  r.set_query(query);
  return r;
}
rankd::v1::Item Text(const std::string& t) {
  rankd::v1::Item i;
  i.set_text(t);
  return i;
}
ResultKey Key(int n) {
  return ResultKeyBuilder("scope", Request("q"), false).ItemKey(Text("item " + std::to_string(n)));
}

// A clock the test moves.
struct FakeClock {
  Clock::time_point t = Clock::time_point() + std::chrono::hours(1);
  std::function<Clock::time_point()> Fn() {
    return [this] { return t; };
  }
};

TEST(ResultKeyTest, EveryInputThatChangesTheScoreChangesTheKey) {
  const auto req = Request("rust engineer");
  const ResultKeyBuilder base("m|t1", req, false);
  std::set<std::array<uint8_t, 16>> keys;
  auto add = [&](const ResultKey& k) { return keys.insert(k.bytes).second; };
  EXPECT_TRUE(add(base.ItemKey(Text("Rust developer"))));
  EXPECT_EQ(base.ItemKey(Text("Rust developer")),
            ResultKeyBuilder("m|t1", req, false).ItemKey(Text("Rust developer")));  // stable
  EXPECT_TRUE(add(base.ItemKey(Text("Rust developer "))));                          // item text
  EXPECT_TRUE(add(ResultKeyBuilder("m|t2", req, false).ItemKey(Text("Rust developer"))));  // scope
  EXPECT_TRUE(add(ResultKeyBuilder("m|t1", Request("rust engineers"), false)
                      .ItemKey(Text("Rust developer"))));  // query
  auto sig = req;
  sig.set_apply_sigmoid(true);
  EXPECT_TRUE(
      add(ResultKeyBuilder("m|t1", sig, false).ItemKey(Text("Rust developer"))));  // sigmoid
  // TRUNCATE_END (asked for or the config's): a too-long item scored cut is another score.
  EXPECT_TRUE(add(ResultKeyBuilder("m|t1", req, true).ItemKey(Text("Rust developer"))));
  // query text vs query ids, text vs ids vs embedding: kinds never collide.
  rankd::v1::ScoreRequest ids_req;
  ids_req.add_query_ids(1);
  ids_req.add_query_ids(2);
  const ResultKeyBuilder by_ids("m|t1", ids_req, false);
  EXPECT_TRUE(add(by_ids.ItemKey(Text("Rust developer"))));
  rankd::v1::Item ids;
  ids.mutable_token_ids()->add_ids(7);
  ids.mutable_token_ids()->add_ids(8);
  EXPECT_TRUE(add(by_ids.ItemKey(ids)));
  ids.mutable_token_ids()->set_ids(1, 9);
  EXPECT_TRUE(add(by_ids.ItemKey(ids)));
  rankd::v1::Item emb;
  emb.mutable_embedding()->set_rows(1);
  emb.mutable_embedding()->add_values(0.5f);
  emb.mutable_embedding()->add_values(-0.0f);
  EXPECT_TRUE(add(by_ids.ItemKey(emb)));
  emb.mutable_embedding()->set_values(1, 0.0f);  // +0 and -0 score alike but are other bytes
  EXPECT_TRUE(add(by_ids.ItemKey(emb)));
  emb.mutable_embedding()->set_rows(2);
  EXPECT_TRUE(add(by_ids.ItemKey(emb)));
  // Length prefixes: ("ab", "c") and ("a", "bc") differ.
  EXPECT_NE(ResultKeyBuilder("ab", Request("c"), false).ItemKey(Text("x")),
            ResultKeyBuilder("a", Request("bc"), false).ItemKey(Text("x")));
}

// Issue 24, item 10: a model directory rewritten while serving is another model: its identity
// (model.identity) is part of every key, so scores cached for the old weights never answer for
// the new ones.
TEST(ResultKeyTest, TheScopeCarriesTheModelIdentityAndItsSettings) {
  ServeConfig config;
  config.model.name = "m";
  config.model.engine.model_dir = "/models/m";
  config.model.identity = "sha256:0123456789abcdef";
  std::set<std::string> scopes = {ResultCacheScope(config)};
  const auto item_key = [](const ServeConfig& c) {
    return ResultKeyBuilder(ResultCacheScope(c), Request("q"), false).ItemKey(Text("i"));
  };
  const ResultKey before = item_key(config);
  ServeConfig other = config;
  other.model.identity = "sha256:fedcba9876543210";  // the same directory, rewritten
  EXPECT_TRUE(scopes.insert(ResultCacheScope(other)).second);
  EXPECT_NE(item_key(other), before);
  other = config;
  other.model.engine.settings.item_template = "Doc: {item}";
  EXPECT_TRUE(scopes.insert(ResultCacheScope(other)).second);
  other = config;
  other.model.engine.settings.head = "classifier:1";
  EXPECT_TRUE(scopes.insert(ResultCacheScope(other)).second);
  EXPECT_EQ(item_key(config), before);  // stable
}

TEST(ResultCacheTest, AHitReturnsTheStoredBitsAndCounts) {
  ResultCache cache({.capacity_bytes = 1 << 20, .ttl_s = 60, .shards = 4});
  EXPECT_FALSE(cache.Get(Key(1)).has_value());
  const float odd = std::nextafter(1.0f / 3.0f, 1.0f);
  cache.Put(Key(1), odd);
  cache.Put(Key(2), -0.0f);
  std::optional<float> got = cache.Get(Key(1));
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(std::memcmp(&*got, &odd, sizeof(float)), 0);
  got = cache.Get(Key(2));
  ASSERT_TRUE(got.has_value());
  EXPECT_TRUE(std::signbit(*got));
  const ResultCache::Stats s = cache.stats();
  EXPECT_EQ(s.hits, 2);
  EXPECT_EQ(s.misses, 1);
  EXPECT_EQ(s.entries, 2);
  EXPECT_EQ(s.bytes, 2 * ResultCache::kEntryBytes);
}

TEST(ResultCacheTest, TheByteBoundEvictsTheLeastRecentlyUsed) {
  // One shard holding exactly 3 entries.
  ResultCache cache({.capacity_bytes = 3 * ResultCache::kEntryBytes, .ttl_s = 60, .shards = 1});
  for (int i = 0; i < 3; ++i) cache.Put(Key(i), static_cast<float>(i));
  ASSERT_TRUE(cache.Get(Key(0)).has_value());  // 0 becomes the most recent; 1 is the oldest
  cache.Put(Key(3), 3.0f);
  EXPECT_FALSE(cache.Get(Key(1)).has_value());
  EXPECT_TRUE(cache.Get(Key(0)).has_value());
  EXPECT_TRUE(cache.Get(Key(2)).has_value());
  EXPECT_TRUE(cache.Get(Key(3)).has_value());
  const ResultCache::Stats s = cache.stats();
  EXPECT_EQ(s.evictions, 1);
  EXPECT_EQ(s.entries, 3);
  EXPECT_LE(s.bytes, 3 * ResultCache::kEntryBytes);
  // Many more puts never exceed the bound.
  for (int i = 10; i < 1000; ++i) cache.Put(Key(i), 1.0f);
  EXPECT_LE(cache.stats().bytes, 3 * ResultCache::kEntryBytes);
}

TEST(ResultCacheTest, EntriesExpireAfterTheTtlAndAPutRefreshesThem) {
  FakeClock clock;
  ResultCache cache({.capacity_bytes = 1 << 20, .ttl_s = 10, .shards = 2, .now = clock.Fn()});
  cache.Put(Key(1), 1.0f);
  cache.Put(Key(2), 2.0f);
  clock.t += std::chrono::seconds(9);
  EXPECT_TRUE(cache.Get(Key(1)).has_value());
  cache.Put(Key(2), 2.5f);  // refreshed: valid for 10 s from now
  clock.t += std::chrono::seconds(2);
  EXPECT_FALSE(cache.Get(Key(1)).has_value());  // 11 s after its put, read or not
  ASSERT_TRUE(cache.Get(Key(2)).has_value());
  EXPECT_EQ(*cache.Get(Key(2)), 2.5f);
  const ResultCache::Stats s = cache.stats();
  EXPECT_EQ(s.expired, 1);
  EXPECT_EQ(s.entries, 1);
}

TEST(ResultCacheTest, CapacityZeroIsOff) {
  ResultCache cache({.capacity_bytes = 0});
  EXPECT_FALSE(cache.enabled());
  cache.Put(Key(1), 1.0f);
  EXPECT_FALSE(cache.Get(Key(1)).has_value());
  EXPECT_EQ(cache.stats().entries, 0);
}

TEST(ResultCacheTest, ManyThreadsAtOnce) {
  ResultCache cache({.capacity_bytes = 1 << 22, .ttl_s = 60, .shards = 8});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&cache, t] {
      for (int i = 0; i < 2000; ++i) {
        cache.Put(Key(t * 10000 + i), static_cast<float>(i));
        const std::optional<float> got = cache.Get(Key(t * 10000 + i));
        if (!got || *got != static_cast<float>(i)) ADD_FAILURE() << t << " " << i;
      }
    });
  }
  for (auto& th : threads) th.join();
  const ResultCache::Stats s = cache.stats();
  EXPECT_EQ(s.hits, 8000);
  EXPECT_EQ(s.entries, 8000);  // 8000 entries fit 4 MiB
}

}  // namespace
}  // namespace rankd::server
