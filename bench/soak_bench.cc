// rankd-bench soak: the phases, the /proc and /metrics sampler, the promise checks and the memory
// probe (soak_bench.h). The load of each phase is RunLoad's (load_bench.h).
//
// The promises checked, and why these bounds (RELIABILITY.md, "Overload and soak"):
// - Every call ends OK or RESOURCE_EXHAUSTED. The soak's deadline (--deadline-ms, 30 s by
//   default) is a safety net far above any admitted latency, so DEADLINE_EXCEEDED (as any other
//   code) is a broken promise: a full queue must refuse at once, not let calls time out.
// - RESOURCE_EXHAUSTED comes at once: admission is a check under the pool's lock, so its p99 is
//   one round trip plus scheduling noise (--reject-p99-ms, 50 ms).
// - Admitted calls at 2x: admission bounds the work ahead of an admitted call to the queue
//   (server.queue_size requests) plus what the workers hold; each worker takes one call at a time
//   (CPU) or max_inflight together (CUDA). So an admitted call waits for at most about
//   Q / W calls per worker (Q: the deepest queue sampled at 2x, W: workers up) besides its own,
//   while at 1x it waits for about one: K = 2 x (1 + Q / W), the 2 for noise (--max-p99-ratio
//   overrides it). A p99 beyond K x the 1x p99 means queueing the admission does not see.
// - Recovery: the measured (second) half of the recovery phase, back at 1x, refuses no larger a
//   share than the 1x phase did (plus 1 point) and its p99 is within 2x of the 1x phase's.
// - No worker restarts; fds and threads of the server and the workers grow by at most the slack
//   from the first sample (idle, before any load) to the last (idle, after --settle-s). RSS is
//   reported, not checked (allocator caches keep memory by design).
#include "soak_bench.h"

#include <dirent.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "rankd/cli/flag_set.h"
#include "rankd/common/grpc_status.h"
#include "rankd/common/status.h"
#include "rankd/v1/scorer.grpc.pb.h"

namespace rankd::bench {
namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kAllowed[] = {"RESOURCE_EXHAUSTED"};  // besides OK
constexpr double kSustainableShare = 0.9;  // of the saturated closed-loop throughput
constexpr int kMeasureConcurrencyPerWorker = 8;
constexpr double kRecoveryP99Ratio = 2, kRecoveryRejectSlack = 0.01;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Splits HOST:PORT (the port after the last colon; [v6] brackets dropped).
absl::StatusOr<std::pair<std::string, int>> HostPort(const std::string& target,
                                                     const std::string& flag) {
  const size_t colon = target.rfind(':');
  int port = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(target.substr(colon + 1), &port) ||
      port <= 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " must be HOST:PORT (got '", target, "')"));
  }
  std::string host = target.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  return std::make_pair(host, port);
}

// GET /metrics over HTTP/1.0 (the server closes after answering): the body.
absl::StatusOr<std::string> GetMetrics(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* addrs = nullptr;
  if (getaddrinfo(host.c_str(), absl::StrCat(port).c_str(), &hints, &addrs) != 0) {
    return absl::UnavailableError(absl::StrCat("cannot resolve ", host));
  }
  int fd = -1;
  for (addrinfo* a = addrs; a != nullptr && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd >= 0 && connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(addrs);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("cannot connect to ", host, ":", port));
  timeval timeout{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  const std::string request = "GET /metrics HTTP/1.0\r\n\r\n";
  std::string response;
  if (send(fd, request.data(), request.size(), MSG_NOSIGNAL) ==
      static_cast<ssize_t>(request.size())) {
    char buf[65536];
    for (ssize_t n; (n = recv(fd, buf, sizeof(buf), 0)) > 0;) response.append(buf, n);
  }
  close(fd);
  const size_t body = response.find("\r\n\r\n");
  if (response.rfind("HTTP/1.", 0) != 0 || response.find(" 200 ") > 12 ||
      body == std::string::npos) {
    return absl::UnavailableError(
        absl::StrCat("GET http://", host, ":", port, "/metrics did not answer 200"));
  }
  return response.substr(body + 4);
}

// The value of an unlabelled series in Prometheus text, or -1.
double SeriesValue(const std::string& text, absl::string_view series) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (line.size() > series.size() && absl::StartsWith(line, series) &&
        line[series.size()] == ' ') {
      double v = 0;
      if (absl::SimpleAtod(line.substr(series.size() + 1), &v)) return v;
    }
  }
  return -1;
}

