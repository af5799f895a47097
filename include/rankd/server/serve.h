// rankd/server: the front end of `rankd serve`, by part: config.h (ServeConfig, library
// rankd_config, which the workers read too), validation.h (checks before queueing),
// scorer_service.h (the gRPC service), worker_pool.h (admission, queues, dispatch, retry),
// worker_supervisor.h (worker processes: spawn, pings, reap, restart, stop), worker_plan.h (each
// worker's GPU, CPUs, command line and environment), metrics.h, process.h.
//
// `rankd serve`: the gRPC front end (rankd.v1.Scorer, grpc.health.v1, server reflection), the
// worker pool, /metrics over HTTP, and the SIGTERM drain.
#ifndef RANKD_SERVER_SERVE_H_
#define RANKD_SERVER_SERVE_H_

#include <chrono>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "rankd/server/config/config.h"

namespace rankd::server {

struct ServeOptions {
  // When set, a JSON object {"pid", "grpc_port", "metrics_port"} is written here (atomically, by
  // rename) once the server listens: lets scripts and tests use port 0.
  std::string ready_file;
  // Waits up to `timeout` for a request to stop (SIGTERM / SIGINT in `rankd serve`); true when
  // one came. Required.
  std::function<bool(std::chrono::milliseconds timeout)> wait_for_stop;
  // Waits up to `timeout` for a request to reload (SIGHUP in `rankd serve`): the API keys are
  // read again. Optional.
  std::function<bool(std::chrono::milliseconds timeout)> wait_for_reload;
};

// Serves until `wait_for_stop` reports a stop, then drains: health reports NOT_SERVING, new calls
// get UNAVAILABLE, work in flight finishes within server.drain_timeout_s (a second stop cuts the
// wait short), the workers are stopped, the clients' connections are closed (calls still arriving
// get UNAVAILABLE, not CANCELLED). Returns an error when start-up fails.
absl::Status RunServer(const ServeConfig& config, const ServeOptions& options);

}  // namespace rankd::server

#endif  // RANKD_SERVER_SERVE_H_
