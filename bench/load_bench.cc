// Open loop (--rate R: requests start on a fixed schedule, whatever the server does: latency
// includes the queueing an overloaded server causes) or closed loop (--concurrency C: C requests
// outstanding at all times), either changing in steps with --schedule. Requests follow a seeded
// trace (load_trace.h: a pool of random queries, a chosen fraction of repeated (query, item)
// pairs) of random prefix ids and item ids, embedding vectors, or text of random words. Stops by
// itself after --warmup-s + --duration.
#include "load_bench.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <functional>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include "absl/base/casts.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "affinity.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "load_trace.h"
#include "percentile.h"
#include "rankd/cli/flag_set.h"
#include "rankd/common/grpc_status.h"
#include "rankd/common/status.h"
#include "rankd/v1/scorer.grpc.pb.h"

namespace rankd::bench {
namespace {

using Clock = std::chrono::steady_clock;

// Words for text items and queries.
constexpr const char* kWords[] = {
    "senior",  "software", "engineer",   "remote",   "python",  "kubernetes",  "terraform",
    "cuda",    "manager",  "product",    "data",     "berlin",  "paris",       "sao",
    "paulo",   "team",     "lead",       "backend",  "systems", "ranking",     "search",
    "machine", "learning", "platform",   "security", "cloud",   "startup",     "salary",
    "hybrid",  "years",    "experience", "go",       "rust",    "distributed", "payments"};
constexpr int kWordCount = sizeof(kWords) / sizeof(kWords[0]);
constexpr int kFirstId = 4;     // random ids are drawn from [kFirstId, vocab)
constexpr int kBaseItems = 64;  // random items that the trace's items are made from
constexpr int kKeyBits = 32;    // item keys are numbered modulo 2^32
constexpr int kEmbeddingKeyValues = 3, kEmbeddingKeyBitsPerValue = 11;

// How many digits in `base` number 2^kKeyBits keys.
int KeyDigits(int base) {
  int digits = 0;
  for (double n = 1; n < std::ldexp(1.0, kKeyBits); n *= base) ++digits;
  return digits;
}

// Turns the trace's requests into ScoreRequests: a pool of --queries random queries, and items made
// from kBaseItems random ones, each numbered by its key in its first KeyDigits tokens (ids) or
// words (text), or in the low mantissa bits of its first values (embedding): distinct keys are
// distinct items, one key always the same item. Not thread-safe.
class RequestFactory {
 public:
  static absl::StatusOr<RequestFactory> Create(const LoadOptions& o) {
    if (o.items != "ids" && o.items != "embedding" && o.items != "text") {
      return absl::InvalidArgumentError("--items must be ids, embedding or text");
    }
    if (o.vocab < kFirstId + 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("--vocab must be >= ", kFirstId + 2, " (got ", o.vocab, ")"));
    }
    const int digits = KeyDigits(o.items == "text" ? kWordCount : o.vocab - kFirstId);
    if (o.items == "ids" && o.ti < digits) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--ti must be >= ", digits, " with --vocab ", o.vocab, " (got ", o.ti,
          "): an item's first ", digits, " ids number it, so that fresh items differ"));
    }
    if (o.items == "text" && (o.item_words < digits || o.query_words < 1)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--item-words must be >= ", digits, " (got ", o.item_words, "): an item's first ", digits,
          " words number it, so that fresh items differ; --query-words >= 1"));
    }
    if (o.items == "embedding" && o.hidden < kEmbeddingKeyValues) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--items embedding needs --hidden >= ", kEmbeddingKeyValues, " (got ", o.hidden, ")"));
    }
    TraceOptions t;
    t.repeat = o.repeat;
    t.queries = o.queries;
    t.items_per_request = o.ni;
    t.lag = o.repeat_lag;
    t.seed = static_cast<uint32_t>(o.seed);
    RANKD_ASSIGN_OR_RETURN(RepeatTrace trace, RepeatTrace::Create(t));
    return RequestFactory(o, std::move(trace), digits);
  }

  // The trace's next request; `repeats` gets how many of its pairs repeat earlier ones.
  rankd::v1::ScoreRequest Next(int* repeats) {
    const RepeatTrace::Request next = trace_.Next();
    *repeats = next.repeats;
    rankd::v1::ScoreRequest req = queries_[next.query];
    for (uint64_t key : next.keys) AddItem(key % (uint64_t{1} << kKeyBits), req.add_items());
    return req;
  }

 private:
  RequestFactory(const LoadOptions& o, RepeatTrace trace, int digits)
      : o_(o), trace_(std::move(trace)), digits_(digits) {
    std::mt19937 rng(o.seed);
    std::uniform_int_distribution<int32_t> tok(kFirstId, o.vocab - 1);
    std::uniform_int_distribution<int> word(0, kWordCount - 1);
    std::normal_distribution<float> normal(0, 1);
    queries_.resize(o.queries);
    for (auto& req : queries_) {
      if (o.items == "text") {
        std::string q;
        for (int w = 0; w < o.query_words; ++w)
          absl::StrAppend(&q, w ? " " : "", kWords[word(rng)]);
        req.set_query(q);
      } else {
        req.add_query_ids(1);
        for (int i = 1; i < o.tq; ++i) req.add_query_ids(tok(rng));
      }
      req.set_priority(o.priority == "batch" ? rankd::v1::PRIORITY_BATCH
                                             : rankd::v1::PRIORITY_INTERACTIVE);
      req.set_skip_cache(!o.cache);
    }
    for (int b = 0; b < kBaseItems; ++b) {
      std::vector<int32_t>& base = base_[b];
      const int n = o.items == "text" ? o.item_words : o.items == "embedding" ? o.hidden : o.ti;
      base.resize(n);
      for (int32_t& v : base) {
        v = o.items == "text"        ? word(rng)
            : o.items == "embedding" ? absl::bit_cast<int32_t>(normal(rng))
                                     : tok(rng);
      }
    }
  }

  void AddItem(uint64_t key, rankd::v1::Item* item) {
    const std::vector<int32_t>& base = base_[key % kBaseItems];
    if (o_.items == "embedding") {
      auto* e = item->mutable_embedding();
      e->set_rows(1);
      e->mutable_values()->Reserve(static_cast<int>(base.size()));
      for (size_t h = 0; h < base.size(); ++h) {
        uint32_t bits = absl::bit_cast<uint32_t>(base[h]);
        if (h < kEmbeddingKeyValues) {
          constexpr uint32_t kMask = (1u << kEmbeddingKeyBitsPerValue) - 1;
          bits = (bits & ~kMask) | ((key >> (h * kEmbeddingKeyBitsPerValue)) & kMask);
        }
        e->add_values(absl::bit_cast<float>(bits));
      }
      return;
    }
    const uint64_t radix = o_.items == "text" ? kWordCount : o_.vocab - kFirstId;
    std::vector<int32_t> content = base;  // [ti] ids or [item_words] word indices
    for (int d = 0; d < digits_; ++d, key /= radix) {
      content[d] = static_cast<int32_t>(key % radix) + (o_.items == "text" ? 0 : kFirstId);
    }
    if (o_.items == "text") {
      std::string t;
      for (size_t w = 0; w < content.size(); ++w)
        absl::StrAppend(&t, w ? " " : "", kWords[content[w]]);
      item->set_text(std::move(t));
    } else {
      item->mutable_token_ids()->mutable_ids()->Assign(content.begin(), content.end());
    }
  }

  LoadOptions o_;
  RepeatTrace trace_;
  int digits_;
  std::vector<rankd::v1::ScoreRequest> queries_;  // [queries], no items
  // [kBaseItems][ti] ids, [item_words] word indices or [hidden] float bits.
  std::array<std::vector<int32_t>, kBaseItems> base_;
};

}  // namespace