// Samples the server, its workers and /metrics every period until stopped. Thread-safe.
class Sampler {
 public:
  Sampler(pid_t server, std::string metrics_host, int metrics_port, double period_s)
      : server_(server),
        host_(std::move(metrics_host)),
        port_(metrics_port),
        period_(period_s),
        start_(Clock::now()) {}

  // One sample now, in `phase`.
  SoakSample Take(const std::string& phase) {
    SoakSample s;
    s.t_s = std::chrono::duration<double>(Clock::now() - start_).count();
    s.phase = phase;
    std::vector<pid_t> pids = {server_};
    for (pid_t w : ChildProcesses(server_)) pids.push_back(w);
    for (size_t i = 0; i < pids.size(); ++i) {
      absl::StatusOr<ProcessSample> p = SampleProcess(pids[i]);
      if (!p.ok()) continue;  // a worker that just exited
      p->worker = i > 0;
      s.processes.push_back(*p);
    }
    if (absl::StatusOr<std::string> m = GetMetrics(host_, port_); m.ok()) {
      s.restarts = SeriesValue(*m, "rankd_worker_restarts_total");
      s.exits = SeriesValue(*m, "rankd_worker_exits_total");
      s.queue_depth = SeriesValue(*m, "rankd_queue_depth");
      s.workers_up = SeriesValue(*m, "rankd_workers_up");
    }
    std::lock_guard<std::mutex> lock(mu_);
    samples_.push_back(s);
    return s;
  }

  void SetPhase(const std::string& phase) {
    std::lock_guard<std::mutex> lock(mu_);
    phase_ = phase;
  }

  void Start() {
    thread_ = std::thread([this] {
      auto next = Clock::now();
      while (!stop_) {
        next += std::chrono::microseconds(static_cast<int64_t>(period_ * 1e6));
        std::this_thread::sleep_until(next);
        std::string phase;
        {
          std::lock_guard<std::mutex> lock(mu_);
          phase = phase_;
        }
        Take(phase);
      }
    });
  }

  std::vector<SoakSample> Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    std::lock_guard<std::mutex> lock(mu_);
    return samples_;
  }

 private:
  const pid_t server_;
  const std::string host_;
  const int port_;
  const double period_;
  const Clock::time_point start_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::mutex mu_;  // guards the members below
  std::string phase_ = "start";
  std::vector<SoakSample> samples_;
};

struct Totals {
  int64_t rss_kb = 0;
  int fds = 0, threads = 0, processes = 0;
};

Totals Sum(const SoakSample& s, bool workers) {
  Totals t;
  for (const ProcessSample& p : s.processes) {
    if (p.worker != workers) continue;
    t.rss_kb += p.rss_kb;
    t.fds += p.fds;
    t.threads += p.threads;
    t.processes++;
  }
  return t;
}

// The memory probe's request: `items` texts of `bytes` bytes of words each.
rankd::v1::ScoreRequest ProbeRequest(int items, int bytes, int seed) {
  static constexpr const char* kWords[] = {"engineer", "distributed", "ranking", "systems",
                                           "berlin",   "platform",    "search",  "kubernetes"};
  std::mt19937 rng(seed);
  rankd::v1::ScoreRequest req;
  req.set_query("senior engineer");
  req.set_skip_cache(true);
  req.set_truncate(rankd::v1::TRUNCATE_END);
  for (int i = 0; i < items; ++i) {
    std::string text = absl::StrCat(i);
    while (static_cast<int>(text.size()) < bytes) absl::StrAppend(&text, " ", kWords[rng() % 8]);
    text.resize(bytes);
    req.add_items()->set_text(std::move(text));
  }
  return req;
}

