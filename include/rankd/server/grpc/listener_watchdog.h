// ListenerWatchdog: whether rankd's own gRPC port still accepts connections.
//
// gRPC 1.51 stops accepting for good after one accept4() fails with anything but EAGAIN or
// ECONNABORTED (EMFILE, out of file descriptors, above all: it logs "Failed accept4: Too many open
// files" once and never re-arms its listener; later gRPC releases retry), while the process, its
// health service and its HTTP probes carry on, so an orchestrator would keep sending to a dead
// port. The watchdog connects to the port afresh every interval and looks for the accepted end of
// its connection among this process's descriptors (gRPC runs in this process): a listener that
// no longer accepts leaves the connection in the kernel's backlog (or, the backlog full, the
// connect unanswered). Nothing is sent, so neither a plaintext nor a TLS port logs a failed
// handshake for a probe. After `failures` probes in a row fail, failure() says why from then on,
// and probing stops.
//
// Threads: probes on its own; failure() may be called from any thread.
#ifndef RANKD_SERVER_LISTENER_WATCHDOG_H_
#define RANKD_SERVER_LISTENER_WATCHDOG_H_

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace rankd::server {

// The address to probe for a server listening on `listen` (server.listen) at `port` (the bound
// port: `listen` may say 0): a wildcard host is probed on loopback ("0.0.0.0:0" -> "127.0.0.1:P",
// "[::]:0" -> "[::1]:P"); unix: addresses are probed as they are.
std::string ProbeAddress(absl::string_view listen, int port);

// One probe: OK when the listener at `address` (ProbeAddress's form), which must be this
// process's, accepted a fresh connection within `timeout`; else why not.
absl::Status ProbeListener(const std::string& address, std::chrono::milliseconds timeout);

class ListenerWatchdog {
 public:
  struct Options {
    std::chrono::milliseconds interval{1000};  // between probes
    // One probe's wait. Generous: a live listener accepts in microseconds, on a loaded 2-core
    // machine under a sanitizer in milliseconds; only a dead one takes it all.
    std::chrono::milliseconds timeout{3000};
    int failures = 3;  // in a row
  };
  // Starts probing `address` (ProbeAddress's form).
  ListenerWatchdog(std::string address, Options options);
  ~ListenerWatchdog();  // Stop()

  // Ends the probing (failure() keeps its answer). Idempotent.
  void Stop();

  // OK while the listener is taken to accept; UNAVAILABLE saying why once it is found dead.
  absl::Status failure() const;

 private:
  void Loop();

  const std::string address_;
  const Options options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;     // guarded by mu_
  absl::Status failure_;  // guarded by mu_
  std::thread thread_;
};

}  // namespace rankd::server

#endif  // RANKD_SERVER_LISTENER_WATCHDOG_H_
