// SIGTERM / SIGINT as stop requests for the long-running commands (serve, worker), SIGHUP as a
// reload request (serve). The handlers only write to a pipe each, so the signal may land on any
// thread (OpenBLAS and gRPC start their own); the command's main thread waits on the pipe.
#ifndef RANKD_MAIN_STOP_SIGNAL_H_
#define RANKD_MAIN_STOP_SIGNAL_H_

#include <chrono>

namespace rankd::cli {

// Installs the handlers (once) and ignores SIGPIPE. Child processes get default dispositions back
// at exec.
void InstallStopSignalHandlers();

// True when SIGTERM or SIGINT arrived (each signal is reported once) within `timeout`.
bool WaitForStopSignal(std::chrono::milliseconds timeout);

// Installs the SIGHUP handler (once): from then on SIGHUP no longer ends the process.
void InstallReloadSignalHandler();
// True when SIGHUP arrived (reported once) within `timeout`.
bool WaitForReloadSignal(std::chrono::milliseconds timeout);

}  // namespace rankd::cli

#endif  // RANKD_MAIN_STOP_SIGNAL_H_
