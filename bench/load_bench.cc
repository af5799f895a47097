// Open loop (--rate R: requests start on a fixed schedule, whatever the server does: latency
// includes the queueing an overloaded server causes) or closed loop (--concurrency C: C requests
// outstanding at all times). Each request comes from a pool of prepared random requests (random
// prefix ids and item ids, embedding vectors, or text of random words). Stops by itself after
// --warmup-s + --duration.
#include "load_bench.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <functional>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "percentile.h"
#include "rankd/cli/flag_set.h"
#include "rankd/common/grpc_status.h"
#include "rankd/common/status.h"
#include "rankd/v1/scorer.grpc.pb.h"

namespace rankd::bench {
namespace {

using Clock = std::chrono::steady_clock;

// Words for text items and queries (a fixed seed: every run sends the same texts).
constexpr const char* kWords[] = {
    "senior",  "software", "engineer",   "remote",   "python",  "kubernetes",  "terraform",
    "cuda",    "manager",  "product",    "data",     "berlin",  "paris",       "sao",
    "paulo",   "team",     "lead",       "backend",  "systems", "ranking",     "search",
    "machine", "learning", "platform",   "security", "cloud",   "startup",     "salary",
    "hybrid",  "years",    "experience", "go",       "rust",    "distributed", "payments"};

std::vector<rankd::v1::ScoreRequest> MakeRequests(const LoadOptions& o, int count) {
  std::mt19937 rng(o.seed);
  std::uniform_int_distribution<int32_t> tok(4, o.vocab - 1);
  std::normal_distribution<float> normal(0, 1);
  auto text = [&](int words) {
    std::string t;
    for (int w = 0; w < words; ++w) {
      absl::StrAppend(&t, w ? " " : "", kWords[rng() % (sizeof(kWords) / sizeof(kWords[0]))]);
    }
    return t;
  };
  std::vector<rankd::v1::ScoreRequest> pool(count);
  for (auto& req : pool) {
    if (o.items == "text") {
      req.set_query(text(o.query_words));
    } else {
      req.add_query_ids(1);
      for (int i = 1; i < o.tq; ++i) req.add_query_ids(tok(rng));
    }
    req.set_priority(o.priority == "batch" ? rankd::v1::PRIORITY_BATCH
                                           : rankd::v1::PRIORITY_INTERACTIVE);
    req.set_skip_cache(!o.cache);
    for (int n = 0; n < o.ni; ++n) {
      auto* item = req.add_items();
      if (o.items == "embedding") {
        item->mutable_embedding()->set_rows(1);
        for (int h = 0; h < o.hidden; ++h) item->mutable_embedding()->add_values(normal(rng));
      } else if (o.items == "text") {
        item->set_text(text(o.item_words));
      } else {
        for (int t = 0; t < o.ti; ++t) item->mutable_token_ids()->add_ids(tok(rng));
      }
    }
  }
  return pool;
}

}  // namespace

nlohmann::json LoadResult::ToJson(const LoadOptions& o) const {
  return {
      {"target", o.target},
      {"mode", o.concurrency > 0 ? "closed" : "open"},
      {"rate", o.rate},
      {"concurrency", o.concurrency},
      {"connections", o.connections},
      {"duration_s", elapsed_s},
      {"items", o.items},
      {"tq", o.tq},
      {"ti", o.items == "embedding" ? 1 : o.ti},
      {"ni", o.ni},
      {"requests_ok", ok},
      {"requests_failed", failed},
      {"errors", errors},
      {"requests_per_s", requests_per_s},
      {"items_per_s", items_per_s},
      {"item_tokens_per_s", item_tokens_per_s},
      {"latency_ms",
       {{"mean", mean_ms}, {"p50", p50_ms}, {"p90", p90_ms}, {"p99", p99_ms}, {"max", max_ms}}},
  };
}

// A server that listens is not yet ready to score (workers load the model first): wait until the
// health service reports rankd.v1.Scorer SERVING, so the first requests measure scoring, not
// start-up refusals.
absl::Status WaitUntilServing(const std::shared_ptr<grpc::Channel>& channel, absl::Duration limit) {
  auto health = grpc::health::v1::Health::NewStub(channel);
  const absl::Time give_up = absl::Now() + limit;
  while (true) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    grpc::health::v1::HealthCheckRequest req;
    req.set_service("rankd.v1.Scorer");
    grpc::health::v1::HealthCheckResponse resp;
    const grpc::Status st = health->Check(&ctx, req, &resp);
    if (st.ok() && resp.status() == grpc::health::v1::HealthCheckResponse::SERVING) {
      return absl::OkStatus();
    }
    if (absl::Now() > give_up) {
      return absl::UnavailableError("the server did not report rankd.v1.Scorer SERVING in time");
    }
    absl::SleepFor(absl::Milliseconds(200));
  }
}

