// Fuzz target: a HF config.json's text, parsed as `rankd serve` and `rankd score` read it before
// anything else. An error or a config; never a crash.
#include <cstddef>
#include <cstdint>

#include "rankd/model/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  (void)rankd::model::ModelConfig::FromJson(text, "config.json");
  return 0;
}
