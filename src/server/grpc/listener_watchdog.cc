#include "rankd/server/grpc/listener_watchdog.h"

#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <optional>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "rankd/server/process.h"

namespace rankd::server {
namespace {

using Clock = std::chrono::steady_clock;

// How often a probe looks whether its connection was accepted.
constexpr std::chrono::milliseconds kAcceptPoll(10);

absl::Status Failed(absl::string_view what, int err) {
  return absl::UnavailableError(absl::StrCat(what, ": ", std::strerror(err)));
}

// Whether `a` and `b` are one address: a Unix socket's name, or an IP address and port, an IPv4
// one equal to its IPv4-mapped IPv6 form (gRPC listens on dual-stack sockets, whose accepted
// ends give their IPv4 peers in that form).
bool SameAddress(const sockaddr_storage& a, socklen_t a_size, const sockaddr_storage& b,
                 socklen_t b_size) {
  if (a.ss_family == AF_UNIX || b.ss_family == AF_UNIX) {
    return a_size == b_size && std::memcmp(&a, &b, a_size) == 0;
  }
  // The address as IPv6 (an IPv4 one mapped) and the port; nullopt for other families.
  auto ip = [](const sockaddr_storage& s) -> std::optional<std::pair<in6_addr, in_port_t>> {
    if (s.ss_family == AF_INET6) {
      const auto& in6 = reinterpret_cast<const sockaddr_in6&>(s);
      return std::make_pair(in6.sin6_addr, in6.sin6_port);
    }
    if (s.ss_family != AF_INET) return std::nullopt;
    const auto& in = reinterpret_cast<const sockaddr_in&>(s);
    in6_addr mapped{};
    mapped.s6_addr[10] = mapped.s6_addr[11] = 0xff;
    std::memcpy(&mapped.s6_addr[12], &in.sin_addr, 4);
    return std::make_pair(mapped, in.sin_port);
  };
  const auto x = ip(a), y = ip(b);
  return x && y && x->second == y->second &&
         std::memcmp(&x->first, &y->first, sizeof(in6_addr)) == 0;
}

// Waits for `events` on `fd` until `deadline`: true when they came.
bool WaitFor(int fd, short events, Clock::time_point deadline) {
  while (true) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return false;
    pollfd p{.fd = fd, .events = events, .revents = 0};
    const int n = poll(&p, 1, static_cast<int>(left.count()));
    if (n > 0) return true;
    if (n < 0 && errno != EINTR) return false;
  }
}

}  // namespace

std::string ProbeAddress(absl::string_view listen, int port) {
  if (absl::StartsWith(listen, "unix:") || absl::StartsWith(listen, "unix-abstract:")) {
    return std::string(listen);
  }
  absl::string_view host = listen.substr(0, listen.rfind(':'));
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host.empty() || host == "0.0.0.0") host = "127.0.0.1";
  if (host == "::") host = "::1";
  return host.find(':') != absl::string_view::npos ? absl::StrCat("[", host, "]:", port)
                                                   : absl::StrCat(host, ":", port);
}

absl::Status ProbeListener(const std::string& address, std::chrono::milliseconds timeout) {
  const Clock::time_point deadline = Clock::now() + timeout;
  sockaddr_storage target{};
  socklen_t target_size = 0;
  int family = AF_UNIX;
  const bool unix_socket =
      absl::StartsWith(address, "unix:") || absl::StartsWith(address, "unix-abstract:");
  if (unix_socket) {
    const bool abstract = absl::StartsWith(address, "unix-abstract:");
    const std::string path = address.substr(address.find(':') + 1);
    sockaddr_un* un = reinterpret_cast<sockaddr_un*>(&target);
    un->sun_family = AF_UNIX;
    if (path.size() + 1 > sizeof(un->sun_path)) {
      return absl::InvalidArgumentError(absl::StrCat(address, ": path too long"));
    }
    std::memcpy(un->sun_path + (abstract ? 1 : 0), path.data(), path.size());
    target_size =
        static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + path.size() + (abstract ? 1 : 0));
  } else {
    const size_t colon = address.rfind(':');
    std::string host = address.substr(0, colon);
    if (host.size() >= 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    addrinfo* found = nullptr;
    if (const int rc = getaddrinfo(host.c_str(), address.substr(colon + 1).c_str(), &hints, &found);
        rc != 0) {
      return absl::UnavailableError(absl::StrCat("cannot resolve ", host, ": ", gai_strerror(rc)));
    }
    std::memcpy(&target, found->ai_addr, found->ai_addrlen);
    target_size = found->ai_addrlen;
    family = found->ai_family;
    freeaddrinfo(found);
  }
  const int fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return Failed("socket", errno);
  absl::Cleanup close_fd = [fd] { close(fd); };
  // A Unix socket is unnamed unless bound: autobind gives it a name for the accepted end to show.
  const sa_family_t unix_family = AF_UNIX;
  if (unix_socket &&
      bind(fd, reinterpret_cast<const sockaddr*>(&unix_family), sizeof(unix_family)) != 0) {
    return Failed("bind", errno);
  }
  if (connect(fd, reinterpret_cast<const sockaddr*>(&target), target_size) != 0) {
    if (errno != EINPROGRESS) return Failed("connect", errno);
    if (!WaitFor(fd, POLLOUT, deadline)) {
      return absl::DeadlineExceededError(
          absl::StrCat("connect: no answer within ", timeout.count(), " ms"));
    }
    int err = 0;
    socklen_t size = sizeof(err);
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &size);
    if (err != 0) return Failed("connect", err);
  }
  sockaddr_storage local{};
  socklen_t local_size = sizeof(local);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_size) != 0) {
    return Failed("getsockname", errno);
  }
  // Connected may mean only queued in the kernel's backlog. gRPC has accepted the connection when
  // its end, whose peer is this one, shows among this process's descriptors.
  while (true) {
    bool accepted = false;
    ForEachConnectedSocket([&](const ConnectedSocket& s) {
      accepted = s.fd != fd && SameAddress(s.peer, s.peer_size, local, local_size);
      return !accepted;
    });
    if (accepted) return absl::OkStatus();
    if (Clock::now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "connected, but the server took no connection within ", timeout.count(), " ms"));
    }
    std::this_thread::sleep_for(kAcceptPoll);
  }
}

ListenerWatchdog::ListenerWatchdog(std::string address, Options options)
    : address_(std::move(address)), options_(options) {
  thread_ = std::thread(&ListenerWatchdog::Loop, this);
}

ListenerWatchdog::~ListenerWatchdog() { Stop(); }

void ListenerWatchdog::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

absl::Status ListenerWatchdog::failure() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failure_;
}

void ListenerWatchdog::Loop() {
  int failed = 0;
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, options_.interval, [this] { return stop_; })) {
    lock.unlock();
    const absl::Status probe = ProbeListener(address_, options_.timeout);
    lock.lock();
    failed = probe.ok() ? 0 : failed + 1;
    if (failed >= options_.failures) {
      failure_ = absl::UnavailableError(
          absl::StrCat("the gRPC listener on ", address_, " accepts no connection (", failed,
                       " probes in a row failed; the last: ", probe.message(), ")"));
      return;
    }
  }
}

}  // namespace rankd::server
