#include "rankd/server/pool/cost_estimator.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>

#include "rankd/common/moving_rate.h"

namespace rankd::server {

CostEstimator::CostEstimator(double initial_seconds_per_item)
    : initial_seconds_per_item_(initial_seconds_per_item) {}

WorkSize CostEstimator::Size(const WorkInputs& inputs) const {
  auto tokens = [this](int64_t known, int64_t text_bytes) {
    return known + std::llround(tokens_per_byte_ * static_cast<double>(text_bytes));
  };
  return {.prefix_tokens = tokens(inputs.prefix_known_tokens, inputs.prefix_text_bytes),
          .item_tokens = tokens(inputs.item_known_tokens, inputs.item_text_bytes),
          .items = inputs.items};
}

int CostEstimator::ClassOf(const WorkSize& size) {
  auto log2 = [](int64_t n) {
    return std::min<int>(kClasses - 1,
                         std::bit_width(static_cast<uint64_t>(std::max<int64_t>(n, 0))));
  };
  return log2(size.tokens()) * kClasses + log2(size.item_tokens / std::max(1, size.items));
}

const CostEstimator::Rate* CostEstimator::RateFor(const WorkSize& size) const {
  const int own = ClassOf(size);
  if (rates_[own].seconds_per_token > 0) return &rates_[own];
  const Rate* best = nullptr;
  int best_distance = 0;
  for (int c : measured_) {
    const int distance =
        std::abs(c / kClasses - own / kClasses) + std::abs(c % kClasses - own % kClasses);
    if (best == nullptr || distance < best_distance ||
        (distance == best_distance && rates_[c].measured_at > best->measured_at)) {
      best = &rates_[c];
      best_distance = distance;
    }
  }
  return best;
}

double CostEstimator::Seconds(const WorkSize& size) const {
  const Rate* rate = RateFor(size);
  if (rate == nullptr) return initial_seconds_per_item_ * size.items;
  return rate->seconds_per_token * static_cast<double>(size.tokens());
}

void CostEstimator::Observe(const WorkInputs& inputs, const WorkSize& measured, double seconds,
                            Clock::time_point now) {
  const int64_t text_bytes = inputs.prefix_text_bytes + inputs.item_text_bytes;
  const int64_t text_tokens =
      measured.tokens() - inputs.prefix_known_tokens - inputs.item_known_tokens;
  if (text_bytes > 0 && text_tokens > 0) {
    tokens_per_byte_ = UpdateRate(
        tokens_per_byte_, static_cast<double>(text_tokens) / static_cast<double>(text_bytes));
  }
  if (measured.tokens() <= 0 || seconds <= 0) return;
  const int c = ClassOf(measured);
  Rate& rate = rates_[c];
  if (rate.seconds_per_token <= 0) measured_.push_back(c);
  rate.seconds_per_token =
      UpdateRate(rate.seconds_per_token, seconds / static_cast<double>(measured.tokens()));
  rate.measured_at = now;
}

bool CostEstimator::Probe(const WorkSize& size, double estimate, double seconds_left,
                          Clock::time_point now) {
  if (measured_.empty() || estimate > kProbeFactor * seconds_left) return false;
  Rate& rate = rates_[ClassOf(size)];
  if (rate.seconds_per_token > 0 && now - rate.measured_at < kProbeInterval) return false;
  if (rate.probed_at && now - *rate.probed_at < kProbeInterval) return false;
  rate.probed_at = now;
  return true;
}

}  // namespace rankd::server
