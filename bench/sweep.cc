#include "sweep.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "engine_bench.h"
#include "load_bench.h"
#include "plot.h"
#include "rankd/cli/flag_set.h"
#include "rankd/common/logging.h"

namespace rankd::bench {
namespace {

template <typename T>
bool ParseList(const std::string& text, std::vector<T>* out) {
  out->clear();
  if (text.empty()) return true;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    T v;
    if constexpr (std::is_same_v<T, int>) {
      if (!absl::SimpleAtoi(part, &v) || v < 1) return false;
    } else {
      if (!absl::SimpleAtod(part, &v) || !(v > 0)) return false;
    }
    out->push_back(v);
  }
  return true;
}

bool WriteFile(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  f << text;
  return static_cast<bool>(f);
}

}  // namespace

int RunSweep(int argc, char** argv, int first) {
  cli::FlagSet flags(
      "rankd-bench sweep --model DIR --out DIR [--ni-list 10,50,100,250] [--concurrency-list 1]\n"
      "                  [--target HOST:PORT --rates 5,10,20 | --load-concurrency 1,4,16]\n"
      "Runs `engine` for every Ni x concurrency and, with --target, `load` at every offered load\n"
      "(open loop at each rate, or closed loop at each concurrency) against a running rankd "
      "serve.\n"
      "Writes OUT/sweep.csv, OUT/items_per_s_vs_ni.svg, OUT/p99_vs_ni.svg and, with --target,\n"
      "OUT/p99_vs_load.svg and OUT/items_per_s_vs_load.svg.");
  EngineBenchOptions e;
  LoadOptions l;
  std::string out_dir, ni_text = "10,50,100,250", conc_text = "1", rates_text, load_conc_text;
  e.iters = 10;  // before AddEngineBenchFlags, so --help shows the sweep's default
  // The engine's flags, less --ni and --concurrency: --ni-list and --concurrency-list replace them.
  AddEngineBenchFlags(flags, &e);
  flags.String("out", &out_dir, "output directory");
  flags.String("ni-list", &ni_text, "items per request, comma-separated");
  flags.String("concurrency-list", &conc_text, "engine: requests per step, comma-separated");
  flags.String("target", &l.target, "load: server address (no load runs unless set)");
  flags.String("rates", &rates_text, "load: open-loop rates (requests/s), comma-separated");
  flags.String("load-concurrency", &load_conc_text, "load: closed-loop concurrencies");
  flags.Int("load-ni", &l.ni, "load: items per request");
  flags.Double("duration", &l.duration, "load: measured seconds per point");
  flags.Double("warmup-s", &l.warmup, "load: unmeasured seconds per point");
  flags.Int("vocab", &l.vocab, "load: ids are drawn from [4, vocab)");
  if (std::optional<int> exit_code = ParseCommandFlags(flags, argc, argv, first, "sweep")) {
    return *exit_code;
  }
  std::vector<int> nis, concs, load_concs;
  std::vector<double> rates;
  if (!ParseList(ni_text, &nis) || !ParseList(conc_text, &concs) ||
      !ParseList(rates_text, &rates) || !ParseList(load_conc_text, &load_concs)) {
    std::fprintf(stderr, "sweep: lists are comma-separated positive numbers\n");
    return 2;
  }
  const bool run_load = flags.WasSet("target");
  if (out_dir.empty() || (e.model_dir.empty() && !run_load) ||
      (run_load && rates.empty() == load_concs.empty())) {
    std::fprintf(stderr,
                 "sweep: need --out, --model (or --target), and with --target exactly one of "
                 "--rates, --load-concurrency\n");
    return 2;
  }
  // Every engine point is `e` with one Ni and one concurrency from the lists (checked positive
  // above), so checking `e` here rejects bad shapes before the model is loaded.
  if (absl::Status s = e.model_dir.empty() ? absl::OkStatus() : CheckEngineBenchOptions(e);
      !s.ok()) {
    std::fprintf(stderr, "sweep: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (absl::Status s = SetUpLogging(e.log_level, LogFormat::kText, "rankd-bench"); !s.ok()) {
    std::fprintf(stderr, "sweep: --log-level: %s\n", std::string(s.message()).c_str());
    return 2;
  }

  std::string csv = CsvRow({"kind", "ni", "concurrency", "offered_rate", "items_per_s",
                            "requests_per_s", "p50_ms", "p90_ms", "p99_ms", "requests_failed"});
  std::map<int, Series> items_vs_ni, p99_vs_ni;  // by engine concurrency
  if (!e.model_dir.empty()) {
    absl::StatusOr<std::unique_ptr<backend::Backend>> backend = MakeBenchBackend(e);
    if (!backend.ok()) {
      std::fprintf(stderr, "sweep: %s\n", std::string(backend.status().message()).c_str());
      return 1;
    }
    PrintEngineHeader();
    for (int c : concs) {
      items_vs_ni[c].name = absl::StrCat("concurrency ", c);
      p99_vs_ni[c].name = absl::StrCat("concurrency ", c);
      for (int ni : nis) {
        EngineBenchOptions point = e;
        point.ni = ni;
        point.concurrency = c;
        absl::StatusOr<EngineBenchResult> r = RunEngine(**backend, point);
        if (!r.ok()) {
          std::fprintf(stderr, "sweep: engine ni=%d c=%d: %s\n", ni, c,
                       std::string(r.status().message()).c_str());
          return 1;
        }
        PrintEngineRow(point, *r);
        std::fflush(stdout);
        csv +=
            CsvRow({"engine", absl::StrCat(ni), absl::StrCat(c), "", absl::StrCat(r->items_per_s),
                    absl::StrCat(r->items_per_s / ni), absl::StrCat(r->p50_ms),
                    absl::StrCat(r->p90_ms), absl::StrCat(r->p99_ms), "0"});
        items_vs_ni[c].points.emplace_back(ni, r->items_per_s);
        p99_vs_ni[c].points.emplace_back(ni, r->p99_ms);
      }
    }
  }
  Series p99_vs_load{"p99", {}}, p50_vs_load{"p50", {}}, items_vs_load{"items/s", {}};
  if (run_load) {
    l.ti = e.ti;
    l.tq = e.tq;
    const bool open = !rates.empty();
    PrintLoadHeader();
    for (size_t k = 0; k < (open ? rates.size() : load_concs.size()); ++k) {
      LoadOptions point = l;
      point.rate = open ? rates[k] : 0;
      point.concurrency = open ? 0 : load_concs[k];
      absl::StatusOr<LoadResult> r = RunLoad(point);
      if (!r.ok()) {
        std::fprintf(stderr, "sweep: load: %s\n", std::string(r.status().message()).c_str());
        return 1;
      }
      PrintLoadRow(point, *r);
      std::fflush(stdout);
      // Offered load in items/s: open loop as sent; closed loop as the concurrency achieved.
      const double offered = open ? point.rate * point.ni : r->items_per_s;
      csv += CsvRow({"load", absl::StrCat(point.ni), absl::StrCat(point.concurrency),
                     open ? absl::StrCat(point.rate) : "", absl::StrCat(r->items_per_s),
                     absl::StrCat(r->requests_per_s), absl::StrCat(r->p50_ms),
                     absl::StrCat(r->p90_ms), absl::StrCat(r->p99_ms), absl::StrCat(r->failed)});
      p99_vs_load.points.emplace_back(offered, r->p99_ms);
      p50_vs_load.points.emplace_back(offered, r->p50_ms);
      items_vs_load.points.emplace_back(offered, r->items_per_s);
    }
  }

  bool ok = WriteFile(out_dir + "/sweep.csv", csv);
  if (!items_vs_ni.empty()) {
    LinePlot items{absl::StrCat("rankd-bench engine: items/s vs Ni (tq ", e.tq, ", ti ", e.ti, ", ",
                                e.backend, ")"),
                   "items per request (Ni)",
                   "items/s",
                   {}};
    LinePlot p99{
        absl::StrCat("rankd-bench engine: per-request p99 vs Ni (tq ", e.tq, ", ti ", e.ti, ")"),
        "items per request (Ni)",
        "p99 latency (ms)",
        {}};
    for (auto& [c, s] : items_vs_ni) items.series.push_back(s);
    for (auto& [c, s] : p99_vs_ni) p99.series.push_back(s);
    ok &= WriteFile(out_dir + "/items_per_s_vs_ni.svg", RenderSvg(items));
    ok &= WriteFile(out_dir + "/p99_vs_ni.svg", RenderSvg(p99));
  }
  if (run_load) {
    const std::string x = rates.empty() ? "items/s achieved (closed loop)" : "offered items/s";
    ok &= WriteFile(out_dir + "/p99_vs_load.svg",
                    RenderSvg({absl::StrCat("rankd serve: latency vs load (Ni ", l.ni, ")"),
                               x,
                               "latency (ms)",
                               {p99_vs_load, p50_vs_load}}));
    ok &= WriteFile(out_dir + "/items_per_s_vs_load.svg",
                    RenderSvg({absl::StrCat("rankd serve: items/s vs load (Ni ", l.ni, ")"),
                               x,
                               "items/s scored",
                               {items_vs_load}}));
  }
  if (!ok) {
    std::fprintf(stderr, "sweep: cannot write to %s\n", out_dir.c_str());
    return 1;
  }
  std::printf("wrote %s/sweep.csv and plots\n", out_dir.c_str());
  return 0;
}

}  // namespace rankd::bench
