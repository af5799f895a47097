#include "rankd/server/depth_controller.h"

#include <algorithm>
#include <cmath>

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

}  // namespace rankd::server