absl::Status RunProbe(const SoakOptions& o, pid_t server, SoakResult::Probe* probe) {
  grpc::ChannelArguments args;
  args.SetMaxSendMessageSize(-1);
  RANKD_ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel,
                         client::CreateChannel(o.load.target, o.load.security, args));
  auto stub = rankd::v1::Scorer::NewStub(channel);
  const rankd::v1::ScoreRequest req = ProbeRequest(o.probe_items, o.probe_item_bytes, o.load.seed);
  probe->text_bytes = static_cast<int64_t>(o.probe_items) * o.probe_item_bytes;
  probe->workers = ChildProcesses(server);
  auto rss = [&](std::vector<int64_t>* out) {
    for (pid_t w : probe->workers) {
      absl::StatusOr<ProcessSample> s = SampleProcess(w);
      out->push_back(s.ok() ? s->rss_kb : -1);
    }
  };
  rss(&probe->rss_before_kb);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
  rankd::v1::ScoreResponse resp;
  const grpc::Status st = stub->Score(&ctx, req, &resp);
  rss(&probe->rss_after_kb);
  std::this_thread::sleep_for(std::chrono::duration<double>(o.settle_s));
  rss(&probe->rss_settled_kb);
  probe->ok = st.ok();
  probe->status =
      st.ok() ? "OK" : absl::StrCat(GrpcCodeName(st.error_code()), ": ", st.error_message());
  return absl::OkStatus();
}

// One phase through RunLoad, the sampler told its name.
absl::StatusOr<SoakPhase> Phase(const SoakOptions& o, Sampler& sampler, const std::string& name,
                                double rate, int concurrency, double seconds, double warmup) {
  sampler.SetPhase(name);
  LoadOptions l = o.load;
  l.rate = rate;
  l.concurrency = concurrency;
  l.schedule.clear();
  l.duration = seconds;
  l.warmup = warmup;
  SoakPhase p;
  p.name = name;
  p.offered = concurrency > 0 ? concurrency : rate;
  RANKD_ASSIGN_OR_RETURN(p.load, RunLoad(l));
  // Calls completed per second of the measured window, from the timeline: requests_per_s also
  // divides by the wait for the calls in flight at its end, long when latency is.
  int64_t completed = 0;
  for (const TimelineRow& row : p.load.timeline) {
    if (row.t >= warmup && row.t + 1 <= warmup + seconds) completed += row.completed;
  }
  const int whole_seconds =
      static_cast<int>(warmup + seconds) - static_cast<int>(std::ceil(warmup));
  p.completed_per_s = whole_seconds > 0 ? static_cast<double>(completed) / whole_seconds : 0;
  p.load.timeline.clear();  // per second of each phase: not kept
  return p;
}

double Share(const LoadResult& r, const std::string& code) {
  const int64_t all = r.ok + r.failed;
  const auto it = r.errors.find(code);
  return all > 0 && it != r.errors.end() ? static_cast<double>(it->second) / all : 0;
}

