// The schedule parser, the per-second timeline, its CSV and `rankd-bench plot-timeline`: see
// load_timeline.h.
#include "load_timeline.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "percentile.h"
#include "plot.h"
#include "rankd/cli/flag_set.h"

namespace rankd::bench {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr const char* kColumns[] = {"t",      "offered", "completed",  "errors",  "items_per_s",
                                    "p50_ms", "p99_ms",  "mean_depth", "hit_rate"};

std::string Field(double v) { return std::isfinite(v) ? absl::StrFormat("%.6g", v) : ""; }

}  // namespace

absl::Status CheckOffered(double value, bool closed_loop, absl::string_view flag) {
  if (closed_loop) {
    if (!(value >= 1 && value <= 10000) || value != std::floor(value)) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, ": a concurrency must be an integer in [1, 10000] (got ", value, ")"));
    }
  } else if (!(value > 0 && value <= 1e6)) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": a rate must be in (0, 1e6] requests/s (got ", value, ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<LoadStep>> ParseSchedule(absl::string_view text, bool closed_loop,
                                                    double run_s) {
  std::vector<LoadStep> steps;
  if (text.empty()) return steps;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    const std::string step(absl::StripAsciiWhitespace(part));
    std::vector<absl::string_view> tv = absl::StrSplit(step, ':');
    LoadStep s;
    if (tv.size() != 2 || !absl::SimpleAtod(absl::StripAsciiWhitespace(tv[0]), &s.at_s) ||
        !absl::SimpleAtod(absl::StripAsciiWhitespace(tv[1]), &s.value)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--schedule: step '", step, "' is not SECONDS:VALUE (e.g. 0:4,40:32,100:4)"));
    }
    if (!(s.at_s >= 0 && s.at_s < run_s)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--schedule: step '", step, "' must start in [0, ", run_s,
                       ") s (the run is --warmup-s + --duration = ", run_s, " s)"));
    }
    if (!steps.empty() && !(s.at_s > steps.back().at_s)) {
      return absl::InvalidArgumentError(absl::StrCat("--schedule: step '", step,
                                                     "' must start after the step before it (",
                                                     steps.back().at_s, " s)"));
    }
    if (absl::Status st =
            CheckOffered(s.value, closed_loop, absl::StrCat("--schedule step '", step, "'"));
        !st.ok()) {
      return st;
    }
    steps.push_back(s);
  }
  return steps;
}

double OfferedAt(const std::vector<LoadStep>& steps, double base, double t_s) {
  double v = base;
  for (const LoadStep& s : steps) {
    if (s.at_s > t_s) break;
    v = s.value;
  }
  return v;
}

void Timeline::Add(const CallRecord& call) {
  const size_t second = call.end_s > 0 ? static_cast<size_t>(call.end_s) : 0;
  if (buckets_.size() <= second) buckets_.resize(second + 1);
  Bucket& b = buckets_[second];
  if (!call.ok) {
    b.errors++;
    return;
  }
  b.latencies_s.push_back(call.latency_s);
  b.served += call.served;
  b.cached += call.cached;
  b.depth_sum += call.depth;
}

std::vector<TimelineRow> Timeline::Rows(const std::vector<LoadStep>& steps, double base) const {
  std::vector<TimelineRow> rows;
  for (size_t t = 0; t < buckets_.size(); ++t) {
    const Bucket& b = buckets_[t];
    TimelineRow r;
    r.t = static_cast<int>(t);
    r.offered = OfferedAt(steps, base, static_cast<double>(t));
    r.completed = static_cast<int64_t>(b.latencies_s.size());
    r.errors = b.errors;
    r.items_per_s = static_cast<double>(b.served);
    const bool any = r.completed > 0;
    r.p50_ms = any ? Percentile(b.latencies_s, 0.5) * 1e3 : kNaN;
    r.p99_ms = any ? Percentile(b.latencies_s, 0.99) * 1e3 : kNaN;
    r.mean_depth = any ? static_cast<double>(b.depth_sum) / static_cast<double>(r.completed) : kNaN;
    r.hit_rate =
        b.served > 0 ? static_cast<double>(b.cached) / static_cast<double>(b.served) : kNaN;
    rows.push_back(r);
  }
  return rows;
}

std::string TimelineCsv(const std::vector<TimelineRow>& rows) {
  std::string csv = CsvRow(std::vector<std::string>(std::begin(kColumns), std::end(kColumns)));
  for (const TimelineRow& r : rows) {
    csv += CsvRow({absl::StrCat(r.t), Field(r.offered), absl::StrCat(r.completed),
                   absl::StrCat(r.errors), Field(r.items_per_s), Field(r.p50_ms), Field(r.p99_ms),
                   Field(r.mean_depth), Field(r.hit_rate)});
  }
  return csv;
}

