#include "rankd/server/metrics.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "rankd/common/grpc_status.h"
#include "rankd/backend/backend.h"
#include "rankd/server/build_info.h"
#include "rankd/server/process.h"

namespace rankd::server {
namespace {

// The shortest text that reads back as `v` (absl::StrCat keeps 6 digits: a start time of
// 1796230123 s came out as 1.79623e+09, and a counter past a million stopped counting).
std::string FormatValue(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (std::isnan(v)) return "NaN";
  char text[32];
  const std::to_chars_result end = std::to_chars(text, text + sizeof(text), v);
  return std::string(text, end.ptr);
}

std::string EscapeLabelValue(absl::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string EscapeHelp(absl::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

// `labels` ({a="x"} or "") with one more label appended.
std::string WithLabel(const std::string& labels, absl::string_view name, absl::string_view value) {
  const std::string extra = absl::StrCat(name, "=\"", EscapeLabelValue(value), "\"");
  if (labels.empty()) return absl::StrCat("{", extra, "}");
  return absl::StrCat(labels.substr(0, labels.size() - 1), ",", extra, "}");
}

const char* TypeName(MetricsRegistry::Type type) {
  switch (type) {
    case MetricsRegistry::Type::kCounter:
      return "counter";
    case MetricsRegistry::Type::kGauge:
      return "gauge";
    case MetricsRegistry::Type::kHistogram:
      return "histogram";
  }
  return "untyped";
}

void AppendFamilyHeader(std::string* out, const std::string& name, const std::string& help,
                        MetricsRegistry::Type type) {
  absl::StrAppend(out, "# HELP ", name, " ", EscapeHelp(help), "\n# TYPE ", name, " ",
                  TypeName(type), "\n");
}

}  // namespace

std::string RenderLabels(const Labels& labels) {
  if (labels.empty()) return "";
  std::string out = "{";
  for (size_t i = 0; i < labels.size(); ++i) {
    absl::StrAppend(&out, i ? "," : "", labels[i].first, "=\"", EscapeLabelValue(labels[i].second),
                    "\"");
  }
  return out + "}";
}

std::vector<double> DurationBuckets() {
  return {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
}

std::vector<double> PowersOfTwoBuckets(double max) {
  std::vector<double> b;
  for (double v = 1; v <= max; v *= 2) b.push_back(v);
  return b;
}

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::Observe(double v) {
  const size_t bucket = std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin();
  std::lock_guard<std::mutex> lock(mu_);
  ++counts_[bucket];
  sum_ += v;
}

Histogram::Snapshot Histogram::Read() const {
  Snapshot s;
  s.upper_bounds = bounds_;
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t running = 0;
  for (uint64_t c : counts_) {
    running += c;
    s.cumulative_counts.push_back(running);
  }
  s.count = running;
  s.sum = sum_;
  return s;
}

MetricsRegistry::Family& MetricsRegistry::GetFamily(absl::string_view name, absl::string_view help,
                                                    Type type) {
  auto [it, inserted] = families_.try_emplace(std::string(name));
  if (inserted) {
    it->second.type = type;
    it->second.help = std::string(help);
  }
  return it->second;
}

Counter* MetricsRegistry::GetCounter(absl::string_view name, absl::string_view help,
                                     const Labels& labels) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& slot = GetFamily(name, help, Type::kCounter).counters[RenderLabels(labels)];
  if (!slot) slot = std::make_unique<Counter>();
  return slot.get();
}

Gauge* MetricsRegistry::GetGauge(absl::string_view name, absl::string_view help,
                                 const Labels& labels) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& slot = GetFamily(name, help, Type::kGauge).gauges[RenderLabels(labels)];
  if (!slot) slot = std::make_unique<Gauge>();
  return slot.get();
}

Histogram* MetricsRegistry::GetHistogram(absl::string_view name, absl::string_view help,
                                         const std::vector<double>& upper_bounds,
                                         const Labels& labels) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& slot = GetFamily(name, help, Type::kHistogram).histograms[RenderLabels(labels)];
  if (!slot) slot = std::make_unique<Histogram>(upper_bounds);
  return slot.get();
}

void MetricsRegistry::AddCollector(Collector collector) {
  std::lock_guard<std::mutex> lock(mu_);
  collectors_.push_back(std::move(collector));
}

std::string MetricsRegistry::Render() const {
  std::vector<Collector> collectors;
  {
    std::lock_guard<std::mutex> lock(mu_);
    collectors = collectors_;
  }
  std::vector<Collected> collected;
  for (const Collector& collector : collectors) {
    for (Collected& family : collector()) collected.push_back(std::move(family));
  }
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  for (const auto& [name, f] : families_) {
    AppendFamilyHeader(&out, name, f.help, f.type);
    for (const auto& [labels, c] : f.counters) {
      absl::StrAppend(&out, name, labels, " ", FormatValue(c->value()), "\n");
    }
    for (const auto& [labels, g] : f.gauges) {
      absl::StrAppend(&out, name, labels, " ", FormatValue(g->value()), "\n");
    }
    for (const auto& [labels, h] : f.histograms) {
      const Histogram::Snapshot s = h->Read();
      for (size_t i = 0; i <= s.upper_bounds.size(); ++i) {
        const double le = i < s.upper_bounds.size() ? s.upper_bounds[i] : INFINITY;
        absl::StrAppend(&out, name, "_bucket", WithLabel(labels, "le", FormatValue(le)), " ",
                        s.cumulative_counts[i], "\n");
      }
      absl::StrAppend(&out, name, "_sum", labels, " ", FormatValue(s.sum), "\n");
      absl::StrAppend(&out, name, "_count", labels, " ", s.count, "\n");
    }
  }
  for (const Collected& f : collected) {
    AppendFamilyHeader(&out, f.name, f.help, f.type);
    for (const Sample& sample : f.samples) {
      absl::StrAppend(&out, f.name, RenderLabels(sample.labels), " ", FormatValue(sample.value),
                      "\n");
    }
  }
  return out;
}

MetricsRegistry::Collector ProcessMetrics(
    std::function<std::vector<std::pair<int, pid_t>>()> workers) {
  return [workers = std::move(workers)] {
    using Type = MetricsRegistry::Type;
    std::vector<MetricsRegistry::Collected> families = {
        {"process_cpu_seconds_total", "User and system CPU time spent, in seconds.",
         Type::kCounter},
        {"process_resident_memory_bytes", "Resident memory size, in bytes.", Type::kGauge},
        {"process_open_fds", "Open file descriptors.", Type::kGauge},
        {"process_start_time_seconds",
         "Start time of the process since the Unix epoch, in seconds.", Type::kGauge}};
    auto add = [&families](const Labels& labels, const ProcessStats& p) {
      const double values[] = {p.cpu_seconds, p.resident_bytes, static_cast<double>(p.open_fds),
                               p.start_time_seconds};
      for (size_t i = 0; i < families.size(); ++i)
        families[i].samples.push_back({labels, values[i]});
    };
    if (std::optional<ProcessStats> self = ReadProcessStats(getpid())) add({}, *self);
    for (const auto& [index, pid] : workers()) {
      if (std::optional<ProcessStats> worker = ReadProcessStats(pid)) {
        add({{"worker", absl::StrCat(index)}}, *worker);
      }
    }
    return families;
  };
}

void ExportBuildInfo(MetricsRegistry* registry, const std::string& backend,
                     const std::string& precision) {
  // The cpu backend computes in float32 whatever model.precision says (a cuda setting).
  registry
      ->GetGauge("rankd_build_info",
                 "1, labelled with the version and git commit rankd was built from and the "
                 "backend and precision its workers compute with.",
                 {{"version", kVersion},
                  {"commit", kCommit},
                  {"backend", backend},
                  {"precision", backend == backend::kCpuBackend ? "float32" : precision}})
      ->Set(1);
}

ServerMetrics::ServerMetrics(MetricsRegistry* r)
    : registry(r),
      request_seconds(r->GetHistogram("rankd_request_duration_seconds",
                                      "Time from a Score call's arrival to its answer.",
                                      DurationBuckets())),
      queue_seconds(r->GetHistogram("rankd_queue_duration_seconds",
                                    "Time work waited in the front end's queue for a worker.",
                                    DurationBuckets())),
      batch_wait_seconds(r->GetHistogram(
          "rankd_batch_wait_seconds",
          "Time PRIORITY_BATCH work waited in the front end's queue (for idle capacity).",
          DurationBuckets())),
      batch_deferred(r->GetCounter("rankd_batch_deferred_total",
                                   "PRIORITY_BATCH work held back while interactive load was above "
                                   "shaping.busy_threshold.")),
      interactive_load(r->GetGauge(
          "rankd_interactive_load",
          "Share of the workers busy with interactive calls (now, or over the last second, "
          "whichever is higher).")),
      compute_seconds(r->GetHistogram("rankd_compute_duration_seconds",
                                      "Time a worker spent tokenizing and scoring one call.",
                                      DurationBuckets())),
      batch_items(
          r->GetHistogram("rankd_batch_items", "Items per worker call.", PowersOfTwoBuckets(4096))),
      batch_tokens(r->GetHistogram("rankd_batch_tokens", "Item tokens per worker call.",
                                   PowersOfTwoBuckets(1 << 20))),
      worker_queue_seconds(r->GetHistogram(
          "rankd_worker_queue_duration_seconds",
          "Time a worker call waited in the worker for the engine.", DurationBuckets())),
      worker_pass_requests(r->GetHistogram(
          "rankd_worker_batch_requests",
          "Worker calls (requests or stream chunks) with items in one forward pass of a worker.",
          PowersOfTwoBuckets(256))),
      worker_pass_items(r->GetHistogram("rankd_worker_batch_items",
                                        "Items in one forward pass of a worker.",
                                        PowersOfTwoBuckets(65536))),
      items_scored(r->GetCounter("rankd_items_scored_total", "Items scored.")),
      prefix_tokens(r->GetCounter("rankd_tokens_total", "Tokens scored, by part of the sequence.",
                                  {{"part", "prefix"}})),
      item_tokens(r->GetCounter("rankd_tokens_total", "Tokens scored, by part of the sequence.",
                                {{"part", "item"}})),
      retries(r->GetCounter("rankd_worker_retries_total",
                            "Worker calls sent again to another worker after a worker failed.")),
      worker_restarts(r->GetCounter("rankd_worker_restarts_total",
                                    "Workers started again after one exited or was killed.")),
      worker_exits(r->GetCounter("rankd_worker_exits_total",
                                 "Worker processes that exited (crashed, killed, or stopped).")),
      result_cache_hits(
          r->GetCounter("rankd_result_cache_hits_total", "Items answered from the result cache.")),
      result_cache_misses(r->GetCounter("rankd_result_cache_misses_total",
                                        "Items looked up in the result cache and not found.")),
      result_cache_evictions(
          r->GetCounter("rankd_result_cache_evictions_total",
                        "Result cache entries pushed out by result_cache.capacity_mb.")),
      result_cache_bytes(r->GetGauge("rankd_result_cache_bytes",
                                     "Bytes the result cache holds (an estimate per entry).")),
      depth(r->GetGauge("rankd_depth",
                        "Items of a Score call (depth 0) the depth controller lets be scored.")),
      latency_p99(r->GetGauge("rankd_latency_p99_seconds",
                              "End-to-end p99 of Score calls that the depth controller sees.")),
      queue_depth(r->GetGauge("rankd_queue_depth", "Work waiting for a worker.")),
      answer_bytes(r->GetGauge("rankd_answer_bytes_held",
                               "Bytes reserved for the answers of calls in progress "
                               "(server.max_buffered_answer_bytes).")),
      running(r->GetGauge("rankd_calls_in_flight", "Worker calls in flight, all workers.")),
      workers_up(r->GetGauge("rankd_workers_up", "Workers that are up (answered a ping).")),
      workers_configured(r->GetGauge("rankd_workers_configured", "Workers configured.")),
      ready(r->GetGauge("rankd_ready", "1 when rankd.v1.Scorer reports SERVING, else 0.")) {}

Gauge* ServerMetrics::WorkerCallsInFlight(int worker) {
  return registry->GetGauge("rankd_worker_calls_in_flight", "Calls in flight on one worker.",
                            {{"worker", absl::StrCat(worker)}});
}

Gauge* ServerMetrics::WorkerUp(int worker) {
  return registry->GetGauge("rankd_worker_up", "1 when the worker is up (answered a ping).",
                            {{"worker", absl::StrCat(worker)}});
}

void CumulativeCounter::Update(uint64_t incarnation, int64_t total) {
  if (incarnation < incarnation_) return;
  const int64_t since = incarnation == incarnation_ ? total_ : 0;
  if (total > since) counter_->Add(static_cast<double>(total - since));
  incarnation_ = incarnation;
  total_ = total;
}

WorkerPrefixCacheMetrics::WorkerPrefixCacheMetrics(MetricsRegistry* r, int worker)
    : hits_(r->GetCounter("rankd_prefix_cache_hits_total",
                          "Prefix lookups that found the prefix's K/V in a worker's cache.",
                          {{"worker", absl::StrCat(worker)}})),
      misses_(r->GetCounter("rankd_prefix_cache_misses_total",
                            "Prefix lookups that did not (the prefix was encoded).",
                            {{"worker", absl::StrCat(worker)}})),
      evictions_(r->GetCounter("rankd_prefix_cache_evictions_total",
                               "Prefixes pushed out of a worker's cache by model.prefix_cache_mb.",
                               {{"worker", absl::StrCat(worker)}})),
      bytes_(r->GetGauge("rankd_prefix_cache_bytes",
                         "Bytes a worker's cached prefixes (and evicted ones still in use) hold.",
                         {{"worker", absl::StrCat(worker)}})),
      entries_(r->GetGauge("rankd_prefix_cache_entries", "Prefixes in a worker's cache.",
                           {{"worker", absl::StrCat(worker)}})) {}

void WorkerPrefixCacheMetrics::Update(uint64_t incarnation, const Reading& reading) {
  hits_.Update(incarnation, reading.hits);
  misses_.Update(incarnation, reading.misses);
  evictions_.Update(incarnation, reading.evictions);
  bytes_->Set(static_cast<double>(reading.bytes));
  entries_->Set(static_cast<double>(reading.entries));
}

void WorkerPrefixCacheMetrics::Down() {
  bytes_->Set(0);
  entries_->Set(0);
}

void ServerMetrics::CountRequest(int grpc_code) {
  const bool cached = grpc_code >= 0 && grpc_code < kGrpcCodes;
  Counter* counter =
      cached ? requests_by_code_[grpc_code].load(std::memory_order_acquire) : nullptr;
  if (counter == nullptr) {
    // The registry creates the series on first use only (so that /metrics lists the codes seen)
    // and returns the same one to every caller, so threads racing here store the same pointer.
    counter = registry->GetCounter(
        "rankd_requests_total", "Score and ScoreStream calls answered, by status code.",
        {{"code", GrpcCodeName(static_cast<grpc::StatusCode>(grpc_code))}});
    if (cached) requests_by_code_[grpc_code].store(counter, std::memory_order_release);
  }
  counter->Add();
}

}  // namespace rankd::server
