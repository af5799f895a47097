// RepeatTrace: see load_trace.h.
#include "load_trace.h"

#include <algorithm>
#include <cmath>
#include <iterator>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace rankd::bench {

absl::StatusOr<RepeatTrace> RepeatTrace::Create(const TraceOptions& options) {
  if (!(options.repeat >= 0 && options.repeat <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--repeat must be in [0, 1] (got ", options.repeat, ")"));
  }
  constexpr int kMaxQueries = 100000;
  if (options.queries < 1 || options.queries > kMaxQueries) {
    return absl::InvalidArgumentError(
        absl::StrCat("--queries must be in [1, ", kMaxQueries, "] (got ", options.queries, ")"));
  }
  if (options.lag < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--repeat-lag must be >= 0 (got ", options.lag, ")"));
  }
  return RepeatTrace(options);
}

RepeatTrace::RepeatTrace(const TraceOptions& options)
    : options_(options),
      ring_size_(2 * static_cast<size_t>(options.items_per_request)),
      rng_(options.seed),
      history_(options.queries),
      history_next_(options.queries, 0) {}

RepeatTrace::Request RepeatTrace::Next() {
  const int ni = options_.items_per_request;
  Request req;
  req.query = std::uniform_int_distribution<int>(0, options_.queries - 1)(rng_);
  const std::vector<uint64_t>& history = history_[req.query];
  // Repeats that keep the cumulative count at round(repeat x pairs), as far as the query's history
  // allows (distinct keys: a request does not carry one pair twice).
  const auto target =
      static_cast<int64_t>(std::llround(options_.repeat * static_cast<double>(pairs_ + ni)));
  req.repeats = static_cast<int>(
      std::clamp<int64_t>(target - repeats_, 0, std::min<int64_t>(ni, history.size())));
  req.keys.reserve(ni);
  std::sample(history.begin(), history.end(), std::back_inserter(req.keys), req.repeats, rng_);
  std::vector<uint64_t> fresh;
  fresh.reserve(ni - req.repeats);
  for (int i = req.repeats; i < ni; ++i) fresh.push_back(next_key_++);
  req.keys.insert(req.keys.end(), fresh.begin(), fresh.end());
  std::shuffle(req.keys.begin(), req.keys.end(), rng_);
  pairs_ += ni;
  repeats_ += req.repeats;
  if (options_.repeat > 0) {  // without repeats no history is needed
    pending_.emplace_back(req.query, std::move(fresh));
    if (pending_.size() > static_cast<size_t>(options_.lag)) {
      Remember(pending_.front().first, pending_.front().second);
      pending_.pop_front();
    }
  }
  return req;
}

void RepeatTrace::Remember(int query, const std::vector<uint64_t>& fresh) {
  std::vector<uint64_t>& ring = history_[query];
  for (uint64_t key : fresh) {
    if (ring.size() < ring_size_) {
      ring.push_back(key);
    } else {
      ring[history_next_[query]] = key;
      history_next_[query] = (history_next_[query] + 1) % ring_size_;
    }
  }
}

}  // namespace rankd::bench
