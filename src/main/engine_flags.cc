#include "engine_flags.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace rankd::cli {

void AddEngineFlags(FlagSet& flags, EngineFlags* v) {
  flags.String("model", &v->model, "Hugging Face model directory (config.json, *.safetensors, tokenizer)");
  flags.String("backend", &v->backend, "compute backend: cpu or cuda");
  flags.Int("threads", &v->threads, "CPU backend threads (0: all cores)");
  flags.Int("tokenizer-threads", &v->tokenizer_threads, "threads that tokenize items in parallel");
  flags.Int("max-batch-tokens", &v->max_batch_tokens, "item tokens per forward pass, at most");
  flags.String("head", &v->head,
               "score head: classifier[:INDEX] or yes_no:YES,NO (pieces or ids); default by "
               "architecture");
  flags.String("query-template", &v->query_template, "query template with {query}");
  flags.String("item-template", &v->item_template, "item template with {item}");
  flags.String("preset", &v->preset,
               absl::StrCat("prompt preset: ", absl::StrJoin(engine::PresetNames(), ", "),
                            " (explicit --query-template/--item-template/--head override it)"));
  flags.String("instruction", &v->instruction,
               absl::StrCat("the preset's task instruction (qwen3-reranker default: \"",
                            engine::kQwen3RerankerInstruction, "\")"));
  flags.String("strategy", &v->strategy, "cuda: ibpc (prefix once, then items) or multi-item");
  flags.Bool("graphs", &v->graphs, "cuda: use CUDA graphs (--no-graphs turns them off)");
  flags.Int("device", &v->device, "cuda: device index");
}

absl::StatusOr<engine::EngineOptions> ToEngineOptions(const EngineFlags& v, const FlagSet& flags) {
  if (v.model.empty()) return absl::InvalidArgumentError("--model is required");
  if (v.max_batch_tokens <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max-batch-tokens must be positive (got ", v.max_batch_tokens, ")"));
  }
  engine::EngineOptions o;
  o.model_dir = v.model;
  o.backend.kind = v.backend;
  o.backend.threads = v.threads;
  o.backend.device = v.device;
  o.backend.strategy = v.strategy;
  o.backend.cuda_graphs = v.graphs;
  o.backend.max_batch_tokens = v.max_batch_tokens;
  o.tokenizer_threads = v.tokenizer_threads;
  o.max_batch_tokens = v.max_batch_tokens;
  if (flags.WasSet("head")) o.settings.head = v.head;
  if (flags.WasSet("query-template")) o.settings.query_template = v.query_template;
  if (flags.WasSet("item-template")) o.settings.item_template = v.item_template;
  if (flags.WasSet("preset")) o.settings.preset = v.preset;
  if (flags.WasSet("instruction")) o.settings.instruction = v.instruction;
  return o;
}

}  // namespace rankd::cli
