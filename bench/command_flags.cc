#include "command_flags.h"

#include <cstdio>
#include <string>

#include "absl/status/status.h"

namespace rankd::bench {

std::optional<int> ParseCommandFlags(cli::FlagSet& flags, int argc, char** argv, int first,
                                     const char* command) {
  absl::Status s = flags.Parse(argc, argv, first, nullptr);
  if (s.ok()) return std::nullopt;
  if (absl::IsCancelled(s)) return 0;  // --help, already printed
  std::fprintf(stderr, "%s: %s\n", command, std::string(s.message()).c_str());
  return 2;
}

}  // namespace rankd::bench
