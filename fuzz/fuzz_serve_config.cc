// Fuzz target: a `rankd serve` YAML config. Parsing and the range checks give an error or a
// config; a config that parses is written back (ServeConfigToYaml, how the workers get it) and
// must parse back to the same config.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "rankd/server/config/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<rankd::server::ServeConfig> config =
      rankd::server::ParseServeConfig(text, "/fuzz", "fuzz.yaml");
  if (!config.ok()) return 0;
  if (!rankd::server::FinalizeServeConfig(&*config).ok()) return 0;
  absl::StatusOr<rankd::server::ServeConfig> back =
      rankd::server::ParseServeConfig(rankd::server::ServeConfigToYaml(*config), "/", "back.yaml");
  if (!back.ok() || !(*back == *config)) std::abort();  // the workers would see another config
  return 0;
}
