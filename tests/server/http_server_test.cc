// HttpServer in-process, over raw TCP sockets: routes, bodies and their limit, keep-alive, and
// that idle, slow and surplus connections neither starve nor block the others. Waits are generous
// liveness bounds, never speed assertions.
#include "rankd/server/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
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
using ::testing::StartsWith;

constexpr milliseconds kLiveness(30000);

// A client connection; every wait is bounded by kLiveness.
class Client {
 public:
  explicit Client(int port) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<uint16_t>(port));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
  }
  ~Client() { close(fd_); }
  bool connected() const { return connected_; }

  bool Send(const std::string& bytes) {
    return send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL) ==
           static_cast<ssize_t>(bytes.size());
  }
  // Reads one response (headers and Content-Length body); empty when the server closed first.
  std::string ReadResponse() {
    std::string in;
    while (true) {
      const size_t end = in.find("\r\n\r\n");
      if (end != std::string::npos) {
        const size_t at = in.find("Content-Length: ");
        const size_t length = at == std::string::npos ? 0 : std::stoul(in.substr(at + 16));
        if (in.size() >= end + 4 + length) {
          buffered_ = in.substr(end + 4 + length);
          return in.substr(0, end + 4 + length);
        }
      }
      if (!ReadMore(&in)) return "";
    }
  }
  // True once the server closed the connection.
  bool WaitClosed() {
    std::string in;
    while (ReadMore(&in)) {
    }
    return eof_;
  }

 private:
  bool ReadMore(std::string* in) {
    if (!buffered_.empty()) {
      in->append(buffered_);
      buffered_.clear();
      return true;
    }
    pollfd p{.fd = fd_, .events = POLLIN, .revents = 0};
    if (poll(&p, 1, static_cast<int>(kLiveness.count())) != 1) return false;
    char buffer[4096];
    const ssize_t n = recv(fd_, buffer, sizeof(buffer), 0);
    if (n <= 0) {
      eof_ = true;
      return false;
    }
    in->append(buffer, static_cast<size_t>(n));
    return true;
  }

  int fd_ = -1;
  bool connected_ = false;
  bool eof_ = false;
  std::string buffered_;
};

std::string Get(const std::string& path) {
  return absl::StrCat("GET ", path, " HTTP/1.1\r\nHost: x\r\n\r\n");
}

class HttpServerTest : public ::testing::Test {
 protected:
  void StartServer(HttpServer::Options options) {
    server_ = std::make_unique<HttpServer>(std::move(options));
    server_->Handle("GET", "/healthz",
                    [](const HttpRequest&, HttpServer::Reply reply) { reply({.body = "ok\n"}); });
    server_->Handle("POST", "/echo", [](const HttpRequest& request, HttpServer::Reply reply) {
      reply({.content_type = "application/json", .body = request.body});
    });
    server_->Handle("GET", "/later", [](const HttpRequest&, HttpServer::Reply reply) {
      std::thread([reply] {
        std::this_thread::sleep_for(milliseconds(50));
        reply({.body = "later\n"});
      }).detach();
    });
    ASSERT_TRUE(server_->Start("127.0.0.1:0").ok());
    ASSERT_GT(server_->port(), 0);
  }
  int port() const { return server_->port(); }

  std::unique_ptr<HttpServer> server_;
};

TEST_F(HttpServerTest, AnswersRoutesAndKeepsTheConnectionAlive) {
  StartServer({});
  Client client(port());
  ASSERT_TRUE(client.connected());
  ASSERT_TRUE(client.Send(Get("/healthz?probe=1")));
  std::string response = client.ReadResponse();
  EXPECT_THAT(response, StartsWith("HTTP/1.1 200 OK\r\n"));
  EXPECT_THAT(response, HasSubstr("Connection: keep-alive"));
  EXPECT_THAT(response, HasSubstr("\r\n\r\nok\n"));
  // Two pipelined requests on the same connection, the second answered from another thread.
  ASSERT_TRUE(client.Send(Get("/later") + Get("/nowhere")));
  EXPECT_THAT(client.ReadResponse(), HasSubstr("\r\n\r\nlater\n"));
  EXPECT_THAT(client.ReadResponse(), StartsWith("HTTP/1.1 404 Not Found\r\n"));
  ASSERT_TRUE(client.Send("POST /healthz HTTP/1.1\r\nContent-Length: 0\r\n\r\n"));
  EXPECT_THAT(client.ReadResponse(), StartsWith("HTTP/1.1 405 Method Not Allowed\r\n"));
  ASSERT_TRUE(client.Send("GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n"));
  EXPECT_THAT(client.ReadResponse(), HasSubstr("Connection: close"));
  EXPECT_TRUE(client.WaitClosed());
}

