#include "tests/server/test_server.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "nlohmann/json.hpp"

extern char** environ;

namespace rankd::testing {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

std::unique_ptr<TestServer> TestServer::Launch(const std::string& config_yaml,
                                               bool default_socket_dir) {
  return Launch(config_yaml, Options{.default_socket_dir = default_socket_dir});
}

std::unique_ptr<TestServer> TestServer::Launch(const std::string& config_yaml,
                                               const Options& options) {
  const bool default_socket_dir = options.default_socket_dir;
  std::unique_ptr<TestServer> server(new TestServer());
  char dir[] = "/tmp/rankd-test-XXXXXX";
  if (mkdtemp(dir) == nullptr) {
    ADD_FAILURE() << "mkdtemp failed";
    return nullptr;
  }
  server->dir_ = dir;
  const std::string config = server->dir_ + "/config.yaml";
  const std::string ready = server->ReadyFile();
  const std::string log = server->dir_ + "/server.log";

  // The workers' sockets live in the test's directory, which the destructor removes.
  std::string yaml = config_yaml;
  if (!default_socket_dir) {
    const std::string sockets = absl::StrCat("  socket_dir: ", server->dir_, "/sockets\n");
    if (const size_t workers = yaml.find("workers:\n"); workers != std::string::npos) {
      yaml.insert(workers + 9, sockets);
    } else {
      yaml += "\nworkers:\n" + sockets;
    }
  }
  std::ofstream(config) << yaml;
  const std::string binary = std::string(RANKD_BINARY_DIR) + "/bin/rankd";
  std::vector<std::string> args = {binary,
                                   "serve",
                                   "--config=" + config,
                                   "--listen=127.0.0.1:0",
                                   "--metrics-listen=127.0.0.1:0",
                                   "--http-listen=127.0.0.1:0",
                                   "--ready-file=" + ready};
  args.insert(args.end(), options.flags.begin(), options.flags.end());
  const rlimit files{static_cast<rlim_t>(options.max_open_files),
                     static_cast<rlim_t>(options.max_open_files)};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const int log_fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  const pid_t parent = getpid();
  server->pid_ = fork();
  if (server->pid_ == 0) {
    // The server goes when the test process goes, even if it crashes.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    dup2(log_fd, STDOUT_FILENO);
    dup2(log_fd, STDERR_FILENO);
    if (options.max_open_files > 0 && setrlimit(RLIMIT_NOFILE, &files) != 0) _exit(126);
    execv(binary.c_str(), argv.data());
    _exit(127);
  }
  close(log_fd);
  if (server->pid_ < 0) {
    ADD_FAILURE() << "fork: " << strerror(errno);
    return nullptr;
  }
  return server;
}

std::unique_ptr<TestServer> TestServer::Start(const std::string& config_yaml,
                                              bool default_socket_dir) {
  return Start(config_yaml, Options{.default_socket_dir = default_socket_dir});
}

std::unique_ptr<TestServer> TestServer::Start(const std::string& config_yaml,
                                              const Options& options) {
  std::unique_ptr<TestServer> server = Launch(config_yaml, options);
  if (server == nullptr) return nullptr;
  const std::string ready = server->ReadyFile();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!std::filesystem::exists(ready)) {
    int status = 0;
    if (waitpid(server->pid_, &status, WNOHANG) == server->pid_) {
      server->exited_ = true;
      ADD_FAILURE() << "rankd serve exited during start-up:\n" << server->Log();
      return nullptr;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      ADD_FAILURE() << "rankd serve did not start listening within 60 s:\n" << server->Log();
      return nullptr;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const auto j = nlohmann::json::parse(ReadFile(ready));
  server->grpc_port_ = j.at("grpc_port").get<int>();
  server->metrics_port_ = j.at("metrics_port").get<int>();
  server->http_port_ = j.at("http_port").get<int>();
  server->channel_ = grpc::CreateChannel(server->target(), grpc::InsecureChannelCredentials());
  return server;
}

TestServer::~TestServer() {
  // Our connection first: the server's shutdown would give it a second's grace.
  channel_.reset();
  if (pid_ > 0 && !exited_) {
    // Gracefully, so that the server stops its workers and removes what it made; then for sure.
    kill(pid_, SIGTERM);
    if (!WaitExit(std::chrono::seconds(10))) {
      kill(pid_, SIGKILL);
      int status = 0;
      waitpid(pid_, &status, 0);
    }
  }
  if (!dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
}

std::string TestServer::target() const { return absl::StrCat("127.0.0.1:", grpc_port_); }

std::unique_ptr<rankd::v1::Scorer::Stub> TestServer::NewScorer() const {
  return rankd::v1::Scorer::NewStub(channel_);
}

std::optional<grpc::health::v1::HealthCheckResponse::ServingStatus> TestServer::Health(
    const std::string& service) const {
  auto stub = grpc::health::v1::Health::NewStub(channel_);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  grpc::health::v1::HealthCheckResponse response;
  if (!stub->Check(&context, request, &response).ok()) return std::nullopt;
  return response.status();
}

std::string TestServer::Metrics() const {
  httplib::Client client("127.0.0.1", metrics_port_);
  client.set_connection_timeout(5);
  client.set_read_timeout(5);
  auto res = client.Get("/metrics");
  if (!res || res->status != 200) return "";
  return res->body;
}

std::optional<double> TestServer::Metric(const std::string& series) const {
  const std::string text = Metrics();
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (line.size() > series.size() && line.substr(0, series.size()) == series &&
        line[series.size()] == ' ') {
      double v = 0;
      if (absl::SimpleAtod(line.substr(series.size() + 1), &v)) return v;
    }
  }
  return std::nullopt;
}

bool TestServer::WaitForMetric(const std::string& series, double value,
                               std::chrono::milliseconds timeout) const {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (Metric(series) == value) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

bool TestServer::WaitReady(int workers, std::chrono::milliseconds timeout) const {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (Health("rankd.v1.Scorer") == grpc::health::v1::HealthCheckResponse::SERVING &&
        Metric("rankd_workers_up") == workers) {
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

std::vector<pid_t> TestServer::WorkerPids() const {
  // The children that run the server's own binary: a sanitizer's symbolizer, started by the
  // server to symbolize a report (a suppressed one too), is its child as well.
  const auto exe = [](pid_t pid) {
    std::error_code error;
    return std::filesystem::read_symlink(absl::StrCat("/proc/", pid, "/exe"), error);
  };
  const std::filesystem::path server = exe(pid_);
  std::vector<pid_t> workers = ChildPids(pid_);
  std::erase_if(workers, [&](pid_t pid) { return exe(pid) != server; });
  return workers;
}

std::optional<int> TestServer::WorkerIndex(pid_t pid) const {
  const std::string log = Log();
  const std::string tail = absl::StrCat(" started: pid ", pid);
  std::optional<int> index;
  for (absl::string_view line : absl::StrSplit(log, '\n')) {
    const size_t at = line.find(tail);
    if (at == absl::string_view::npos) continue;
    const absl::string_view rest = line.substr(at + tail.size());
    if (!rest.empty() && rest[0] >= '0' && rest[0] <= '9') continue;  // pid 12 vs pid 123
    const size_t worker = line.rfind("worker ", at);
    int n = 0;
    if (worker != absl::string_view::npos &&
        absl::SimpleAtoi(line.substr(worker + 7, at - worker - 7), &n)) {
      index = n;  // the last start that names `pid` (a pid can be reused by a later worker)
    }
  }
  return index;
}

void TestServer::Signal(int sig) const { kill(pid_, sig); }

std::optional<int> TestServer::WaitExit(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      exited_ = true;
      return status;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return std::nullopt;
}

std::string TestServer::Log() const { return ReadFile(dir_ + "/server.log"); }

namespace {

// The state letter of /proc/PID/stat or /proc/PID/task/TID/stat ('?' when unreadable).
char StatState(const std::string& stat_path) {
  const std::string stat = ReadFile(stat_path);
  const size_t close = stat.rfind(')');
  return close != std::string::npos && stat.size() > close + 2 ? stat[close + 2] : '?';
}

// Every thread of `pid` stopped ('T'), or the process gone. SIGSTOP takes effect only when each
// thread next runs: on a starved machine a worker went on answering a call sent right after the
// kill (HttpMannersTest's held calls came back 200).
bool AllThreadsStopped(pid_t pid) {
  const std::string task = absl::StrCat("/proc/", pid, "/task");
  DIR* dir = opendir(task.c_str());
  if (dir == nullptr) return true;  // gone
  bool stopped = true;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    const char state = StatState(absl::StrCat(task, "/", e->d_name, "/stat"));
    if (state != 'T' && state != '?' && state != 'Z' && state != 'X') stopped = false;
  }
  closedir(dir);
  return stopped;
}

}  // namespace

StoppedWorkers::StoppedWorkers(std::vector<pid_t> pids) : pids_(std::move(pids)) {
  for (pid_t p : pids_) kill(p, SIGSTOP);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (pid_t p : pids_) {
    while (!AllThreadsStopped(p) && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    EXPECT_TRUE(AllThreadsStopped(p)) << "worker " << p << " did not stop within 30 s";
  }
}

void StoppedWorkers::Resume(pid_t p) { kill(p, SIGCONT); }

StoppedWorkers::~StoppedWorkers() {
  for (pid_t p : pids_) kill(p, SIGCONT);
}

std::vector<pid_t> ChildPids(pid_t parent) {
  std::vector<pid_t> children;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return children;
  while (dirent* e = readdir(proc)) {
    pid_t pid = 0;
    if (!absl::SimpleAtoi(e->d_name, &pid)) continue;
    // /proc/PID/stat: "pid (comm) state ppid ..."; comm may hold spaces and parentheses.
    const std::string stat = ReadFile(absl::StrCat("/proc/", pid, "/stat"));
    const size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::vector<std::string> fields = absl::StrSplit(stat.substr(close + 2), ' ');
    pid_t ppid = 0;
    if (fields.size() > 1 && fields[0] != "Z" && absl::SimpleAtoi(fields[1], &ppid) &&
        ppid == parent) {
      children.push_back(pid);
    }
  }
  closedir(proc);
  std::sort(children.begin(), children.end());
  return children;
}

bool ProcessExists(pid_t pid) {
  const char state = StatState(absl::StrCat("/proc/", pid, "/stat"));
  return state != '?' && state != 'Z';
}

}  // namespace rankd::testing
