#include "plot.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace rankd::bench {
namespace {

constexpr double kWidth = 640, kHeight = 400;
constexpr double kLeft = 70, kRight = 160, kTop = 40, kBottom = 55;  // margins
constexpr const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                   "#9467bd", "#8c564b", "#e377c2", "#17becf"};

std::string Number(double v) {
  if (v != 0 && (std::abs(v) >= 1e6 || std::abs(v) < 1e-3)) return absl::StrFormat("%.3g", v);
  return absl::StrFormat("%.6g", v);
}

}  // namespace

std::string XmlEscape(absl::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        // Control characters are not allowed in XML 1.0 text (tab, CR and LF are).
        out +=
            (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n' && c != '\r') ? ' ' : c;
    }
  }
  return out;
}

std::vector<double> NiceTicks(double lo, double hi, int target) {
  if (!(hi > lo)) hi = lo + 1;
  const double raw = (hi - lo) / std::max(1, target);
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  double step = power;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    step = m * power;
    if (step >= raw) break;
  }
  std::vector<double> ticks;
  for (double t = std::ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) {
    ticks.push_back(std::abs(t) < step * 1e-9 ? 0.0 : t);
  }
  return ticks;
}

std::string RenderSvg(const LinePlot& plot) {
  double x_lo = INFINITY, x_hi = -INFINITY, y_lo = 0, y_hi = -INFINITY;
  for (const Series& s : plot.series) {
    for (const auto& [x, y] : s.points) {
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      x_lo = std::min(x_lo, x);
      x_hi = std::max(x_hi, x);
      y_lo = std::min(y_lo, y);
      y_hi = std::max(y_hi, y);
    }
  }
  if (!std::isfinite(x_lo)) x_lo = 0, x_hi = 1, y_hi = 1;  // no points
  if (x_hi <= x_lo) x_lo -= 1, x_hi += 1;
  if (y_hi <= y_lo) y_hi = y_lo + 1;
  const std::vector<double> x_ticks = NiceTicks(x_lo, x_hi, 6);
  // The y axis ends on ticks, so that the highest point has a labelled line above it.
  std::vector<double> y_ticks = NiceTicks(y_lo, y_hi * 1.05, 5);
  if (y_ticks.size() >= 2) {
    const double step = y_ticks[1] - y_ticks[0];
    if (y_ticks.back() < y_hi) y_ticks.push_back(y_ticks.back() + step);
    if (y_ticks.front() > y_lo) y_ticks.insert(y_ticks.begin(), y_ticks.front() - step);
  }
  y_lo = std::min(y_lo, y_ticks.front());
  y_hi = std::max(y_hi, y_ticks.back());
  const double pw = kWidth - kLeft - kRight, ph = kHeight - kTop - kBottom;
  auto px = [&](double x) { return kLeft + (x - x_lo) / (x_hi - x_lo) * pw; };
  auto py = [&](double y) { return kTop + ph - (y - y_lo) / (y_hi - y_lo) * ph; };

  std::string svg = absl::StrFormat(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
      "viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
      kWidth, kHeight, kWidth, kHeight);
  absl::StrAppendFormat(&svg,
                        "<text x=\"%.1f\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">%s"
                        "</text>\n",
                        kLeft + pw / 2, XmlEscape(plot.title));
  // Grid, ticks and tick labels.
  for (double t : x_ticks) {
    absl::StrAppendFormat(
        &svg,
        "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n"
        "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n",
        px(t), kTop, px(t), kTop + ph, px(t), kTop + ph + 16, Number(t));
  }
  for (double t : y_ticks) {
    absl::StrAppendFormat(
        &svg,
        "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n"
        "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n",
        kLeft, py(t), kLeft + pw, py(t), kLeft - 6, py(t) + 4, Number(t));
  }
  // Axes and their labels.
  absl::StrAppendFormat(
      &svg,
      "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>\n"
      "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>\n",
      kLeft, kTop + ph, kLeft + pw, kTop + ph, kLeft, kTop, kLeft, kTop + ph);
  absl::StrAppendFormat(&svg, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n",
                        kLeft + pw / 2, kHeight - 14, XmlEscape(plot.x_label));
  absl::StrAppendFormat(&svg,
                        "<text x=\"16\" y=\"%.1f\" text-anchor=\"middle\" "
                        "transform=\"rotate(-90 16 %.1f)\">%s</text>\n",
                        kTop + ph / 2, kTop + ph / 2, XmlEscape(plot.y_label));
  // Series and legend.
  for (size_t i = 0; i < plot.series.size(); ++i) {
    const Series& s = plot.series[i];
    const char* color = kColors[i % (sizeof(kColors) / sizeof(kColors[0]))];
    std::string points;
    std::string markers;
    for (const auto& [x, y] : s.points) {
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      absl::StrAppendFormat(&points, "%s%.1f,%.1f", points.empty() ? "" : " ", px(x), py(y));
      absl::StrAppendFormat(&markers, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n",
                            px(x), py(y), color);
    }
    if (!points.empty()) {
      absl::StrAppendFormat(&svg,
                            "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" "
                            "points=\"%s\"/>\n%s",
                            color, points, markers);
    }
    const double ly = kTop + 10 + 18 * static_cast<double>(i);
    absl::StrAppendFormat(&svg,
                          "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                          "stroke-width=\"2\"/>\n"
                          "<text x=\"%.1f\" y=\"%.1f\">%s</text>\n",
                          kLeft + pw + 12, ly, kLeft + pw + 32, ly, color, kLeft + pw + 38, ly + 4,
                          XmlEscape(s.name));
  }
  svg += "</svg>\n";
  return svg;
}

std::string CsvRow(const std::vector<std::string>& fields) {
  std::string line;
  for (size_t i = 0; i < fields.size(); ++i) {
    if (i) line += ',';
    const std::string& f = fields[i];
    if (f.find_first_of(",\"\r\n") == std::string::npos) {
      line += f;
      continue;
    }
    line += '"';
    for (char c : f) {
      if (c == '"') line += '"';
      line += c;
    }
    line += '"';
  }
  return line + "\n";
}

}  // namespace rankd::bench