void Check(SoakResult& r, const SoakOptions& o) {
  auto fail = [&](const char* promise, std::string line) {
    r.failures.push_back({promise, std::move(line)});
  };
  const SoakPhase* one = nullptr;
  const SoakPhase* two = nullptr;
  const SoakPhase* recovery = nullptr;
  for (const SoakPhase& p : r.phases) {
    for (const auto& [code, n] : p.load.errors) {
      if (std::find(std::begin(kAllowed), std::end(kAllowed), code) == std::end(kAllowed)) {
        fail(kPromiseCodes, absl::StrCat(p.name, ": ", n, " calls ended ", code,
                                         " (only OK and RESOURCE_EXHAUSTED are allowed)"));
      }
    }
    if (auto it = p.load.error_latency_ms.find("RESOURCE_EXHAUSTED");
        it != p.load.error_latency_ms.end() && it->second.p99 > o.reject_p99_ms) {
      fail(kPromiseRefusalLatency,
           absl::StrFormat("%s: RESOURCE_EXHAUSTED answered in %.1f ms at p99 (bound %g ms)",
                           p.name, it->second.p99, o.reject_p99_ms));
    }
    if (p.name == "1x") one = &p;
    if (p.name == "2x") two = &p;
    if (p.name == "recovery") recovery = &p;
  }
  if (one == nullptr || two == nullptr || recovery == nullptr) return;
  if (Share(two->load, "RESOURCE_EXHAUSTED") == 0) {
    fail(kPromiseRefusal,
         "2x: no call got RESOURCE_EXHAUSTED: the overload never reached admission");
  }
  // K: from the deepest queue sampled at 2x and the workers up (see the top of this file).
  double queue = 0, workers = 1;
  for (const SoakSample& s : r.samples) {
    if (s.phase != "2x") continue;
    queue = std::max(queue, s.queue_depth);
    workers = std::max(workers, s.workers_up);
  }
  r.max_p99_ratio = o.max_p99_ratio > 0 ? o.max_p99_ratio : 2 * (1 + queue / workers);
  if (two->load.p99_ms > r.max_p99_ratio * one->load.p99_ms) {
    fail(kPromiseAdmittedLatency,
         absl::StrFormat("2x: admitted p99 %.1f ms > K=%.1f x the 1x p99 %.1f ms", two->load.p99_ms,
                         r.max_p99_ratio, one->load.p99_ms));
  }
  const double refused_1x = Share(one->load, "RESOURCE_EXHAUSTED");
  const double refused_rec = Share(recovery->load, "RESOURCE_EXHAUSTED");
  if (refused_rec > refused_1x + kRecoveryRejectSlack) {
    fail(kPromiseRecovery,
         absl::StrFormat("recovery: %.1f%% refused, at 1x %.1f%%: the server did not recover",
                         100 * refused_rec, 100 * refused_1x));
  }
  if (recovery->load.p99_ms > kRecoveryP99Ratio * one->load.p99_ms) {
    fail(kPromiseRecovery,
         absl::StrFormat("recovery: p99 %.1f ms > %g x the 1x p99 %.1f ms", recovery->load.p99_ms,
                         kRecoveryP99Ratio, one->load.p99_ms));
  }
  if (r.samples.size() < 2) return;
  const SoakSample& first = r.samples.front();
  const SoakSample& last = r.samples.back();
  if (first.restarts >= 0 && last.restarts >= 0) {
    r.worker_restarts = static_cast<int64_t>(last.restarts - first.restarts);
  }
  if (r.worker_restarts > 0)
    fail(kPromiseRestarts, absl::StrCat(r.worker_restarts, " worker restarts"));
  for (bool w : {false, true}) {
    const Totals a = Sum(first, w), b = Sum(last, w);
    const int per = w ? std::max(1, a.processes) : 1;
    const char* who = w ? "workers" : "server";
    if (b.processes != a.processes) {
      fail(kPromiseResources, absl::StrCat(who, ": ", a.processes, " processes at the start, ",
                                           b.processes, " at the end"));
    }
    if (b.fds - a.fds > o.fd_slack * per) {
      fail(kPromiseResources, absl::StrCat(who, ": open fds ", a.fds, " -> ", b.fds, " (slack ",
                                           o.fd_slack * per, ")"));
    }
    if (b.threads - a.threads > o.thread_slack * per) {
      fail(kPromiseResources, absl::StrCat(who, ": threads ", a.threads, " -> ", b.threads,
                                           " (slack ", o.thread_slack * per, ")"));
    }
  }
}

}  // namespace

