#include "engine_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>

#include "absl/strings/str_format.h"
#include "flag_set.h"
#include "nlohmann/json.hpp"
#include "rankd/common/logging.h"
#include "rankd/engine/backend.h"
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

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(q * (v.size() - 1) + 0.5));
  return v[i];
}

}  // namespace

int RunEngineBench(int argc, char** argv, int first) {
  cli::FlagSet flags(
      "rankd-bench engine --model DIR [--backend cpu|cuda] [--tq 50] [--ti 150] [--ni 50]\n"
      "                   [--strategy ibpc|multi-item] [--graphs|--no-graphs] [--iters N]\n"
      "Scores random requests (a fresh prefix of tq ids with BOS, ni items of ti ids) and reports\n"
      "items/s, tokens/s, model FLOP/s and its fraction of the bf16 peak, latency p50/p90/p99.");
  std::string model_dir, backend = "cpu", strategy = "ibpc", json_path, head_spec, items_kind = "ids";
  int tq = 50, ti = 150, ni = 50, iters = 20, warmup = 3, threads = 0, device = 0, seed = 1;
  int max_batch_tokens = 65536;
  double peak_tflops = 790;
  bool graphs = true;
  flags.String("model", &model_dir, "model directory");
  flags.String("backend", &backend, "cpu or cuda");
  flags.String("strategy", &strategy, "ibpc or multi-item");
  flags.Bool("graphs", &graphs, "CUDA graphs on/off");
  flags.String("head", &head_spec, "score head (default by architecture)");
  flags.String("items", &items_kind, "ids, or embedding (each item one hidden-size vector)");
  flags.Int("tq", &tq, "prefix tokens, BOS included");
  flags.Int("ti", &ti, "tokens per item");
  flags.Int("ni", &ni, "items per request");
  flags.Int("iters", &iters, "timed requests");
  flags.Int("warmup", &warmup, "untimed requests first");
  flags.Int("threads", &threads, "CPU backend threads (0: all)");
  flags.Int("device", &device, "CUDA device");
  flags.Int("seed", &seed, "random seed");
  flags.Int("max-batch-tokens", &max_batch_tokens, "item tokens per backend call");
  flags.Double("peak-tflops", &peak_tflops, "bf16 peak of the device, for the fraction");
  flags.String("json", &json_path, "also write the result as JSON to this file");
  if (auto s = flags.Parse(argc, argv, first, nullptr); !s.ok()) {
    if (absl::IsCancelled(s)) return 0;
    std::fprintf(stderr, "engine: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  if (model_dir.empty() || tq < 1 || ti < 1 || ni < 1 || iters < 1) {
    std::fprintf(stderr, "engine: need --model and positive --tq --ti --ni --iters\n");
    return 2;
  }
  (void)SetUpLogging("warn", LogFormat::kText, "rankd-bench");
  auto config = model::ModelConfig::FromHfDir(model_dir);
  if (!config.ok()) {
    std::fprintf(stderr, "engine: %s\n", std::string(config.status().message()).c_str());
    return 1;
  }
  if (head_spec.empty()) {
    head_spec = config->head_kind == model::HeadKind::kSequenceClassification ? "classifier:0"
                                                                               : "yes_no:4,5";
  }
  auto head = engine::ParseHeadSpec(head_spec, *config, nullptr);
  if (!head.ok()) {
    std::fprintf(stderr, "engine: %s\n", std::string(head.status().message()).c_str());
    return 2;
  }
  engine::BackendOptions bo;
  bo.kind = backend;
  bo.threads = threads;
  bo.device = device;
  bo.strategy = strategy;
  bo.cuda_graphs = graphs;
  bo.max_batch_tokens = max_batch_tokens;
  auto be = engine::CreateBackend(bo, model_dir, *head);
  if (!be.ok()) {
    std::fprintf(stderr, "engine: %s\n", std::string(be.status().message()).c_str());
    return 1;
  }
  const bool embedding_items = items_kind == "embedding";
  const int item_tokens = embedding_items ? 1 : ti;
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> tok(4, config->vocab_size - 1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto make_request = [&](std::vector<int32_t>* prefix, engine::ItemBatch* batch) {
    prefix->assign(tq, 0);
    (*prefix)[0] = config->bos_token_id.value_or(1);
    for (int i = 1; i < tq; ++i) (*prefix)[i] = tok(rng);
    batch->Clear();
    std::vector<int32_t> ids(ti);
    std::vector<float> row(config->hidden_size);
    for (int n = 0; n < ni; ++n) {
      if (embedding_items) {
        for (float& v : row) v = normal(rng);
        batch->AddEmbeddings(row, config->hidden_size);
      } else {
        for (int32_t& id : ids) id = tok(rng);
        batch->AddIds(ids);
      }
    }
  };
  std::vector<float> scores(ni);
  std::vector<double> latencies;
  std::vector<int32_t> prefix;
  engine::ItemBatch batch;
  double total = 0;
  for (int it = 0; it < warmup + iters; ++it) {
    make_request(&prefix, &batch);  // not timed
    const auto t0 = std::chrono::steady_clock::now();
    auto p = (*be)->EncodePrefix(prefix);
    absl::Status s = p.ok() ? (*be)->ScoreItems(**p, batch, absl::MakeSpan(scores)) : p.status();
    const double dt =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!s.ok()) {
      std::fprintf(stderr, "engine: request %d: %s\n", it, std::string(s.message()).c_str());
      return 1;
    }
    for (float v : scores) {
      if (!std::isfinite(v)) {
        std::fprintf(stderr, "engine: request %d: non-finite score\n", it);
        return 1;
      }
    }
    if (it >= warmup) {
      latencies.push_back(dt);
      total += dt;
    }
  }
  const double items_per_s = static_cast<double>(ni) * iters / total;
  const double tokens_per_s = items_per_s * item_tokens;
  const double flops = ItemFlops(*config, tq, item_tokens) * items_per_s;
  const double peak_fraction = flops / (peak_tflops * 1e12);
  nlohmann::json result = {
      {"model", model_dir},      {"backend", backend},
      {"strategy", strategy},    {"graphs", graphs},
      {"items", items_kind},     {"tq", tq},
      {"ti", item_tokens},       {"ni", ni},
      {"iters", iters},          {"items_per_s", items_per_s},
      {"tokens_per_s", tokens_per_s}, {"model_tflops", flops / 1e12},
      {"peak_fraction", peak_fraction},
      {"latency_ms", {{"p50", Percentile(latencies, 0.5) * 1e3},
                      {"p90", Percentile(latencies, 0.9) * 1e3},
                      {"p99", Percentile(latencies, 0.99) * 1e3}}},
  };
  std::printf("%-8s %-10s %-6s %-9s %4s %4s %4s %10s %12s %8s %7s %9s %9s %9s\n", "backend",
              "strategy", "graphs", "items", "tq", "ti", "ni", "items/s", "tokens/s", "TFLOP/s",
              "%peak", "p50 ms", "p90 ms", "p99 ms");
  std::printf("%-8s %-10s %-6s %-9s %4d %4d %4d %10.1f %12.0f %8.2f %6.1f%% %9.2f %9.2f %9.2f\n",
              backend.c_str(), strategy.c_str(), graphs ? "on" : "off", items_kind.c_str(), tq,
              item_tokens, ni, items_per_s, tokens_per_s, flops / 1e12, 100 * peak_fraction,
              Percentile(latencies, 0.5) * 1e3, Percentile(latencies, 0.9) * 1e3,
              Percentile(latencies, 0.99) * 1e3);
  if (!json_path.empty()) std::ofstream(json_path) << result.dump(2) << "\n";
  return 0;
}

}  // namespace rankd::bench
