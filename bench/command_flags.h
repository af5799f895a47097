// The flag parsing every rankd-bench command starts with, so --help and a bad flag end each one
// the same way (exit 0 and exit 2 with "<command>: <error>").
#ifndef RANKD_BENCH_COMMAND_FLAGS_H_
#define RANKD_BENCH_COMMAND_FLAGS_H_

#include <optional>

#include "rankd/cli/flag_set.h"

namespace rankd::bench {

// Parses argv[first..argc) into `flags` (no positional arguments). Returns nullopt when the
// command should go on, else the exit code to return at once: 0 after --help (FlagSet has printed
// the help), 2 after printing "<command>: <error>" to stderr.
std::optional<int> ParseCommandFlags(cli::FlagSet& flags, int argc, char** argv, int first,
                                     const char* command);

}  // namespace rankd::bench

#endif  // RANKD_BENCH_COMMAND_FLAGS_H_
