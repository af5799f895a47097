#include "rankd/server/http/http_server.h"

#include <netdb.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "spdlog/spdlog.h"

namespace rankd::server {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint64_t kListenId = 0;
constexpr uint64_t kWakeId = 1;
constexpr size_t kReadChunk = 16 << 10;
constexpr char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";

const char* Reason(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 204:
      return "No Content";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 413:
      return "Content Too Large";
    case 429:
      return "Too Many Requests";
    case 415:
      return "Unsupported Media Type";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 503:
      return "Service Unavailable";
    case 504:
      return "Gateway Timeout";
    default:
      return "";
  }
}

// "host:port", "[v6]:port" or ":port" (all interfaces).
absl::Status SplitHostPort(const std::string& name, const std::string& address, std::string* host,
                           int* port) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || !absl::SimpleAtoi(address.substr(colon + 1), port) ||
      *port < 0 || *port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": '", address, "' is not HOST:PORT"));
  }
  *host = address.substr(0, colon);
  if (host->size() >= 2 && host->front() == '[' && host->back() == ']') {
    *host = host->substr(1, host->size() - 2);
  }
  if (host->empty()) *host = "0.0.0.0";
  return absl::OkStatus();
}

}  // namespace

struct HttpServer::Connection {
  // kDraining: answered, the write side shut; what the client still sends is read and dropped
  // until it closes too or the deadline passes (a lingering close: closing with unread bytes
  // would reset the connection, and the client could lose the answer, e.g. a 413's, unread).
  enum class State { kReading, kHandling, kWriting, kDraining };
  explicit Connection(int64_t max_body_bytes) : parser(max_body_bytes) {}
  uint64_t id = 0;
  int fd = -1;
  State state = State::kReading;
  Clock::time_point deadline;  // all but kHandling: closed when it passes
  Clock::time_point idle_since;
  std::string in;  // received, not yet parsed: the headers so far, or one read's bytes
  HttpRequestParser parser;
  const Route* route = nullptr;  // the request's, once its headers are accepted
  HttpRequest head;              // its line and headers (no body): for Options::finish_answer
  int64_t reserved = 0;          // its body's bytes, counted in buffered_bytes_ until the answer
  // The answer being written; while reading, a 100 Continue not yet sent whole.
  std::string out;
  size_t written = 0;
  int served = 0;  // requests whose headers were read
  bool close_after = false;
};

struct HttpServer::Replies {
  std::mutex mu;
  bool stopped = false;  // guarded by mu: no more wake-ups (wake_fd is closed)
  int wake_fd = -1;
  std::vector<std::pair<uint64_t, HttpResponse>> ready;  // guarded by mu

  void Post(uint64_t id, HttpResponse response) {
    std::lock_guard<std::mutex> lock(mu);
    if (stopped) return;
    ready.emplace_back(id, std::move(response));
    const uint64_t one = 1;
    (void)!write(wake_fd, &one, sizeof(one));
  }
};

const std::string* HttpResponse::Header(absl::string_view name) const {
  for (const auto& [n, value] : headers) {
    if (absl::EqualsIgnoreCase(n, name)) return &value;
  }
  return nullptr;
}

HttpResponse HttpServer::Error(int status, std::string message) const {
  if (options_.error_response) return options_.error_response(status, std::move(message));
  return {.status = status, .content_type = "text/plain", .body = std::move(message) + "\n"};
}

HttpServer::HttpServer(Options options)
    : options_(std::move(options)), replies_(std::make_shared<Replies>()) {}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::Handle(const std::string& method, const std::string& path, Handler handler,
                        HeaderCheck check) {
  routes_.push_back({method, path, std::move(handler), std::move(check)});
}