std::vector<pid_t> ChildProcesses(pid_t parent) {
  std::vector<pid_t> pids;
  const std::string tasks = absl::StrCat("/proc/", parent, "/task");
  DIR* dir = opendir(tasks.c_str());
  if (dir == nullptr) return pids;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    std::istringstream children(ReadFile(absl::StrCat(tasks, "/", e->d_name, "/children")));
    for (pid_t p; children >> p;) pids.push_back(p);
  }
  closedir(dir);
  std::sort(pids.begin(), pids.end());
  pids.erase(std::unique(pids.begin(), pids.end()), pids.end());
  return pids;
}

absl::StatusOr<ProcessSample> SampleProcess(pid_t pid) {
  ProcessSample s;
  s.pid = pid;
  const std::string status = ReadFile(absl::StrCat("/proc/", pid, "/status"));
  if (status.empty()) return absl::NotFoundError(absl::StrCat("no process ", pid));
  for (absl::string_view line : absl::StrSplit(status, '\n')) {
    std::vector<absl::string_view> f =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    if (f.size() < 2) continue;
    if (f[0] == "VmRSS:") (void)absl::SimpleAtoi(f[1], &s.rss_kb);
    if (f[0] == "Threads:") (void)absl::SimpleAtoi(f[1], &s.threads);
  }
  DIR* dir = opendir(absl::StrCat("/proc/", pid, "/fd").c_str());
  if (dir == nullptr) return absl::NotFoundError(absl::StrCat("cannot read /proc/", pid, "/fd"));
  while (dirent* e = readdir(dir)) s.fds += e->d_name[0] != '.';
  closedir(dir);
  return s;
}

absl::StatusOr<pid_t> ListeningProcess(int port) {
  // Sockets listening (state 0A) on the port: their inodes.
  std::vector<std::string> inodes;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::istringstream in(ReadFile(table));
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::vector<std::string> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
      if (f.size() < 10 || f[3] != "0A") continue;
      const size_t colon = f[1].rfind(':');
      int local = 0;
      if (colon != std::string::npos && absl::SimpleHexAtoi(f[1].substr(colon + 1), &local) &&
          local == port) {
        inodes.push_back(absl::StrCat("socket:[", f[9], "]"));
      }
    }
  }
  if (inodes.empty()) {
    return absl::NotFoundError(
        absl::StrCat("no process of this host listens on port ", port, " (give --server-pid)"));
  }
  DIR* proc = opendir("/proc");
  std::optional<pid_t> found;
  while (dirent* p = proc ? readdir(proc) : nullptr) {
    pid_t pid = 0;
    if (!absl::SimpleAtoi(p->d_name, &pid)) continue;
    const std::string fds = absl::StrCat("/proc/", pid, "/fd");
    DIR* dir = opendir(fds.c_str());
    while (dirent* e = dir ? readdir(dir) : nullptr) {
      char link[64] = {};
      const std::string path = absl::StrCat(fds, "/", e->d_name);
      if (readlink(path.c_str(), link, sizeof(link) - 1) > 0 &&
          std::find(inodes.begin(), inodes.end(), link) != inodes.end()) {
        found = pid;
      }
    }
    if (dir) closedir(dir);
    if (found) break;
  }
  if (proc) closedir(proc);
  if (!found) {
    return absl::NotFoundError(
        absl::StrCat("port ", port,
                     " listens, but its process is not visible to this user (give --server-pid)"));
  }
  return *found;
}

