// rankd: the command-line entry point. `rankd <command> [flags]`; each command has its own flags.
#include <cstdio>
#include <cstring>
#include <string>

#include "rankd/server/build_info.h"
#include "score_command.h"
#include "serve_command.h"
#include "tokenize_command.h"

namespace {

constexpr char kUsage[] =
    "rankd: scores ranking candidates with an LLM.\n"
    "\n"
    "usage: rankd <command> [flags]   (rankd <command> --help for its flags)\n"
    "\n"
    "commands:\n"
    "  score     offline batch scoring of JSON lines\n"
    "  serve     the gRPC scoring server (rankd.v1.Scorer) over a pool of worker processes\n"
    "  tokenize  the token ids of JSON-lines texts, as the model is fed them\n"
    "  worker    one worker process of serve (started by it)\n"
    "  version   print the version and the git commit it was built from\n";

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0 ||
      std::strcmp(argv[1], "help") == 0) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string command = argv[1];
  if (command == "score") return rankd::cli::RunScoreCommand(argc, argv, 2);
  if (command == "tokenize") return rankd::cli::RunTokenizeCommand(argc, argv, 2);
  if (command == "serve") return rankd::cli::RunServeCommand(argc, argv, 2);
  if (command == "worker") return rankd::cli::RunWorkerCommand(argc, argv, 2);
  if (command == "version" || command == "--version") {
    std::printf("rankd %s (commit %s)\n", rankd::server::kVersion, rankd::server::kCommit);
    return 0;
  }
  std::fprintf(stderr, "rankd: unknown command '%s'\n\n%s", command.c_str(), kUsage);
  return 2;
}
