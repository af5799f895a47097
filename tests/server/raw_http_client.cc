#include "tests/server/raw_http_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstdint>

namespace rankd::testing {

RawHttpClient::RawHttpClient(int port, std::chrono::milliseconds wait) : wait_(wait) {
  fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  // A send that the server does not take (it refused the body) gives up after the wait.
  const timeval timeout{.tv_sec = static_cast<time_t>(wait.count() / 1000),
                        .tv_usec = static_cast<suseconds_t>(wait.count() % 1000 * 1000)};
  setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  connected_ = connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
}

RawHttpClient::~RawHttpClient() { close(fd_); }

bool RawHttpClient::Send(const std::string& bytes) {
  size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

std::string RawHttpClient::ReadResponse() {
  std::string in;
  while (true) {
    const size_t end = in.find("\r\n\r\n");
    if (end != std::string::npos) {
      const size_t at = in.substr(0, end).find("Content-Length: ");
      const size_t length = at == std::string::npos ? 0 : std::stoul(in.substr(at + 16));
      if (in.size() >= end + 4 + length) {
        buffered_ = in.substr(end + 4 + length);
        return in.substr(0, end + 4 + length);
      }
    }
    if (!ReadMore(&in)) return "";
  }
}

bool RawHttpClient::WaitClosed() {
  std::string in;
  while (ReadMore(&in)) {
  }
  return eof_;
}

bool RawHttpClient::ReadMore(std::string* in) {
  if (!buffered_.empty()) {
    in->append(buffered_);
    buffered_.clear();
    return true;
  }
  pollfd p{.fd = fd_, .events = POLLIN, .revents = 0};
  if (poll(&p, 1, static_cast<int>(wait_.count())) != 1) return false;
  char buffer[4096];
  const ssize_t n = recv(fd_, buffer, sizeof(buffer), 0);
  if (n <= 0) {
    eof_ = true;
    return false;
  }
  in->append(buffer, static_cast<size_t>(n));
  return true;
}

}  // namespace rankd::testing
