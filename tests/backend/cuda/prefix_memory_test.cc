// The device memory the CUDA backend holds for prefixes under the engine's prefix cache: 2,000
// distinct prefixes (IBPC, so each keeps its K/V on the device) through a budget that holds about
// a hundred, scored in steps of many requests as the worker's engine thread runs them. Measured
// independently of the cache's own count: the prefix pool's used and reserved memory
// (CudaBackendStats) in the middle of every step, when every request's prefix is alive, and the
// device's free memory (cudaMemGetInfo) after every step. The pool reserves whole chunks (32 MiB
// on an H200), so what it holds may exceed what its live prefixes use by the free part of partly
// used chunks: kSlack allows two.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "rankd/backend/cuda/cuda_backend.h"
#include "rankd/backend/registry.h"
#include "rankd/engine/engine.h"
#include "tests/backend/cuda/cuda_test_util.h"

namespace rankd::cuda {
namespace {

constexpr size_t kBudget = size_t{128} << 20;  // model.prefix_cache_mb = 128
constexpr size_t kSlack = size_t{64} << 20;    // two of the pool's chunks
constexpr int kPrefixTokens = 2000;
constexpr int kPrefixes = 2000;
constexpr int kStep = 80;  // requests per ScoreMany, each with its own prefix
// llama-cls: 2 layers x (K, V) x 4 kv heads x head_dim 16, bf16: 512 bytes a token, a multiple of
// the pool's 512-byte alignment. The cache counts each prefix's K/V and its ids.
constexpr size_t kKvBytes = size_t{kPrefixTokens} * 2 * 2 * 64 * 2;
constexpr size_t kEntryBytes = kKvBytes + kPrefixTokens * sizeof(int32_t);
static_assert((kStep + 1) * kEntryBytes < kBudget, "a step's prefixes fit the budget");

size_t FreeDeviceMemory() {
  size_t free = 0, total = 0;
  EXPECT_EQ(cudaMemGetInfo(&free, &total), cudaSuccess);
  return free;
}

// kStep requests, prefix ids distinct for each `first + r` (its first two ids spell it), one item.
std::vector<engine::ScoreRequest> Step(int first) {
  std::vector<engine::ScoreRequest> step(kStep);
  for (int r = 0; r < kStep; ++r) {
    const int n = first + r;
    std::vector<int32_t> ids(kPrefixTokens);
    for (int j = 0; j < kPrefixTokens; ++j) ids[j] = 1 + (n * 31 + j * 7) % 1000;
    ids[0] = 1 + n % 1000;
    ids[1] = 1 + n / 1000;
    step[r].query_ids = std::move(ids);
    step[r].items.push_back(engine::Item::Ids({5}));
  }
  return step;
}

TEST(CudaPrefixMemoryTest, TheBudgetBoundsTheDeviceMemoryOfManyDistinctPrefixes) {
  RANKD_SKIP_WITHOUT_GPU();
  engine::EngineOptions o;
  o.model_dir = std::string(RANKD_TEST_DATA_DIR) + "/models/llama-cls";
  o.backend.kind = "cuda";
  o.backend.strategy = "ibpc";
  o.prefix_cache_bytes = kBudget;
  auto created = engine::Engine::Create(o, backend::CreateBackend);
  ASSERT_TRUE(created.ok()) << created.status();
  engine::Engine& eng = **created;

  // Warm-up: the step's shapes (graphs captured, GEMMs tuned, arenas sized) with one prefix for all
  // requests, so that what the device holds from here on changes with the prefixes alone.
  std::vector<engine::ScoreRequest> warm = Step(kPrefixes);
  for (auto& r : warm) r.query_ids = warm[0].query_ids;
  for (const auto& r : eng.ScoreMany(warm)) ASSERT_TRUE(r.ok()) << r.status();
  RANKD_EXPECT_CUDA_OK(cudaDeviceSynchronize());
  const size_t free_before = FreeDeviceMemory();
  const uint64_t reserved_before = GetCudaBackendStats(eng.backend())->prefix_pool_reserved_bytes;
  ASSERT_LE(reserved_before, kSlack);

  uint64_t most_used = 0, most_reserved = 0;
  for (int first = 0; first < kPrefixes; first += kStep) {
    std::vector<engine::PreparedRequest> step;
    for (const engine::ScoreRequest& r : Step(first)) step.push_back(*eng.Prepare(r));
    int answered = 0;
    eng.ScoreMany(
        step,
        [&](size_t, absl::StatusOr<engine::ScoreResult> r) {
          EXPECT_TRUE(r.ok()) << r.status();
          ++answered;
        },
        [&](const engine::PassInfo&) {
          // Every request of the step holds its prefix now (the pass just synchronised).
          const CudaBackendStats pool = *GetCudaBackendStats(eng.backend());
          const engine::PrefixCache::Stats cache = eng.prefix_cache_stats();
          most_used = std::max(most_used, pool.prefix_pool_used_bytes);
          most_reserved = std::max(most_reserved, pool.prefix_pool_reserved_bytes);
          EXPECT_LE(pool.prefix_pool_used_bytes, kBudget) << "step " << first;
          EXPECT_LE(pool.prefix_pool_reserved_bytes, kBudget + kSlack) << "step " << first;
          // The cache counts exactly the live prefixes (cached, or evicted and still in use).
          ASSERT_EQ(pool.prefix_pool_used_bytes % kKvBytes, 0u);
          EXPECT_EQ(cache.bytes, pool.prefix_pool_used_bytes / kKvBytes * kEntryBytes)
              << "step " << first;
          EXPECT_LE(cache.bytes, kBudget);
        });
    ASSERT_EQ(answered, kStep);
    RANKD_EXPECT_CUDA_OK(cudaDeviceSynchronize());
    const size_t free_now = FreeDeviceMemory();
    const size_t grown = free_before > free_now ? free_before - free_now : 0;
    EXPECT_LE(reserved_before + grown, kBudget + kSlack) << "after step " << first;
  }
  const engine::PrefixCache::Stats cache = eng.prefix_cache_stats();
  EXPECT_EQ(cache.misses, kPrefixes + 1);  // and the warm-up's one prefix
  EXPECT_GT(cache.evictions, 0);
  EXPECT_EQ(cache.entries, kBudget / kEntryBytes);  // full: the budget is not spent elsewhere
  std::printf("prefix pool: most used %.1f MiB, most reserved %.1f MiB (budget %.0f MiB)\n",
              most_used / 1048576.0, most_reserved / 1048576.0, kBudget / 1048576.0);
}

}  // namespace
}  // namespace rankd::cuda
