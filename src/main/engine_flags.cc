#include "engine_flags.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace rankd::cli {

EngineFlags::EngineFlags(engine::EngineOptions o) : options(std::move(o)) {
  const engine::ModelSettings& ms = options.settings;
  head = ms.head.value_or("");
  query_template = ms.query_template.value_or("");
  item_template = ms.item_template.value_or("");
  preset = ms.preset.value_or("");
  instruction = ms.instruction.value_or("");
}

void AddModelFlags(FlagSet& flags, EngineFlags* v) {
  flags.String("model", &v->options.model_dir,
               "Hugging Face model directory (config.json, *.safetensors, tokenizer)");
  flags.String("head", &v->head,
               "score head: classifier[:INDEX], yes_no:YES,NO or logit:TOKEN (pieces or ids); "
               "default by architecture");
  flags.String("query-template", &v->query_template, "query template with {query}");
  flags.String("item-template", &v->item_template, "item template with {item}");
  flags.String("preset", &v->preset,
               absl::StrCat("prompt preset: ", absl::StrJoin(engine::PresetNames(), ", "),
                            " (explicit --query-template/--item-template/--head override it)"));
  flags.String("instruction", &v->instruction,
               absl::StrCat("the preset's task instruction (qwen3-reranker default: \"",
                            engine::kQwen3RerankerInstruction, "\")"));
}

void AddEngineFlags(FlagSet& flags, EngineFlags* v) {
  engine::EngineOptions& o = v->options;
  AddModelFlags(flags, v);
  flags.String("backend", &o.backend.kind, "compute backend: cpu or cuda");
  flags.Int("threads", &o.backend.threads, "CPU backend threads (0: all cores)");
  flags.Int("tokenizer-threads", &o.tokenizer_threads, "threads that tokenize items in parallel");
  flags.Int("max-batch-tokens", &o.backend.max_batch_tokens,
            "item tokens per forward pass, at most");
  flags.String("strategy", &o.backend.strategy,
               "cuda: ibpc (prefix once, then items) or multi-item");
  flags.Bool("graphs", &o.backend.cuda_graphs,
             "cuda: use CUDA graphs (--no-graphs turns them off)");
  flags.Int("device", &o.backend.device, "cuda: device index");
  flags.String("precision", &o.backend.precision,
               "cuda linear layers: bf16, or fp8 (e4m3 weights quantised at load, sm_89+)");
}

engine::EngineOptions ToEngineOptions(const EngineFlags& v, const FlagSet& flags) {
  engine::EngineOptions o = v.options;
  auto apply = [&](const char* flag, const std::string& value,
                   std::optional<std::string>* setting) {
    if (!flags.WasSet(flag)) return;
    if (value.empty()) {
      setting->reset();
    } else {
      *setting = value;
    }
  };
  apply("head", v.head, &o.settings.head);
  apply("query-template", v.query_template, &o.settings.query_template);
  apply("item-template", v.item_template, &o.settings.item_template);
  apply("preset", v.preset, &o.settings.preset);
  apply("instruction", v.instruction, &o.settings.instruction);
  return o;
}

}  // namespace rankd::cli
