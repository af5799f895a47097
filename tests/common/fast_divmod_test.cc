// kernels/fast_divmod.h: the attention kernel's division by the query-group size and the number
// of kv heads. The host path is the device path's arithmetic (__umulhi is the same product).
#include "kernels/fast_divmod.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>

namespace rankd::kernels {
namespace {

TEST(FastDivmodTest, EveryDivisorUpTo4096OnSmallAndLargeDividends) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> any(0, INT32_MAX);
  for (int32_t d = 1; d <= 4096; ++d) {
    const FastDivmod f(d);
    auto check = [&](int32_t n) {
      const int32_t q = f.Div(n);
      ASSERT_EQ(q, n / d) << n << " / " << d;
      ASSERT_EQ(f.Mod(n, q), n % d) << n << " % " << d;
    };
    for (int32_t n = 0; n < 20000; ++n) check(n);
    for (int32_t n = INT32_MAX; n > INT32_MAX - 2000; --n) check(n);
    for (int k = 0; k < 2000; ++k) check(any(rng));
  }
}

TEST(FastDivmodTest, LargeDivisors) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<int32_t> any(0, INT32_MAX);
  for (const int32_t d : {65535, 65536, 65537, 1000003, 1 << 30, (1 << 30) + 1, INT32_MAX}) {
    const FastDivmod f(d);
    for (int k = 0; k < 200000; ++k) {
      const int32_t n = any(rng);
      ASSERT_EQ(f.Div(n), n / d) << n << " / " << d;
    }
    ASSERT_EQ(f.Div(INT32_MAX), INT32_MAX / d);
    ASSERT_EQ(f.Div(d - 1), 0);
    ASSERT_EQ(f.Div(d), 1);
  }
}

}  // namespace
}  // namespace rankd::kernels