absl::StatusOr<SoakResult> RunSoak(const SoakOptions& o) {
  if (!(o.duration > 0) || o.rate < 0 || o.measure_concurrency < 0 || !(o.sample_s > 0) ||
      o.settle_s < 0 || o.fd_slack < 0 || o.thread_slack < 0 || o.max_p99_ratio < 0 ||
      o.probe_items < 0 || o.probe_item_bytes < 1) {
    return absl::InvalidArgumentError(
        "--duration and --sample-s must be > 0; --rate, --measure-concurrency, --settle-s, "
        "--fd-slack, --thread-slack, --max-p99-ratio, --probe-items >= 0; --probe-item-bytes >= 1");
  }
  RANKD_ASSIGN_OR_RETURN(auto target, HostPort(o.load.target, "--target"));
  RANKD_ASSIGN_OR_RETURN(
      auto metrics,
      HostPort(o.metrics.empty() ? absl::StrCat(target.first, ":9464") : o.metrics, "--metrics"));
  pid_t server = o.server_pid;
  if (server == 0) {
    RANKD_ASSIGN_OR_RETURN(server, ListeningProcess(target.second));
  }
  RANKD_RETURN_IF_ERROR(SampleProcess(server).status());
  Sampler sampler(server, metrics.first, metrics.second, o.sample_s);
  SoakResult r;
  const SoakSample first = sampler.Take("start");
  if (first.workers_up < 0) {
    return absl::UnavailableError(absl::StrCat("no rankd_workers_up in http://", metrics.first, ":",
                                               metrics.second, "/metrics (--metrics)"));
  }
  sampler.Start();
  const double d = o.duration;
  absl::Status status = [&]() -> absl::Status {
    r.sustainable_rps = o.rate;
    if (o.rate == 0) {
      const int c = o.measure_concurrency > 0 ? o.measure_concurrency
                                              : kMeasureConcurrencyPerWorker *
                                                    std::max(1, static_cast<int>(first.workers_up));
      RANKD_ASSIGN_OR_RETURN(SoakPhase m, Phase(o, sampler, "measure", 0, c, 0.15 * d, 0.05 * d));
      r.sustainable_rps = kSustainableShare * m.completed_per_s;
      r.phases.push_back(std::move(m));
      if (!(r.sustainable_rps > 0)) {
        return absl::UnavailableError("the measuring phase completed no call");
      }
    }
    const double rate = r.sustainable_rps;
    for (const auto& [name, factor, share] :
         {std::tuple{"1x", 1.0, 0.25}, std::tuple{"2x", 2.0, 0.3}}) {
      RANKD_ASSIGN_OR_RETURN(SoakPhase p, Phase(o, sampler, name, factor * rate, 0, share * d, 0));
      r.phases.push_back(std::move(p));
    }
    // Recovery: its first half (not measured) lets the 2x backlog drain.
    RANKD_ASSIGN_OR_RETURN(SoakPhase rec,
                           Phase(o, sampler, "recovery", rate, 0, 0.125 * d, 0.125 * d));
    r.phases.push_back(std::move(rec));
    sampler.SetPhase("settle");
    std::this_thread::sleep_for(std::chrono::duration<double>(o.settle_s));
    if (o.probe_items > 0) {
      sampler.SetPhase("probe");
      RANKD_RETURN_IF_ERROR(RunProbe(o, server, &r.probe));
    }
    return absl::OkStatus();
  }();
  r.samples = sampler.Stop();
  RANKD_RETURN_IF_ERROR(status);
  r.samples.push_back(sampler.Take("end"));
  Check(r, o);
  if (o.probe_items > 0 && !r.probe.ok)
    r.failures.push_back({kPromiseProbe, "probe: " + r.probe.status});
  return r;
}

