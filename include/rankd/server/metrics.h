// A small Prometheus registry: counters, gauges and histograms (with labels), rendered in the text
// exposition format (version 0.0.4) for GET /metrics. Updates are lock-free for counters and
// gauges and take a short per-histogram lock; rendering takes the registry lock.
#ifndef RANKD_SERVER_METRICS_H_
#define RANKD_SERVER_METRICS_H_

#include <sys/types.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"

namespace rankd::server {

using Labels = std::vector<std::pair<std::string, std::string>>;

class Counter {
 public:
  void Add(double v = 1) { value_.fetch_add(v, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

class Gauge {
 public:
  void Set(double v) { value_.store(v, std::memory_order_relaxed); }
  void Add(double v) { value_.fetch_add(v, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);  // ascending; +Inf is implicit
  void Observe(double v);

  struct Snapshot {
    std::vector<double> upper_bounds;
    std::vector<uint64_t> cumulative_counts;  // per bound, then +Inf
    double sum = 0;
    uint64_t count = 0;
  };
  Snapshot Read() const;

 private:
  const std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::vector<uint64_t> counts_;  // per bucket (not cumulative), the last one is +Inf
  double sum_ = 0;
};

class MetricsRegistry {
 public:
  enum class Type { kCounter, kGauge, kHistogram };
  // A family whose values are read when Render runs instead of being kept here: figures that
  // something else holds (a process's CPU time and memory, in /proc). Counters and gauges.
  struct Sample {
    Labels labels;
    double value = 0;
  };
  struct Collected {
    std::string name, help;
    Type type = Type::kGauge;
    std::vector<Sample> samples;
  };
  using Collector = std::function<std::vector<Collected>()>;

  // Each returns the series of `name` with `labels`, creating it (and its family) on first use.
  // A name keeps the type and help of its first registration. Pointers stay valid for the
  // registry's lifetime.
  Counter* GetCounter(absl::string_view name, absl::string_view help, const Labels& labels = {});
  Gauge* GetGauge(absl::string_view name, absl::string_view help, const Labels& labels = {});
  Histogram* GetHistogram(absl::string_view name, absl::string_view help,
                          const std::vector<double>& upper_bounds, const Labels& labels = {});
  // Render runs `collector` every time, before it takes the registry's lock (so that a collector
  // may take locks whose holders register series here). Its families' names must differ from the
  // registry's own.
  void AddCollector(Collector collector);
  std::string Render() const;

 private:
  struct Family {
    Type type;
    std::string help;
    // Series by their rendered label set ({a="x",b="y"} or "").
    std::map<std::string, std::unique_ptr<Counter>> counters;
    std::map<std::string, std::unique_ptr<Gauge>> gauges;
    std::map<std::string, std::unique_ptr<Histogram>> histograms;
  };
  Family& GetFamily(absl::string_view name, absl::string_view help, Type type);

  mutable std::mutex mu_;
  std::map<std::string, Family> families_;
  std::vector<Collector> collectors_;
};

// Renders a label set as {a="x",b="y"} (escaped), or "" when empty.
std::string RenderLabels(const Labels& labels);

// Bucket bounds in seconds for request, queue and compute durations: 0.5 ms .. 60 s.
std::vector<double> DurationBuckets();
// Bucket bounds for counts (items or tokens per batch): 1, 2, 4, ... up to `max`.
std::vector<double> PowersOfTwoBuckets(double max);

// Feeds a Counter from a running total that its source reports now and then and that starts
// again from 0 when the source restarts (a worker process: each incarnation counts from 0). A
// reading adds what the total grew by since the previous reading of the same incarnation; the
// first reading of a newer incarnation adds its whole total; a reading of an older incarnation, or
// a total that went down, adds nothing. So the counter never decreases, and what an incarnation
// counted after its last reading is lost with it. Threads: one caller at a time.
class CumulativeCounter {
 public:
  explicit CumulativeCounter(Counter* counter) : counter_(counter) {}
  void Update(uint64_t incarnation, int64_t total);

 private:
  Counter* counter_;
  uint64_t incarnation_ = 0;  // of the last reading; 0: none yet (incarnations start at 1)
  int64_t total_ = 0;         // the last reading's total
};

// One worker's engine prefix cache as its pings report it (PrefixCache::Stats):
// rankd_prefix_cache_{hits,misses,evictions}_total{worker="i"} and
// rankd_prefix_cache_{bytes,entries}{worker="i"}. Threads: one caller at a time.
class WorkerPrefixCacheMetrics {
 public:
  struct Reading {
    int64_t hits = 0, misses = 0, evictions = 0;  // cumulative over the incarnation
    int64_t bytes = 0, entries = 0;               // now
  };
  WorkerPrefixCacheMetrics(MetricsRegistry* registry, int worker);
  void Update(uint64_t incarnation, const Reading& reading);
  // The worker exited: its cache is gone (bytes and entries 0; the counters keep their values).
  void Down();

 private:
  CumulativeCounter hits_, misses_, evictions_;
  Gauge* bytes_;
  Gauge* entries_;
};

// process_cpu_seconds_total, process_resident_memory_bytes, process_open_fds and
// process_start_time_seconds (the names of the Prometheus client libraries' process metrics) of
// this process, unlabelled, and of each worker process that runs, labelled worker="i": `workers`
// gives their (index, pid). Read from /proc on every Render; a worker that is down has no series
// until its next incarnation runs (whose CPU time counts from 0, with a new start time).
MetricsRegistry::Collector ProcessMetrics(
    std::function<std::vector<std::pair<int, pid_t>>()> workers);

// rankd_build_info{version,commit,backend,precision} 1: what this binary was built from
// (build_info.h) and what its workers compute with: `backend` (model.backend) and its precision
// (float32 on the cpu backend, else `precision`, model.precision).
void ExportBuildInfo(MetricsRegistry* registry, const std::string& backend,
                     const std::string& precision);

// The series `rankd serve` exports (names and meanings in docs/config.md, "Metrics").
struct ServerMetrics {
  explicit ServerMetrics(MetricsRegistry* registry);

  // rankd_requests_total{code="OK"|"INVALID_ARGUMENT"|...}: finished Score/ScoreStream calls.
  void CountRequest(int grpc_code);
  // rankd_worker_calls_in_flight{worker="i"} and rankd_worker_up{worker="i"}.
  Gauge* WorkerCallsInFlight(int worker);
  Gauge* WorkerUp(int worker);

  MetricsRegistry* registry;
  Histogram* request_seconds;       // arrival -> answer, successful or not
  Histogram* queue_seconds;         // admission -> sent to a worker
  Histogram* batch_wait_seconds;    // the same, of PRIORITY_BATCH work (traffic shaping)
  Counter* batch_deferred;          // batch work held back for idle capacity
  Gauge* interactive_load;          // what shaping.busy_threshold is compared with
  Histogram* compute_seconds;       // tokenize + score inside the worker
  Histogram* batch_items;           // items per worker call
  Histogram* batch_tokens;          // item tokens per worker call
  Histogram* worker_queue_seconds;  // waiting for the engine inside the worker
  Histogram* worker_pass_requests;  // worker calls with items in one forward pass of a worker
  Histogram* worker_pass_items;     // items in one forward pass of a worker
  Counter* items_scored;
  Counter* prefix_tokens;
  Counter* item_tokens;
  Counter* retries;          // worker calls re-dispatched after a worker failed
  Counter* worker_restarts;  // workers started again after one exited or was killed
  Counter* worker_exits;
  Counter* result_cache_hits;       // items answered from the result cache
  Counter* result_cache_misses;     // items looked up and not found (or expired)
  Counter* result_cache_evictions;  // entries pushed out by result_cache.capacity_mb
  Gauge* result_cache_bytes;        // what the result cache holds (ResultCache::kEntryBytes each)
  Gauge* depth;                     // the depth controller's current depth
  Gauge* latency_p99;               // the p99 (s) the depth controller sees
  Gauge* queue_depth;               // requests (stream chunks) waiting for a worker
  Gauge* answer_bytes;              // reserved for answers of calls in progress (AnswerBudget)
  Gauge* running;                   // worker calls in flight, all workers
  Gauge* workers_up;
  Gauge* workers_configured;
  Gauge* ready;  // 1 when health reports rankd.v1.Scorer SERVING

 private:
  // rankd_requests_total's series by gRPC code (0..16), each looked up in the registry (its lock,
  // its maps) once, the first time that code is counted: every finished call counts one.
  static constexpr int kGrpcCodes = 17;
  std::array<std::atomic<Counter*>, kGrpcCodes> requests_by_code_{};
};

}  // namespace rankd::server

#endif  // RANKD_SERVER_METRICS_H_
