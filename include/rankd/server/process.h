// Child processes of the front end: spawning `rankd worker` (fork + exec of /proc/self/exe),
// describing how one ended, and the run directories that outlive a killed front end.
#ifndef RANKD_SERVER_PROCESS_H_
#define RANKD_SERVER_PROCESS_H_

#include <sys/socket.h>
#include <sys/types.h>

#include <optional>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace rankd::server {

// Starts this program's own binary with `argv` (argv[0] is only its name) and exactly `env`
// (NAME=VALUE). The child
// - runs in its own process group, so a terminal's Ctrl-C reaches only the front end, which then
//   stops its workers in order;
// - gets SIGKILL when the thread that spawned it exits (PR_SET_PDEATHSIG), so no worker outlives
//   a front end that was killed;
// - starts with all signals unblocked and at their default action;
// - is pinned to `cpus` (sched_setaffinity) when that is not empty;
// - inherits no file descriptor but 0, 1 and 2.
// Returns once the exec succeeded (or with the reason it failed).
absl::StatusOr<pid_t> SpawnSelf(const std::vector<std::string>& argv,
                                const std::vector<std::string>& env, const std::vector<int>& cpus);

// "exited with status 1", "killed by signal 9 (Killed)", ... for a waitpid status.
std::string DescribeWaitStatus(int wait_status);

// The CPUs this process may run on (sched_getaffinity).
std::vector<int> AvailableCpus();

// GPUs a worker could use: the entries of CUDA_VISIBLE_DEVICES when set, else the NVIDIA driver's
// /proc/driver/nvidia/gpus entries, else 0.
int CountVisibleGpus();

// A process's figures as the Prometheus process_* metrics report them, read from /proc/PID.
struct ProcessStats {
  double cpu_seconds = 0;         // user + system time
  double resident_bytes = 0;      // resident set size
  int open_fds = 0;               // entries of /proc/PID/fd
  double start_time_seconds = 0;  // since the Unix epoch
};
// nullopt when no such process runs (or it has exited and awaits its reaping), or its /proc
// entries are not readable by this process.
std::optional<ProcessStats> ReadProcessStats(pid_t pid);
// Raises this process's soft limit of open files (RLIMIT_NOFILE) to its hard limit: every
// connection is a file descriptor, and the soft limit is often 1024 while the hard one is far
// higher. Returns the limit in force afterwards, and writes the one before to `before`.
absl::StatusOr<int64_t> RaiseFileLimit(int64_t* before);

// A connected socket of this process: its descriptor and both ends' addresses.
struct ConnectedSocket {
  int fd;
  const sockaddr_storage& local;
  socklen_t local_size;
  const sockaddr_storage& peer;
  socklen_t peer_size;
};
// Calls `visit` with each connected socket this process holds (not listening ones), from
// /proc/self/fd, until it returns false.
void ForEachConnectedSocket(const std::function<bool(const ConnectedSocket&)>& visit);

// This process's environment as NAME=VALUE strings.
std::vector<std::string> CurrentEnvironment();

// Run directories (the workers' sockets and config): made fresh under `parent` as
// <prefix>XXXXXX, or given (workers.socket_dir). The process that serves from one holds it with a
// RunDirectoryLock, whose owner file names it ("PID START": the pid and the start time of the
// process, so that a reused pid is not taken for it).
//
// Makes a fresh run directory (mkdtemp); returns its path. The caller takes it (RunDirectoryLock).
absl::StatusOr<std::string> MakeRunDirectory(const std::string& parent, const std::string& prefix);
// Removes the run directories under `parent` left by processes that are gone (killed with
// SIGKILL, crashed): those of this user with an owner file naming a process that no longer runs.
// Directories without an owner file are left alone. Returns how many were removed.
int RemoveStaleRunDirectories(const std::string& parent, const std::string& prefix);

// A run directory held by this process: an exclusive flock on its owner file (`owner.pid`),
// which names this process once held. The lock lasts while the object lives, and goes with the
// process however it ends (the kernel releases it: a server killed with SIGKILL leaves none), so
// that two servers never share the directory (the second would hand its workers its own config
// there, and remove the first's sockets when it stops). The descriptor does not reach children.
class RunDirectoryLock {
 public:
  // Takes `dir` (which must exist). FAILED_PRECONDITION naming the holder's pid when another
  // process holds it.
  static absl::StatusOr<std::unique_ptr<RunDirectoryLock>> Take(const std::string& dir);
  ~RunDirectoryLock();
  RunDirectoryLock(const RunDirectoryLock&) = delete;
  RunDirectoryLock& operator=(const RunDirectoryLock&) = delete;

 private:
  explicit RunDirectoryLock(int fd) : fd_(fd) {}
  const int fd_;
};

// The process that listens on TCP `port` ("pid 1234 (rankd)"), for the message of a listen
// that failed: "another user's process" when the socket is found but not its process (only this
// user's processes can be looked into), "" when nothing listens there.
std::string DescribePortHolder(int port);

}  // namespace rankd::server

#endif  // RANKD_SERVER_PROCESS_H_