absl::StatusOr<std::vector<TimelineRow>> ParseTimelineCsv(absl::string_view text) {
  std::vector<absl::string_view> lines = absl::StrSplit(text, '\n', absl::SkipEmpty());
  if (lines.empty()) return absl::InvalidArgumentError("timeline: empty file");
  std::map<std::string, size_t> column;  // name -> index
  std::vector<absl::string_view> header = absl::StrSplit(lines[0], ',');
  for (size_t i = 0; i < header.size(); ++i) column[std::string(header[i])] = i;
  for (const char* name : kColumns) {
    if (!column.count(name)) {
      return absl::InvalidArgumentError(absl::StrCat("timeline: no column '", name, "'"));
    }
  }
  std::vector<TimelineRow> rows;
  for (size_t n = 1; n < lines.size(); ++n) {
    std::vector<absl::string_view> f = absl::StrSplit(lines[n], ',');
    if (f.size() != header.size()) {
      return absl::InvalidArgumentError(absl::StrCat("timeline line ", n + 1, ": ", f.size(),
                                                     " fields, the header has ", header.size()));
    }
    auto number = [&](const char* name, double* v) {
      const absl::string_view s = f[column[name]];
      if (s.empty()) {
        *v = kNaN;
        return true;
      }
      return absl::SimpleAtod(s, v);
    };
    TimelineRow r;
    double t = 0, completed = 0, errors = 0;
    if (!number("t", &t) || !number("offered", &r.offered) || !number("completed", &completed) ||
        !number("errors", &errors) || !number("items_per_s", &r.items_per_s) ||
        !number("p50_ms", &r.p50_ms) || !number("p99_ms", &r.p99_ms) ||
        !number("mean_depth", &r.mean_depth) || !number("hit_rate", &r.hit_rate) ||
        !std::isfinite(t)) {
      return absl::InvalidArgumentError(absl::StrCat("timeline line ", n + 1, ": not a number"));
    }
    r.t = static_cast<int>(t);
    r.completed = static_cast<int64_t>(completed);
    r.errors = static_cast<int64_t>(errors);
    rows.push_back(r);
  }
  return rows;
}

int RunPlotTimeline(int argc, char** argv, int first) {
  cli::FlagSet flags(
      "rankd-bench plot-timeline --timeline FILE --out PREFIX [--target-p99-ms X]\n"
      "Draws a `rankd-bench load --timeline` file: PREFIX_p99.svg (p99 and p50 latency per\n"
      "second, and the target as a line) and PREFIX_depth.svg (mean ScoreResponse.depth per\n"
      "second, and the offered load).");
  std::string timeline_path, out, title = "rankd serve through a load step";
  double target_ms = 0;
  flags.String("timeline", &timeline_path, "CSV written by rankd-bench load --timeline");
  flags.String("out", &out, "output path prefix");
  flags.Double("target-p99-ms", &target_ms, "p99 target drawn as a line (0: none)");
  flags.String("title", &title, "plot title");
  if (std::optional<int> exit_code = ParseCommandFlags(flags, argc, argv, first, "plot-timeline")) {
    return *exit_code;
  }
  if (timeline_path.empty() || out.empty() || !(target_ms >= 0)) {
    std::fprintf(stderr, "plot-timeline: need --timeline and --out; --target-p99-ms >= 0\n");
    return 2;
  }
  std::ifstream in(timeline_path);
  std::stringstream text;
  text << in.rdbuf();
  if (!in) {
    std::fprintf(stderr, "plot-timeline: cannot read %s\n", timeline_path.c_str());
    return 1;
  }
  absl::StatusOr<std::vector<TimelineRow>> rows = ParseTimelineCsv(text.str());
  if (!rows.ok()) {
    std::fprintf(stderr, "plot-timeline: %s\n", std::string(rows.status().message()).c_str());
    return 1;
  }
  LinePlot p99{title, "seconds", "latency (ms)", {{"p99", {}}, {"p50", {}}}};
  LinePlot depth{
      title, "seconds", "depth (items) / offered load", {{"mean depth", {}}, {"offered", {}}}};
  for (const TimelineRow& r : *rows) {
    p99.series[0].points.emplace_back(r.t, r.p99_ms);
    p99.series[1].points.emplace_back(r.t, r.p50_ms);
    depth.series[0].points.emplace_back(r.t, r.mean_depth);
    depth.series[1].points.emplace_back(r.t, r.offered);
  }
  if (target_ms > 0 && !rows->empty()) {
    p99.series.push_back({absl::StrFormat("target %g ms", target_ms),
                          {{rows->front().t, target_ms}, {rows->back().t, target_ms}}});
  }
  for (const auto& [suffix, plot] :
       {std::pair{"_p99.svg", &p99}, std::pair{"_depth.svg", &depth}}) {
    const std::string path = out + suffix;
    std::ofstream f(path);
    f << RenderSvg(*plot);
    if (!f) {
      std::fprintf(stderr, "plot-timeline: cannot write %s\n", path.c_str());
      return 1;
    }
    std::printf("wrote %s\n", path.c_str());
  }
  return 0;
}

}  // namespace rankd::bench
