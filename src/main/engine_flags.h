// Flags shared by the commands that load a model (score, serve, bench).
#ifndef RANKD_MAIN_ENGINE_FLAGS_H_
#define RANKD_MAIN_ENGINE_FLAGS_H_

#include <string>

#include "absl/status/statusor.h"
#include "rankd/cli/flag_set.h"
#include "rankd/engine/engine.h"

namespace rankd::cli {

struct EngineFlags {
  std::string model;
  std::string backend = "cpu";
  int threads = 0;
  int tokenizer_threads = 4;
  int max_batch_tokens = 8192;
  std::string head;
  std::string query_template;
  std::string item_template;
  std::string preset;
  std::string instruction;
  std::string strategy = "ibpc";
  bool graphs = true;
  int device = 0;
};

void AddEngineFlags(FlagSet& flags, EngineFlags* values);

// Flags left at their defaults do not override rankd.yaml beside the weights.
absl::StatusOr<engine::EngineOptions> ToEngineOptions(const EngineFlags& values,
                                                      const FlagSet& flags);

}  // namespace rankd::cli

#endif  // RANKD_MAIN_ENGINE_FLAGS_H_
