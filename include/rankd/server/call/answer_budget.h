// AnswerBudget: what the answers of the Score and ScoreStream calls in progress may make the front
// end hold. A call echoes its ids (ItemScore.id, ScoreResponse.request_id), and an answer stays in
// the front end until its client reads it: one that never reads would keep it for good (64 ids
// of 250 KB held 60 MB a call, and 160 such calls 10 GB). So each call reserves the bytes its
// answer can take (AnswerBytes) at admission, before any work, and gives them back when it ends:
// at most limits.max_answer_bytes for one call, server.max_buffered_answer_bytes for all calls
// together. A call over either fails RESOURCE_EXHAUSTED at once.
//
// Threads: any; Reserve and the Hold's release are lock-free.
#ifndef RANKD_SERVER_ANSWER_BUDGET_H_
#define RANKD_SERVER_ANSWER_BUDGET_H_

#include <atomic>
#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "rankd/server/metrics.h"
#include "rankd/v1/scorer.pb.h"

namespace rankd::server {

// The most bytes the serialized answer to `request` can take, as `messages` ScoreResponses (1
// for Score, its chunks for ScoreStream) from the server of `model`: each item's ItemScore with
// its id, and each message's own fields (model, request_id, usage, timing). Transports that
// re-encode it (the HTTP API's JSON) hold their own copy, bounded by their own limits.
int64_t AnswerBytes(const rankd::v1::ScoreRequest& request, absl::string_view model, int messages);

class AnswerBudget {
 public:
  // `held` (optional): a gauge of the bytes reserved.
  AnswerBudget(int64_t max_call_bytes, int64_t max_total_bytes, Gauge* held);

  // A reservation; gives its bytes back when destroyed. Movable.
  class Hold {
   public:
    Hold() = default;
    Hold(Hold&& other) noexcept;
    Hold& operator=(Hold&& other) noexcept;
    ~Hold();

   private:
    friend class AnswerBudget;
    Hold(AnswerBudget* budget, int64_t bytes) : budget_(budget), bytes_(bytes) {}
    void Release();
    AnswerBudget* budget_ = nullptr;
    int64_t bytes_ = 0;
  };

  // Reserves `bytes` for one call's answer, or RESOURCE_EXHAUSTED naming the limit it is over.
  absl::StatusOr<Hold> Reserve(int64_t bytes);
  int64_t held() const { return held_.load(std::memory_order_relaxed); }

 private:
  const int64_t max_call_bytes_;
  const int64_t max_total_bytes_;
  Gauge* const gauge_;
  std::atomic<int64_t> held_{0};
};

}  // namespace rankd::server

#endif  // RANKD_SERVER_ANSWER_BUDGET_H_