nlohmann::json LoadResult::ToJson(const LoadOptions& o) const {
  nlohmann::json error_latency_json = nlohmann::json::object();
  for (const auto& [code, l] : error_latency_ms) {
    error_latency_json[code] = {{"p50", l.p50}, {"p99", l.p99}, {"max", l.max}};
  }
  return {
      {"target", o.target},
      {"mode", o.concurrency > 0 ? "closed" : "open"},
      {"rate", o.rate},
      {"concurrency", o.concurrency},
      {"schedule", o.schedule},
      {"connections", o.connections},
      {"duration_s", elapsed_s},
      {"items", o.items},
      {"tq", o.tq},
      {"ti", o.items == "embedding" ? 1 : o.ti},
      {"ni", o.ni},
      {"cache", o.cache},
      {"affinity", o.affinity},
      {"queries", o.queries},
      {"repeat_requested", o.repeat},
      {"repeat_realized", repeat_realized},
      {"hit_rate", hit_rate},
      {"requests_ok", ok},
      {"requests_failed", failed},
      {"errors", errors},
      {"error_latency_ms", error_latency_json},
      {"items_served", items_served},
      {"items_cached", items_cached},
      {"items_scored", items_scored},
      {"requests_per_s", requests_per_s},
      {"items_per_s", items_per_s},
      {"worker_items_per_s", worker_items_per_s},
      {"item_tokens_per_s", item_tokens_per_s},
      {"mean_depth", mean_depth},
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
  const bool closed = o.concurrency > 0;
  if ((o.rate > 0) == closed || o.duration <= 0 || o.warmup < 0 || o.ni < 1 || o.tq < 1 ||
      o.ti < 1 || o.connections < 1) {
    return absl::InvalidArgumentError(
        "give exactly one of --rate, --concurrency; positive sizes and duration");
  }
  const double base = closed ? o.concurrency : o.rate;
  RANKD_RETURN_IF_ERROR(CheckOffered(base, closed, closed ? "--concurrency" : "--rate"));
  const double run_s = o.warmup + o.duration;
  RANKD_ASSIGN_OR_RETURN(const std::vector<LoadStep> steps,
                         ParseSchedule(o.schedule, closed, run_s));
  RANKD_ASSIGN_OR_RETURN(RequestFactory factory, RequestFactory::Create(o));
  std::vector<std::unique_ptr<rankd::v1::Scorer::Stub>> stubs;
  for (int c = 0; c < o.connections; ++c) {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(-1);
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // a connection of its own
    RANKD_ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel,
                           client::CreateChannel(o.target, o.security, args));
    if (!channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(10))) {
      return absl::UnavailableError(absl::StrCat("cannot connect to ", o.target));
    }
    if (c == 0) RANKD_RETURN_IF_ERROR(WaitUntilServing(channel, absl::Seconds(120)));
    stubs.push_back(rankd::v1::Scorer::NewStub(channel));
  }

  std::mutex factory_mu;          // guards `factory` (the trace is one sequence, whoever asks)
  std::mutex mu;                  // guards everything below
  std::vector<double> latencies;  // seconds, successful measured calls
  std::map<std::string, std::vector<double>> error_latencies;  // seconds, by code, measured
  LoadResult result;
  Timeline timeline;
  int64_t item_tokens = 0, depth_sum = 0, pairs = 0, repeats = 0;
  int64_t in_flight = 0;  // calls issued and not completed
  int64_t sent = 0;
  int target = closed ? o.concurrency : 0;  // closed loop: calls to keep outstanding
  std::condition_variable idle;
  const Clock::time_point start = Clock::now();
  auto after = [&](double s) {
    return start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
  };
  const Clock::time_point measure_from = after(o.warmup), stop = after(run_s);

  // Issues one call (counted in in_flight by the caller); closed loop: its completion issues as
  // many as keep `target` calls outstanding.
  std::function<void()> issue = [&]() {
    struct Call {
      grpc::ClientContext ctx;
      rankd::v1::ScoreRequest req;
      rankd::v1::ScoreResponse resp;
      Clock::time_point t0;
      int repeats = 0;
    };
    auto* call = new Call();
    int64_t k = 0;
    {
      std::lock_guard<std::mutex> lock(factory_mu);
      call->req = factory.Next(&call->repeats);
      k = sent++;
    }
    call->t0 = Clock::now();
    call->ctx.set_deadline(std::chrono::system_clock::now() +
                           std::chrono::microseconds(static_cast<int64_t>(o.deadline_ms * 1e3)));
    if (o.affinity) call->ctx.AddMetadata(client::kAffinityHeader, client::AffinityKey(call->req));
    stubs[k % stubs.size()]->async()->Score(
        &call->ctx, &call->req, &call->resp, [&, call](grpc::Status status) {
          const Clock::time_point now = Clock::now();
          CallRecord rec;
          rec.end_s = std::chrono::duration<double>(now - start).count();
          rec.latency_s = std::chrono::duration<double>(now - call->t0).count();
          rec.ok = status.ok();
          rec.depth = call->resp.depth();
          for (const rankd::v1::ItemScore& s : call->resp.scores()) {
            rec.served += s.scored();
            rec.cached += s.cached();
          }
          const bool measured = call->t0 >= measure_from;
          const int items = call->req.items_size(), repeated = call->repeats;
          const int64_t scored = call->resp.usage().items_scored();
          const int64_t tokens = call->resp.usage().item_tokens();
          delete call;  // before the count: RunLoad may return once in_flight is 0
          int launch = 0;
          {
            std::lock_guard<std::mutex> lock(mu);
            timeline.Add(rec);
            if (measured) {
              pairs += items;
              repeats += repeated;
              if (status.ok()) {
                latencies.push_back(rec.latency_s);
                result.items_served += rec.served;
                result.items_cached += rec.cached;
                result.items_scored += scored;
                item_tokens += tokens;
                depth_sum += rec.depth;
              } else {
                const std::string code = GrpcCodeName(status.error_code());
                result.errors[code]++;
                error_latencies[code].push_back(rec.latency_s);
              }
            }
            in_flight--;
            if (closed && now < stop)
              launch = static_cast<int>(std::max<int64_t>(0, target - in_flight));
            in_flight += launch;
            if (in_flight == 0) idle.notify_all();
          }
          for (int i = 0; i < launch; ++i) issue();
        });
  };
  // Closed loop: sets the calls to keep outstanding, issuing what is missing.
  auto set_target = [&](int value) {
    int launch = 0;
    {
      std::lock_guard<std::mutex> lock(mu);
      target = value;
      launch = static_cast<int>(std::max<int64_t>(0, target - in_flight));
      in_flight += launch;
    }
    for (int i = 0; i < launch; ++i) issue();
  };

  // The offered load's segments: [from, to) at one value.
  std::vector<LoadStep> segments = {{0, base}};
  for (const LoadStep& s : steps) {
    if (s.at_s == 0) {
      segments[0].value = s.value;
    } else {
      segments.push_back(s);
    }
  }
  for (size_t i = 0; i < segments.size(); ++i) {
    const double from = segments[i].at_s;
    const double to = i + 1 < segments.size() ? segments[i + 1].at_s : run_s;
    if (closed) {
      std::this_thread::sleep_until(after(from));
      set_target(static_cast<int>(segments[i].value));
      continue;
    }
    for (int64_t k = 0;; ++k) {
      const double t = from + static_cast<double>(k) / segments[i].value;
      if (t >= to) break;
      std::this_thread::sleep_until(after(t));
      {
        std::lock_guard<std::mutex> lock(mu);
        in_flight++;
      }
      issue();
    }
  }
  std::this_thread::sleep_until(stop);
  std::unique_lock<std::mutex> lock(mu);
  idle.wait_for(lock, std::chrono::seconds(static_cast<int>(o.deadline_ms / 1000) + 30),
                [&] { return in_flight == 0; });
  result.elapsed_s =
      std::max(o.duration, std::chrono::duration<double>(Clock::now() - measure_from).count());
  result.ok = static_cast<int64_t>(latencies.size());
  for (const auto& [code, n] : result.errors) result.failed += n;
  const auto per_s = [&](int64_t n) { return static_cast<double>(n) / result.elapsed_s; };
  const auto ratio = [](int64_t n, int64_t d) {
    return d > 0 ? static_cast<double>(n) / static_cast<double>(d) : 0.0;
  };
  result.requests_per_s = per_s(result.ok);
  result.items_per_s = per_s(result.items_served);
  result.worker_items_per_s = per_s(result.items_scored);
  result.item_tokens_per_s = per_s(item_tokens);
  result.hit_rate = ratio(result.items_cached, result.items_served);
  result.repeat_realized = ratio(repeats, pairs);
  result.mean_depth = ratio(depth_sum, result.ok);
  double sum = 0;
  for (double l : latencies) sum += l;
  result.mean_ms = latencies.empty() ? 0 : 1e3 * sum / static_cast<double>(latencies.size());
  result.p50_ms = Percentile(latencies, 0.5) * 1e3;
  result.p90_ms = Percentile(latencies, 0.9) * 1e3;
  result.p99_ms = Percentile(latencies, 0.99) * 1e3;
  result.max_ms = Percentile(latencies, 1.0) * 1e3;
  for (const auto& [code, l] : error_latencies) {
    result.error_latency_ms[code] = {Percentile(l, 0.5) * 1e3, Percentile(l, 0.99) * 1e3,
                                     Percentile(l, 1.0) * 1e3};
  }
  result.timeline = timeline.Rows(steps, base);
  return result;
}