nlohmann::json SoakResult::ToJson(const SoakOptions& o) const {
  nlohmann::json j;
  j["target"] = o.load.target;
  j["duration_s"] = o.duration;
  j["sustainable_rps"] = sustainable_rps;
  j["max_p99_ratio"] = max_p99_ratio;
  j["reject_p99_bound_ms"] = o.reject_p99_ms;
  j["fd_slack"] = o.fd_slack;
  j["thread_slack"] = o.thread_slack;
  j["worker_restarts"] = worker_restarts;
  for (const SoakPhase& p : phases) {
    nlohmann::json pj = p.load.ToJson(o.load);
    pj["phase"] = p.name;
    pj["offered"] = p.offered;
    pj["completed_per_s"] = p.completed_per_s;
    j["phases"].push_back(pj);
  }
  for (const SoakSample& s : samples) {
    nlohmann::json sj = {{"t_s", s.t_s},
                         {"phase", s.phase},
                         {"restarts", s.restarts},
                         {"exits", s.exits},
                         {"queue_depth", s.queue_depth},
                         {"workers_up", s.workers_up}};
    for (const ProcessSample& p : s.processes) {
      sj["processes"].push_back({{"pid", p.pid},
                                 {"role", p.worker ? "worker" : "server"},
                                 {"rss_kb", p.rss_kb},
                                 {"fds", p.fds},
                                 {"threads", p.threads}});
    }
    j["samples"].push_back(sj);
  }
  if (o.probe_items > 0) {
    j["probe"] = {{"status", probe.status},
                  {"items", o.probe_items},
                  {"item_bytes", o.probe_item_bytes},
                  {"text_bytes", probe.text_bytes},
                  {"workers", probe.workers},
                  {"rss_before_kb", probe.rss_before_kb},
                  {"rss_after_kb", probe.rss_after_kb},
                  {"rss_settled_kb", probe.rss_settled_kb}};
  }
  j["failures"] = nlohmann::json::array();
  for (const Failure& f : failures) {
    j["failures"].push_back({{"promise", f.promise}, {"message", f.message}});
  }
  j["ok"] = failures.empty();
  return j;
}

std::string SoakResult::Summary() const {
  std::string s =
      absl::StrFormat("sustainable (1x): %.1f requests/s; K (2x p99 / 1x p99) <= %.1f\n",
                      sustainable_rps, max_p99_ratio);
  absl::StrAppendFormat(&s, "%-9s %9s %8s %8s %7s %9s %9s %11s %11s\n", "phase", "offered", "ok",
                        "refused", "other", "p50 ms", "p99 ms", "ref p99 ms", "ref max ms");
  for (const SoakPhase& p : phases) {
    const auto it = p.load.errors.find("RESOURCE_EXHAUSTED");
    const int64_t refused = it == p.load.errors.end() ? 0 : it->second;
    const auto lt = p.load.error_latency_ms.find("RESOURCE_EXHAUSTED");
    const LoadResult::LatencyMs l =
        lt == p.load.error_latency_ms.end() ? LoadResult::LatencyMs{} : lt->second;
    absl::StrAppendFormat(&s, "%-9s %9.1f %8d %8d %7d %9.2f %9.2f %11.2f %11.2f\n", p.name,
                          p.offered, p.load.ok, refused, p.load.failed - refused, p.load.p50_ms,
                          p.load.p99_ms, l.p99, l.max);
    for (const auto& [code, n] : p.load.errors) {
      if (code != "RESOURCE_EXHAUSTED") absl::StrAppendFormat(&s, "  %s: %d\n", code, n);
    }
  }
  if (samples.size() >= 2) {
    for (bool w : {false, true}) {
      const Totals a = Sum(samples.front(), w), b = Sum(samples.back(), w);
      Totals peak;
      for (const SoakSample& x : samples) {
        const Totals t = Sum(x, w);
        peak.rss_kb = std::max(peak.rss_kb, t.rss_kb);
        peak.fds = std::max(peak.fds, t.fds);
        peak.threads = std::max(peak.threads, t.threads);
      }
      absl::StrAppendFormat(&s,
                            "%-8s (%d): RSS %.1f -> %.1f MiB (peak %.1f), fds %d -> %d (peak %d), "
                            "threads %d -> %d (peak %d)\n",
                            w ? "workers" : "server", b.processes, a.rss_kb / 1024.0,
                            b.rss_kb / 1024.0, peak.rss_kb / 1024.0, a.fds, b.fds, peak.fds,
                            a.threads, b.threads, peak.threads);
    }
  }
  absl::StrAppendFormat(&s, "worker restarts: %d\n", worker_restarts);
  if (!probe.workers.empty()) {
    absl::StrAppendFormat(&s,
                          "probe (%d bytes of text, %s): worker RSS MiB before / after / "
                          "settled:",
                          probe.text_bytes, probe.status);
    for (size_t i = 0; i < probe.workers.size(); ++i) {
      absl::StrAppendFormat(&s, " [%.1f / %.1f / %.1f]", probe.rss_before_kb[i] / 1024.0,
                            probe.rss_after_kb[i] / 1024.0, probe.rss_settled_kb[i] / 1024.0);
    }
    s += "\n";
  }
  for (const Failure& f : failures)
    absl::StrAppend(&s, "FAILED (", f.promise, "): ", f.message, "\n");
  if (failures.empty()) s += "all promises held\n";
  return s;
}

