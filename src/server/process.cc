#include "rankd/server/process.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

extern char** environ;

namespace rankd::server {

absl::StatusOr<pid_t> SpawnSelf(const std::vector<std::string>& argv,
                                const std::vector<std::string>& env, const std::vector<int>& cpus) {
  // Everything the child needs is prepared here: between fork and exec only async-signal-safe
  // calls are allowed (this process has other threads).
  std::vector<char*> c_argv, c_env;
  for (const std::string& a : argv) c_argv.push_back(const_cast<char*>(a.c_str()));
  c_argv.push_back(nullptr);
  for (const std::string& e : env) c_env.push_back(const_cast<char*>(e.c_str()));
  c_env.push_back(nullptr);
  cpu_set_t cpu_set;
  CPU_ZERO(&cpu_set);
  for (int cpu : cpus) {
    if (cpu >= 0 && cpu < CPU_SETSIZE) CPU_SET(cpu, &cpu_set);
  }
  sigset_t all_signals;
  sigemptyset(&all_signals);
  const pid_t parent = getpid();

  // The child reports a failed exec through this pipe; a successful exec closes it (CLOEXEC).
  int report[2];
  if (pipe2(report, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe2: ", std::strerror(errno)));
  }
  const pid_t pid = fork();
  if (pid < 0) {
    const int err = errno;
    close(report[0]);
    close(report[1]);
    return absl::ResourceExhaustedError(absl::StrCat("fork: ", std::strerror(err)));
  }
  if (pid == 0) {
    close(report[0]);
    int step = 0;  // which call failed, for the parent's message
    auto fail = [&](int which) {
      const int payload[2] = {which, errno};
      (void)!write(report[1], payload, sizeof(payload));
      _exit(127);
    };
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) fail(step = 1);
    if (getppid() != parent) _exit(0);  // the parent is already gone
    if (setpgid(0, 0) != 0) fail(step = 2);
    if (!cpus.empty() && sched_setaffinity(0, sizeof(cpu_set), &cpu_set) != 0) fail(step = 3);
    struct sigaction dfl;
    std::memset(&dfl, 0, sizeof(dfl));
    dfl.sa_handler = SIG_DFL;
    for (int sig = 1; sig < NSIG; ++sig) sigaction(sig, &dfl, nullptr);  // fails for KILL/STOP
    if (sigprocmask(SIG_SETMASK, &all_signals, nullptr) != 0) fail(step = 4);
    // Nothing but stdin/out/err crosses the exec (the front end's listening sockets must not
    // outlive it in a worker). Best effort: kernels before 5.11 lack the flag.
    close_range(3, ~0U, CLOSE_RANGE_CLOEXEC);
    execve("/proc/self/exe", c_argv.data(), c_env.data());
    fail(step = 5);
  }
  close(report[1]);
  int payload[2] = {0, 0};
  ssize_t n;
  do {
    n = read(report[0], payload, sizeof(payload));
  } while (n < 0 && errno == EINTR);
  close(report[0]);
  if (n <= 0) return pid;  // exec succeeded: the pipe closed without a report
  int status = 0;
  waitpid(pid, &status, 0);
  static const char* kSteps[] = {"",
                                 "prctl(PR_SET_PDEATHSIG)",
                                 "setpgid",
                                 "sched_setaffinity",
                                 "sigprocmask",
                                 "execve(/proc/self/exe)"};
  const int which = payload[0] >= 1 && payload[0] <= 5 ? payload[0] : 0;
  return absl::InternalError(
      absl::StrCat("starting a worker: ", kSteps[which], ": ", std::strerror(payload[1])));
}

std::string DescribeWaitStatus(int s) {
  if (WIFEXITED(s)) return absl::StrCat("exited with status ", WEXITSTATUS(s));
  if (WIFSIGNALED(s)) {
    return absl::StrCat("killed by signal ", WTERMSIG(s), " (", strsignal(WTERMSIG(s)), ")",
                        WCOREDUMP(s) ? ", core dumped" : "");
  }
  return absl::StrCat("ended with wait status ", s);
}

std::vector<int> AvailableCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  }
  return cpus;
}