TEST_F(HttpServerTest, PostBodiesUpToTheLimitAreServedLargerOnesGet413) {
  StartServer({.max_body_bytes = 64});
  Client client(port());
  const std::string body = R"({"query": "q", "items": ["a", "b"]})";
  ASSERT_TRUE(client.Send(absl::StrCat("POST /echo HTTP/1.1\r\nContent-Type: application/json\r\n",
                                       "Content-Length: ", body.size(), "\r\n\r\n", body)));
  const std::string response = client.ReadResponse();
  EXPECT_THAT(response, StartsWith("HTTP/1.1 200 OK\r\n"));
  EXPECT_THAT(response, HasSubstr("\r\n\r\n" + body));
  ASSERT_TRUE(client.Send("POST /echo HTTP/1.1\r\nContent-Length: 65\r\n\r\n"));
  const std::string refused = client.ReadResponse();
  EXPECT_THAT(refused, StartsWith("HTTP/1.1 413 "));
  EXPECT_THAT(refused, HasSubstr("body of 65 bytes exceeds the limit of 64 bytes"));
  EXPECT_TRUE(client.WaitClosed());
}

TEST_F(HttpServerTest, AnOversizedBodySentWholeStillGetsItsAnswerFromTheErrorHook) {
  StartServer({.max_body_bytes = 64, .error_response = [](int status, std::string message) {
                 return HttpResponse{.status = status,
                                     .content_type = "application/json",
                                     .body = absl::StrCat("{\"error\": \"", message, "\"}")};
               }});
  Client client(port());
  // Sent at once, body and all: the server answers after the headers and must not reset the
  // connection while the rest of the body still arrives (the answer would be lost).
  const std::string body(256 << 10, 'x');
  std::thread sender([&] {
    EXPECT_TRUE(client.Send(
        absl::StrCat("POST /echo HTTP/1.1\r\nContent-Length: ", body.size(), "\r\n\r\n", body)));
  });
  const std::string refused = client.ReadResponse();
  sender.join();
  EXPECT_THAT(refused, StartsWith("HTTP/1.1 413 "));
  EXPECT_THAT(refused, HasSubstr("application/json"));
  EXPECT_THAT(refused,
              HasSubstr("{\"error\": \"body of 262144 bytes exceeds the limit of 64 bytes\"}"));
  EXPECT_TRUE(client.WaitClosed());
}

TEST_F(HttpServerTest, MalformedAndOversizedRequestsAreRefused) {
  StartServer({});
  {
    Client client(port());
    ASSERT_TRUE(client.Send("garbage\r\n\r\n"));
    EXPECT_THAT(client.ReadResponse(), StartsWith("HTTP/1.1 400 "));
  }
  {
    Client client(port());
    ASSERT_TRUE(client.Send("GET /healthz HTTP/1.1\r\nX: " + std::string(20000, 'a')));
    EXPECT_THAT(client.ReadResponse(), StartsWith("HTTP/1.1 431 "));
  }
  {
    Client client(port());
    ASSERT_TRUE(client.Send("POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"));
    EXPECT_THAT(client.ReadResponse(), StartsWith("HTTP/1.1 501 "));
  }
}

TEST_F(HttpServerTest, KeepAliveServesABoundedNumberOfRequests) {
  StartServer({.max_requests_per_connection = 2});
  Client client(port());
  ASSERT_TRUE(client.Send(Get("/healthz")));
  EXPECT_THAT(client.ReadResponse(), HasSubstr("Connection: keep-alive"));
  ASSERT_TRUE(client.Send(Get("/healthz")));
  EXPECT_THAT(client.ReadResponse(), HasSubstr("Connection: close"));
  EXPECT_TRUE(client.WaitClosed());
}

TEST_F(HttpServerTest, IdleAndSlowConnectionsAreClosedAfterTheReadTimeout) {
  StartServer({.read_timeout = milliseconds(300)});
  Client idle(port());
  Client slow(port());  // a byte at a time, never a whole request: each byte must not extend it
  ASSERT_TRUE(idle.connected() && slow.connected());
  const std::string request = Get("/healthz");
  std::thread trickle([&] {
    for (size_t i = 0; i + 1 < request.size() && slow.Send(request.substr(i, 1)); ++i) {
      std::this_thread::sleep_for(milliseconds(40));
    }
  });
  EXPECT_TRUE(idle.WaitClosed());
  EXPECT_TRUE(slow.WaitClosed());
  trickle.join();
}

TEST_F(HttpServerTest, AnswersWithHundredsOfIdleAndSlowConnectionsOpen) {
  // More connections than the cap: the newest (the probe) closes the one idle longest.
  StartServer({.max_connections = 100});
  std::vector<std::unique_ptr<Client>> idle;
  for (int i = 0; i < 300; ++i) {
    idle.push_back(std::make_unique<Client>(port()));
    ASSERT_TRUE(idle.back()->connected());
    if (i % 2 == 0) {
      ASSERT_TRUE(idle.back()->Send("GET /healthz HTTP/1.1\r\n"));  // never ends
    }
  }
  for (int i = 0; i < 3; ++i) {
    Client probe(port());
    ASSERT_TRUE(probe.Send(Get("/healthz")));
    EXPECT_THAT(probe.ReadResponse(), StartsWith("HTTP/1.1 200 OK\r\n"));
  }
  // The first connections were closed to make room.
  EXPECT_TRUE(idle.front()->WaitClosed());
}

}  // namespace
}  // namespace rankd::server
