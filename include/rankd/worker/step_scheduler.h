// The worker's step scheduler, pure logic (no gRPC, no engine): the queue of work items waiting
// for the engine (interactive before batch priority, each in arrival order) and the rule for how
// many of them one engine step takes (a token budget, and the deadlines of the step's items).
#ifndef RANKD_WORKER_STEP_SCHEDULER_H_
#define RANKD_WORKER_STEP_SCHEDULER_H_

#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <utility>
#include <vector>

namespace rankd::worker {

// The scheduler's rule for one more work item in the engine step being gathered (which holds
// `step_tokens` prefix and item tokens; the candidate brings `candidate_tokens`): no while the
// step already fills `token_budget`, nor when, at the measured `seconds_per_token` (0: not
// measured yet, no limit), the step with it would end after the earliest deadline of the step and
// the candidate less `margin`.
bool BatchAdmits(int64_t step_tokens, int64_t candidate_tokens, int64_t token_budget,
                 double seconds_per_token, std::chrono::steady_clock::time_point now,
                 std::chrono::steady_clock::time_point earliest_deadline,
                 std::chrono::steady_clock::duration margin);

// The end of the next slice of a batch job: items [begin, end) whose tokens, with the prefix's,
// fit `token_budget`, at least one item. A batch job over the budget is scored one slice per
// engine step and goes back to the head of the batch queue in between, so that interactive work
// arriving meanwhile waits for one slice at most, not for the whole job. `item_tokens[j]`: the
// tokens (or embedding rows) of item j.
int SliceEnd(const std::vector<int64_t>& item_tokens, int begin, int64_t prefix_tokens,
             int64_t token_budget);

// Work waiting for the engine: interactive jobs before batch jobs, each kind in arrival order.
// Threads: not thread-safe; the worker guards it with its lock.
template <typename Job>
class JobQueue {
 public:
  // At the back of its priority's queue.
  void Push(Job job, bool interactive) {
    (interactive ? interactive_ : batch_).push_back(std::move(job));
  }
  // At the head of its priority's queue: a job taken that did not fit the step goes first next.
  void PushFront(Job job, bool interactive) {
    (interactive ? interactive_ : batch_).push_front(std::move(job));
  }
  // The oldest interactive job, else the oldest batch job; nullopt when empty.
  std::optional<Job> Pop() {
    std::deque<Job>& queue = !interactive_.empty() ? interactive_ : batch_;
    if (queue.empty()) return std::nullopt;
    std::optional<Job> job(std::move(queue.front()));
    queue.pop_front();
    return job;
  }
  bool empty() const { return interactive_.empty() && batch_.empty(); }
  size_t size() const { return interactive_.size() + batch_.size(); }

 private:
  std::deque<Job> interactive_, batch_;
};

// Sizes one engine step: the jobs taken in queue order join while BatchAdmits says yes (the first
// always joins); the step ends at the first that does not, or once the budget is filled.
// Threads: one step, one thread (the worker's engine thread).
class StepBuilder {
 public:
  using Clock = std::chrono::steady_clock;

  StepBuilder(int64_t token_budget, double seconds_per_token, Clock::duration margin)
      : token_budget_(token_budget), seconds_per_token_(seconds_per_token), margin_(margin) {}

  // Whether a job of `tokens` prefix and item tokens, due at `deadline`, joins the step; counted
  // in the step when it does.
  bool TryAdd(int64_t tokens, Clock::time_point deadline, Clock::time_point now);
  // The step fills the token budget: it takes no more.
  bool full() const { return tokens_ >= token_budget_; }
  int64_t tokens() const { return tokens_; }
  int jobs() const { return jobs_; }

 private:
  const int64_t token_budget_;
  const double seconds_per_token_;
  const Clock::duration margin_;
  int64_t tokens_ = 0;
  int jobs_ = 0;
  Clock::time_point earliest_ = Clock::time_point::max();  // deadline of the step's jobs
};

}  // namespace rankd::worker

#endif  // RANKD_WORKER_STEP_SCHEDULER_H_
