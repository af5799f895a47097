#include "rankd/common/work_queue.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace rankd {
namespace {

absl::Status Stopping() { return absl::UnavailableError("the server is stopping"); }

}  // namespace

WorkQueue::WorkQueue(std::string name, int threads, int max_queued)
    : name_(std::move(name)), max_queued_(static_cast<size_t>(max_queued)) {
  for (int i = 0; i < threads; ++i) threads_.emplace_back(&WorkQueue::Loop, this);
}

WorkQueue::~WorkQueue() { Stop(); }

absl::Status WorkQueue::Post(Task task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return Stopping();
    if (queue_.size() >= max_queued_) {
      return absl::ResourceExhaustedError(
          absl::StrCat("too many ", name_, ": ", max_queued_, " wait already; retry with backoff"));
    }
    queue_.push_back(std::move(task));
  }
  cv_.notify_one();
  return absl::OkStatus();
}

void WorkQueue::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
}

void WorkQueue::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stop_, and every task run
    Task task = std::move(queue_.front());
    queue_.pop_front();
    const absl::Status run = stop_ ? Stopping() : absl::OkStatus();
    lock.unlock();
    task(run);
    lock.lock();
  }
}

}  // namespace rankd
