// The float32 reference ops that Gemma, Gemma 2 and Mistral added (GeGLU, soft-capping, the
// attention scale and the sliding window), against values worked out by hand.
#include "rankd/backend/cpu/ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace rankd::cpu {
namespace {

TEST(OpsTest, GeGluIsTanhGeluOfGateTimesUp) {
  // gelu_tanh(1) = 0.5 (1 + tanh(0.7978846 * 1.044715)) = 0.8411920;
  // gelu_tanh(-1) = -0.1588080; gelu_tanh(0) = 0.
  const float gate[] = {1.0f, -1.0f, 0.0f};
  const float up[] = {2.0f, 1.0f, 5.0f};
  float out[3];
  GeGlu(gate, up, 3, out);
  EXPECT_NEAR(out[0], 1.6823840f, 1e-6);
  EXPECT_NEAR(out[1], -0.1588080f, 1e-6);
  EXPECT_EQ(out[2], 0.0f);
}

TEST(OpsTest, SoftCap) {
  EXPECT_NEAR(SoftCap(2.0f, 4.0f), 4.0f * std::tanh(0.5f), 1e-6);  // 1.8484690
  EXPECT_NEAR(SoftCap(2.0f, 4.0f), 1.8484690f, 1e-6);
  EXPECT_NEAR(SoftCap(100.0f, 4.0f), 4.0f, 1e-6);
  EXPECT_EQ(SoftCap(100.0f, 0.0f), 100.0f);
}

// One head, D = 2. With q = 0 every visible key weighs the same, so the output is the mean of the
// visible values: the window decides which.
TEST(OpsTest, SlidingWindowMasksKeysOutsideIt) {
  const int P = 3, T = 2;
  // Value of position p: (p, 10 p); keys irrelevant (q = 0).
  std::vector<float> ctx_k(P * 2, 0.5f), own_k(T * 2, -0.5f), ctx_v, own_v;
  for (int p = 0; p < P; ++p) ctx_v.insert(ctx_v.end(), {float(p), 10.0f * p});
  for (int p = P; p < P + T; ++p) own_v.insert(own_v.end(), {float(p), 10.0f * p});
  const std::vector<float> q(T * 2, 0.0f);
  std::vector<float> out(T * 2);
  // Window 2: position 3 sees 2, 3; position 4 sees 3, 4.
  PrefixAttention(q.data(), ctx_k.data(), ctx_v.data(), P, own_k.data(), own_v.data(), T, 1, 1, 2,
                  AttentionScoring{1.0f, 0.0f, 2}, out.data());
  EXPECT_NEAR(out[0], 2.5f, 1e-6);
  EXPECT_NEAR(out[1], 25.0f, 1e-5);
  EXPECT_NEAR(out[2], 3.5f, 1e-6);
  EXPECT_NEAR(out[3], 35.0f, 1e-5);
  // No window: position 3 sees 0..3, position 4 sees 0..4.
  PrefixAttention(q.data(), ctx_k.data(), ctx_v.data(), P, own_k.data(), own_v.data(), T, 1, 1, 2,
                  AttentionScoring{1.0f, 0.0f, 0}, out.data());
  EXPECT_NEAR(out[0], 1.5f, 1e-6);
  EXPECT_NEAR(out[2], 2.0f, 1e-6);
  // A window wider than the sequence sees everything too.
  PrefixAttention(q.data(), ctx_k.data(), ctx_v.data(), P, own_k.data(), own_v.data(), T, 1, 1, 2,
                  AttentionScoring{1.0f, 0.0f, 5}, out.data());
  EXPECT_NEAR(out[2], 2.0f, 1e-6);
}

// Two keys: logit 0 = cap(scale * 10), logit 1 = 0; softmax weight of key 0 is sigmoid(logit 0).
TEST(OpsTest, AttentionScaleAndSoftCap) {
  const float q[] = {1.0f, 0.0f};
  const float k[] = {10.0f, 0.0f, 0.0f, 0.0f};
  const float v[] = {1.0f, 0.0f, 0.0f, 1.0f};
  float out[2];
  auto weight0 = [&](AttentionScoring s) {
    PrefixAttention(q, k, v, 1, k + 2, v + 2, 1, 1, 1, 2, s, out);
    EXPECT_NEAR(out[0] + out[1], 1.0f, 1e-6);
    return out[0];
  };
  // scale 0.1: logit 1, weight 1 / (1 + e^-1) = 0.7310586.
  EXPECT_NEAR(weight0({0.1f, 0.0f, 0}), 0.7310586f, 1e-6);
  // cap 2: logit 2 tanh(5) = 1.9998184, weight 0.8807781.
  EXPECT_NEAR(weight0({1.0f, 2.0f, 0}), 0.8807781f, 1e-6);
}

}  // namespace
}  // namespace rankd::cpu
