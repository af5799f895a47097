#include "rankd/server/call/answer_budget.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace rankd::server {
namespace {

// Upper bounds of the wire format: an ItemScore without its id's bytes (score, scored, cached,
// the id's tag and length, and the ItemScore's own tag and length: 21 bytes), and a
// ScoreResponse's fields besides its scores, model and request_id's bytes (usage, timing,
// offset, depth, and the tags and lengths: 69 bytes).
constexpr int64_t kItemScoreBytes = 24;
constexpr int64_t kMessageBytes = 96;

}  // namespace

int64_t AnswerBytes(const rankd::v1::ScoreRequest& request, absl::string_view model, int messages) {
  int64_t bytes =
      messages * (kMessageBytes + static_cast<int64_t>(model.size() + request.request_id().size()));
  for (const rankd::v1::Item& item : request.items()) {
    bytes += kItemScoreBytes + static_cast<int64_t>(item.id().size());
  }
  return bytes;
}

AnswerBudget::AnswerBudget(int64_t max_call_bytes, int64_t max_total_bytes, Gauge* held)
    : max_call_bytes_(max_call_bytes), max_total_bytes_(max_total_bytes), gauge_(held) {}

absl::StatusOr<AnswerBudget::Hold> AnswerBudget::Reserve(int64_t bytes) {
  if (bytes > max_call_bytes_) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the answer would take up to ", bytes,
                     " bytes (ids are echoed), over limits.max_answer_bytes=", max_call_bytes_));
  }
  int64_t held = held_.load(std::memory_order_relaxed);
  do {
    if (held + bytes > max_total_bytes_) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "answers not yet taken by their clients hold ", held, " bytes; this one's ", bytes,
          " more would exceed server.max_buffered_answer_bytes=", max_total_bytes_,
          "; retry later"));
    }
  } while (!held_.compare_exchange_weak(held, held + bytes, std::memory_order_relaxed));
  if (gauge_ != nullptr) gauge_->Add(static_cast<double>(bytes));
  return Hold(this, bytes);
}

AnswerBudget::Hold::Hold(Hold&& other) noexcept
    : budget_(std::exchange(other.budget_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

AnswerBudget::Hold& AnswerBudget::Hold::operator=(Hold&& other) noexcept {
  if (this != &other) {
    Release();
    budget_ = std::exchange(other.budget_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

AnswerBudget::Hold::~Hold() { Release(); }

void AnswerBudget::Hold::Release() {
  if (budget_ == nullptr) return;
  budget_->held_.fetch_sub(bytes_, std::memory_order_relaxed);
  if (budget_->gauge_ != nullptr) budget_->gauge_->Add(-static_cast<double>(bytes_));
  budget_ = nullptr;
}

}  // namespace rankd::server
