// The worker's step scheduler: queue order (interactive before batch) and how many work items one
// engine step takes (token budget, deadlines).
#include "rankd/worker/step_scheduler.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace rankd::worker {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::microseconds;
using std::chrono::milliseconds;

std::vector<std::string> Drain(JobQueue<std::string>& queue) {
  std::vector<std::string> order;
  while (std::optional<std::string> job = queue.Pop()) order.push_back(*job);
  return order;
}

TEST(JobQueueTest, InteractiveBeforeBatchEachInArrivalOrder) {
  JobQueue<std::string> queue;
  EXPECT_TRUE(queue.empty());
  EXPECT_FALSE(queue.Pop().has_value());
  queue.Push("b1", false);
  queue.Push("i1", true);
  queue.Push("b2", false);
  queue.Push("i2", true);
  EXPECT_EQ(queue.size(), 4u);
  EXPECT_EQ(Drain(queue), (std::vector<std::string>{"i1", "i2", "b1", "b2"}));
  EXPECT_TRUE(queue.empty());
}

TEST(JobQueueTest, AJobPutBackGoesFirstInItsPriority) {
  JobQueue<std::string> queue;
  queue.Push("i2", true);
  queue.Push("b2", false);
  queue.PushFront("b1", false);  // taken, did not fit the step
  queue.PushFront("i1", true);
  EXPECT_EQ(Drain(queue), (std::vector<std::string>{"i1", "i2", "b1", "b2"}));
}

TEST(BatchAdmitsTest, TokenBudgetAndDeadline) {
  const auto now = Clock::now();
  const auto far = now + std::chrono::hours(1);
  // Under the budget and no cost measured yet: yes, whatever the deadline.
  EXPECT_TRUE(BatchAdmits(100, 500, 1000, 0, now, now + milliseconds(1), milliseconds(5)));
  // A step that already fills the budget takes no more; one that is short of it may overflow.
  EXPECT_FALSE(BatchAdmits(1000, 1, 1000, 0, now, far, milliseconds(5)));
  EXPECT_TRUE(BatchAdmits(999, 5000, 1000, 0, now, far, milliseconds(5)));
  // 1 ms per 100 tokens: 600 tokens take 6 ms.
  const double per_token = 1e-5;
  EXPECT_TRUE(BatchAdmits(100, 500, 1000, per_token, now, now + milliseconds(12), milliseconds(5)));
  EXPECT_FALSE(
      BatchAdmits(100, 500, 1000, per_token, now, now + milliseconds(10), milliseconds(5)));
  EXPECT_FALSE(BatchAdmits(100, 500, 1000, per_token, now, now - milliseconds(1), milliseconds(5)));
}

// How many jobs of `tokens` each, all due at `deadline`, one step takes from a long queue.
int JobsInAStep(int64_t budget, double seconds_per_token, int64_t tokens,
                Clock::time_point deadline, Clock::time_point now) {
  StepBuilder step(budget, seconds_per_token, milliseconds(5));
  for (int i = 0; i < 1000; ++i) {
    if (!step.TryAdd(tokens, deadline, now)) break;
    if (step.full()) break;
  }
  return step.jobs();
}

TEST(StepBuilderTest, TakesJobsUntilTheTokenBudgetIsFilled) {
  const auto now = Clock::now();
  const auto far = now + std::chrono::hours(1);
  EXPECT_EQ(JobsInAStep(1000, 0, 100, far, now), 10);
  EXPECT_EQ(JobsInAStep(1000, 0, 300, far, now), 4);   // the last one overflows the budget
  EXPECT_EQ(JobsInAStep(1000, 0, 5000, far, now), 1);  // the first always joins
}

TEST(StepBuilderTest, StopsWhereTheStepWouldEndAfterADeadline) {
  const auto now = Clock::now();
  // 1 ms per 100 tokens, 20.05 ms left, 5 ms margin: 1500 tokens fit.
  EXPECT_EQ(JobsInAStep(100000, 1e-5, 100, now + microseconds(20050), now), 15);
  // Past its deadline already: the first still joins (the worker answers those before), no other.
  EXPECT_EQ(JobsInAStep(100000, 1e-5, 100, now - milliseconds(1), now), 1);
}

TEST(StepBuilderTest, ACandidateDueEarlierBoundsTheStep) {
  const auto now = Clock::now();
  StepBuilder step(100000, 1e-5, milliseconds(5));
  ASSERT_TRUE(step.TryAdd(100, now + std::chrono::hours(1), now));
  // 1 ms per 100 tokens: with 200 tokens the step takes 2 ms; a job due in 6 ms (5 ms margin)
  // does not fit, one due in 7.5 ms does, and then it bounds the step for the next ones.
  EXPECT_FALSE(step.TryAdd(100, now + milliseconds(6), now));
  EXPECT_TRUE(step.TryAdd(100, now + microseconds(7500), now));
  EXPECT_FALSE(step.TryAdd(100, now + std::chrono::hours(1), now));  // 3 ms > 7.5 - 5
  EXPECT_EQ(step.jobs(), 2);
  EXPECT_EQ(step.tokens(), 200);
}

TEST(SliceEndTest, TakesTheItemsThatFitTheBudgetWithThePrefix) {
  const std::vector<int64_t> items = {30, 30, 30, 50, 10};
  EXPECT_EQ(SliceEnd(items, 0, 10, 100), 3);  // 10 + 30 + 30 + 30 = 100
  EXPECT_EQ(SliceEnd(items, 3, 10, 100), 5);  // 10 + 50 + 10
  EXPECT_EQ(SliceEnd(items, 4, 10, 100), 5);
  EXPECT_EQ(SliceEnd(items, 0, 10, 1 << 20), 5);  // the whole job fits
}

TEST(SliceEndTest, AtLeastOneItemEvenOverTheBudget) {
  const std::vector<int64_t> items = {500, 20};
  EXPECT_EQ(SliceEnd(items, 0, 10, 100), 1);
  EXPECT_EQ(SliceEnd(items, 0, 200, 100), 1);  // the prefix alone is over
  EXPECT_EQ(SliceEnd(items, 1, 10, 100), 2);
}

}  // namespace
}  // namespace rankd::worker
