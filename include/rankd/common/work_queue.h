// WorkQueue: a fixed set of threads that run tasks in arrival order, at most `max_queued` of them
// waiting, so that work whose cost grows with its input (parsing a request body) runs off the
// thread that took the input in (an event loop), and a flood of it is refused at once instead of
// queued without bound.
//
// Threads: Post from any thread; Stop (or the destructor) from a thread that runs no task.
#ifndef RANKD_COMMON_WORK_QUEUE_H_
#define RANKD_COMMON_WORK_QUEUE_H_

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"

namespace rankd {

class WorkQueue {
 public:
  // OK: the task runs. UNAVAILABLE: Stop has begun; the task should end at once, saying so.
  using Task = std::function<void(const absl::Status& run)>;

  // `name` says what waits, in the refusal ("HTTP bodies to parse").
  WorkQueue(std::string name, int threads, int max_queued);
  ~WorkQueue();  // Stop()
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  // Queues `task`, or refuses it (`task` dropped, not run): RESOURCE_EXHAUSTED when max_queued
  // tasks wait already, UNAVAILABLE once Stop has begun.
  absl::Status Post(Task task);
  // Runs the tasks still queued with UNAVAILABLE, lets the running ones finish, and joins the
  // threads: as long as the longest task takes.
  void Stop();

 private:
  void Loop();

  const std::string name_;
  const size_t max_queued_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> queue_;  // guarded by mu_
  bool stop_ = false;       // guarded by mu_
  std::vector<std::thread> threads_;
};

}  // namespace rankd

#endif  // RANKD_COMMON_WORK_QUEUE_H_
