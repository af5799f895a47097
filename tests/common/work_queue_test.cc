// WorkQueue (rankd/common/work_queue.h): tasks run off the caller's thread, the queue's bound
// refuses at once, and the stop answers what still waits and joins.
#include "rankd/common/work_queue.h"

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

namespace rankd {
namespace {

TEST(WorkQueueTest, RefusesBeyondItsBoundAndAnswersTheWaitingAtTheStop) {
  WorkQueue queue("test tasks", /*threads=*/1, /*max_queued=*/2);
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::promise<void> started;
  std::mutex mu;
  std::vector<absl::StatusCode> runs;  // guarded by mu
  // The thread is held by the first task; two wait; a fourth is refused.
  ASSERT_TRUE(queue
                  .Post([&](const absl::Status& run) {
                    started.set_value();
                    released.wait();
                    std::lock_guard<std::mutex> lock(mu);
                    runs.push_back(run.code());
                  })
                  .ok());
  started.get_future().wait();
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(queue
                    .Post([&](const absl::Status& run) {
                      std::lock_guard<std::mutex> lock(mu);
                      runs.push_back(run.code());
                    })
                    .ok());
  }
  const absl::Status full = queue.Post([](const absl::Status&) { ADD_FAILURE() << "ran"; });
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(full.message(), "too many test tasks: 2 wait already; retry with backoff");
  // The stop lets the running task finish and runs the waiting ones with UNAVAILABLE.
  std::thread stopper([&] { queue.Stop(); });
  // Stop has begun once a post is refused UNAVAILABLE (it is RESOURCE_EXHAUSTED before).
  while (queue.Post([](const absl::Status&) {}).code() != absl::StatusCode::kUnavailable) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  release.set_value();
  stopper.join();
  EXPECT_EQ(runs, (std::vector<absl::StatusCode>{absl::StatusCode::kOk,
                                                 absl::StatusCode::kUnavailable,
                                                 absl::StatusCode::kUnavailable}));
}

}  // namespace
}  // namespace rankd
