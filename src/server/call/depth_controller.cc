#include "rankd/server/call/depth_controller.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace rankd::server {

DepthController::DepthController(const DepthControlOptions& options)
    : options_(options), integral_(options.max_depth), depth_(options.max_depth) {}

int DepthController::Update(std::optional<double> p99_s, double dt_s) {
  if (!p99_s || !std::isfinite(*p99_s) || dt_s <= 0 || options_.target_p99_s <= 0) return depth_;
  const double lo = options_.min_depth, hi = options_.max_depth;
  const double y = *p99_s / options_.target_p99_s;  // 1 at the target
  const double e = 1.0 - y;
  const double dy = last_measurement_ ? (y - *last_measurement_) / dt_s : 0.0;
  last_measurement_ = y;
  // Anti-windup: the integral is kept where the output it gives is inside the range, so that a
  // saturated controller leaves saturation as soon as the error turns.
  integral_ =
      std::clamp(integral_ + options_.ki * e * dt_s, lo - options_.kp * e, hi - options_.kp * e);
  const double u = options_.kp * e + integral_ - options_.kd * dy;
  depth_ = static_cast<int>(std::lround(std::clamp(u, lo, hi)));
  return depth_;
}

LatencyWindow::LatencyWindow(double window_s, size_t max_samples)
    : window_(std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(window_s))),
      max_samples_(std::max<size_t>(1, max_samples)) {}

void LatencyWindow::Record(double seconds, Clock::time_point at) {
  std::lock_guard<std::mutex> lock(mu_);
  samples_.emplace_back(at, seconds);
  if (samples_.size() > max_samples_) samples_.pop_front();
}

std::optional<double> LatencyWindow::P99(Clock::time_point now) {
  std::vector<double> values;
  {
    std::lock_guard<std::mutex> lock(mu_);
    while (!samples_.empty() && samples_.front().first < now - window_) samples_.pop_front();
    if (samples_.empty()) return std::nullopt;
    values.reserve(samples_.size());
    for (const auto& [at, v] : samples_) values.push_back(v);
  }
  // The nearest-rank p99: the smallest value at or above 99% of the samples.
  const size_t rank = static_cast<size_t>(std::ceil(0.99 * static_cast<double>(values.size())));
  const size_t k = std::max<size_t>(rank, 1) - 1;
  std::nth_element(values.begin(), values.begin() + k, values.end());
  return values[k];
}

}  // namespace rankd::server
