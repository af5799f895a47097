// Open loop (--rate R: requests start on a fixed schedule, whatever the server does: latency
// includes the queueing an overloaded server causes) or closed loop (--concurrency C: C requests
// outstanding at all times). Each request is a fresh random prefix of tq ids and ni items of ti ids
// (or one embedding vector each with --items embedding). Stops by itself after --duration.
#include "load_bench.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "flag_set.h"
#include "nlohmann/json.hpp"
#include "rankd/v1/scorer.grpc.pb.h"

namespace rankd::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct Stats {
  std::mutex mu;
  std::vector<double> latencies;       // seconds, successful calls
  std::map<std::string, int64_t> errors;  // by status code name
  int64_t items = 0;
};

std::string CodeName(grpc::StatusCode code) {
  static const char* kNames[] = {"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT",
                                 "DEADLINE_EXCEEDED", "NOT_FOUND", "ALREADY_EXISTS",
                                 "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
                                 "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL",
                                 "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"};
  const int c = static_cast<int>(code);
  return c >= 0 && c < 17 ? kNames[c] : std::to_string(c);
}

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * (v.size() - 1) + 0.5))];
}

}  // namespace

int RunLoadBench(int argc, char** argv, int first) {
  cli::FlagSet flags(
      "rankd-bench load --target HOST:PORT (--rate R | --concurrency C) --duration S --ni N\n"
      "gRPC load against a running rankd serve; latency percentiles, items/s, errors by code.");
  std::string target = "127.0.0.1:8080", items_kind = "ids", json_path, priority = "interactive";
  double rate = 0, duration = 10, deadline_ms = 5000;
  int concurrency = 0, tq = 50, ti = 150, ni = 50, vocab = 1024, hidden = 0, seed = 1;
  flags.String("target", &target, "server address");
  flags.Double("rate", &rate, "open loop: requests per second");
  flags.Int("concurrency", &concurrency, "closed loop: requests outstanding");
  flags.Double("duration", &duration, "seconds to send for");
  flags.Double("deadline-ms", &deadline_ms, "per-request deadline");
  flags.Int("tq", &tq, "prefix tokens (random ids, sent as query_ids)");
  flags.Int("ti", &ti, "tokens per item");
  flags.Int("ni", &ni, "items per request");
  flags.Int("vocab", &vocab, "ids are drawn from [4, vocab)");
  flags.String("items", &items_kind, "ids or embedding (one vector of --hidden floats per item)");
  flags.Int("hidden", &hidden, "model hidden size, for --items embedding");
  flags.String("priority", &priority, "interactive or batch");
  flags.Int("seed", &seed, "random seed");
  flags.String("json", &json_path, "also write the result as JSON to this file");
  if (auto s = flags.Parse(argc, argv, first, nullptr); !s.ok()) {
    if (absl::IsCancelled(s)) return 0;
    std::fprintf(stderr, "load: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  if ((rate > 0) == (concurrency > 0) || duration <= 0 || ni < 1 || tq < 1 || ti < 1) {
    std::fprintf(stderr, "load: give exactly one of --rate, --concurrency; positive sizes\n");
    return 2;
  }
  if (items_kind == "embedding" && hidden <= 0) {
    std::fprintf(stderr, "load: --items embedding needs --hidden\n");
    return 2;
  }

  auto channel = grpc::CreateChannel(target, grpc::InsecureChannelCredentials());
  if (!channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(10))) {
    std::fprintf(stderr, "load: cannot connect to %s\n", target.c_str());
    return 1;
  }
  auto stub = rankd::v1::Scorer::NewStub(channel);

  // A pool of prepared requests, reused round-robin (building them is not what we measure).
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> tok(4, vocab - 1);
  std::normal_distribution<float> normal(0, 1);
  std::vector<rankd::v1::ScoreRequest> pool(16);
  for (auto& req : pool) {
    req.add_query_ids(1);
    for (int i = 1; i < tq; ++i) req.add_query_ids(tok(rng));
    req.set_priority(priority == "batch" ? rankd::v1::PRIORITY_BATCH
                                         : rankd::v1::PRIORITY_INTERACTIVE);
    for (int n = 0; n < ni; ++n) {
      auto* item = req.add_items();
      if (items_kind == "embedding") {
        item->mutable_embedding()->set_rows(1);
        for (int h = 0; h < hidden; ++h) item->mutable_embedding()->add_values(normal(rng));
      } else {
        for (int t = 0; t < ti; ++t) item->mutable_token_ids()->add_ids(tok(rng));
      }
    }
  }

  Stats stats;
  std::atomic<int64_t> in_flight{0}, sent{0};
  std::mutex done_mu;
  std::condition_variable done_cv;
  const auto start = Clock::now();
  const auto stop = start + std::chrono::duration_cast<Clock::duration>(
                                std::chrono::duration<double>(duration));

  // Issues one call; `then` runs after it completes (closed loop: issues the next).
  std::function<void()> issue;
  issue = [&]() {
    struct Call {
      grpc::ClientContext ctx;
      rankd::v1::ScoreResponse resp;
      Clock::time_point t0;
    };
    auto* call = new Call();
    call->t0 = Clock::now();
    call->ctx.set_deadline(std::chrono::system_clock::now() +
                           std::chrono::microseconds(static_cast<int64_t>(deadline_ms * 1e3)));
    const auto& req = pool[sent.fetch_add(1) % pool.size()];
    in_flight++;
    stub->async()->Score(&call->ctx, &req, &call->resp, [&, call](grpc::Status status) {
      const double dt = std::chrono::duration<double>(Clock::now() - call->t0).count();
      {
        std::lock_guard<std::mutex> lock(stats.mu);
        if (status.ok()) {
          stats.latencies.push_back(dt);
          stats.items += call->resp.scores_size();
        } else {
          stats.errors[CodeName(status.error_code())]++;
        }
      }
      delete call;
      if (concurrency > 0 && Clock::now() < stop) issue();
      if (--in_flight == 0) {
        std::lock_guard<std::mutex> lock(done_mu);
        done_cv.notify_all();
      }
    });
  };

  if (concurrency > 0) {
    for (int c = 0; c < concurrency; ++c) issue();
  } else {
    const auto period = std::chrono::duration<double>(1.0 / rate);
    for (int64_t k = 0;; ++k) {
      const auto due = start + std::chrono::duration_cast<Clock::duration>(period * k);
      if (due >= stop) break;
      std::this_thread::sleep_until(due);
      issue();
    }
  }
  {
    std::unique_lock<std::mutex> lock(done_mu);
    done_cv.wait_for(lock, std::chrono::seconds(static_cast<int>(deadline_ms / 1000) + 30),
                     [&] { return in_flight.load() == 0; });
  }
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  std::lock_guard<std::mutex> lock(stats.mu);
  const int64_t ok = static_cast<int64_t>(stats.latencies.size());
  int64_t failed = 0;
  for (const auto& [code, n] : stats.errors) failed += n;
  nlohmann::json result = {
      {"target", target},
      {"mode", concurrency > 0 ? "closed" : "open"},
      {"rate", rate},
      {"concurrency", concurrency},
      {"duration_s", elapsed},
      {"tq", tq}, {"ti", items_kind == "embedding" ? 1 : ti}, {"ni", ni},
      {"requests_ok", ok},
      {"requests_failed", failed},
      {"errors", stats.errors},
      {"requests_per_s", ok / elapsed},
      {"items_per_s", stats.items / elapsed},
      {"latency_ms", {{"p50", Percentile(stats.latencies, 0.5) * 1e3},
                      {"p90", Percentile(stats.latencies, 0.9) * 1e3},
                      {"p99", Percentile(stats.latencies, 0.99) * 1e3},
                      {"max", Percentile(stats.latencies, 1.0) * 1e3}}},
  };
  std::printf("%-6s %8s %5s %8s %8s %10s %9s %9s %9s %9s\n", "mode", "rate", "conc", "ok",
              "failed", "items/s", "p50 ms", "p90 ms", "p99 ms", "max ms");
  std::printf("%-6s %8.1f %5d %8lld %8lld %10.1f %9.2f %9.2f %9.2f %9.2f\n",
              concurrency > 0 ? "closed" : "open", rate, concurrency,
              static_cast<long long>(ok), static_cast<long long>(failed), stats.items / elapsed,
              Percentile(stats.latencies, 0.5) * 1e3, Percentile(stats.latencies, 0.9) * 1e3,
              Percentile(stats.latencies, 0.99) * 1e3, Percentile(stats.latencies, 1.0) * 1e3);
  for (const auto& [code, n] : stats.errors) std::printf("  %s: %lld\n", code.c_str(), static_cast<long long>(n));
  if (!json_path.empty()) std::ofstream(json_path) << result.dump(2) << "\n";
  return failed > 0 ? 1 : 0;
}

}  // namespace rankd::bench