void PrintLoadHeader() {
  std::printf("%-6s %8s %5s %8s %8s %10s %10s %6s %6s %6s %9s %9s %9s %9s %9s\n", "mode", "rate",
              "conc", "ok", "failed", "items/s", "worker/s", "repeat", "real.", "hit", "mean ms",
              "p50 ms", "p90 ms", "p99 ms", "max ms");
}

void PrintLoadRow(const LoadOptions& o, const LoadResult& r) {
  std::printf(
      "%-6s %8.1f %5d %8lld %8lld %10.1f %10.1f %6.3f %6.3f %6.3f %9.2f %9.2f %9.2f %9.2f %9.2f\n",
      o.concurrency > 0 ? "closed" : "open", o.rate, o.concurrency, static_cast<long long>(r.ok),
      static_cast<long long>(r.failed), r.items_per_s, r.worker_items_per_s, o.repeat,
      r.repeat_realized, r.hit_rate, r.mean_ms, r.p50_ms, r.p90_ms, r.p99_ms, r.max_ms);
  for (const auto& [code, n] : r.errors) {
    const LoadResult::LatencyMs& l = r.error_latency_ms.at(code);
    std::printf("  %s: %lld (answered in p50 %.2f ms, p99 %.2f ms, max %.2f ms)\n", code.c_str(),
                static_cast<long long>(n), l.p50, l.p99, l.max);
  }
}

