#include "rankd/server/pool/cost_estimator.h"

#include "gtest/gtest.h"
#include "rankd/common/moving_rate.h"

namespace rankd::server {
namespace {

using Clock = CostEstimator::Clock;
using std::chrono::milliseconds;

// 50 items of 10 tokens after a 20-token prefix, given as ids; and one item of 512.
constexpr WorkInputs kShort{.prefix_known_tokens = 20, .item_known_tokens = 500, .items = 50};
constexpr WorkInputs kLong{.prefix_known_tokens = 20, .item_known_tokens = 512, .items = 1};

WorkSize Exact(const WorkInputs& in) {
  return {.prefix_tokens = in.prefix_known_tokens,
          .item_tokens = in.item_known_tokens,
          .items = in.items};
}

TEST(UpdateRateTest, ASlowerMeasurementCountsAFifthAndForTwiceTheRateAtMostAFasterOneHalf) {
  EXPECT_DOUBLE_EQ(UpdateRate(0, 3), 3);       // the first measurement is taken as it is
  EXPECT_DOUBLE_EQ(UpdateRate(1, 1.5), 1.1);   // slower: weight 0.2
  EXPECT_DOUBLE_EQ(UpdateRate(1, 30), 1.2);    // counted as twice the rate at most
  EXPECT_DOUBLE_EQ(UpdateRate(1, 0.5), 0.75);  // faster: weight 0.5
}

TEST(CostEstimatorTest, ThePriorPerItemHoldsUntilTheFirstMeasurement) {
  CostEstimator cost(0.002);
  EXPECT_DOUBLE_EQ(cost.Seconds(cost.Size(kShort)), 0.1);
  EXPECT_FALSE(cost.Probe(Exact(kShort), 1, 0.1, Clock::now()));  // the operator's word holds
  cost.Observe(kShort, Exact(kShort), 0.052, Clock::now());
  EXPECT_DOUBLE_EQ(cost.Seconds(cost.Size(kShort)), 0.052);  // 520 tokens at 0.1 ms
}

TEST(CostEstimatorTest, TextTokensAreEstimatedFromBytesAtTheMeasuredTokensPerByte) {
  CostEstimator cost(0.001);
  const WorkInputs text{.prefix_text_bytes = 40, .item_text_bytes = 800, .items = 20};
  WorkSize size = cost.Size(text);
  EXPECT_EQ(size.prefix_tokens, 10);  // 4 bytes a token until measured
  EXPECT_EQ(size.item_tokens, 200);
  // The worker made 420 tokens of those 840 bytes: the estimate rises (a fifth of the way: 0.25 ->
  // 0.3 tokens a byte), and with each such report further.
  cost.Observe(text, {.prefix_tokens = 20, .item_tokens = 400, .items = 20}, 0.01, Clock::now());
  size = cost.Size(text);
  EXPECT_EQ(size.prefix_tokens, 12);
  EXPECT_EQ(size.item_tokens, 240);
  for (int i = 0; i < 30; ++i) {
    cost.Observe(text, {.prefix_tokens = 20, .item_tokens = 400, .items = 20}, 0.01, Clock::now());
  }
  size = cost.Size(text);
  EXPECT_EQ(size.prefix_tokens, 20);
  EXPECT_EQ(size.item_tokens, 400);
  // Known tokens are not estimated, and do not count as text.
  cost.Observe(kShort, Exact(kShort), 0.05, Clock::now());
  EXPECT_EQ(cost.Size(kShort).tokens(), 520);
}

// The case: after one call with a single 512-token item that took 2.7 times longer per
// token, 50 short items were estimated at 28 times their cost. Its class is not theirs.
TEST(CostEstimatorTest, OneExpensiveCallOfAnotherShapeLeavesTheEstimateOfShortCallsAlone) {
  CostEstimator cost(0.001);
  for (int i = 0; i < 5; ++i) cost.Observe(kShort, Exact(kShort), 0.052, Clock::now());
  cost.Observe(kLong, Exact(kLong), 0.139, Clock::now());
  EXPECT_DOUBLE_EQ(cost.Seconds(cost.Size(kShort)), 0.052);
  EXPECT_DOUBLE_EQ(cost.Seconds(cost.Size(kLong)), 0.139);
}

TEST(CostEstimatorTest, OneSlowCallOfTheSameShapeRaisesItsEstimateByTwentyPercentAtMost) {
  CostEstimator cost(0.001);
  cost.Observe(kShort, Exact(kShort), 0.050, Clock::now());
  cost.Observe(kShort, Exact(kShort), 5.0, Clock::now());
  EXPECT_NEAR(cost.Seconds(cost.Size(kShort)), 0.060, 1e-12);
  // A lasting slowdown is believed, a measurement at a time.
  for (int i = 0; i < 30; ++i) cost.Observe(kShort, Exact(kShort), 0.5, Clock::now());
  EXPECT_NEAR(cost.Seconds(cost.Size(kShort)), 0.5, 0.01);
}

TEST(CostEstimatorTest, AnUnmeasuredShapeTakesTheRateOfTheNearestMeasuredOne) {
  CostEstimator cost(1.0);
  cost.Observe(kShort, Exact(kShort), 0.052, Clock::now());  // 0.1 ms a token
  cost.Observe(kLong, Exact(kLong), 0.266, Clock::now());    // 0.5 ms a token
  // 200 items of 10 tokens: one class up in tokens from kShort, far from kLong.
  const WorkInputs more{.prefix_known_tokens = 20, .item_known_tokens = 2000, .items = 200};
  EXPECT_NEAR(cost.Seconds(cost.Size(more)), 0.202, 1e-12);
  // 2 items of 300 tokens: one class from kLong in tokens per item, far from kShort.
  const WorkInputs two_long{.prefix_known_tokens = 20, .item_known_tokens = 600, .items = 2};
  EXPECT_NEAR(cost.Seconds(cost.Size(two_long)), 0.31, 1e-12);
}

TEST(CostEstimatorTest, ARefusedShapeIsProbedOncePerIntervalOnlyWhenItsClassIsStale) {
  CostEstimator cost(0.001);
  const Clock::time_point t0 = Clock::now();
  cost.Observe(kShort, Exact(kShort), 0.052, t0);
  // Measured just now: no probe.
  EXPECT_FALSE(cost.Probe(Exact(kShort), 0.052, 0.04, t0 + milliseconds(10)));
  // Stale: one probe, then none until an interval has passed.
  const Clock::time_point t1 = t0 + CostEstimator::kProbeInterval;
  EXPECT_TRUE(cost.Probe(Exact(kShort), 0.052, 0.04, t1));
  EXPECT_FALSE(cost.Probe(Exact(kShort), 0.052, 0.04, t1 + milliseconds(10)));
  EXPECT_TRUE(cost.Probe(Exact(kShort), 0.052, 0.04, t1 + CostEstimator::kProbeInterval));
  // An estimate further off than kProbeFactor is taken as right: no probe.
  EXPECT_FALSE(cost.Probe(Exact(kShort), 0.052, 0.01, t1 + 5 * CostEstimator::kProbeInterval));
  // A shape never measured counts as stale.
  EXPECT_TRUE(cost.Probe(Exact(kLong), 0.1, 0.05, t0));
}

// A probe's measurement brings an estimate that a slow spell left too high back down in a few.
TEST(CostEstimatorTest, AnEstimateLeftHighComesDownWithinAFewMeasurements) {
  CostEstimator cost(0.001);
  for (int i = 0; i < 30; ++i) cost.Observe(kShort, Exact(kShort), 0.5, Clock::now());
  int measurements = 0;
  while (cost.Seconds(cost.Size(kShort)) > 0.06) {
    cost.Observe(kShort, Exact(kShort), 0.05, Clock::now());
    ++measurements;
  }
  EXPECT_LE(measurements, 6);
}

}  // namespace
}  // namespace rankd::server