absl::StatusOr<LoadResult> RunLoad(const LoadOptions& o) {
  if ((o.rate > 0) == (o.concurrency > 0) || o.duration <= 0 || o.warmup < 0 || o.ni < 1 ||
      o.tq < 1 || o.ti < 1 || o.connections < 1) {
    return absl::InvalidArgumentError(
        "give exactly one of --rate, --concurrency; positive sizes and duration");
  }
  if (o.items != "ids" && o.items != "embedding" && o.items != "text") {
    return absl::InvalidArgumentError("--items must be ids, embedding or text");
  }
  if (o.items == "embedding" && o.hidden <= 0) {
    return absl::InvalidArgumentError("--items embedding needs --hidden");
  }
  std::vector<std::unique_ptr<rankd::v1::Scorer::Stub>> stubs;
  for (int c = 0; c < o.connections; ++c) {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(-1);
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // a connection of its own
    auto channel = grpc::CreateCustomChannel(o.target, grpc::InsecureChannelCredentials(), args);
    if (!channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(10))) {
      return absl::UnavailableError(absl::StrCat("cannot connect to ", o.target));
    }
    if (c == 0) RANKD_RETURN_IF_ERROR(WaitUntilServing(channel, absl::Seconds(120)));
    stubs.push_back(rankd::v1::Scorer::NewStub(channel));
  }
  // A pool of prepared requests, reused round-robin (building them is not what we measure).
  const std::vector<rankd::v1::ScoreRequest> pool = MakeRequests(o, 16);

  std::mutex mu;                  // guards the tallies below
  std::vector<double> latencies;  // seconds, successful measured calls
  LoadResult result;
  int64_t items = 0, item_tokens = 0;
  std::atomic<int64_t> in_flight{0}, sent{0};
  std::condition_variable idle;
  const Clock::time_point start = Clock::now();
  auto after = [&](double s) {
    return start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
  };
  const Clock::time_point measure_from = after(o.warmup), stop = after(o.warmup + o.duration);

  // Issues one call; closed loop: its completion issues the next.
  std::function<void()> issue = [&]() {
    struct Call {
      grpc::ClientContext ctx;
      rankd::v1::ScoreResponse resp;
      Clock::time_point t0;
    };
    auto* call = new Call();
    call->t0 = Clock::now();
    call->ctx.set_deadline(std::chrono::system_clock::now() +
                           std::chrono::microseconds(static_cast<int64_t>(o.deadline_ms * 1e3)));
    const int64_t k = sent.fetch_add(1);
    const auto& req = pool[k % pool.size()];
    in_flight++;
    stubs[k % stubs.size()]->async()->Score(
        &call->ctx, &req, &call->resp, [&, call](grpc::Status status) {
          const double dt = std::chrono::duration<double>(Clock::now() - call->t0).count();
          if (call->t0 >= measure_from) {
            std::lock_guard<std::mutex> lock(mu);
            if (status.ok()) {
              latencies.push_back(dt);
              items += call->resp.usage().items_scored();
              item_tokens += call->resp.usage().item_tokens();
            } else {
              result.errors[GrpcCodeName(status.error_code())]++;
            }
          }
          delete call;
          if (o.concurrency > 0 && Clock::now() < stop) issue();
          if (--in_flight == 0) {
            std::lock_guard<std::mutex> lock(mu);
            idle.notify_all();
          }
        });
  };

  if (o.concurrency > 0) {
    for (int c = 0; c < o.concurrency; ++c) issue();
  } else {
    const auto period = std::chrono::duration<double>(1.0 / o.rate);
    for (int64_t k = 0;; ++k) {
      const auto due = start + std::chrono::duration_cast<Clock::duration>(period * k);
      if (due >= stop) break;
      std::this_thread::sleep_until(due);
      issue();
    }
  }
  std::unique_lock<std::mutex> lock(mu);
  idle.wait_for(lock, std::chrono::seconds(static_cast<int>(o.deadline_ms / 1000) + 30),
                [&] { return in_flight.load() == 0; });
  result.elapsed_s =
      std::max(o.duration, std::chrono::duration<double>(Clock::now() - measure_from).count());
  result.ok = static_cast<int64_t>(latencies.size());
  for (const auto& [code, n] : result.errors) result.failed += n;
  result.requests_per_s = static_cast<double>(result.ok) / result.elapsed_s;
  result.items_per_s = static_cast<double>(items) / result.elapsed_s;
  result.item_tokens_per_s = static_cast<double>(item_tokens) / result.elapsed_s;
  double sum = 0;
  for (double l : latencies) sum += l;
  result.mean_ms = latencies.empty() ? 0 : 1e3 * sum / static_cast<double>(latencies.size());
  result.p50_ms = Percentile(latencies, 0.5) * 1e3;
  result.p90_ms = Percentile(latencies, 0.9) * 1e3;
  result.p99_ms = Percentile(latencies, 0.99) * 1e3;
  result.max_ms = Percentile(latencies, 1.0) * 1e3;
  return result;
}

