// CostEstimator: deadline admission's estimate (WorkerPool::Submit) of how long a worker takes to
// score a work item, from what the work will make it do: its prefix and item tokens.
//
// Tokens: token ids (query_ids, token_ids items) and embedding rows are counted as given. Text is
// tokenized by the worker, after admission, so its tokens are estimated from its bytes at the
// tokens per byte measured so far (the worker reports the tokens it made of a work's text;
// kInitialTokensPerByte until the first report).
//
// Seconds: each worker call reports its compute seconds and its exact tokens, so the estimator
// learns the workers' seconds per token on the backend they run. That rate depends on a call's
// shape: a call of few tokens pays the per-step overheads over fewer tokens, and long items pay
// attention over more positions per token. So a rate is kept per class of shape (the call's
// tokens, and its tokens per item, each by power of two), and a work's estimate is its tokens
// times the rate of its class, or of the nearest class measured. Before any measurement it is the
// operator's prior: server.initial_seconds_per_item times its items.
//
// One call cannot skew it: a class's rate moves by UpdateRate (rankd/common/moving_rate.h), which
// lets one slow call raise it by 20% at most, and a call of one shape moves only its own class
// (one 512-token item no longer makes 50 short items look 30 times dearer). And it recovers while
// calls are refused, although a refused call measures nothing: with the workers idle, a call the
// estimate refuses is let through as a probe when its class has not been measured lately and the
// estimate is off by less than kProbeFactor (Probe).
//
// Threads: none of its own and no lock; the pool calls it under its lock.
#ifndef RANKD_SERVER_COST_ESTIMATOR_H_
#define RANKD_SERVER_COST_ESTIMATOR_H_

#include <array>
#include <chrono>
#include <cstdint>
#include <optional>
#include <vector>

namespace rankd::server {

// What admission knows of a work's inputs before the worker tokenizes them.
struct WorkInputs {
  int64_t prefix_known_tokens = 0;  // query_ids
  int64_t prefix_text_bytes = 0;    // the query's text
  int64_t item_known_tokens = 0;    // token ids and embedding rows of its items
  int64_t item_text_bytes = 0;      // text of its items
  int items = 0;
};

// A work's tokens: estimated (CostEstimator::Size) or as the worker reports them.
struct WorkSize {
  int64_t prefix_tokens = 0;
  int64_t item_tokens = 0;
  int items = 0;
  int64_t tokens() const { return prefix_tokens + item_tokens; }
};

class CostEstimator {
 public:
  using Clock = std::chrono::steady_clock;

  // Tokens per text byte assumed until the first measurement: 4 bytes a token, natural text's
  // typical (3-6).
  static constexpr double kInitialTokensPerByte = 0.25;
  // A class unmeasured this long may be probed, once per this long.
  static constexpr Clock::duration kProbeInterval = std::chrono::seconds(1);
  // A call whose estimate exceeds its time left by more than this is not probed: an estimate off
  // by that much is unlikely, and a probe costs a worker the call's whole cost.
  static constexpr double kProbeFactor = 4;

  explicit CostEstimator(double initial_seconds_per_item);

  // The tokens `inputs` are likely to make.
  WorkSize Size(const WorkInputs& inputs) const;
  // Estimated compute seconds of a work of `size`.
  double Seconds(const WorkSize& size) const;
  // A worker's report of a work of `inputs`: `measured` tokens in `seconds` of compute.
  void Observe(const WorkInputs& inputs, const WorkSize& measured, double seconds,
               Clock::time_point now);
  // Whether a call of `size` (its first work's) that admission would refuse, `estimate` seconds
  // needed against `seconds_left`, runs anyway as a probe; recorded as its class's probe when so.
  // The caller asks only while the workers are idle (a probe then delays no one). Never before
  // the first measurement: the operator's prior holds until then.
  bool Probe(const WorkSize& size, double estimate, double seconds_left, Clock::time_point now);

 private:
  static constexpr int kClasses = 32;  // powers of two of tokens, and of tokens per item
  struct Rate {
    double seconds_per_token = 0;  // 0: not measured
    Clock::time_point measured_at;
    std::optional<Clock::time_point> probed_at;
  };
  static int ClassOf(const WorkSize& size);
  // The rate of `size`'s class, or of the nearest measured one (by classes apart, the latest
  // measured among equals); null when nothing was measured.
  const Rate* RateFor(const WorkSize& size) const;

  const double initial_seconds_per_item_;
  double tokens_per_byte_ = kInitialTokensPerByte;
  std::array<Rate, kClasses * kClasses> rates_;  // [tokens class][tokens per item class]
  std::vector<int> measured_;                    // indices of the measured classes
};

}  // namespace rankd::server

#endif  // RANKD_SERVER_COST_ESTIMATOR_H_
