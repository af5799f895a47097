// Flags shared by the commands that load a model (score, serve, bench, tokenize).
#ifndef RANKD_MAIN_ENGINE_FLAGS_H_
#define RANKD_MAIN_ENGINE_FLAGS_H_

#include <string>

#include "absl/status/statusor.h"
#include "rankd/cli/flag_set.h"
#include "rankd/engine/engine.h"

namespace rankd::cli {

// The flags write into `options` (engine::EngineOptions, the one definition of an engine's
// options), whose values are the flags' defaults: a lone engine's for `rankd score`, the config
// file's for `rankd serve`. The optional prompt settings pass through strings first.
struct EngineFlags {
  engine::EngineOptions options;
  std::string head;
  std::string query_template;
  std::string item_template;
  std::string preset;
  std::string instruction;

  // Sets options and the strings from `o`.
  explicit EngineFlags(engine::EngineOptions o = {});
};

// --model and the prompt flags (--head, --query-template, --item-template, --preset,
// --instruction): what the model's text encoding and head need.
void AddModelFlags(FlagSet& flags, EngineFlags* values);
// AddModelFlags, then the backend's flags (--backend, --threads, --max-batch-tokens, ...).
void AddEngineFlags(FlagSet& flags, EngineFlags* values);

// values.options with the prompt flags that were given applied: a non-empty value sets the
// setting, an empty one unsets it; flags not given keep values.options' settings (so that
// rankd.yaml beside the weights still applies).
engine::EngineOptions ToEngineOptions(const EngineFlags& values, const FlagSet& flags);

}  // namespace rankd::cli

#endif  // RANKD_MAIN_ENGINE_FLAGS_H_