void PrintLoadHeader() {
  std::printf("%-6s %8s %5s %8s %8s %10s %9s %9s %9s %9s %9s\n", "mode", "rate", "conc", "ok",
              "failed", "items/s", "mean ms", "p50 ms", "p90 ms", "p99 ms", "max ms");
}

void PrintLoadRow(const LoadOptions& o, const LoadResult& r) {
  std::printf("%-6s %8.1f %5d %8lld %8lld %10.1f %9.2f %9.2f %9.2f %9.2f %9.2f\n",
              o.concurrency > 0 ? "closed" : "open", o.rate, o.concurrency,
              static_cast<long long>(r.ok), static_cast<long long>(r.failed), r.items_per_s,
              r.mean_ms, r.p50_ms, r.p90_ms, r.p99_ms, r.max_ms);
  for (const auto& [code, n] : r.errors) {
    std::printf("  %s: %lld\n", code.c_str(), static_cast<long long>(n));
  }
}

int RunLoadBench(int argc, char** argv, int first) {
  cli::FlagSet flags(
      "rankd-bench load --target HOST:PORT (--rate R | --concurrency C) --duration S --ni N\n"
      "                 [--items ids|embedding|text] [--warmup-s S] [--connections K]\n"
      "gRPC load against a running rankd serve: latency mean and percentiles, items/s, errors by\n"
      "code. Calls started during the first --warmup-s seconds are not measured.");
  LoadOptions o;
  std::string json_path;
  flags.String("target", &o.target, "server address");
  flags.Double("rate", &o.rate, "open loop: requests per second");
  flags.Int("concurrency", &o.concurrency, "closed loop: requests outstanding");
  flags.Double("duration", &o.duration, "measured seconds");
  flags.Double("warmup-s", &o.warmup, "seconds of load before measuring");
  flags.Double("deadline-ms", &o.deadline_ms, "per-request deadline");
  flags.Int("connections", &o.connections, "gRPC connections, calls spread round-robin");
  flags.String("items", &o.items, "ids, embedding (one vector of --hidden floats) or text");
  flags.Int("tq", &o.tq, "prefix tokens (random ids, sent as query_ids; not with --items text)");
  flags.Int("ti", &o.ti, "tokens per item (--items ids)");
  flags.Int("ni", &o.ni, "items per request");
  flags.Int("vocab", &o.vocab, "ids are drawn from [4, vocab)");
  flags.Int("hidden", &o.hidden, "model hidden size, for --items embedding");
  flags.Int("item-words", &o.item_words, "words per item (--items text)");
  flags.Int("query-words", &o.query_words, "words per query (--items text)");
  flags.String("priority", &o.priority, "interactive or batch");
  flags.Int("seed", &o.seed, "random seed");
  flags.Bool("cache", &o.cache,
             "let the server's result cache answer items it has seen (default: skip_cache on "
             "every request, so that every item is scored)");
  flags.String("json", &json_path, "also write the result as JSON to this file");
  if (std::optional<int> exit_code = ParseCommandFlags(flags, argc, argv, first, "load")) {
    return *exit_code;
  }
  absl::StatusOr<LoadResult> r = RunLoad(o);
  if (!r.ok()) {
    std::fprintf(stderr, "load: %s\n", std::string(r.status().message()).c_str());
    return absl::IsInvalidArgument(r.status()) ? 2 : 1;
  }
  PrintLoadHeader();
  PrintLoadRow(o, *r);
  if (!json_path.empty()) std::ofstream(json_path) << r->ToJson(o).dump(2) << "\n";
  return r->failed > 0 ? 1 : 0;
}

}  // namespace rankd::bench