absl::Status HttpServer::Start(const std::string& address) {
  std::string host;
  int port = 0;
  if (absl::Status s = SplitHostPort(options_.name, address, &host, &port); !s.ok()) return s;
  auto cannot = [&](absl::string_view what) {
    return absl::UnavailableError(absl::StrCat(options_.name, ": cannot listen on ", address, ": ",
                                               what, ": ", std::strerror(errno)));
  };
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (const int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
      rc != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(options_.name, ": cannot resolve '", host, "': ", gai_strerror(rc)));
  }
  listen_fd_ = socket(found->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  const int on = 1;
  const bool bound = listen_fd_ >= 0 &&
                     setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on)) == 0 &&
                     bind(listen_fd_, found->ai_addr, found->ai_addrlen) == 0 &&
                     listen(listen_fd_, SOMAXCONN) == 0;
  freeaddrinfo(found);
  if (!bound) {
    absl::Status s = cannot("bind");
    if (listen_fd_ >= 0) close(listen_fd_);
    listen_fd_ = -1;
    return s;
  }
  sockaddr_storage bound_address{};
  socklen_t length = sizeof(bound_address);
  getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&bound_address), &length);
  port_ = ntohs(bound_address.ss_family == AF_INET6
                    ? reinterpret_cast<sockaddr_in6*>(&bound_address)->sin6_port
                    : reinterpret_cast<sockaddr_in*>(&bound_address)->sin_port);

  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  replies_->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  epoll_event listen_event{.events = EPOLLIN, .data = {.u64 = kListenId}};
  epoll_event wake_event{.events = EPOLLIN, .data = {.u64 = kWakeId}};
  if (epoll_fd_ < 0 || replies_->wake_fd < 0 ||
      epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &listen_event) != 0 ||
      epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, replies_->wake_fd, &wake_event) != 0) {
    absl::Status s = cannot("epoll");
    Stop();
    return s;
  }
  thread_ = std::thread(&HttpServer::Loop, this);
  return absl::OkStatus();
}

void HttpServer::Stop() {
  {
    std::lock_guard<std::mutex> lock(replies_->mu);
    if (replies_->stopped) return;
    replies_->stopped = true;
    if (thread_.joinable()) {
      const uint64_t one = 1;
      (void)!write(replies_->wake_fd, &one, sizeof(one));
    }
  }
  if (thread_.joinable()) thread_.join();
  for (auto& [id, c] : connections_) close(c->fd);
  connections_.clear();
  for (int fd : {listen_fd_, epoll_fd_, replies_->wake_fd}) {
    if (fd >= 0) close(fd);
  }
  listen_fd_ = epoll_fd_ = replies_->wake_fd = -1;
}

void HttpServer::Loop() {
  std::vector<epoll_event> events(64);
  while (true) {
    {
      std::lock_guard<std::mutex> lock(replies_->mu);
      if (replies_->stopped) return;
    }
    // Sleep until the next deadline at most.
    const Clock::time_point now = Clock::now();
    Clock::time_point next = now + std::chrono::seconds(1);
    for (const auto& [id, c] : connections_) {
      if (c->state != Connection::State::kHandling) next = std::min(next, c->deadline);
    }
    const int timeout_ms = static_cast<int>(
        std::chrono::ceil<std::chrono::milliseconds>(std::max(next - now, Clock::duration(0)))
            .count());
    const int n = epoll_wait(epoll_fd_, events.data(), static_cast<int>(events.size()), timeout_ms);
    for (int i = 0; i < n; ++i) {
      const uint64_t id = events[i].data.u64;
      if (id == kListenId) {
        Accept();
      } else if (id == kWakeId) {
        TakeReplies();
      } else if (auto it = connections_.find(id); it != connections_.end()) {
        Connection& c = *it->second;
        if (events[i].events & (EPOLLERR | EPOLLHUP)) {
          Close(id);
        } else if (c.state == Connection::State::kReading) {
          if (events[i].events & EPOLLOUT) OnWritable(c);  // a 100 Continue
          if (connections_.contains(id) && (events[i].events & EPOLLIN)) OnReadable(c);
        } else if (c.state == Connection::State::kWriting) {
          OnWritable(c);
        } else if (c.state == Connection::State::kDraining) {
          OnDraining(c);
        }
      }
    }
    const Clock::time_point after = Clock::now();
    std::vector<uint64_t> expired;
    for (const auto& [id, c] : connections_) {
      if (c->state != Connection::State::kHandling && c->deadline <= after) expired.push_back(id);
    }
    for (uint64_t id : expired) Close(id);
  }
}

