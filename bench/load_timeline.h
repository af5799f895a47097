// rankd-bench load's offered-load schedule (--schedule "T0:V0,T1:V1,...": from T seconds after the
// start, V requests outstanding in closed loop or V requests/s in open loop) and its per-second
// timeline (--timeline FILE, CSV), and `rankd-bench plot-timeline`, which draws a timeline file:
// p99 latency over time against a target, and the served depth (with the offered load) over time.
#ifndef RANKD_BENCH_LOAD_TIMELINE_H_
#define RANKD_BENCH_LOAD_TIMELINE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace rankd::bench {

struct LoadStep {
  double at_s = 0;   // seconds after the first call
  double value = 0;  // closed loop: concurrency (an integer); open loop: requests per second
};

// The one check of an offered value (--concurrency, --rate, a --schedule step): closed loop an
// integer in [1, 10000], open loop a rate in (0, 1e6]. `flag` names it in the message.
absl::Status CheckOffered(double value, bool closed_loop, absl::string_view flag);

// Parses --schedule: comma-separated T:V steps, T ascending (strictly) from >= 0 and before
// `run_s` (the run's length), each V checked by CheckOffered. Empty text: no steps. Errors are
// InvalidArgument naming --schedule and the step.
absl::StatusOr<std::vector<LoadStep>> ParseSchedule(absl::string_view text, bool closed_loop,
                                                    double run_s);

// The offered value at `t_s`: the last step at or before it, else `base` (--concurrency/--rate).
double OfferedAt(const std::vector<LoadStep>& steps, double base, double t_s);

// One finished call, as the timeline sees it.
struct CallRecord {
  double end_s = 0;      // when it completed, seconds after the first call
  double latency_s = 0;  // end-to-end
  bool ok = false;
  int served = 0;  // items answered (scored: true), cached or not
  int cached = 0;  // of those, from the result cache
  int depth = 0;   // ScoreResponse.depth
};

// One second of the timeline: the calls that completed in [t, t + 1). Latency, depth and hit rate
// are of the successful ones; NaN when there were none.
struct TimelineRow {
  int t = 0;
  double offered = 0;  // the schedule's value at t
  int64_t completed = 0, errors = 0;
  double items_per_s = 0;  // served items
  double p50_ms = 0, p99_ms = 0, mean_depth = 0, hit_rate = 0;
};

// Buckets calls by the second they completed in. Not thread-safe (the caller locks).
class Timeline {
 public:
  void Add(const CallRecord& call);
  // Rows 0 .. the last second with a call (seconds without calls included, empty).
  std::vector<TimelineRow> Rows(const std::vector<LoadStep>& steps, double base) const;

 private:
  struct Bucket {
    std::vector<double> latencies_s;  // successful calls
    int64_t errors = 0, served = 0, cached = 0, depth_sum = 0;
  };
  std::vector<Bucket> buckets_;  // [seconds]
};

// The timeline as CSV: a header line `t,offered,completed,errors,items_per_s,p50_ms,p99_ms,
// mean_depth,hit_rate`, then one line per row; NaN fields are empty.
std::string TimelineCsv(const std::vector<TimelineRow>& rows);
// Reads TimelineCsv's output back (columns by header name; InvalidArgument naming the line).
absl::StatusOr<std::vector<TimelineRow>> ParseTimelineCsv(absl::string_view text);

// `rankd-bench plot-timeline --timeline FILE --out PREFIX [--target-p99-ms X]`: writes
// PREFIX_p99.svg and PREFIX_depth.svg.
int RunPlotTimeline(int argc, char** argv, int first);

}  // namespace rankd::bench

#endif  // RANKD_BENCH_LOAD_TIMELINE_H_
