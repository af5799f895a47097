// `rankd serve` (the gRPC server) and `rankd worker` (one of its worker processes).
#ifndef RANKD_MAIN_SERVE_COMMAND_H_
#define RANKD_MAIN_SERVE_COMMAND_H_

namespace rankd::cli {

// `rankd serve` with its flags in argv[first..argc).
int RunServeCommand(int argc, char** argv, int first);

// `rankd worker` with its flags in argv[first..argc); started by `rankd serve`.
int RunWorkerCommand(int argc, char** argv, int first);

}  // namespace rankd::cli

#endif  // RANKD_MAIN_SERVE_COMMAND_H_