int CountVisibleGpus() {
  if (const char* v = std::getenv("CUDA_VISIBLE_DEVICES"); v != nullptr) {
    int n = 0;
    for (absl::string_view part : absl::StrSplit(v, ',', absl::SkipWhitespace())) {
      if (part == "-1") break;  // CUDA stops at the first invalid entry
      ++n;
    }
    return n;
  }
  std::error_code ec;
  int n = 0;
  for (auto it = std::filesystem::directory_iterator("/proc/driver/nvidia/gpus", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    ++n;
  }
  return n;
}

absl::StatusOr<int64_t> RaiseFileLimit(int64_t* before) {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) {
    return absl::InternalError(absl::StrCat("getrlimit(RLIMIT_NOFILE): ", std::strerror(errno)));
  }
  *before = static_cast<int64_t>(std::min<rlim_t>(limit.rlim_cur, INT64_MAX));
  if (limit.rlim_cur != limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &limit) != 0) {
      return absl::InternalError(
          absl::StrCat("setrlimit(RLIMIT_NOFILE, ", limit.rlim_max, "): ", std::strerror(errno)));
    }
  }
  return static_cast<int64_t>(std::min<rlim_t>(limit.rlim_cur, INT64_MAX));
}

void ForEachConnectedSocket(const std::function<bool(const ConnectedSocket&)>& visit) {
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator("/proc/self/fd", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    int fd = -1;
    if (!absl::SimpleAtoi(it->path().filename().string(), &fd)) continue;
    sockaddr_storage local{}, peer{};
    socklen_t local_size = sizeof(local), peer_size = sizeof(peer);
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_size) != 0 ||
        getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_size) != 0) {
      continue;  // not a socket, or not connected (a listening socket)
    }
    if (!visit({fd, local, local_size, peer, peer_size})) return;
  }
}

std::vector<std::string> CurrentEnvironment() {
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) env.emplace_back(*e);
  return env;
}

namespace {

constexpr char kOwnerFile[] = "owner.pid";

// The fields of /proc/PID/stat from field 3 (state) on, so that field N is fields[N - 3]; nullopt
// when no such process runs or it has exited (a zombie, awaiting its reaping).
std::optional<std::vector<std::string>> StatFields(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::stringstream text;
  text << in.rdbuf();
  const std::string stat = text.str();
  // "pid (comm) state ppid ...": comm may hold spaces and parentheses.
  const size_t close = stat.rfind(')');
  if (close == std::string::npos || close + 2 >= stat.size()) return std::nullopt;
  std::vector<std::string> fields = absl::StrSplit(stat.substr(close + 2), ' ');
  if (fields.size() < 22 || fields[0] == "Z") return std::nullopt;
  return fields;
}

// The start time of process `pid` (clock ticks after boot, field 22 of /proc/PID/stat), or
// nullopt when no such process runs.
std::optional<uint64_t> StartTime(pid_t pid) {
  const std::optional<std::vector<std::string>> fields = StatFields(pid);
  uint64_t start = 0;
  if (!fields || !absl::SimpleAtoi((*fields)[19], &start)) return std::nullopt;
  return start;
}

// The boot time (seconds since the Unix epoch: /proc/stat's btime), or 0 when unreadable.
int64_t BootTime() {
  std::ifstream in("/proc/stat");
  std::string line;
  while (std::getline(in, line)) {
    absl::string_view rest = line;
    int64_t btime = 0;
    if (absl::ConsumePrefix(&rest, "btime ") && absl::SimpleAtoi(rest, &btime)) return btime;
  }
  return 0;
}

}  // namespace

std::optional<ProcessStats> ReadProcessStats(pid_t pid) {
  const std::optional<std::vector<std::string>> fields = StatFields(pid);
  if (!fields) return std::nullopt;
  // Fields 14 and 15 (utime, stime) and 22 (starttime) in clock ticks, 24 (rss) in pages.
  uint64_t utime = 0, stime = 0, start = 0, rss_pages = 0;
  if (!absl::SimpleAtoi((*fields)[11], &utime) || !absl::SimpleAtoi((*fields)[12], &stime) ||
      !absl::SimpleAtoi((*fields)[19], &start) || !absl::SimpleAtoi((*fields)[21], &rss_pages)) {
    return std::nullopt;
  }
  static const double kTicksPerSecond = static_cast<double>(sysconf(_SC_CLK_TCK));
  static const double kPageBytes = static_cast<double>(sysconf(_SC_PAGESIZE));
  static const int64_t kBootTime = BootTime();
  ProcessStats stats;
  stats.cpu_seconds = static_cast<double>(utime + stime) / kTicksPerSecond;
  stats.resident_bytes = static_cast<double>(rss_pages) * kPageBytes;
  stats.start_time_seconds =
      static_cast<double>(kBootTime) + static_cast<double>(start) / kTicksPerSecond;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator(absl::StrCat("/proc/", pid, "/fd"), ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    ++stats.open_fds;
  }
  if (ec) return std::nullopt;  // it exited meanwhile, or its fds are not ours to read
  return stats;
}

