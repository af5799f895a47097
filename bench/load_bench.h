// rankd-bench load: a gRPC load generator against a running `rankd serve`.
#ifndef RANKD_BENCH_LOAD_BENCH_H_
#define RANKD_BENCH_LOAD_BENCH_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace rankd::bench {

struct LoadOptions {
  std::string target = "127.0.0.1:50051";
  double rate = 0;       // open loop: requests per second
  int concurrency = 0;   // closed loop: requests outstanding
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
  // false: every request carries skip_cache, so that every item is scored (the serving path's
  // throughput); true: the server's result cache may answer items it has seen.
  bool cache = false;
};

struct LoadResult {
  double elapsed_s = 0;  // measured window
  int64_t ok = 0, failed = 0;
  std::map<std::string, int64_t> errors;  // by status code name
  double requests_per_s = 0, items_per_s = 0, item_tokens_per_s = 0;
  double p50_ms = 0, p90_ms = 0, p99_ms = 0, max_ms = 0, mean_ms = 0;
  nlohmann::json ToJson(const LoadOptions& o) const;
};

// Sends load for warmup + duration seconds, then waits for the calls in flight. Calls that start
// in the measured window count. Errors: bad options (InvalidArgument), no connection
// (Unavailable).
absl::StatusOr<LoadResult> RunLoad(const LoadOptions& o);

void PrintLoadHeader();
void PrintLoadRow(const LoadOptions& o, const LoadResult& r);

int RunLoadBench(int argc, char** argv, int first);

}  // namespace rankd::bench

#endif  // RANKD_BENCH_LOAD_BENCH_H_
