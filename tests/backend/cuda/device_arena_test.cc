// The kernel tests of the device arena's alignment (rankd/backend/cuda/device_arena.h)
// (kernel_test.h says how they check).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <tuple>
#include <vector>

#include "rankd/backend/cuda/device_arena.h"
#include "tests/backend/cuda/kernel_test.h"

namespace rankd::cuda::kernel_test {
namespace {

TEST_F(KernelTest, ArenaBuffersAreAligned) {
  auto layout = [](Carver& c) {
    std::vector<uintptr_t> p;
    for (int i = 0; i < 5; ++i) p.push_back(reinterpret_cast<uintptr_t>(c.Take<char>(i * 70 + 1)));
    p.push_back(reinterpret_cast<uintptr_t>(c.Take<float>(3)));
    return p;
  };
  Carver measure;
  layout(measure);
  EXPECT_EQ(measure.bytes(), 10 * kArenaAlignment);  // 1, 1, 2, 2, 3 and 1 blocks of 128
  auto arena = Arena::Create(Arena::Kind::kDevice, measure.bytes());
  ASSERT_TRUE(arena.ok()) << arena.status();
  Carver c = (*arena)->carver();
  for (uintptr_t p : layout(c)) EXPECT_EQ(p % kArenaAlignment, 0u);
  EXPECT_EQ(c.bytes(), measure.bytes());
  EXPECT_LE(c.bytes(), (*arena)->capacity());
}

}  // namespace
}  // namespace rankd::cuda::kernel_test
