#include "rankd/worker/step_scheduler.h"

#include <algorithm>

namespace rankd::worker {

using Clock = std::chrono::steady_clock;

bool BatchAdmits(int64_t step_tokens, int64_t candidate_tokens, int64_t token_budget,
                 double seconds_per_token, Clock::time_point now,
                 Clock::time_point earliest_deadline, Clock::duration margin) {
  if (step_tokens >= token_budget) return false;
  if (seconds_per_token <= 0) return true;
  const auto step_time = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(
      seconds_per_token * static_cast<double>(step_tokens + candidate_tokens)));
  return now + step_time <= earliest_deadline - margin;
}

bool StepBuilder::TryAdd(int64_t tokens, Clock::time_point deadline, Clock::time_point now) {
  if (jobs_ > 0 && !BatchAdmits(tokens_, tokens, token_budget_, seconds_per_token_, now,
                                std::min(earliest_, deadline), margin_)) {
    return false;
  }
  tokens_ += tokens;
  earliest_ = std::min(earliest_, deadline);
  ++jobs_;
  return true;
}

int SliceEnd(const std::vector<int64_t>& item_tokens, int begin, int64_t prefix_tokens,
             int64_t token_budget) {
  const int n = static_cast<int>(item_tokens.size());
  int end = std::min(n, begin + 1);
  int64_t tokens = prefix_tokens + (begin < n ? item_tokens[begin] : 0);
  while (end < n && tokens + item_tokens[end] <= token_budget) tokens += item_tokens[end++];
  return end;
}

}  // namespace rankd::worker
