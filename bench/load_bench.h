// rankd-bench load: a gRPC load generator against a running `rankd serve`.
#ifndef RANKD_BENCH_LOAD_BENCH_H_
#define RANKD_BENCH_LOAD_BENCH_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "channel.h"
#include "load_timeline.h"
#include "nlohmann/json.hpp"
#include "rankd/cli/flag_set.h"

namespace rankd::bench {

struct LoadOptions {
  std::string target = "127.0.0.1:50051";
  client::ChannelSecurity security;  // TLS and API key (--tls-ca, --api-key, ...)
  double rate = 0;                   // open loop: requests per second
  int concurrency = 0;               // closed loop: requests outstanding
  // Steps of the offered load (ParseSchedule's syntax, seconds from the first call, warmup
  // included); --rate / --concurrency picks the loop and its value holds until the first step.
  std::string schedule;
  double duration = 10;  // seconds of measured sending
  double warmup = 0;     // seconds of sending before, not measured
  double deadline_ms = 5000;
  int connections = 1;  // gRPC channels (TCP connections), calls spread round-robin
  // Items: ids (ti random ids each, prefix of tq random ids sent as query_ids), embedding (one
  // vector of `hidden` floats each), or text (item_words words each, a query of query_words words).
  std::string items = "ids";
  int tq = 50, ti = 150, ni = 50, vocab = 1024, hidden = 0;
  int item_words = 60, query_words = 8;
  std::string priority = "interactive";
  int seed = 1;
  // The trace (load_trace.h): requests draw their query from `queries` distinct ones; `repeat` of
  // the (query, item) pairs repeat a pair first sent more than `repeat_lag` requests earlier.
  double repeat = 0;
  int queries = 16;
  int repeat_lag = 32;
  // false: every request carries skip_cache, so that every item is scored (the serving path's
  // throughput); true: the server's result cache may answer items it has seen.
  bool cache = false;
  // Every call carries x-rankd-affinity (src/client/affinity.h), the hash of its query that a
  // balancer in front of many servers routes on.
  bool affinity = false;
};

// Of the calls started in the measured window.
struct LoadResult {
  double elapsed_s = 0;  // measured window
  int64_t ok = 0, failed = 0;
  std::map<std::string, int64_t> errors;  // by status code name
  struct LatencyMs {
    double p50 = 0, p99 = 0, max = 0;
  };
  std::map<std::string, LatencyMs> error_latency_ms;  // of the failed calls, by status code name
  // Items answered (scored: true, from a worker or the result cache), those from the cache, and
  // those the workers scored (Usage.items_scored).
  int64_t items_served = 0, items_cached = 0, items_scored = 0;
  double requests_per_s = 0;
  double items_per_s = 0;         // served
  double worker_items_per_s = 0;  // scored by the workers
  double item_tokens_per_s = 0;   // scored by the workers (Usage.item_tokens)
  double hit_rate = 0;            // items_cached / items_served
  double repeat_realized = 0;     // the trace's repeated pairs / pairs sent
  double mean_depth = 0;          // ScoreResponse.depth
  double p50_ms = 0, p90_ms = 0, p99_ms = 0, max_ms = 0, mean_ms = 0;
  std::vector<TimelineRow> timeline;  // the whole run (warmup included), per second
  nlohmann::json ToJson(const LoadOptions& o) const;
};

// Sends load for warmup + duration seconds, then waits for the calls in flight. Calls that start
// in the measured window count (the timeline has them all). Errors: bad options
// (InvalidArgument, naming the flag), no connection (Unavailable).
absl::StatusOr<LoadResult> RunLoad(const LoadOptions& o);

void PrintLoadHeader();
void PrintLoadRow(const LoadOptions& o, const LoadResult& r);

// The flags of what is sent and how (--target, TLS and key, --deadline-ms, --connections, the
// request shape --items/--tq/--ti/--ni/..., --priority, --seed), shared by load and soak.
void AddRequestFlags(cli::FlagSet& flags, LoadOptions* o);

int RunLoadBench(int argc, char** argv, int first);

}  // namespace rankd::bench

#endif  // RANKD_BENCH_LOAD_BENCH_H_
