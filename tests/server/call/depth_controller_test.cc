// The depth controller against a simulated plant: end-to-end p99 grows with depth x load, and the
// controller sees it through a measurement window (a first-order lag). It settles without
// oscillating and recovers after load steps both ways.
#include "rankd/server/call/depth_controller.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace rankd::server {
namespace {

// p99 = 50 ms + 2 ms x depth x load; the controller reads it smoothed over a window of
// `tau_s` (first order), once a `period_s`.
struct Plant {
  double load = 1;
  double tau_s = 2;
  double measured = 0;
  double Latency(int depth) const { return 0.05 + 0.002 * depth * load; }
};

struct Trace {
  std::vector<int> depth;
  std::vector<double> p99;
};

Trace Simulate(DepthController& c, Plant& plant, int steps, double period_s) {
  Trace t;
  if (plant.measured == 0) plant.measured = plant.Latency(c.depth());
  for (int i = 0; i < steps; ++i) {
    const double true_p99 = plant.Latency(c.depth());
    plant.measured += (true_p99 - plant.measured) * (1 - std::exp(-period_s / plant.tau_s));
    t.depth.push_back(c.Update(plant.measured, period_s));
    t.p99.push_back(plant.measured);
  }
  return t;
}

// Seconds until p99 stays within `band` of the target for good (period 1 s).
int SettlingSteps(const Trace& t, double target, double band) {
  int last_out = -1;
  for (size_t i = 0; i < t.p99.size(); ++i) {
    if (std::abs(t.p99[i] - target) > band * target) last_out = static_cast<int>(i);
  }
  return last_out + 1;
}

// Direction changes of the depth after step `from`, ignoring moves of `dead` items or fewer.
int Reversals(const Trace& t, size_t from, int dead = 1) {
  int reversals = 0, last_dir = 0;
  for (size_t i = from + 1; i < t.depth.size(); ++i) {
    const int d = t.depth[i] - t.depth[i - 1];
    if (std::abs(d) <= dead) continue;
    const int dir = d > 0 ? 1 : -1;
    if (last_dir != 0 && dir != last_dir) ++reversals;
    last_dir = dir;
  }
  return reversals;
}

TEST(DepthControllerTest, StartsAtMaxDepthAndStaysThereWhileUnderTheTarget) {
  DepthController c(DepthControlOptions{});
  EXPECT_EQ(c.depth(), 250);
  Plant light{.load = 0.5};  // 300 ms at full depth
  const Trace t = Simulate(c, light, 60, 1.0);
  for (int d : t.depth) EXPECT_EQ(d, 250);  // no windup above max: it never dips
}

TEST(DepthControllerTest, SettlesAtTheTargetWithoutOscillating) {
  DepthController c(DepthControlOptions{});
  Plant heavy{.load = 2};  // full depth: 1.05 s; the target needs depth 112
  const Trace t = Simulate(c, heavy, 120, 1.0);
  const int settle = SettlingSteps(t, 0.5, 0.05);
  EXPECT_LE(settle, 40) << "seconds to stay within 5% of the 0.5 s target";
  EXPECT_NEAR(t.depth.back(), 112, 3);
  EXPECT_LE(Reversals(t, 0), 2) << "at most one overshoot and its correction";
  EXPECT_GE(*std::min_element(t.depth.begin(), t.depth.end()), 50);
}

TEST(DepthControllerTest, RecoversAfterLoadStepsBothWays) {
  DepthController c(DepthControlOptions{});
  Plant plant{.load = 2};
  Simulate(c, plant, 60, 1.0);
  plant.load = 4;  // target needs depth 56
  Trace up = Simulate(c, plant, 60, 1.0);
  EXPECT_LE(SettlingSteps(up, 0.5, 0.05), 40);
  EXPECT_NEAR(up.depth.back(), 56, 3);
  EXPECT_LE(Reversals(up, 0), 2);
  plant.load = 0.5;  // load falls: the target allows more than max_depth
  Trace down = Simulate(c, plant, 60, 1.0);
  EXPECT_EQ(down.depth.back(), 250);
  const auto first_max = std::find(down.depth.begin(), down.depth.end(), 250);
  EXPECT_LE(first_max - down.depth.begin(), 30) << "seconds back to full depth";
  // Beyond its range: clamped at min_depth, and back without windup when load returns.
  plant.load = 20;  // even depth 50 gives 2.05 s
  Trace over = Simulate(c, plant, 60, 1.0);
  EXPECT_EQ(over.depth.back(), 50);
  plant.load = 2;
  Trace back = Simulate(c, plant, 60, 1.0);
  EXPECT_LE(SettlingSteps(back, 0.5, 0.05), 40);
  EXPECT_NEAR(back.depth.back(), 112, 3);
}

TEST(DepthControllerTest, NoSamplesKeepTheDepth) {
  DepthController c(DepthControlOptions{});
  Plant heavy{.load = 2};
  Simulate(c, heavy, 10, 1.0);
  const int d = c.depth();
  EXPECT_EQ(c.Update(std::nullopt, 1.0), d);
  EXPECT_EQ(c.Update(NAN, 1.0), d);
  EXPECT_EQ(c.Update(0.4, 0), d);
}

TEST(LatencyWindowTest, NearestRankP99OfTheWindowOnly) {
  using Clock = LatencyWindow::Clock;
  const Clock::time_point t0 = Clock::time_point() + std::chrono::hours(1);
  LatencyWindow w(10.0);
  EXPECT_FALSE(w.P99(t0).has_value());
  for (int i = 1; i <= 100; ++i) w.Record(i * 0.001, t0);
  EXPECT_DOUBLE_EQ(*w.P99(t0), 0.099);
  w.Record(5.0, t0 + std::chrono::seconds(8));
  EXPECT_DOUBLE_EQ(*w.P99(t0 + std::chrono::seconds(9)), 0.100);  // 101 samples: rank 100
  // 11 s on, the first hundred are out of the window: only the 5 s one is left.
  EXPECT_DOUBLE_EQ(*w.P99(t0 + std::chrono::seconds(11)), 5.0);
  EXPECT_FALSE(w.P99(t0 + std::chrono::seconds(30)).has_value());
}

TEST(LatencyWindowTest, KeepsAtMostMaxSamplesTheNewest) {
  using Clock = LatencyWindow::Clock;
  const Clock::time_point t0 = Clock::time_point() + std::chrono::hours(1);
  LatencyWindow w(10.0, /*max_samples=*/10);
  for (int i = 0; i < 1000; ++i) w.Record(i < 990 ? 9.0 : 0.001, t0);
  EXPECT_DOUBLE_EQ(*w.P99(t0), 0.001);
}

}  // namespace
}  // namespace rankd::server