void AddRequestFlags(cli::FlagSet& flags, LoadOptions* o) {
  flags.String("target", &o->target, "server address");
  client::AddChannelSecurityFlags(flags, &o->security);
  flags.Double("deadline-ms", &o->deadline_ms, "per-request deadline");
  flags.Int("connections", &o->connections, "gRPC connections, calls spread round-robin");
  flags.String("items", &o->items, "ids, embedding (one vector of --hidden floats) or text");
  flags.Int("tq", &o->tq, "prefix tokens (random ids, sent as query_ids; not with --items text)");
  flags.Int("ti", &o->ti, "tokens per item (--items ids)");
  flags.Int("ni", &o->ni, "items per request");
  flags.Int("vocab", &o->vocab, "ids are drawn from [4, vocab)");
  flags.Int("hidden", &o->hidden, "model hidden size, for --items embedding");
  flags.Int("item-words", &o->item_words, "words per item (--items text)");
  flags.Int("query-words", &o->query_words, "words per query (--items text)");
  flags.String("priority", &o->priority, "interactive or batch");
  flags.Int("seed", &o->seed, "random seed (the trace and every content)");
  flags.Bool("affinity", &o->affinity,
             "send x-rankd-affinity, the query's hash a balancer routes on (docs/deploy.md)");
}

