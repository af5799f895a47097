// DepthController (issue 12): sets how many of a request's candidates get scored so that the
// end-to-end p99 latency stays at a target. A PID controller on the normalised error
// e = (target - p99) / target, in depth units:
//   depth = clamp(kp * e + I - kd * d(p99 / target)/dt, min_depth, max_depth),  I += ki * e * dt
// with the derivative on the measurement (a target change does not kick), and anti-windup by
// clamping the integral: kp * e + I stays inside [min_depth, max_depth], so a saturated
// controller leaves saturation as soon as the error turns. It starts at max_depth (full quality
// until latency says otherwise). Updated on a fixed period with the p99 the caller measured over
// its window; the caller owns the clock and the latency window.
//
// Threading contract: not thread-safe; one owner calls Update (the service's control loop) and
// publishes depth() for the request path.
#ifndef RANKD_SERVER_DEPTH_CONTROLLER_H_
#define RANKD_SERVER_DEPTH_CONTROLLER_H_

#include <chrono>
#include <cstddef>
#include <deque>
#include <mutex>
#include <optional>
#include <utility>

namespace rankd::server {

struct DepthControlOptions {
  double target_p99_s = 0.5;
  int min_depth = 50;
  int max_depth = 250;
  // Gains in items of depth: per unit of normalised error, per unit x second, per unit / second.
  double kp = 60;
  double ki = 40;
  double kd = 5;
};

class DepthController {
 public:
  explicit DepthController(const DepthControlOptions& options);

  // One control step: the p99 (seconds) measured now, `dt_s` seconds after the previous step.
  // Returns the new depth. A step without latency samples (nullopt) keeps the depth.
  int Update(std::optional<double> p99_s, double dt_s);
  int depth() const { return depth_; }

 private:
  const DepthControlOptions options_;
  double integral_;                         // in depth units
  std::optional<double> last_measurement_;  // p99 / target of the previous step
  int depth_;
};

// The p99 of the latencies recorded in the last `window_s` seconds, what the controller reads.
// Keeps at most `max_samples` (the newest), so its memory is bounded whatever the rate.
// Threading contract: every method may be called from any thread.
class LatencyWindow {
 public:
  using Clock = std::chrono::steady_clock;
  explicit LatencyWindow(double window_s, size_t max_samples = size_t{1} << 16);
  void Record(double seconds, Clock::time_point at);
  // nullopt when no sample is younger than the window.
  std::optional<double> P99(Clock::time_point now);

 private:
  const Clock::duration window_;
  const size_t max_samples_;
  std::mutex mu_;
  std::deque<std::pair<Clock::time_point, double>> samples_;  // oldest first
};

}  // namespace rankd::server

#endif  // RANKD_SERVER_DEPTH_CONTROLLER_H_