int RunSoakBench(int argc, char** argv, int first) {
  cli::FlagSet flags(
      "rankd-bench soak --target HOST:PORT [--duration S] [--rate R] [--metrics HOST:PORT]\n"
      "                 [--server-pid PID] [--json FILE] [--probe-items N] [request flags]\n"
      "Overload and soak against a rankd serve on this host: the sustainable throughput\n"
      "(measured closed loop, or --rate), then open loop at 1x, 2x and 1x again (recovery);\n"
      "RSS, fds and threads of the server and its workers and /metrics sampled throughout.\n"
      "Exits 1 when a promise fails (RELIABILITY.md, \"Overload and soak\"), 2 on bad flags.");
  SoakOptions o;
  o.load.deadline_ms = 30000;
  AddRequestFlags(flags, &o.load);
  flags.Double("duration", &o.duration, "seconds of load in all (phases scaled from it)");
  flags.Double("rate", &o.rate, "1x in requests/s (0: 90% of the measured throughput)");
  flags.Int("measure-concurrency", &o.measure_concurrency,
            "closed-loop concurrency of the measuring phase (0: 8 per worker up)");
  flags.String("metrics", &o.metrics,
               "HOST:PORT of the server's /metrics (default: 9464 of "
               "--target's host)");
  int server_pid = 0;
  flags.Int("server-pid", &server_pid, "the server's pid (0: the process listening on --target)");
  flags.Double("sample-s", &o.sample_s, "seconds between samples");
  flags.Double("settle-s", &o.settle_s, "idle seconds before the last sample");
  flags.Int("fd-slack", &o.fd_slack, "fds a process may gain (workers: each)");
  flags.Int("thread-slack", &o.thread_slack, "threads a process may gain (workers: each)");
  flags.Double("reject-p99-ms", &o.reject_p99_ms, "RESOURCE_EXHAUSTED within this at p99");
  flags.Double("max-p99-ratio", &o.max_p99_ratio,
               "admitted p99 at 2x over that at 1x, at most (0: 2 x (1 + queue / workers))");
  flags.Int("probe-items", &o.probe_items,
            "memory probe after the load: one request of this many texts (0: none)");
  flags.Int("probe-item-bytes", &o.probe_item_bytes, "bytes of each probe text");
  std::string json_path;
  flags.String("json", &json_path, "write the result (phases, samples, failures) here");
  if (std::optional<int> exit_code = ParseCommandFlags(flags, argc, argv, first, "soak")) {
    return *exit_code;
  }
  o.server_pid = server_pid;
  absl::StatusOr<SoakResult> r = RunSoak(o);
  if (!r.ok()) {
    std::fprintf(stderr, "soak: %s\n", std::string(r.status().message()).c_str());
    return absl::IsInvalidArgument(r.status()) ? 2 : 1;
  }
  std::fputs(r->Summary().c_str(), stdout);
  std::fflush(stdout);
  if (!json_path.empty()) std::ofstream(json_path) << r->ToJson(o).dump(2) << "\n";
  return r->failures.empty() ? 0 : 1;
}

}  // namespace rankd::bench
