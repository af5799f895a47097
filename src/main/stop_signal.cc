#include "stop_signal.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace rankd::cli {
namespace {

int g_pipe[2] = {-1, -1};         // SIGTERM, SIGINT
int g_reload_pipe[2] = {-1, -1};  // SIGHUP

void OnStopSignal(int sig) {
  const int saved = errno;
  const char byte = static_cast<char>(sig);
  (void)!write(sig == SIGHUP ? g_reload_pipe[1] : g_pipe[1], &byte, 1);
  errno = saved;
}

void Handle(int sig) {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof(sa));
  sa.sa_handler = OnStopSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(sig, &sa, nullptr);
}

bool WaitForByte(int fd, std::chrono::milliseconds timeout) {
  pollfd p{fd, POLLIN, 0};
  const int r = poll(&p, 1, static_cast<int>(timeout.count()));
  if (r <= 0) return false;
  char byte;
  return read(fd, &byte, 1) == 1;
}

}  // namespace

void InstallStopSignalHandlers() {
  if (g_pipe[0] >= 0) return;
  if (pipe2(g_pipe, O_CLOEXEC | O_NONBLOCK) != 0) return;
  Handle(SIGTERM);
  Handle(SIGINT);
  signal(SIGPIPE, SIG_IGN);
}

bool WaitForStopSignal(std::chrono::milliseconds timeout) {
  return WaitForByte(g_pipe[0], timeout);
}

void InstallReloadSignalHandler() {
  if (g_reload_pipe[0] >= 0) return;
  if (pipe2(g_reload_pipe, O_CLOEXEC | O_NONBLOCK) != 0) return;
  Handle(SIGHUP);
}

bool WaitForReloadSignal(std::chrono::milliseconds timeout) {
  return WaitForByte(g_reload_pipe[0], timeout);
}

}  // namespace rankd::cli
