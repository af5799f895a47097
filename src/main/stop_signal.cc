#include "stop_signal.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace rankd::cli {
namespace {

int g_pipe[2] = {-1, -1};

void OnStopSignal(int sig) {
  const int saved = errno;
  const char byte = static_cast<char>(sig);
  (void)!write(g_pipe[1], &byte, 1);
  errno = saved;
}

}  // namespace

void InstallStopSignalHandlers() {
  if (g_pipe[0] >= 0) return;
  if (pipe2(g_pipe, O_CLOEXEC | O_NONBLOCK) != 0) return;
  struct sigaction sa;
  std::memset(&sa, 0, sizeof(sa));
  sa.sa_handler = OnStopSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

bool WaitForStopSignal(std::chrono::milliseconds timeout) {
  pollfd p{g_pipe[0], POLLIN, 0};
  const int r = poll(&p, 1, static_cast<int>(timeout.count()));
  if (r <= 0) return false;
  char byte;
  return read(g_pipe[0], &byte, 1) == 1;
}

}  // namespace rankd::cli
