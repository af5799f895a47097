// Small writers for rankd-bench sweep: CSV rows and line plots as standalone SVG (axes with ticks,
// one polyline with point markers per series, a legend), no plotting library.
#ifndef RANKD_BENCH_PLOT_H_
#define RANKD_BENCH_PLOT_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"

namespace rankd::bench {

struct Series {
  std::string name;
  std::vector<std::pair<double, double>> points;  // (x, y), drawn in the given order
};

struct LinePlot {
  std::string title;
  std::string x_label;
  std::string y_label;
  std::vector<Series> series;
};

// An SVG document (640 x 400) of `plot`. The y axis starts at 0 (or below, for negative values);
// non-finite points are left out. Text is XML-escaped.
std::string RenderSvg(const LinePlot& plot);

// One CSV line (RFC 4180: a field with a comma, quote or line break is quoted, quotes doubled),
// ending in \n.
std::string CsvRow(const std::vector<std::string>& fields);

// Tick values covering [lo, hi]: about `target` round steps (1, 2 or 5 times a power of ten).
std::vector<double> NiceTicks(double lo, double hi, int target);

std::string XmlEscape(absl::string_view s);

}  // namespace rankd::bench

#endif  // RANKD_BENCH_PLOT_H_