absl::StatusOr<std::string> MakeRunDirectory(const std::string& parent, const std::string& prefix) {
  std::string dir = absl::StrCat(parent, "/", prefix, "XXXXXX");
  if (mkdtemp(dir.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("mkdtemp(", dir, "): ", std::strerror(errno)));
  }
  return dir;
}

RunDirectoryLock::~RunDirectoryLock() { close(fd_); }

absl::StatusOr<std::unique_ptr<RunDirectoryLock>> RunDirectoryLock::Take(const std::string& dir) {
  const std::string path = absl::StrCat(dir, "/", kOwnerFile);
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::InternalError(absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
  }
  std::unique_ptr<RunDirectoryLock> lock(new RunDirectoryLock(fd));
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    if (err != EWOULDBLOCK) {
      return absl::InternalError(absl::StrCat("flock(", path, "): ", std::strerror(err)));
    }
    std::ifstream in(path);
    pid_t holder = 0;
    in >> holder;
    return absl::FailedPreconditionError(absl::StrCat(
        dir, " is held by another process (pid ",
        holder > 0 ? absl::StrCat(holder) : std::string("unknown"), ", named in ", path, ")"));
  }
  // Written once the lock is held: RemoveStaleRunDirectories skips an owner file without a pid.
  const std::optional<uint64_t> start = StartTime(getpid());
  const std::string owner = absl::StrCat(getpid(), " ", start.value_or(0), "\n");
  if (ftruncate(fd, 0) != 0 ||
      pwrite(fd, owner.data(), owner.size(), 0) != static_cast<ssize_t>(owner.size())) {
    return absl::InternalError(absl::StrCat("cannot write ", path, ": ", std::strerror(errno)));
  }
  return lock;
}

std::string DescribePortHolder(int port) {
  // The inodes of the sockets listening on `port` (state 0A), from the kernel's tables.
  std::vector<std::string> sockets;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // the column names
    while (std::getline(in, line)) {
      // "sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode ..."
      std::vector<absl::string_view> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
      if (f.size() < 10 || f[3] != "0A") continue;
      const size_t colon = f[1].rfind(':');
      int local_port = 0;
      if (colon == absl::string_view::npos ||
          !absl::SimpleHexAtoi(f[1].substr(colon + 1), &local_port) || local_port != port) {
        continue;
      }
      sockets.push_back(absl::StrCat("socket:[", f[9], "]"));
    }
  }
  if (sockets.empty()) return "";
  // The process that has one of them open (only processes of this user can be looked into).
  std::error_code ec;
  for (auto p = std::filesystem::directory_iterator("/proc", ec);
       !ec && p != std::filesystem::directory_iterator(); p.increment(ec)) {
    pid_t pid = 0;
    if (!absl::SimpleAtoi(p->path().filename().string(), &pid)) continue;
    std::error_code fd_ec;
    for (auto fd = std::filesystem::directory_iterator(p->path() / "fd", fd_ec);
         !fd_ec && fd != std::filesystem::directory_iterator(); fd.increment(fd_ec)) {
      std::error_code link_ec;
      const std::string target = std::filesystem::read_symlink(fd->path(), link_ec).string();
      if (link_ec || std::find(sockets.begin(), sockets.end(), target) == sockets.end()) continue;
      std::ifstream comm(p->path() / "comm");
      std::string name;
      std::getline(comm, name);
      return absl::StrCat("pid ", pid, " (", name, ")");
    }
  }
  return "another user's process";
}

int RemoveStaleRunDirectories(const std::string& parent, const std::string& prefix) {
  namespace fs = std::filesystem;
  int removed = 0;
  std::error_code ec;
  for (auto it = fs::directory_iterator(parent, ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    struct stat st;
    // Only real directories (not links) of this user, named as MakeRunDirectory names them.
    if (name.size() != prefix.size() + 6 || !absl::StartsWith(name, prefix) ||
        lstat(it->path().c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != getuid()) {
      continue;
    }
    std::ifstream in(it->path() / kOwnerFile);
    pid_t pid = 0;
    uint64_t start = 0;
    if (!(in >> pid >> start) || pid <= 0) continue;  // not ours to judge
    if (const std::optional<uint64_t> now = StartTime(pid); now && *now == start) continue;
    std::error_code remove_ec;
    if (fs::remove_all(it->path(), remove_ec) > 0 && !remove_ec) ++removed;
  }
  return removed;
}

}  // namespace rankd::server
