// ListenerWatchdog's probe against listeners in this process: one that accepts, one that stopped
// accepting (listening, but nobody calls accept: what gRPC 1.51 leaves after an accept4 failure),
// over TCP and Unix sockets.
#include "rankd/server/grpc/listener_watchdog.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rankd::server {
namespace {

using std::chrono::milliseconds;
using ::testing::HasSubstr;

TEST(ProbeAddressTest, WildcardsAreProbedOnLoopback) {
  EXPECT_EQ(ProbeAddress("0.0.0.0:0", 4321), "127.0.0.1:4321");
  EXPECT_EQ(ProbeAddress(":50051", 50051), "127.0.0.1:50051");
  EXPECT_EQ(ProbeAddress("[::]:0", 4321), "[::1]:4321");
  EXPECT_EQ(ProbeAddress("127.0.0.1:0", 4321), "127.0.0.1:4321");
  EXPECT_EQ(ProbeAddress("localhost:50051", 50051), "localhost:50051");
  EXPECT_EQ(ProbeAddress("unix:/run/rankd.sock", 0), "unix:/run/rankd.sock");
}

enum class Kind { kTcp, kDualStack, kUnix };

// A listening socket of this process; with `accepting`, a thread accepts (and keeps) every
// connection, as gRPC does. kDualStack: an IPv6 socket on ::ffff:127.0.0.1, as gRPC listens on
// 127.0.0.1 (its accepted ends give their IPv4 peers IPv4-mapped).
class Listener {
 public:
  Listener(Kind kind, bool accepting) {
    if (kind == Kind::kDualStack) {
      fd_ = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in6 addr{};
      addr.sin6_family = AF_INET6;
      EXPECT_EQ(inet_pton(AF_INET6, "::ffff:127.0.0.1", &addr.sin6_addr), 1);
      EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
      socklen_t size = sizeof(addr);
      getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &size);
      address_ = absl::StrCat("127.0.0.1:", ntohs(addr.sin6_port));
    } else if (kind == Kind::kUnix) {
      path_ = absl::StrCat(::testing::TempDir(), "/rankd_probe_", getpid(), ".sock");
      unlink(path_.c_str());
      fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_un addr{};
      addr.sun_family = AF_UNIX;
      std::strncpy(addr.sun_path, path_.c_str(), sizeof(addr.sun_path) - 1);
      EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
      address_ = "unix:" + path_;
    } else {
      fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
      socklen_t size = sizeof(addr);
      getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &size);
      address_ = absl::StrCat("127.0.0.1:", ntohs(addr.sin_port));
    }
    EXPECT_EQ(listen(fd_, 16), 0);
    if (accepting) {
      thread_ = std::thread([this] {
        while (true) {
          const int c = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
          if (c < 0 || stop_.load()) {
            if (c >= 0) close(c);
            return;
          }
          accepted_.push_back(c);
        }
      });
    }
  }
  ~Listener() {
    stop_.store(true);
    shutdown(fd_, SHUT_RDWR);  // wakes accept4
    if (thread_.joinable()) thread_.join();
    for (int c : accepted_) close(c);
    close(fd_);
    if (!path_.empty()) unlink(path_.c_str());
  }
  const std::string& address() const { return address_; }

 private:
  int fd_ = -1;
  std::string path_;
  std::string address_;
  std::atomic<bool> stop_{false};
  std::vector<int> accepted_;  // the accepting thread's until it is joined
  std::thread thread_;
};

TEST(ProbeListenerTest, AListenerThatAcceptsPassesAndOneThatStoppedFails) {
  for (Kind kind : {Kind::kTcp, Kind::kDualStack, Kind::kUnix}) {
    SCOPED_TRACE(static_cast<int>(kind));
    {
      Listener live(kind, /*accepting=*/true);
      const absl::Status s = ProbeListener(live.address(), milliseconds(30000));
      EXPECT_TRUE(s.ok()) << s;
    }
    {
      Listener dead(kind, /*accepting=*/false);
      const absl::Status s = ProbeListener(dead.address(), milliseconds(300));
      EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
      EXPECT_THAT(std::string(s.message()), HasSubstr("took no connection within 300 ms"));
    }
  }
  const absl::Status refused = ProbeListener("unix:/nonexistent/rankd.sock", milliseconds(300));
  EXPECT_THAT(std::string(refused.message()), HasSubstr("connect"));
}

TEST(ListenerWatchdogTest, ReportsAListenerDeadAfterItsFailuresInARow) {
  Listener dead(Kind::kDualStack, /*accepting=*/false);
  ListenerWatchdog watchdog(
      dead.address(), {.interval = milliseconds(10), .timeout = milliseconds(50), .failures = 3});
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (watchdog.failure().ok() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(10));
  }
  EXPECT_THAT(std::string(watchdog.failure().message()),
              HasSubstr(absl::StrCat("the gRPC listener on ", dead.address(),
                                     " accepts no connection (3 probes in a row failed")));

  Listener live(Kind::kDualStack, /*accepting=*/true);
  ListenerWatchdog content(live.address(), {.interval = milliseconds(10)});
  std::this_thread::sleep_for(milliseconds(300));  // some probes, each needing an accept
  EXPECT_TRUE(content.failure().ok()) << content.failure();
}

}  // namespace
}  // namespace rankd::server
