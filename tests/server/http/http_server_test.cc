// HttpServer in-process, over raw TCP sockets: routes, bodies and their limit, keep-alive, and
// that idle, slow and surplus connections neither starve nor block the others. Waits are generous
// liveness bounds, never speed assertions.
#include "rankd/server/http/http_server.h"

#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/server/raw_http_client.h"

namespace rankd::server {
namespace {

using Client = rankd::testing::RawHttpClient;
using std::chrono::milliseconds;
using ::testing::HasSubstr;
using ::testing::StartsWith;

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
    // Echoes too, for a request with header "key: ok" only, checked before its body is read.
    server_->Handle(
        "POST", "/guarded",
        [](HttpRequest request, HttpServer::Reply reply) { reply({.body = request.body}); },
        [](const HttpRequest& request) -> std::optional<HttpResponse> {
          const std::string* key = request.Header("key");
          if (key != nullptr && *key == "ok") return std::nullopt;
          return HttpResponse{.status = 401, .body = "no key\n"};
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

std::string Guarded(int64_t length, const std::string& more_headers = "") {
  return absl::StrCat("POST /guarded HTTP/1.1\r\nkey: ok\r\n", more_headers,
                      "Content-Length: ", length, "\r\n\r\n");
}

TEST_F(HttpServerTest, BodiesAreReadOnlyOnceTheirRequestIsWanted) {
  StartServer({.max_body_bytes = 64, .max_buffered_bytes = 100});
  {  // Refused by the route's check at its headers: the body is never waited for.
    Client client(port());
    ASSERT_TRUE(client.Send("POST /guarded HTTP/1.1\r\nContent-Length: 50\r\n\r\n"));
    EXPECT_THAT(client.ReadResponse(), StartsWith("HTTP/1.1 401 "));
    EXPECT_TRUE(client.WaitClosed());
  }
  // 60 bytes on their way leave 40 of the 100: a body of 60 more is refused, one of 40 is not.
  Client first(port());
  ASSERT_TRUE(first.Send(Guarded(60) + "abc"));
  Client second(port());
  ASSERT_TRUE(second.Send(Guarded(60)));
  const std::string refused = second.ReadResponse();
  EXPECT_THAT(refused, StartsWith("HTTP/1.1 503 "));
  EXPECT_THAT(refused, HasSubstr("server.http_max_buffered_bytes=100"));
  EXPECT_TRUE(second.WaitClosed());
  Client third(port());
  ASSERT_TRUE(third.Send(Guarded(40) + std::string(40, 'c')));
  EXPECT_THAT(third.ReadResponse(), HasSubstr("\r\n\r\n" + std::string(40, 'c')));
  // Answered, the first's bytes are free again.
  ASSERT_TRUE(first.Send(std::string(57, 'a')));
  EXPECT_THAT(first.ReadResponse(), HasSubstr("\r\n\r\nabc" + std::string(57, 'a')));
  Client fourth(port());
  ASSERT_TRUE(fourth.Send(Guarded(60) + std::string(60, 'd')));
  EXPECT_THAT(fourth.ReadResponse(), StartsWith("HTTP/1.1 200 OK\r\n"));
}

TEST_F(HttpServerTest, ExpectContinueIsAnsweredOnceTheHeadersAreAccepted) {
  StartServer({});
  Client client(port());
  ASSERT_TRUE(client.Send(Guarded(5, "Expect: 100-continue\r\n")));
  EXPECT_EQ(client.ReadResponse(), "HTTP/1.1 100 Continue\r\n\r\n");
  ASSERT_TRUE(client.Send("hello"));
  const std::string answer = client.ReadResponse();
  EXPECT_THAT(answer, StartsWith("HTTP/1.1 200 OK\r\n"));
  EXPECT_THAT(answer, HasSubstr("Connection: keep-alive\r\n\r\nhello"));
  // Refused at its headers: the final answer instead of 100 Continue.
  Client refused(port());
  ASSERT_TRUE(
      refused.Send("POST /guarded HTTP/1.1\r\nExpect: 100-continue\r\n"
                   "Content-Length: 5\r\n\r\n"));
  EXPECT_THAT(refused.ReadResponse(), StartsWith("HTTP/1.1 401 "));
}

TEST_F(HttpServerTest, APortWithoutBodiesRefusesThemAtTheirHeaders) {
  StartServer({.max_body_bytes = 0});
  Client client(port());
  ASSERT_TRUE(client.Send("POST /echo HTTP/1.1\r\nContent-Length: 0\r\n\r\n"));
  EXPECT_THAT(client.ReadResponse(), StartsWith("HTTP/1.1 200 OK\r\n"));
  ASSERT_TRUE(client.Send("POST /echo HTTP/1.1\r\nContent-Length: 16777216\r\n\r\n"));
  const std::string refused = client.ReadResponse();
  EXPECT_THAT(refused, StartsWith("HTTP/1.1 413 "));
  EXPECT_THAT(refused, HasSubstr("this port takes no request bodies"));
  EXPECT_TRUE(client.WaitClosed());
}

// The parser alone: every request read one way, or refused.
TEST(HttpRequestParserTest, RequestsSplitAnywhereParseTheSame) {
  const std::string bytes =
      "POST /a?x=1 HTTP/1.1\r\nHost: h\r\nX-Two:  v  \r\nContent-Length: 3\r\n\r\nabc"
      "GET /b HTTP/1.0\r\n\r\n";
  for (size_t chunk : {bytes.size(), size_t{1}, size_t{7}}) {
    SCOPED_TRACE(chunk);
    HttpRequestParser parser(64);
    std::string in;
    std::vector<HttpRequest> requests;
    std::vector<bool> keep_alive;
    size_t at = 0;
    while (true) {
      const HttpRequestParser::Step step = parser.Parse(&in);
      ASSERT_NE(step, HttpRequestParser::Step::kError) << parser.error_message();
      if (step == HttpRequestParser::Step::kDone) {
        requests.push_back(std::move(parser.request()));
        keep_alive.push_back(parser.keep_alive());
        parser.Reset();
      } else if (step == HttpRequestParser::Step::kNeedMore) {
        if (at >= bytes.size()) break;
        in += bytes.substr(at, chunk);
        at += chunk;
      }
    }
    ASSERT_EQ(requests.size(), 2u);
    EXPECT_EQ(requests[0].method, "POST");
    EXPECT_EQ(requests[0].path, "/a");
    EXPECT_EQ(requests[0].query, "x=1");
    ASSERT_NE(requests[0].Header("x-two"), nullptr);
    EXPECT_EQ(*requests[0].Header("x-two"), "v");
    EXPECT_EQ(requests[0].body, "abc");
    EXPECT_TRUE(keep_alive[0]);
    EXPECT_EQ(requests[1].path, "/b");
    EXPECT_FALSE(keep_alive[1]);  // HTTP/1.0
  }
}

TEST(HttpRequestParserTest, AmbiguousOrUnsupportedRequestsAreRefused) {
  struct Case {
    std::string request;
    int status;
    std::string message;
  };
  const Case cases[] = {
      {"POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n", 400, "Content-Length"},
      {"POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\n", 400,
       "Content-Length given more than once"},
      {"POST / HTTP/1.1\r\nContent-Length: 3, 3\r\n\r\n", 400,
       "Content-Length given more than once"},
      {"POST / HTTP/1.1\r\nContent-Length : 3\r\n\r\n", 400, "malformed header line"},
      {"POST / HTTP/1.1\r\nContent-Length: +3\r\n\r\n", 400, "malformed Content-Length"},
      {"POST / HTTP/1.1\r\nContent-Length: -3\r\n\r\n", 400, "malformed Content-Length"},
      {"POST / HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n", 400,
       "malformed Content-Length"},
      {"POST / HTTP/1.1\r\nContent-Length: 65\r\n\r\n", 413,
       "body of 65 bytes exceeds the limit of 64 bytes"},
      {"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", 501, "Transfer-Encoding"},
      {"GET http://h/ HTTP/1.1\r\n\r\n", 400, "malformed request line"},
      {"GET / HTTP/2.0\r\n\r\n", 400, "malformed request line"},
      {"GET /\r\n\r\n", 400, "malformed request line"},
      {"GET / HTTP/1.1\r\nX: " + std::string(20000, 'a') + "\r\n\r\n", 431, "exceed"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.request.substr(0, 80));
    HttpRequestParser parser(64);
    std::string in = c.request;
    EXPECT_EQ(parser.Parse(&in), HttpRequestParser::Step::kError);
    EXPECT_EQ(parser.error_status(), c.status);
    EXPECT_THAT(parser.error_message(), HasSubstr(c.message));
  }
}

}  // namespace
}  // namespace rankd::server