int RunLoadBench(int argc, char** argv, int first) {
  cli::FlagSet flags(
      "rankd-bench load --target HOST:PORT (--rate R | --concurrency C) --duration S --ni N\n"
      "                 [--items ids|embedding|text] [--warmup-s S] [--connections K]\n"
      "                 [--repeat F --queries Q --cache] [--schedule T:V,...] [--timeline FILE]\n"
      "gRPC load against a running rankd serve: latency mean and percentiles, items/s served\n"
      "(items/s) and scored by the workers (worker/s), the repeat fraction asked for and "
      "realized,\n"
      "the result cache's hit rate, errors by code. Calls started during the first --warmup-s\n"
      "seconds are not measured (the timeline has them).");
  LoadOptions o;
  std::string json_path, timeline_path;
  AddRequestFlags(flags, &o);
  flags.Double("rate", &o.rate, "open loop: requests per second");
  flags.Int("concurrency", &o.concurrency, "closed loop: requests outstanding");
  flags.Double("duration", &o.duration, "measured seconds");
  flags.Double("warmup-s", &o.warmup, "seconds of load before measuring");
  flags.Double("repeat", &o.repeat,
               "fraction (0..1) of the (query, item) pairs that repeat a pair sent earlier");
  flags.Int("queries", &o.queries, "distinct queries the requests draw from");
  flags.Int("repeat-lag", &o.repeat_lag,
            "a repeat is of a pair first sent more than this many requests earlier (more than are "
            "in flight, so that the server has answered it)");
  flags.String("schedule", &o.schedule,
               "steps of the offered load, T:V,... (from T s after the start: concurrency V, or "
               "V requests/s with --rate), e.g. 0:4,40:32,100:4");
  flags.Bool("cache", &o.cache,
             "let the server's result cache answer items it has seen (default: skip_cache on "
             "every request, so that every item is scored)");
  flags.String("json", &json_path, "also write the result as JSON to this file");
  flags.String("timeline", &timeline_path,
               "write one CSV row per second of the run here (t, offered, completed, errors, "
               "items_per_s, p50_ms, p99_ms, mean_depth, hit_rate; rankd-bench plot-timeline "
               "draws it)");
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
  std::fflush(stdout);
  if (!json_path.empty()) std::ofstream(json_path) << r->ToJson(o).dump(2) << "\n";
  if (!timeline_path.empty()) std::ofstream(timeline_path) << TimelineCsv(r->timeline);
  return r->failed > 0 ? 1 : 0;
}

}  // namespace rankd::bench
