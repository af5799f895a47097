// The (query, item) trace of rankd-bench load: which query of a fixed pool each request carries and
// which of its items repeat a (query, item) pair sent earlier, at a chosen repeat fraction. Items
// are integer keys (a fresh item gets the next key; the caller turns a key into content), so the
// trace is cheap, deterministic given its seed, and testable without a server.
#ifndef RANKD_BENCH_LOAD_TRACE_H_
#define RANKD_BENCH_LOAD_TRACE_H_

#include <cstdint>
#include <deque>
#include <random>
#include <vector>

#include "absl/status/statusor.h"

namespace rankd::bench {

struct TraceOptions {
  double repeat = 0;           // fraction of (query, item) pairs that repeat an earlier pair, 0..1
  int queries = 16;            // distinct queries requests draw from (uniformly)
  int items_per_request = 50;  // Ni, >= 1 (the caller checks it)
  // A repeat is of a pair first sent more than `lag` requests earlier: more requests than are in
  // flight, so that the server has answered (and cached) it.
  int lag = 32;
  uint32_t seed = 1;
};

// Not thread-safe (one caller at a time). Memory is bounded: per query a ring of the last
// 2 x items_per_request fresh keys (repeats draw from it), plus the last `lag` requests' keys.
//
// The number of repeats is error-diffused over the whole trace: after each request the trace holds
// round(repeat x pairs) repeats, except while it cannot (a query's first requests have nothing to
// repeat, and the first lag + 1 requests none at all); the shortfall is made up by the next
// requests that can repeat. So the realized fraction is repeat +- 0.5 / pairs once the start is
// made up (which takes about lag x repeat / (1 - repeat) requests more).
class RepeatTrace {
 public:
  struct Request {
    int query = 0;               // index into the query pool
    std::vector<uint64_t> keys;  // [items_per_request], in sending order (repeats shuffled in)
    int repeats = 0;             // how many of `keys` repeat an earlier pair of this query
  };

  // InvalidArgument, naming the flag (--repeat, --queries, --repeat-lag), for bad options.
  static absl::StatusOr<RepeatTrace> Create(const TraceOptions& options);

  Request Next();

  int64_t pairs() const { return pairs_; }
  int64_t repeats() const { return repeats_; }

 private:
  explicit RepeatTrace(const TraceOptions& options);
  void Remember(int query, const std::vector<uint64_t>& fresh);

  TraceOptions options_;
  size_t ring_size_;
  std::mt19937_64 rng_;
  std::vector<std::vector<uint64_t>> history_;  // [queries][<= ring_size_] fresh keys
  std::vector<size_t> history_next_;            // [queries] next ring slot to overwrite
  std::deque<std::pair<int, std::vector<uint64_t>>> pending_;  // the last `lag` requests
  uint64_t next_key_ = 0;
  int64_t pairs_ = 0, repeats_ = 0;
};

}  // namespace rankd::bench

#endif  // RANKD_BENCH_LOAD_TRACE_H_
