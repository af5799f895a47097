// The one rule by which rankd keeps a measured cost rate (seconds per token) up to date: the
// worker's, which sizes its engine steps (src/worker/worker.cc), and deadline admission's
// (rankd/server/pool/cost_estimator.h).
#ifndef RANKD_COMMON_MOVING_RATE_H_
#define RANKD_COMMON_MOVING_RATE_H_

#include <algorithm>

namespace rankd {

// `rate` moved toward a new measurement `sample` (> 0); a `rate` <= 0 (none yet) takes it. A
// slower measurement counts with weight 0.2 and for at most twice the rate, so that one slow call
// (one long item, a moment the machine was busy elsewhere) moves the rate by 20% at most while a
// lasting slowdown still raises it by up to 20% a measurement. A faster one counts with weight 0.5:
// a rate too high costs more than one too low (steps split needlessly, calls refused at admission
// that would have met their deadline, and a refused call measures nothing), so the rate comes
// down sooner than it goes up.
inline double UpdateRate(double rate, double sample) {
  constexpr double kRiseWeight = 0.2;
  constexpr double kMaxRise = 2;
  constexpr double kFallWeight = 0.5;
  if (rate <= 0) return sample;
  if (sample >= rate) return rate + kRiseWeight * (std::min(sample, kMaxRise * rate) - rate);
  return rate + kFallWeight * (sample - rate);
}

}  // namespace rankd

#endif  // RANKD_COMMON_MOVING_RATE_H_
