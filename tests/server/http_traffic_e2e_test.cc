// The HTTP servers of `rankd serve` (the JSON API and the metrics port) under what an adversary
// sends them (issue 24, items 1, 5 and 8), through a real server and raw sockets: bodies that cost
// a parser time in their number of objects, bodies nobody wants, ambiguous requests. Waits are
// generous liveness bounds (10 s), never speed assertions.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/golden.h"
#include "tests/server/raw_http_client.h"
#include "tests/server/test_server.h"

namespace rankd::testing {
namespace {

using std::chrono::seconds;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// How long an answer that must not wait on another connection's body may take: far above what
// it takes (milliseconds), far below what a stalled server takes (minutes).
constexpr seconds kPrompt(10);

// One worker of the tiny llama classifier; bodies up to 4 MiB; `server_more` adds lines to the
// server section.
std::string Config(const std::string& server_more = "") {
  return absl::StrCat("model:\n  dir: ", ModelDir("llama-cls"),
                      "\n  threads: 1\n"
                      "server:\n"
                      "  drain_timeout_s: 2\n",
                      server_more,
                      "limits:\n"
                      "  max_message_bytes: 4194304\n"
                      "workers:\n"
                      "  count: 1\n");
}

std::unique_ptr<TestServer> StartReady(const std::string& config) {
  auto server = TestServer::Start(config);
  if (server == nullptr) return nullptr;
  EXPECT_TRUE(server->WaitReady(1, std::chrono::seconds(60))) << server->Log();
  return server;
}

std::string Post(const std::string& path, const std::string& body,
                 const std::string& more_headers = "") {
  return absl::StrCat("POST ", path, " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n",
                      more_headers, "Content-Length: ", body.size(), "\r\n\r\n", body);
}

// `count` copies of `element`, comma-separated, inside `open` and `close`.
std::string Repeated(const std::string& open, const std::string& element, int count,
                     const std::string& close) {
  std::string s = open;
  s.reserve(open.size() + (element.size() + 1) * count + close.size());
  for (int i = 0; i < count; ++i) {
    if (i > 0) s += ',';
    s += element;
  }
  return s + close;
}

constexpr char kSmallCall[] = R"({"query": "rust engineer", "documents": ["Rust developer"]})";

// VmRSS of `pid`, in bytes (0 when unreadable).
int64_t Rss(pid_t pid) {
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  }
  return 0;
}

// Item 1: a body of a million objects (4 MiB) was parsed in time quadratic in their number on the
// API's only thread (minutes): every other call waited, and SIGTERM did not stop the server.
TEST(HttpTrafficTest, BodiesOfManyObjectsStallNoOtherCallAndNoStop) {
  auto server = StartReady(Config());
  ASSERT_NE(server, nullptr);
  const int objects = 1300000;  // 3.9 MB of "{}," within max_message_bytes
  const std::string bodies[][2] = {
      {"/v1/rerank", Repeated(R"({"query": "q", "documents": [)", "{}", objects, "]}")},
      {"/rerank", Repeated(R"({"query": "q", "texts": [)", "{}", objects, "]}")},
      {"/tokenize", Repeated(R"({"inputs": [)", "{}", objects, "]}")},
      {"/v1/rerank", Repeated("[", R"({"text": "a"})", 270000, "]")},
      {"/v1/rerank", Repeated(R"({"query": "q", "documents": ["a"], "x": [)", "{}", objects, "]}")},
  };
  const char* expected[] = {
      "documents: more than max_items=1000 items",
      "texts: more than max_items=1000 items",
      "inputs: more than max_items=1000 items",
      "body: must be a JSON object",
      nullptr,  // parsed whole: a call of one document
  };
  for (size_t i = 0; i < std::size(bodies); ++i) {
    SCOPED_TRACE(bodies[i][0] + std::string(" body ") + std::to_string(i));
    RawHttpClient hostile(server->http_port(), std::chrono::seconds(60));
    ASSERT_TRUE(hostile.Send(Post(bodies[i][0], bodies[i][1])));
    // Another call meanwhile, on its own connection: answered at once.
    RawHttpClient other(server->http_port(), kPrompt);
    ASSERT_TRUE(other.Send(Post("/v1/rerank", kSmallCall)));
    EXPECT_THAT(other.ReadResponse(), StartsWith("HTTP/1.1 200 OK\r\n"));
    const std::string answer = hostile.ReadResponse();
    if (expected[i] == nullptr) {
      EXPECT_THAT(answer, StartsWith("HTTP/1.1 200 OK\r\n"));
    } else {
      EXPECT_THAT(answer, StartsWith("HTTP/1.1 400 "));
      EXPECT_THAT(answer, HasSubstr(expected[i]));
    }
  }
  // The stop while such bodies arrive and are parsed: over within the drain timeout (2 s), the
  // parses under way (each bounded by max_message_bytes: seconds under a sanitizer) and the
  // workers' stop; before, minutes.
  std::vector<std::unique_ptr<RawHttpClient>> hostile;
  for (int i = 0; i < 3; ++i) {
    hostile.push_back(std::make_unique<RawHttpClient>(server->http_port()));
    ASSERT_TRUE(hostile.back()->Send(Post("/v1/rerank", bodies[4][1])));
  }
  server->Signal(SIGTERM);
  const std::optional<int> status = server->WaitExit(std::chrono::seconds(30));
  ASSERT_TRUE(status.has_value()) << "rankd serve did not stop within 30 s of SIGTERM";
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << server->Log();
}

// Item 5: the metrics port buffered bodies (16 MiB each) it never wanted; the API port buffered
// them before it checked the key; and nothing bounded what all connections held together.
TEST(HttpTrafficTest, BodiesAreRefusedAtTheirHeadersWhenUnwanted) {
  const std::string dir = absl::StrCat(::testing::TempDir(), "/http-traffic-", getpid());
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/keys") << "secret-key-1-abcdef\n";
  auto server = StartReady(Config(absl::StrCat("  auth:\n    api_keys_file: ", dir, "/keys\n")));
  ASSERT_NE(server, nullptr);
  const std::string part(1 << 20, 'x');  // the first MiB of a body that never ends
  const int64_t rss_before = Rss(server->pid());
  std::vector<std::unique_ptr<RawHttpClient>> clients;  // kept open, their bodies unfinished
  for (int i = 0; i < 32; ++i) {
    const bool metrics = i % 2 == 0;
    clients.push_back(std::make_unique<RawHttpClient>(
        metrics ? server->metrics_port() : server->http_port(), kPrompt));
    ASSERT_TRUE(clients.back()->Send(
        metrics ? "POST /metrics HTTP/1.1\r\nContent-Length: 4194304\r\n\r\n"
                : "POST /v1/rerank HTTP/1.1\r\nContent-Type: application/json\r\n"
                  "Content-Length: 4194304\r\n\r\n"));
    clients.back()->Send(part);  // read and dropped, or held
  }
  for (int i = 0; i < 32; ++i) {
    SCOPED_TRACE(i);
    const bool metrics = i % 2 == 0;
    const std::string answer = clients[i]->ReadResponse();
    EXPECT_THAT(answer, StartsWith(metrics ? "HTTP/1.1 413 " : "HTTP/1.1 401 "));
    EXPECT_THAT(answer, HasSubstr(metrics ? "takes no request bodies" : "no API key"));
    if (answer.empty()) break;  // no answer within kPrompt: the others would wait as long
  }
  // 32 MiB were sent: nothing of them is held.
  EXPECT_LT(Rss(server->pid()) - rss_before, 8 << 20);
  std::filesystem::remove_all(dir);
}

TEST(HttpTrafficTest, BodiesBeyondTheBufferedBytesOfAllConnectionsGet503) {
  auto server = StartReady(Config("  http_max_buffered_bytes: 8388608\n"));
  ASSERT_NE(server, nullptr);
  const std::string headers = absl::StrCat(
      "POST /v1/rerank HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: ", 4 << 20,
      "\r\n\r\n");
  // Two 4 MiB bodies on their way take the 8 MiB: a third is refused at its headers.
  RawHttpClient first(server->http_port(), kPrompt), second(server->http_port(), kPrompt);
  ASSERT_TRUE(first.Send(headers + "[") && second.Send(headers + "["));
  RawHttpClient third(server->http_port(), kPrompt);
  ASSERT_TRUE(third.Send(headers));
  const std::string refused = third.ReadResponse();
  EXPECT_THAT(refused, StartsWith("HTTP/1.1 503 "));
  EXPECT_THAT(refused, HasSubstr("server.http_max_buffered_bytes=8388608"));
  // Once the first is answered, its bytes are free again.
  ASSERT_TRUE(first.Send(std::string((4 << 20) - 1, ' ')));
  EXPECT_THAT(first.ReadResponse(), StartsWith("HTTP/1.1 400 "));
  RawHttpClient fourth(server->http_port(), kPrompt);
  ASSERT_TRUE(fourth.Send(Post("/v1/rerank", kSmallCall)));
  EXPECT_THAT(fourth.ReadResponse(), StartsWith("HTTP/1.1 200 OK\r\n"));
}

// Item 8: requests that two parsers read two ways, and Expect: 100-continue.
TEST(HttpTrafficTest, AmbiguousRequestsAreRefusedAndExpectContinueIsAnswered) {
  auto server = StartReady(Config());
  ASSERT_NE(server, nullptr);
  const std::string body = kSmallCall;
  const std::string start = "POST /v1/rerank HTTP/1.1\r\nContent-Type: application/json\r\n";
  const std::string ambiguous[][2] = {
      // Both taken, the first before: the rest of the body was answered as a request of its own.
      {absl::StrCat(start, "Content-Length: ", body.size(), "\r\nContent-Length: 10\r\n\r\n", body),
       "Content-Length"},
      {absl::StrCat(start, "Content-Length: ", body.size(), "\r\nContent-Length: ", body.size(),
                    "\r\n\r\n", body),
       "Content-Length given more than once"},
      {absl::StrCat(start, "Content-Length : ", body.size(), "\r\n\r\n", body),
       "malformed header line"},
      {absl::StrCat(start, "Content-Length: +", body.size(), "\r\n\r\n", body),
       "malformed Content-Length"},
  };
  for (const auto& [request, message] : ambiguous) {
    SCOPED_TRACE(request);
    RawHttpClient c(server->http_port(), kPrompt);
    ASSERT_TRUE(c.Send(request));
    const std::string answer = c.ReadResponse();
    EXPECT_THAT(answer, StartsWith("HTTP/1.1 400 "));
    EXPECT_THAT(answer, HasSubstr(message));
    EXPECT_TRUE(c.WaitClosed());  // and nothing more answered
  }
  // 100 Continue once the headers are accepted, then the answer.
  RawHttpClient c(server->http_port(), kPrompt);
  ASSERT_TRUE(c.Send(
      absl::StrCat(start, "Expect: 100-continue\r\nContent-Length: ", body.size(), "\r\n\r\n")));
  EXPECT_EQ(c.ReadResponse(), "HTTP/1.1 100 Continue\r\n\r\n");
  ASSERT_TRUE(c.Send(body));
  EXPECT_THAT(c.ReadResponse(), StartsWith("HTTP/1.1 200 OK\r\n"));
  // A request refused at its headers gets its answer instead.
  RawHttpClient wrong(server->http_port(), kPrompt);
  ASSERT_TRUE(wrong.Send(absl::StrCat("POST /v1/rerank HTTP/1.1\r\nContent-Type: text/plain\r\n",
                                      "Expect: 100-continue\r\nContent-Length: 10\r\n\r\n")));
  EXPECT_THAT(wrong.ReadResponse(), StartsWith("HTTP/1.1 415 "));
}

}  // namespace
}  // namespace rankd::testing