bool HttpServer::EvictIdlest() {
  Connection* idlest = nullptr;
  for (const auto& [id, c] : connections_) {
    if (c->state == Connection::State::kHandling) continue;
    if (idlest == nullptr || c->idle_since < idlest->idle_since) idlest = c.get();
  }
  if (idlest == nullptr) return false;
  Close(idlest->id);
  return true;
}

void HttpServer::Accept() {
  while (true) {
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      // Out of descriptors: make room, else leave the connection in the backlog for later.
      if ((errno == EMFILE || errno == ENFILE) && EvictIdlest()) continue;
      return;
    }
    if (static_cast<int>(connections_.size()) >= options_.max_connections && !EvictIdlest()) {
      close(fd);  // every connection is waiting for its answer
      continue;
    }
    auto c = std::make_unique<Connection>(options_.max_body_bytes);
    c->id = next_id_++;
    c->fd = fd;
    c->idle_since = Clock::now();
    c->deadline = c->idle_since + options_.read_timeout;
    epoll_event event{.events = EPOLLIN, .data = {.u64 = c->id}};
    if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &event) != 0) {
      close(fd);
      continue;
    }
    connections_.emplace(c->id, std::move(c));
  }
}

void HttpServer::Close(uint64_t id) {
  auto it = connections_.find(id);
  if (it == connections_.end()) return;
  buffered_bytes_ -= it->second->reserved;
  close(it->second->fd);  // also leaves the epoll set
  connections_.erase(it);
}

void HttpServer::SetInterest(const Connection& c, uint32_t events) {
  epoll_event event{.events = events, .data = {.u64 = c.id}};
  epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, c.fd, &event);
}

void HttpServer::OnReadable(Connection& c) {
  const uint64_t id = c.id;
  char buffer[kReadChunk];
  while (true) {
    const ssize_t n = recv(c.fd, buffer, sizeof(buffer), 0);
    if (n == 0) {
      Close(id);
      return;
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) Close(id);
      return;
    }
    c.in.append(buffer, static_cast<size_t>(n));
    Parse(c);
    // Read on while the request is still coming: a whole one waits in `in` (a pipelined one)
    // until this one is answered.
    auto it = connections_.find(id);
    if (it == connections_.end() || it->second->state != Connection::State::kReading) return;
  }
}

void HttpServer::Parse(Connection& c) {
  while (true) {
    switch (c.parser.Parse(&c.in)) {
      case HttpRequestParser::Step::kNeedMore:
        return;
      case HttpRequestParser::Step::kError:
        c.close_after = true;
        c.head = c.parser.request();  // what was parsed of it
        c.head.body.clear();
        Respond(c, Error(c.parser.error_status(), c.parser.error_message()));
        return;
      case HttpRequestParser::Step::kHeaders:
        if (!AcceptHeaders(c)) return;
        break;
      case HttpRequestParser::Step::kDone: {
        c.state = Connection::State::kHandling;
        SetInterest(c, 0);
        c.route->handler(std::move(c.parser.request()),
                         [replies = replies_, id = c.id](HttpResponse response) {
                           replies->Post(id, std::move(response));
                         });
        return;
      }
    }
  }
}

