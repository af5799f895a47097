#include "engine_bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <optional>
#include <random>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "percentile.h"
#include "rankd/backend/registry.h"
#include "rankd/cli/flag_set.h"
#include "rankd/common/logging.h"
#include "rankd/common/status.h"
#include "rankd/engine/engine.h"

namespace rankd::bench {

double ItemFlops(const model::ModelConfig& c, int tq, int ti) {
  const double H = c.hidden_size, Q = c.q_width(), KV = c.kv_width(), I = c.intermediate_size;
  const double linear_per_token = 2.0 * c.num_layers * (H * (Q + 2 * KV) + Q * H + 3 * H * I);
  double attended = 0;  // sum over item tokens of the positions each attends to
  for (int t = 0; t < ti; ++t) attended += tq + t + 1;
  const double attention = 4.0 * c.num_layers * Q * attended;
  return linear_per_token * ti + attention;
}

namespace {

using Clock = std::chrono::steady_clock;

int ItemTokens(const EngineBenchOptions& o) { return o.items == "embedding" ? 1 : o.ti; }

}  // namespace

nlohmann::json EngineBenchResult::ToJson(const EngineBenchOptions& o) const {
  return {
      {"model", o.model_dir},
      {"backend", o.backend},
      {"strategy", o.strategy},
      {"precision", o.precision},
      {"graphs", o.graphs},
      {"items", o.items},
      {"tq", o.tq},
      {"ti", ItemTokens(o)},
      {"ni", o.ni},
      {"concurrency", o.concurrency},
      {"iters", o.iters},
      {"items_per_s", items_per_s},
      {"tokens_per_s", tokens_per_s},
      {"model_tflops", model_tflops},
      {"peak_fraction", peak_fraction},
      {"latency_ms", {{"p50", p50_ms}, {"p90", p90_ms}, {"p99", p99_ms}}},
  };
}

void AddEngineBenchFlags(cli::FlagSet& flags, EngineBenchOptions* o) {
  flags.String("model", &o->model_dir, "model directory");
  flags.String("log-level", &o->log_level,
               "log level on stderr: trace, debug, info (the backend's load line and GEMM "
               "choices), warn, error, off");
  flags.String("backend", &o->backend, "cpu or cuda");
  flags.String("strategy", &o->strategy, "ibpc or multi-item");
  flags.String("precision", &o->precision, "cuda linear layers: bf16 or fp8");
  flags.Bool("graphs", &o->graphs, "CUDA graphs on/off");
  flags.String("head", &o->head_spec, "score head (default by architecture)");
  flags.String("items", &o->items, "ids, or embedding (each item one hidden-size vector)");
  flags.Int("tq", &o->tq, "prefix tokens, BOS included");
  flags.Int("ti", &o->ti, "tokens per item");
  flags.Int("iters", &o->iters, "timed steps (per point in a sweep)");
  flags.Int("warmup", &o->warmup, "untimed steps first (per point in a sweep)");
  flags.Int("threads", &o->threads, "CPU backend threads (0: all)");
  flags.Int("device", &o->device, "CUDA device");
  flags.Int("seed", &o->seed, "random seed");
  flags.Int("max-batch-tokens", &o->max_batch_tokens, "item tokens per forward pass");
  flags.Double("peak-tflops", &o->peak_tflops, "bf16 peak of the device, for the fraction");
}

backend::BackendOptions BenchBackendOptions(const EngineBenchOptions& o) {
  backend::BackendOptions bo;
  bo.kind = o.backend;
  bo.threads = o.threads;
  bo.device = o.device;
  bo.strategy = o.strategy;
  bo.cuda_graphs = o.graphs;
  bo.precision = o.precision;
  bo.max_batch_tokens = o.max_batch_tokens;
  return bo;
}

absl::StatusOr<std::unique_ptr<backend::Backend>> MakeBenchBackend(const EngineBenchOptions& o) {
  RANKD_ASSIGN_OR_RETURN(model::ModelConfig config, model::ModelConfig::FromHfDir(o.model_dir));
  std::string head_spec = o.head_spec;
  if (head_spec.empty()) {
    head_spec = config.head_kind == model::HeadKind::kSequenceClassification ? "classifier:0"
                                                                             : "yes_no:4,5";
  }
  RANKD_ASSIGN_OR_RETURN(backend::HeadSpec head, engine::ParseHeadSpec(head_spec, config, nullptr));
  backend::BackendOptions bo = BenchBackendOptions(o);
  RANKD_RETURN_IF_ERROR(backend::ApplyBackendEnvironment(&bo));  // RANKD_CUDA_* switches
  return backend::CreateBackend(bo, o.model_dir, head);
}

absl::Status CheckEngineBenchOptions(const EngineBenchOptions& o) {
  // Checked here rather than in each command: RunEngine sizes its buffers from these (tq 0 writes
  // past an empty prefix) and divides by iters, and the sweep calls it with its own options.
  RANKD_RETURN_IF_ERROR(cli::CheckFlagsAtLeast({{"tq", o.tq},
                                                {"ti", o.ti},
                                                {"ni", o.ni},
                                                {"iters", o.iters},
                                                {"concurrency", o.concurrency}},
                                               1));
  RANKD_RETURN_IF_ERROR(cli::CheckFlagsAtLeast({{"warmup", o.warmup}}, 0));
  if (o.items != "ids" && o.items != "embedding") {
    return absl::InvalidArgumentError(
        absl::StrCat("--items must be ids or embedding (got '", o.items, "')"));
  }
  return absl::OkStatus();
}

absl::StatusOr<EngineBenchResult> RunEngine(backend::Backend& backend,
                                            const EngineBenchOptions& o) {
  RANKD_RETURN_IF_ERROR(CheckEngineBenchOptions(o));
  const model::ModelConfig& config = backend.config();
  const bool embedding_items = o.items == "embedding";
  const int c = o.concurrency;
  std::mt19937 rng(o.seed);
  std::uniform_int_distribution<int32_t> tok(4, config.vocab_size - 1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  // Request r of a step: prefixes[r] (tq ids, BOS first), batches[r] (ni items), scores[r].
  std::vector<std::vector<int32_t>> prefixes(c, std::vector<int32_t>(o.tq));
  std::vector<backend::ItemBatch> batches(c);
  std::vector<std::vector<float>> scores(c, std::vector<float>(o.ni));
  auto make_requests = [&] {
    std::vector<int32_t> ids(o.ti);
    std::vector<float> row(config.hidden_size);
    for (int r = 0; r < c; ++r) {
      prefixes[r][0] = config.bos_token_id.value_or(1);
      for (int i = 1; i < o.tq; ++i) prefixes[r][i] = tok(rng);
      batches[r].Clear();
      for (int n = 0; n < o.ni; ++n) {
        if (embedding_items) {
          for (float& v : row) v = normal(rng);
          batches[r].AddEmbeddings(row, config.hidden_size);
        } else {
          for (int32_t& id : ids) id = tok(rng);
          batches[r].AddIds(ids);
        }
      }
    }
  };
  std::vector<double> latencies;
  double total = 0;
  for (int it = 0; it < o.warmup + o.iters; ++it) {
    make_requests();  // not timed
    const Clock::time_point t0 = Clock::now();
    std::vector<std::shared_ptr<const backend::PrefixState>> states(c);
    std::vector<backend::Backend::ScoreGroup> groups(c);
    for (int r = 0; r < c; ++r) {
      RANKD_ASSIGN_OR_RETURN(states[r], backend.EncodePrefix(prefixes[r]));
      groups[r] = {states[r].get(), &batches[r], absl::MakeSpan(scores[r])};
    }
    std::vector<double> done_at;  // seconds from t0, per request in order
    absl::Status s = engine::ScoreGroupsInPasses(
        backend, groups, o.max_batch_tokens, [&](const engine::PassInfo& pass) {
          const double t = std::chrono::duration<double>(Clock::now() - t0).count();
          while (done_at.size() < pass.groups_done) done_at.push_back(t);
        });
    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    if (!s.ok()) return Annotate(s, absl::StrCat("step ", it));
    for (const auto& step_scores : scores) {
      for (float v : step_scores) {
        if (!std::isfinite(v))
          return absl::InternalError(absl::StrCat("step ", it, ": non-finite score"));
      }
    }
    if (it >= o.warmup) {
      latencies.insert(latencies.end(), done_at.begin(), done_at.end());
      total += dt;
    }
  }
  EngineBenchResult r;
  r.items_per_s = static_cast<double>(o.ni) * c * o.iters / total;
  r.tokens_per_s = r.items_per_s * ItemTokens(o);
  const double flops = ItemFlops(config, o.tq, ItemTokens(o)) * r.items_per_s;
  r.model_tflops = flops / 1e12;
  r.peak_fraction = flops / (o.peak_tflops * 1e12);
  r.p50_ms = Percentile(latencies, 0.5) * 1e3;
  r.p90_ms = Percentile(latencies, 0.9) * 1e3;
  r.p99_ms = Percentile(latencies, 0.99) * 1e3;
  return r;
}

void PrintEngineHeader() {
  std::printf("%-8s %-10s %-6s %-5s %-9s %4s %4s %4s %4s %10s %12s %8s %7s %9s %9s %9s\n",
              "backend", "strategy", "graphs", "prec", "items", "tq", "ti", "ni", "conc", "items/s",
              "tokens/s", "TFLOP/s", "%peak", "p50 ms", "p90 ms", "p99 ms");
}

void PrintEngineRow(const EngineBenchOptions& o, const EngineBenchResult& r) {
  std::printf(
      "%-8s %-10s %-6s %-5s %-9s %4d %4d %4d %4d %10.1f %12.0f %8.2f %6.1f%% %9.2f %9.2f %9.2f\n",
      o.backend.c_str(), o.strategy.c_str(), o.graphs ? "on" : "off", o.precision.c_str(),
      o.items.c_str(), o.tq, ItemTokens(o), o.ni, o.concurrency, r.items_per_s, r.tokens_per_s,
      r.model_tflops, 100 * r.peak_fraction, r.p50_ms, r.p90_ms, r.p99_ms);
}

int RunEngineBench(int argc, char** argv, int first) {
  cli::FlagSet flags(
      "rankd-bench engine --model DIR [--backend cpu|cuda] [--tq 50] [--ti 150] [--ni 50]\n"
      "                   [--concurrency C] [--strategy ibpc|multi-item] [--graphs|--no-graphs]\n"
      "                   [--precision bf16|fp8] [--iters N]\n"
      "Per step, C random requests (each a fresh prefix of tq ids with BOS and ni items of ti "
      "ids)\n"
      "are scored together (their items packed into passes of --max-batch-tokens, each request\n"
      "against its own prefix). Reports items/s, tokens/s, model FLOP/s and its fraction of the\n"
      "bf16 peak, and per-request latency p50/p90/p99 (step start to the request's scores).");
  EngineBenchOptions o;
  std::string json_path;
  AddEngineBenchFlags(flags, &o);
  flags.Int("ni", &o.ni, "items per request");
  flags.Int("concurrency", &o.concurrency, "requests scored together per step");
  flags.String("json", &json_path, "also write the result as JSON to this file");
  if (std::optional<int> exit_code = ParseCommandFlags(flags, argc, argv, first, "engine")) {
    return *exit_code;
  }
  if (o.model_dir.empty()) {
    std::fprintf(stderr, "engine: need --model\n");
    return 2;
  }
  if (absl::Status s = CheckEngineBenchOptions(o); !s.ok()) {
    std::fprintf(stderr, "engine: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  if (absl::Status s = SetUpLogging(o.log_level, LogFormat::kText, "rankd-bench"); !s.ok()) {
    std::fprintf(stderr, "engine: --log-level: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  absl::StatusOr<std::unique_ptr<backend::Backend>> backend = MakeBenchBackend(o);
  if (!backend.ok()) {
    std::fprintf(stderr, "engine: %s\n", std::string(backend.status().message()).c_str());
    return absl::IsInvalidArgument(backend.status()) ? 2 : 1;
  }
  absl::StatusOr<EngineBenchResult> r = RunEngine(**backend, o);
  if (!r.ok()) {
    std::fprintf(stderr, "engine: %s\n", std::string(r.status().message()).c_str());
    return 1;
  }
  PrintEngineHeader();
  PrintEngineRow(o, *r);
  if (!json_path.empty()) std::ofstream(json_path) << r->ToJson(o).dump(2) << "\n";
  return 0;
}

}  // namespace rankd::bench
