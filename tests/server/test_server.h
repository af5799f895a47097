// A `rankd serve` child process for the end-to-end tests: started on free loopback ports (port 0
// and --ready-file), with its log in a file, plus the probes the tests need (health, metrics,
// worker pids).
#ifndef RANKD_TESTS_SERVER_TEST_SERVER_H_
#define RANKD_TESTS_SERVER_TEST_SERVER_H_

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "rankd/v1/scorer.grpc.pb.h"

namespace rankd::testing {

class TestServer {
 public:
  // Writes `config_yaml` (plus, unless `default_socket_dir`, workers.socket_dir in a temporary
  // directory that the destructor removes) to a file and starts bin/rankd serve --config with it;
  // waits until the server listens (it writes its ready file). Fails the test (and returns null)
  // when it does not come up within a minute.
  static std::unique_ptr<TestServer> Start(const std::string& config_yaml,
                                           bool default_socket_dir = false);
  // The same process without the wait: for the tests of servers that exit during start-up
  // (WaitExit, Log).
  static std::unique_ptr<TestServer> Launch(const std::string& config_yaml,
                                            bool default_socket_dir = false);
  // More of the child's start: flags after the others (a later flag wins), and its limit of open
  // files (RLIMIT_NOFILE, soft and hard; 0: inherited).
  struct Options {
    bool default_socket_dir = false;
    std::vector<std::string> flags = {};
    int max_open_files = 0;
  };
  static std::unique_ptr<TestServer> Start(const std::string& config_yaml, const Options& options);
  static std::unique_ptr<TestServer> Launch(const std::string& config_yaml, const Options& options);
  ~TestServer();  // SIGTERM if still running (SIGKILL after 10 s)

  pid_t pid() const { return pid_; }
  std::string target() const;  // 127.0.0.1:PORT
  int metrics_port() const { return metrics_port_; }
  int http_port() const { return http_port_; }  // the JSON API's (server.http_listen)
  std::unique_ptr<rankd::v1::Scorer::Stub> NewScorer() const;
  std::shared_ptr<grpc::Channel> channel() const { return channel_; }

  // grpc.health.v1 Check; nullopt when the call fails.
  std::optional<grpc::health::v1::HealthCheckResponse::ServingStatus> Health(
      const std::string& service) const;
  // GET /metrics; empty on failure.
  std::string Metrics() const;
  // The value of one series (e.g. `rankd_workers_up` or `rankd_requests_total{code="OK"}`), or
  // nullopt when absent.
  std::optional<double> Metric(const std::string& series) const;
  // Polls until Metric(series) == value, up to `timeout`.
  bool WaitForMetric(const std::string& series, double value,
                     std::chrono::milliseconds timeout) const;
  // Ready: rankd.v1.Scorer SERVING and all `workers` up.
  bool WaitReady(int workers, std::chrono::milliseconds timeout) const;

  // The live child processes of the server that run its binary (its workers), sorted.
  std::vector<pid_t> WorkerPids() const;
  // The pool index of the worker process `pid` (the `worker` label of the per-worker metrics),
  // read from the server's "worker N started: pid P" log line; nullopt when none names `pid`.
  std::optional<int> WorkerIndex(pid_t pid) const;

  // Sends `sig`; for SIGTERM, then waits up to `timeout` for the exit and returns the wait
  // status (nullopt if it did not exit).
  void Signal(int sig) const;
  std::optional<int> WaitExit(std::chrono::milliseconds timeout);

  std::string Log() const;  // the server's (and its workers') stderr so far

 private:
  TestServer() = default;
  std::string ReadyFile() const { return dir_ + "/ready.json"; }
  pid_t pid_ = -1;
  bool exited_ = false;
  int grpc_port_ = 0;
  int metrics_port_ = 0;
  int http_port_ = 0;
  std::string dir_;
  std::shared_ptr<grpc::Channel> channel_;
};

// Holds processes stopped (SIGSTOP) while it lives, e.g. a server's workers, so that its queue
// fills deterministically. The constructor returns once every thread of each is stopped.
class StoppedWorkers {
 public:
  explicit StoppedWorkers(std::vector<pid_t> pids);
  void Resume(pid_t p);
  ~StoppedWorkers();  // SIGCONT to all

 private:
  std::vector<pid_t> pids_;
};

// Processes whose parent is `parent`, from /proc.
std::vector<pid_t> ChildPids(pid_t parent);
bool ProcessExists(pid_t pid);

}  // namespace rankd::testing

#endif  // RANKD_TESTS_SERVER_TEST_SERVER_H_