bool HttpServer::AcceptHeaders(Connection& c) {
  const HttpRequest& request = c.parser.request();
  c.head = request;  // no body yet
  const int64_t body = c.parser.body_bytes();
  c.close_after = !c.parser.keep_alive() || ++c.served >= options_.max_requests_per_connection;
  const Route* route = nullptr;
  bool path_known = false;
  for (const Route& r : routes_) {
    if (r.path != request.path) continue;
    path_known = true;
    if (r.method == request.method) route = &r;
  }
  std::optional<HttpResponse> refusal;
  if (route == nullptr) {
    refusal = path_known
                  ? Error(405, absl::StrCat(request.method, " is not allowed on ", request.path))
                  : Error(404, absl::StrCat("no such path: ", request.path));
  } else if (route->check) {
    refusal = route->check(request);
  }
  if (!refusal.has_value() && body > options_.max_buffered_bytes - buffered_bytes_) {
    refusal = Error(503, absl::StrCat("the server holds ", buffered_bytes_,
                                      " bytes of request bodies not yet answered: this one's ",
                                      body, " would pass server.http_max_buffered_bytes=",
                                      options_.max_buffered_bytes, "; retry later"));
  }
  if (refusal.has_value()) {
    c.close_after = c.close_after || body > 0;  // its body is not read
    Respond(c, *refusal);
    return false;
  }
  c.route = route;
  c.reserved = body;
  buffered_bytes_ += body;
  const std::string* expect = request.Header("expect");
  if (body > 0 && expect != nullptr && absl::EqualsIgnoreCase(*expect, "100-continue")) {
    const uint64_t id = c.id;
    c.out = kContinue;
    c.written = 0;
    OnWritable(c);  // a client waits for it (curl: 1 s) before it sends the body
    return connections_.contains(id);
  }
  return true;
}

void HttpServer::TakeReplies() {
  uint64_t count;
  (void)!read(replies_->wake_fd, &count, sizeof(count));
  std::vector<std::pair<uint64_t, HttpResponse>> ready;
  {
    std::lock_guard<std::mutex> lock(replies_->mu);
    ready.swap(replies_->ready);
  }
  for (auto& [id, response] : ready) {
    auto it = connections_.find(id);  // gone when the client left meanwhile
    if (it != connections_.end() && it->second->state == Connection::State::kHandling) {
      Respond(*it->second, std::move(response));
    }
  }
}

void HttpServer::Respond(Connection& c, HttpResponse response) {
  buffered_bytes_ -= c.reserved;
  c.reserved = 0;
  if (options_.finish_answer) options_.finish_answer(c.head, &response);
  std::string headers;
  for (const auto& [name, value] : response.headers) {
    absl::StrAppend(&headers, name, ": ", value, "\r\n");
  }
  c.out = absl::StrCat(
      absl::string_view(c.out).substr(c.written),  // what is left of a 100 Continue
      "HTTP/1.1 ", response.status, " ", Reason(response.status),
      "\r\nContent-Type: ", response.content_type, "\r\nContent-Length: ", response.body.size(),
      "\r\nConnection: ", c.close_after ? "close" : "keep-alive", "\r\n", headers, "\r\n",
      response.body);
  c.written = 0;
  c.state = Connection::State::kWriting;
  c.deadline = Clock::now() + options_.read_timeout;
  SetInterest(c, EPOLLOUT);
  OnWritable(c);
}

void HttpServer::OnDraining(Connection& c) {
  char buffer[kReadChunk];
  while (true) {
    const ssize_t n = recv(c.fd, buffer, sizeof(buffer), 0);
    if (n > 0 || (n < 0 && errno == EINTR)) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    Close(c.id);  // the client closed its side too (or the connection failed)
    return;
  }
}

void HttpServer::OnWritable(Connection& c) {
  while (c.written < c.out.size()) {
    const ssize_t n = send(c.fd, c.out.data() + c.written, c.out.size() - c.written, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        // EPOLLOUT brings us back (reading, for the rest of a 100 Continue).
        if (c.state == Connection::State::kReading) SetInterest(c, EPOLLIN | EPOLLOUT);
        return;
      }
      Close(c.id);
      return;
    }
    c.written += static_cast<size_t>(n);
  }
  c.out.clear();
  c.written = 0;
  if (c.state == Connection::State::kReading) {  // a 100 Continue, sent
    SetInterest(c, EPOLLIN);
    return;
  }
  if (c.close_after) {
    shutdown(c.fd, SHUT_WR);
    c.in.clear();
    c.state = Connection::State::kDraining;
    SetInterest(c, EPOLLIN);
    OnDraining(c);
    return;
  }
  c.state = Connection::State::kReading;
  c.idle_since = Clock::now();
  c.deadline = c.idle_since + options_.read_timeout;
  c.parser.Reset();
  c.route = nullptr;
  SetInterest(c, EPOLLIN);
  Parse(c);  // a pipelined request may be buffered already
}

}  // namespace rankd::server
