// End-to-end tests of `rankd serve`: a real server process with two worker processes, called
// through the generated gRPC client. Timeouts here are generous liveness bounds, never speed
// assertions.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "google/protobuf/descriptor.pb.h"
#include "grpc/reflection/v1alpha/reflection.grpc.pb.h"
#include "grpcpp/generic/generic_stub.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "rankd/common/grpc_status.h"
#include "tests/common/golden.h"
#include "tests/server/test_server.h"

namespace rankd::testing {
namespace {

using grpc::StatusCode;
using ::testing::HasSubstr;
using HealthStatus = grpc::health::v1::HealthCheckResponse;
using rankd::v1::ScoreRequest;
using rankd::v1::ScoreResponse;
using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr milliseconds kLiveness = seconds(60);

struct MainOptions {
  std::string model_settings;   // more lines of the model section
  std::string worker_settings;  // more lines of the workers section
  std::string server_settings;  // more lines of the server section
  int max_query_tokens = 32;
  int max_item_tokens = 128;
  int max_inflight = 4;  // several calls per worker: its scheduler scores them together
  int64_t max_message_bytes = 65536;
  std::string log_format = "text";
};

// A YAML double-quoted scalar (JSON strings are valid ones).
std::string Quoted(const std::string& s) { return nlohmann::json(s).dump(); }

// Two workers holding several calls each, tight limits (so that the limit tests stay small), quick
// hang detection.
std::string MainConfig(const std::string& model, const MainOptions& o = {}) {
  return absl::StrCat("model:\n  dir: ", ModelDir(model), "\n", o.model_settings,
                      "  threads: 1\n"
                      "server:\n"
                      "  queue_size: 64\n"
                      "  stream_chunk_items: 3\n",
                      o.server_settings,
                      "limits:\n"
                      "  max_items: 64\n"
                      "  max_query_tokens: ",
                      o.max_query_tokens, "\n", "  max_item_tokens: ", o.max_item_tokens, "\n",
                      "  max_request_tokens: 4096\n"
                      "  max_message_bytes: ",
                      o.max_message_bytes, "\n",
                      "workers:\n"
                      "  count: 2\n"
                      "  ping_interval_s: 0.2\n"
                      "  ping_timeout_s: 2\n"
                      "  restart_backoff_s: 0.1\n"
                      "  max_inflight: ",
                      o.max_inflight, "\n", o.worker_settings,
                      "logging:\n"
                      "  access_log: true\n"
                      "  format: ",
                      o.log_format, "\n");
}

// `max_inflight` calls per worker and a queue of two, so that stopping the workers (SIGSTOP)
// fills both deterministically; pings wait long, so a stopped worker is not taken for hung; a
// pessimistic cost prior for deadline admission. `server_settings`: more lines of the server
// section.
std::string ControlConfig(int max_inflight = 1, const std::string& server_settings = "") {
  return absl::StrCat("model:\n  dir: ", ModelDir("llama-cls"),
                      "\n"
                      "  threads: 1\n"
                      "server:\n"
                      "  queue_size: 2\n"
                      "  initial_seconds_per_item: 0.05\n",
                      server_settings,
                      "workers:\n"
                      "  count: 2\n"
                      "  max_inflight: ",
                      max_inflight,
                      "\n"
                      "  ping_interval_s: 0.2\n"
                      "  ping_timeout_s: 60\n");
}

int HiddenSize(const std::string& model) {
  std::ifstream in(ModelDir(model) + "/config.json");
  return nlohmann::json::parse(in).at("hidden_size").get<int>();
}

ScoreRequest TextRequest(const GoldenCase& c) {
  ScoreRequest r;
  r.set_query(c.query);
  for (size_t i = 0; i < c.items.size(); ++i) {
    auto* item = r.add_items();
    item->set_text(c.items[i].text);
    item->set_id(absl::StrCat("item-", i));
  }
  return r;
}

ScoreRequest IdsRequest(const GoldenCase& c) {
  ScoreRequest r;
  r.mutable_query_ids()->Add(c.prefix_ids.begin(), c.prefix_ids.end());
  for (const GoldenItem& it : c.items) {
    r.add_items()->mutable_token_ids()->mutable_ids()->Add(it.ids.begin(), it.ids.end());
  }
  return r;
}

ScoreRequest EmbeddingRequest(const GoldenCase& c, int hidden) {
  ScoreRequest r;
  r.mutable_query_ids()->Add(c.prefix_ids.begin(), c.prefix_ids.end());
  for (const GoldenItem& it : c.items) {
    auto* e = r.add_items()->mutable_embedding();
    e->set_rows(static_cast<int>(it.embedding.size()) / hidden);
    e->mutable_values()->Add(it.embedding.begin(), it.embedding.end());
  }
  return r;
}

grpc::Status Score(const TestServer& server, const ScoreRequest& request, ScoreResponse* response,
                   milliseconds timeout = seconds(30)) {
  auto stub = server.NewScorer();
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + timeout);
  return stub->Score(&context, request, response);
}

// Scores of `response` against the golden case (f32 tolerance); returns the first mismatch.
std::string GoldenMismatch(const ScoreResponse& response, const GoldenCase& c,
                           bool sigmoid = false) {
  if (response.scores_size() != static_cast<int>(c.items.size())) {
    return absl::StrCat(response.scores_size(), " scores for ", c.items.size(), " items");
  }
  for (size_t i = 0; i < c.items.size(); ++i) {
    const double ref = sigmoid ? 1.0 / (1.0 + std::exp(-c.items[i].score)) : c.items[i].score;
    const auto& s = response.scores(static_cast<int>(i));
    if (!s.scored() || !WithinF32Tolerance(s.score(), ref)) {
      return absl::StrCat("item ", i, ": got ", s.score(), " (scored=", s.scored(), "), want ",
                          ref);
    }
  }
  return "";
}

// A Score call in flight, for the tests that hold workers stopped.
class AsyncScore {
 public:
  AsyncScore(const TestServer& server, ScoreRequest request,
             std::optional<milliseconds> timeout = std::nullopt)
      : stub_(server.NewScorer()), request_(std::move(request)) {
    if (timeout) context_.set_deadline(std::chrono::system_clock::now() + *timeout);
    stub_->async()->Score(&context_, &request_, &response_, [this](grpc::Status s) {
      static std::atomic<int> sequence{0};
      order_ = ++sequence;
      done_.set_value(std::move(s));
    });
    future_ = done_.get_future();
  }
  bool Done(milliseconds wait = milliseconds(0)) {
    return future_.wait_for(wait) == std::future_status::ready;
  }
  grpc::Status Wait() {
    EXPECT_EQ(future_.wait_for(kLiveness), std::future_status::ready);
    return future_.get();
  }
  const ScoreResponse& response() const { return response_; }
  int order() const { return order_; }  // completion order among all AsyncScore calls

 private:
  std::unique_ptr<rankd::v1::Scorer::Stub> stub_;
  grpc::ClientContext context_;
  ScoreRequest request_;
  ScoreResponse response_;
  std::promise<grpc::Status> done_;
  std::future<grpc::Status> future_;
  std::atomic<int> order_{0};
};

// Waits until `victim` has been replaced: two workers, neither of them `victim`, both up. (The
// new pid appears only after the server reaped the victim, so the gauge cannot be stale.)
bool WaitForReplacement(const TestServer& server, pid_t victim) {
  const auto deadline = std::chrono::steady_clock::now() + kLiveness;
  while (std::chrono::steady_clock::now() < deadline) {
    const std::vector<pid_t> pids = server.WorkerPids();
    if (pids.size() == 2 && pids[0] != victim && pids[1] != victim &&
        server.Metric("rankd_workers_up") == 2 &&
        server.Health("rankd.v1.Scorer") == HealthStatus::SERVING) {
      return true;
    }
    std::this_thread::sleep_for(milliseconds(20));
  }
  return false;
}

std::unique_ptr<TestServer> StartReady(const std::string& config) {
  auto server = TestServer::Start(config);
  if (server == nullptr) return nullptr;
  EXPECT_TRUE(server->WaitReady(2, kLiveness)) << server->Log();
  return server;
}

// ---- API, health, reflection, golden scores -------------------------------------------------

TEST(ServeTest, HealthAndReflectionAnswer) {
  auto server = StartReady(MainConfig("llama-cls"));
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(server->Health(""), HealthStatus::SERVING);
  EXPECT_EQ(server->Health("rankd.v1.Scorer"), HealthStatus::SERVING);
  EXPECT_EQ(server->Health("no.such.Service"), std::nullopt);  // NOT_FOUND

  auto reflection = grpc::reflection::v1alpha::ServerReflection::NewStub(server->channel());
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + seconds(30));
  auto stream = reflection->ServerReflectionInfo(&context);
  grpc::reflection::v1alpha::ServerReflectionRequest request;
  grpc::reflection::v1alpha::ServerReflectionResponse response;
  request.set_list_services("");
  ASSERT_TRUE(stream->Write(request));
  ASSERT_TRUE(stream->Read(&response));
  std::vector<std::string> services;
  for (const auto& s : response.list_services_response().service()) services.push_back(s.name());
  EXPECT_THAT(services, ::testing::IsSupersetOf({"rankd.v1.Scorer", "grpc.health.v1.Health"}));

  request.set_file_containing_symbol("rankd.v1.Scorer");
  ASSERT_TRUE(stream->Write(request));
  ASSERT_TRUE(stream->Read(&response));
  ASSERT_GT(response.file_descriptor_response().file_descriptor_proto_size(), 0);
  google::protobuf::FileDescriptorProto file;
  ASSERT_TRUE(file.ParseFromString(response.file_descriptor_response().file_descriptor_proto(0)));
  EXPECT_EQ(file.name(), "rankd/v1/scorer.proto");
  ASSERT_GT(file.service_size(), 0);
  EXPECT_EQ(file.service(0).name(), "Scorer");
  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());
}

// A TCP connection to 127.0.0.1:port; -1 when it cannot connect.
int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

TEST(ServeTest, HttpProbesAnswerWithHundredsOfIdleAndSlowConnectionsOpen) {
  auto server = StartReady(MainConfig("llama-cls"));
  ASSERT_NE(server, nullptr);
  // Idle connections, and connections that started a request and never finish it: more than
  // server.http_max_connections (256), which closes the idlest to make room.
  std::vector<int> connections;
  for (int i = 0; i < 300; ++i) {
    const int fd = Connect(server->metrics_port());
    ASSERT_GE(fd, 0);
    connections.push_back(fd);
    const std::string partial = "GET /metrics HTTP/1.1\r\n";
    if (i % 2 == 1) {
      ASSERT_EQ(send(fd, partial.data(), partial.size(), MSG_NOSIGNAL), partial.size());
    }
  }
  httplib::Client client("127.0.0.1", server->metrics_port());
  client.set_connection_timeout(30);
  client.set_read_timeout(30);
  for (const std::string path : {"/healthz", "/readyz", "/metrics"}) {
    const auto res = client.Get(path);
    ASSERT_TRUE(res) << path << ": " << httplib::to_string(res.error());
    EXPECT_EQ(res->status, 200) << path;
    if (path == "/metrics") {
      EXPECT_THAT(res->body, HasSubstr("rankd_workers_up 2"));
    }
  }
  for (int fd : connections) close(fd);
}

TEST(ServeTest, GoldenScoresLlamaClassifier) {
  const Golden golden = LoadGolden("llama-cls");
  auto server = StartReady(MainConfig("llama-cls"));
  ASSERT_NE(server, nullptr);
  int requests = 0;
  int64_t items = 0;
  for (size_t k = 0; k < golden.cases.size(); ++k) {
    const GoldenCase& c = golden.cases[k];
    SCOPED_TRACE(absl::StrCat("case ", k, ": ", c.query));
    for (bool as_ids : {false, true}) {
      ScoreRequest request = as_ids ? IdsRequest(c) : TextRequest(c);
      request.set_request_id(absl::StrCat("golden-", k));
      ScoreResponse response;
      const grpc::Status s = Score(*server, request, &response);
      ++requests;
      items += static_cast<int64_t>(c.items.size());
      ASSERT_TRUE(s.ok()) << s.error_message();
      EXPECT_EQ(GoldenMismatch(response, c), "") << (as_ids ? "token ids" : "text");
      EXPECT_EQ(response.request_id(), absl::StrCat("golden-", k));
      EXPECT_EQ(response.model(), "llama-cls");
      EXPECT_EQ(response.usage().prefix_tokens(), static_cast<int>(c.prefix_ids.size()));
      int64_t item_tokens = 0;
      for (const auto& it : c.items) item_tokens += static_cast<int64_t>(it.ids.size());
      EXPECT_EQ(response.usage().item_tokens(), item_tokens);
      EXPECT_EQ(response.usage().items_scored(), static_cast<int>(c.items.size()));
      if (!as_ids) {
        EXPECT_EQ(response.scores(0).id(), "item-0");
      }
    }
  }
  const int hidden = HiddenSize("llama-cls");
  ASSERT_FALSE(golden.embedding_cases.empty());
  for (const GoldenCase& c : golden.embedding_cases) {
    ScoreResponse response;
    const grpc::Status s = Score(*server, EmbeddingRequest(c, hidden), &response);
    ++requests;
    items += static_cast<int64_t>(c.items.size());
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(GoldenMismatch(response, c), "") << "embeddings";
  }
  // Sigmoid on request.
  const GoldenCase& big = golden.cases[5];  // 17 items
  {
    ScoreRequest request = TextRequest(big);
    request.set_apply_sigmoid(true);
    request.set_priority(rankd::v1::PRIORITY_BATCH);
    ScoreResponse response;
    ASSERT_TRUE(Score(*server, request, &response).ok());
    ++requests;
    items += static_cast<int64_t>(big.items.size());
    EXPECT_EQ(GoldenMismatch(response, big, /*sigmoid=*/true), "");
  }
  // depth: the first 5 items scored, the rest marked unscored.
  {
    ScoreRequest request = TextRequest(big);
    request.set_depth(5);
    request.set_skip_cache(true);  // scored again: the items are the big request's
    ScoreResponse response;
    ASSERT_TRUE(Score(*server, request, &response).ok());
    ++requests;
    items += 5;
    ASSERT_EQ(response.scores_size(), static_cast<int>(big.items.size()));
    for (int i = 0; i < response.scores_size(); ++i) {
      EXPECT_EQ(response.scores(i).scored(), i < 5) << i;
      EXPECT_EQ(response.scores(i).id(), absl::StrCat("item-", i));
      if (i < 5) {
        EXPECT_TRUE(WithinF32Tolerance(response.scores(i).score(), big.items[i].score));
      }
    }
    EXPECT_EQ(response.usage().items_scored(), 5);
    EXPECT_EQ(response.depth(), 5);
  }
  EXPECT_EQ(server->Metric("rankd_requests_total{code=\"OK\"}"), requests);
  EXPECT_EQ(server->Metric("rankd_items_scored_total"), items);
}

// The result cache (on by default): a repeated (query, item) is answered without a worker, with
// the bits first computed; a mixed request sends only its misses and merges them in order; a
// worker's error about a miss names the item's index in the caller's request; skip_cache scores
// everything again.
TEST(ServeTest, ResultCacheAnswersRepeatedItems) {
  const Golden golden = LoadGolden("llama-cls");
  const GoldenCase& c = golden.cases[4];
  ASSERT_GE(c.items.size(), 5u);
  auto server = StartReady(MainConfig("llama-cls"));
  ASSERT_NE(server, nullptr);
  ScoreRequest first = TextRequest(c);
  first.mutable_items()->DeleteSubrange(3, first.items_size() - 3);
  ScoreResponse r1;
  ASSERT_TRUE(Score(*server, first, &r1).ok());
  EXPECT_EQ(r1.depth(), 3);
  EXPECT_EQ(r1.usage().items_scored(), 3);
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(r1.scores(i).cached()) << i;

  ScoreResponse r2;
  ASSERT_TRUE(Score(*server, first, &r2).ok());
  EXPECT_EQ(r2.usage().items_scored(), 0);  // no worker call
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(r2.scores(i).cached()) << i;
    EXPECT_TRUE(r2.scores(i).scored()) << i;
    EXPECT_EQ(r2.scores(i).score(), r1.scores(i).score()) << i;  // the same bits
    EXPECT_EQ(r2.scores(i).id(), absl::StrCat("item-", i));
  }
  EXPECT_EQ(server->Metric("rankd_result_cache_hits_total"), 3);

  // Items 0..4: 0..2 cached, 3 and 4 scored now, in order.
  ScoreRequest mixed = TextRequest(c);
  mixed.mutable_items()->DeleteSubrange(5, mixed.items_size() - 5);
  ScoreResponse r3;
  ASSERT_TRUE(Score(*server, mixed, &r3).ok());
  ASSERT_EQ(r3.scores_size(), 5);
  EXPECT_EQ(r3.usage().items_scored(), 2);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(r3.scores(i).cached(), i < 3) << i;
    EXPECT_TRUE(WithinF32Tolerance(r3.scores(i).score(), c.items[i].score)) << i;
    EXPECT_EQ(r3.scores(i).id(), absl::StrCat("item-", i));
  }

  // A miss the worker refuses (over max_item_tokens=128) at index 1 of the misses' request is
  // items[6] of the caller's.
  ScoreRequest bad = mixed;
  std::string long_text;
  for (int w = 0; w < 400; ++w) absl::StrAppend(&long_text, "word", w, " ");
  bad.add_items()->set_text("a new item");
  bad.add_items()->set_text(long_text);
  ScoreResponse r4;
  const grpc::Status s = Score(*server, bad, &r4);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("items[6].text"));

  // skip_cache: every item goes to a worker again, nothing marked cached.
  mixed.set_skip_cache(true);
  ScoreResponse r5;
  ASSERT_TRUE(Score(*server, mixed, &r5).ok());
  EXPECT_EQ(r5.usage().items_scored(), 5);
  for (int i = 0; i < 5; ++i) EXPECT_FALSE(r5.scores(i).cached()) << i;
  EXPECT_GT(server->Metric("rankd_result_cache_bytes").value_or(0), 0);
}

// TRUNCATE_END through the server: a text or token-ids item over max_item_tokens=128 is cut and
// scored (Usage counts the 128 tokens), also when it is the one miss of a request whose other
// item is cached (the worker gets only the miss); the cached score of a cut item never answers a
// TRUNCATE_NONE call, which is refused as before.
TEST(ServeTest, TruncateEndCutsAndTheCacheKeepsTheModesApart) {
  auto server = StartReady(MainConfig("llama-cls"));
  ASSERT_NE(server, nullptr);
  std::string long_text;
  for (int w = 0; w < 400; ++w) absl::StrAppend(&long_text, "word", w, " ");
  ScoreRequest cut;
  cut.set_query("rust engineer");
  cut.add_items()->set_text(long_text);
  cut.set_truncate(rankd::v1::TRUNCATE_END);
  ScoreResponse r1;
  ASSERT_TRUE(Score(*server, cut, &r1).ok());
  EXPECT_FALSE(r1.scores(0).cached());
  EXPECT_EQ(r1.usage().item_tokens(), 128);

  ScoreRequest refused = cut;
  refused.set_truncate(rankd::v1::TRUNCATE_NONE);
  ScoreResponse r2;
  const grpc::Status s = Score(*server, refused, &r2);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("items[0].text: "));
  EXPECT_THAT(s.error_message(), HasSubstr(" tokens exceeds max_item_tokens=128"));

  ScoreResponse r3;
  ASSERT_TRUE(Score(*server, cut, &r3).ok());
  EXPECT_TRUE(r3.scores(0).cached());
  EXPECT_EQ(r3.scores(0).score(), r1.scores(0).score());

  // A cached item and a long miss of token ids: the miss alone goes to a worker, cut.
  ScoreRequest mixed = cut;
  auto* ids = mixed.add_items()->mutable_token_ids();
  for (int i = 0; i < 300; ++i) ids->add_ids(10 + i % 500);
  ScoreResponse r4;
  ASSERT_TRUE(Score(*server, mixed, &r4).ok());
  EXPECT_TRUE(r4.scores(0).cached());
  EXPECT_FALSE(r4.scores(1).cached());
  EXPECT_EQ(r4.usage().items_scored(), 1);
  EXPECT_EQ(r4.usage().item_tokens(), 128);
  ScoreRequest by_hand;
  by_hand.set_query("rust engineer");
  by_hand.set_skip_cache(true);
  auto* kept = by_hand.add_items()->mutable_token_ids();
  for (int i = 0; i < 128; ++i) kept->add_ids(10 + i % 500);
  ScoreResponse r5;
  ASSERT_TRUE(Score(*server, by_hand, &r5).ok());
  EXPECT_EQ(r4.scores(1).score(), r5.scores(0).score());
}

// Hostile text (issue 13): the front end refuses text over its byte limit (max_item_bytes,
// max_query_bytes; here derived, 32 x 128 = 4096 and 32 x 32 = 1024) before anything is queued;
// text under it but over max_item_tokens is refused by the worker naming the item, after
// tokenizing a bounded prefix; TRUNCATE_END scores an oversized item as its first bytes.
TEST(ServeTest, OversizedTextIsRefusedBeforeItIsQueuedOrCutUnderTruncation) {
  MainOptions o;
  o.max_message_bytes = 16 << 20;
  auto server = StartReady(MainConfig("llama-cls", o));
  ASSERT_NE(server, nullptr);
  // 11 bytes, then "naïve café " (13 bytes) repeated: byte 4096 is the second one of an "ï".
  std::string huge = "abcdefghijk";
  while (huge.size() < 15'000'000) huge += "naïve café ";
  ScoreRequest request;
  request.set_query("rust engineer");
  for (int i = 0; i < 3; ++i) request.add_items()->set_text("kubernetes operator");
  request.add_items()->set_text(huge);
  ScoreResponse response;
  grpc::Status s = Score(*server, request, &response);
  EXPECT_EQ(s.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(),
            absl::StrCat("items[3].text: ", huge.size(), " bytes exceeds max_item_bytes=4096"));

  ScoreRequest query = request;
  query.mutable_items(3)->set_text("go developer");
  query.set_query(std::string(1025, 'q'));
  s = Score(*server, query, &response);
  EXPECT_EQ(s.error_message(), "query: 1025 bytes exceeds max_query_bytes=1024");

  // Many medium items, each under the byte limit and over the token limit.
  ScoreRequest many;
  many.set_query("rust engineer");
  for (int i = 0; i < 64; ++i) many.add_items()->set_text(huge.substr(11, 4000));
  s = Score(*server, many, &response);
  EXPECT_EQ(s.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("items[0].text: at least "));
  EXPECT_THAT(s.error_message(), HasSubstr(" tokens exceeds max_item_tokens=128"));

  // TRUNCATE_END: the worker keeps the first 4095 bytes (the "ï" is not split), then 128 tokens.
  request.set_truncate(rankd::v1::TRUNCATE_END);
  request.set_skip_cache(true);
  ASSERT_TRUE(Score(*server, request, &response).ok());
  ScoreRequest by_hand = request;
  by_hand.mutable_items(3)->set_text(huge.substr(0, 4095));
  ScoreResponse expected;
  ASSERT_TRUE(Score(*server, by_hand, &expected).ok());
  ASSERT_EQ(response.scores_size(), 4);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(response.scores(i).score(), expected.scores(i).score());
  EXPECT_EQ(response.usage().item_tokens(), expected.usage().item_tokens());
  EXPECT_EQ(server->Health("rankd.v1.Scorer"), HealthStatus::SERVING);
}

// The depth controller: with a p99 target no call can meet, it lowers the depth of calls that do
// not pin one to min_depth within a few control periods (one a second); a pinned depth is kept.
TEST(ServeTest, DepthControllerLowersTheDepthOfUnpinnedCalls) {
  const Golden golden = LoadGolden("llama-cls");
  const GoldenCase& c = golden.cases[4];
  ASSERT_GE(c.items.size(), 5u);
  auto server = StartReady(absl::StrCat(MainConfig("llama-cls"),
                                        "depth_control:\n"
                                        "  enabled: true\n"
                                        "  target_p99_s: 0.00001\n"
                                        "  min_depth: 2\n"
                                        "  max_depth: 4\n"
                                        "  window_s: 30\n"));
  ASSERT_NE(server, nullptr);
  ScoreRequest request = TextRequest(c);
  request.mutable_items()->DeleteSubrange(5, request.items_size() - 5);
  request.set_skip_cache(true);
  ScoreResponse r1;
  ASSERT_TRUE(Score(*server, request, &r1).ok());
  EXPECT_EQ(r1.depth(), 4);  // it starts at max_depth
  EXPECT_FALSE(r1.scores(4).scored());
  ASSERT_TRUE(server->WaitForMetric("rankd_depth", 2, seconds(20)));
  EXPECT_GT(server->Metric("rankd_latency_p99_seconds").value_or(0), 0.00001);
  ScoreResponse r2;
  ASSERT_TRUE(Score(*server, request, &r2).ok());
  EXPECT_EQ(r2.depth(), 2);
  ASSERT_EQ(r2.scores_size(), 5);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(r2.scores(i).scored(), i < 2) << i;
  EXPECT_EQ(r2.usage().items_scored(), 2);
  request.set_depth(3);  // pinned by the caller
  ScoreResponse r3;
  ASSERT_TRUE(Score(*server, request, &r3).ok());
  EXPECT_EQ(r3.depth(), 3);

  // ScoreStream follows the controller too (chunks of 3: [0, 3) scored up to 2, [3, 5) not).
  request.set_depth(0);
  auto stub = server->NewScorer();
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + seconds(30));
  auto reader = stub->ScoreStream(&context, request);
  ScoreResponse chunk;
  int items = 0;
  while (reader->Read(&chunk)) {
    EXPECT_EQ(chunk.depth(), 2);
    for (const auto& s : chunk.scores()) EXPECT_EQ(s.scored(), items++ < 2) << items;
  }
  EXPECT_TRUE(reader->Finish().ok());
  EXPECT_EQ(items, 5);
}

// Chunks in order, through the result cache: a pass at depth 7 fills items 0..6; the full pass
// then takes those from the cache (chunk [6, 9) mixed: item 6 cached, 7 and 8 scored) and scores
// the other 10; skip_cache scores all 17 again.
TEST(ServeTest, ScoreStreamAnswersGoldenScoresInChunks) {
  const Golden golden = LoadGolden("llama-cls");
  auto server = StartReady(MainConfig("llama-cls"));  // stream_chunk_items: 3
  ASSERT_NE(server, nullptr);
  const GoldenCase& big = golden.cases[5];  // 17 items: chunks of 3, the last one of 2
  struct Pass {
    int depth;
    bool skip_cache;
    int cached;  // items [0, cached) come from the cache
  };
  for (const Pass& pass : {Pass{7, false, 0}, Pass{0, false, 7}, Pass{0, true, 0}}) {
    SCOPED_TRACE(absl::StrCat("depth ", pass.depth, " skip_cache ", pass.skip_cache));
    ScoreRequest request = TextRequest(big);
    request.set_depth(pass.depth);
    request.set_skip_cache(pass.skip_cache);
    auto stub = server->NewScorer();
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + seconds(30));
    auto reader = stub->ScoreStream(&context, request);
    ScoreResponse chunk;
    std::vector<rankd::v1::ItemScore> scores;
    int chunks = 0, items_scored = 0;
    const int scored = pass.depth > 0 ? pass.depth : static_cast<int>(big.items.size());
    while (reader->Read(&chunk)) {
      EXPECT_EQ(chunk.offset(), static_cast<int>(scores.size()));
      EXPECT_EQ(chunk.depth(), scored);
      scores.insert(scores.end(), chunk.scores().begin(), chunk.scores().end());
      items_scored = chunk.usage().items_scored();  // set on the last chunk
      ++chunks;
    }
    const grpc::Status s = reader->Finish();
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(chunks, 6);
    ASSERT_EQ(scores.size(), big.items.size());
    EXPECT_EQ(items_scored, scored - pass.cached);
    for (size_t i = 0; i < scores.size(); ++i) {
      const int k = static_cast<int>(i);
      EXPECT_EQ(scores[i].id(), absl::StrCat("item-", i));
      EXPECT_EQ(scores[i].scored(), k < scored) << i;
      EXPECT_EQ(scores[i].cached(), k < pass.cached) << i;
      if (k < scored) {
        EXPECT_TRUE(WithinF32Tolerance(scores[i].score(), big.items[i].score)) << i;
      }
    }
  }
}

// A PRIORITY_BATCH call over the worker's token budget (max_batch_tokens) is scored a slice per
// engine step: the answer is the same as an interactive call's, in order, with the same usage.
TEST(ServeTest, BatchCallsOverTheTokenBudgetAreScoredInSlices) {
  const Golden golden = LoadGolden("llama-cls");
  MainOptions options;
  options.model_settings = "  max_batch_tokens: 64\n";
  auto server = StartReady(MainConfig("llama-cls", options));
  ASSERT_NE(server, nullptr);
  const GoldenCase& big = golden.cases[5];  // 17 items, several hundred tokens
  ScoreRequest request = TextRequest(big);
  request.set_skip_cache(true);
  ScoreResponse interactive, batch;
  ASSERT_TRUE(Score(*server, request, &interactive).ok());
  request.set_priority(rankd::v1::PRIORITY_BATCH);
  const grpc::Status s = Score(*server, request, &batch);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(batch.scores_size(), static_cast<int>(big.items.size()));
  EXPECT_GT(batch.usage().item_tokens(), 64);
  EXPECT_EQ(batch.usage().item_tokens(), interactive.usage().item_tokens());
  EXPECT_EQ(batch.usage().prefix_tokens(), interactive.usage().prefix_tokens());
  for (int i = 0; i < batch.scores_size(); ++i) {
    EXPECT_EQ(batch.scores(i).id(), absl::StrCat("item-", i));
    EXPECT_TRUE(WithinF32Tolerance(batch.scores(i).score(), big.items[i].score)) << i;
  }
}

TEST(ServeTest, ScoreStreamErrorsNameItemsByTheirIndexInTheWholeRequest) {
  const Golden golden = LoadGolden("llama-cls");
  auto server = StartReady(MainConfig("llama-cls"));  // stream_chunk_items: 3
  ASSERT_NE(server, nullptr);
  // Item 10 is the second of the chunk [9, 12), whose worker call carries only that chunk's
  // items; the worker finds its token count over the limit.
  ScoreRequest request = TextRequest(golden.cases[5]);
  std::string text;  // under max_item_bytes (4096), over max_item_tokens
  for (int i = 0; i < 150; ++i) absl::StrAppend(&text, "kubernetes terraform ");
  request.mutable_items(10)->set_text(text);
  auto stub = server->NewScorer();
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + seconds(30));
  auto reader = stub->ScoreStream(&context, request);
  ScoreResponse chunk;
  while (reader->Read(&chunk)) {
    EXPECT_LT(chunk.offset(), 9);
  }
  const grpc::Status s = reader->Finish();
  EXPECT_EQ(s.error_code(), StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("items[10].text"));
  EXPECT_THAT(s.error_message(), HasSubstr("tokens exceeds max_item_tokens=128"));
}

TEST(ServeTest, GoldenScoresLlamaYesNo) {
  const Golden golden = LoadGolden("llama-gqa-yesno");
  MainOptions options;
  options.model_settings = "  head: " + Quoted(golden.head) + "\n";
  auto server = StartReady(MainConfig("llama-gqa-yesno", options));
  ASSERT_NE(server, nullptr);
  for (size_t k = 0; k < golden.cases.size(); ++k) {
    const GoldenCase& c = golden.cases[k];
    ScoreResponse response;
    const grpc::Status s = Score(*server, TextRequest(c), &response);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(GoldenMismatch(response, c), "") << "case " << k;
    EXPECT_EQ(response.model(), "llama-gqa-yesno");
  }
}

TEST(ServeTest, GoldenScoresQwen3RerankerWithTemplatesFromTheConfig) {
  const Golden golden = LoadGolden("qwen3-reranker-tiny");
  ASSERT_TRUE(golden.query_template && golden.item_template);
  MainOptions options;
  options.model_settings = absl::StrCat("  head: ", Quoted(golden.head),
                                        "\n  query_template: ", Quoted(*golden.query_template),
                                        "\n  item_template: ", Quoted(*golden.item_template), "\n");
  options.max_query_tokens = 512;
  options.max_item_tokens = 512;
  auto server = StartReady(MainConfig("qwen3-reranker-tiny", options));
  ASSERT_NE(server, nullptr);
  for (size_t k = 0; k < golden.cases.size(); ++k) {
    const GoldenCase& c = golden.cases[k];
    ScoreResponse response;
    const grpc::Status s = Score(*server, TextRequest(c), &response);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(GoldenMismatch(response, c), "") << "case " << k;
    EXPECT_EQ(response.usage().prefix_tokens(), static_cast<int>(c.prefix_ids.size()));
  }
}

// ---- bad input -------------------------------------------------------------------------------

// A unary call of `method` (/rankd.v1.Scorer/Score) with `bytes` as its request, as they are.
grpc::Status RawCall(const TestServer& server, const std::string& method,
                     const std::string& bytes) {
  grpc::GenericStub stub(server.channel());
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + seconds(30));
  grpc::Slice slice(bytes);
  grpc::ByteBuffer request(&slice, 1), response;
  std::promise<grpc::Status> done;
  stub.UnaryCall(&context, method, grpc::StubOptions(), &request, &response,
                 [&done](grpc::Status s) { done.set_value(std::move(s)); });
  return done.get_future().get();
}

TEST(ServeTest, UnparseableRequestsGetInvalidArgumentSayingWhyAndALogLineOfTheServers) {
  const Golden golden = LoadGolden("llama-cls");
  const ScoreRequest good = TextRequest(golden.cases[2]);
  auto server = StartReady(MainConfig("llama-cls"));
  ASSERT_NE(server, nullptr);

  grpc::Status s = RawCall(*server, "/rankd.v1.Scorer/Score", std::string(11, '\xff'));
  EXPECT_EQ(s.error_code(), StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_EQ(s.error_message(),
            "the request could not be parsed as a rankd.v1.ScoreRequest: 11 bytes that are not a "
            "valid protobuf encoding");

  // Invalid UTF-8 in a string field, as a client that does not check sends it.
  ScoreRequest bad_query = good;
  bad_query.set_query("caf\xc3");
  std::string bytes;
  ASSERT_TRUE(bad_query.SerializeToString(&bytes));
  s = RawCall(*server, "/rankd.v1.Scorer/Score", bytes);
  EXPECT_EQ(s.error_code(), StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_EQ(s.error_message(),
            "the request could not be parsed as a rankd.v1.ScoreRequest: query is not valid UTF-8");

  // The stream names the item's field too.
  ScoreRequest bad_item = good;
  bad_item.mutable_items(1)->set_text("\xed\xa0\x80 surrogate");
  auto stub = server->NewScorer();
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + seconds(30));
  auto reader = stub->ScoreStream(&context, bad_item);
  ScoreResponse chunk;
  EXPECT_FALSE(reader->Read(&chunk));
  s = reader->Finish();
  EXPECT_EQ(s.error_code(), StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr(": items[1].text is not valid UTF-8"));

  // The server's logger says so; protobuf's own line does not reach stderr raw.
  const std::string log = server->Log();
  EXPECT_THAT(log, HasSubstr("Score: the request could not be parsed"));
  EXPECT_THAT(log, HasSubstr("ScoreStream: the request could not be parsed"));
  EXPECT_THAT(log, ::testing::Not(HasSubstr("[libprotobuf")));
  EXPECT_EQ(server->Metric("rankd_requests_total{code=\"INVALID_ARGUMENT\"}"), 3);
  // And it keeps serving.
  ScoreResponse response;
  s = Score(*server, good, &response);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(GoldenMismatch(response, golden.cases[2]), "");
}

TEST(ServeTest, BadInputGetsItsCodeAndAMessageNamingTheFieldAndTheServerKeepsServing) {
  const Golden golden = LoadGolden("llama-cls");
  const GoldenCase& good_case = golden.cases[2];
  const ScoreRequest good = TextRequest(good_case);
  MainOptions strict;  // an unknown model is NOT_FOUND
  strict.server_settings = "  strict_model_name: true\n";
  auto server = StartReady(MainConfig("llama-cls", strict));
  ASSERT_NE(server, nullptr);
  const int hidden = HiddenSize("llama-cls");

  struct Case {
    std::string name;
    std::function<void(ScoreRequest&)> edit;
    StatusCode code;
    std::vector<std::string> message;  // substrings
  };
  auto ids = [](ScoreRequest& r, int item, std::vector<int> v) {
    r.mutable_items(item)->mutable_token_ids()->mutable_ids()->Assign(v.begin(), v.end());
  };
  const std::vector<Case> cases = {
      {"empty query",
       [](ScoreRequest& r) { r.clear_query(); },
       StatusCode::INVALID_ARGUMENT,
       {"query: empty"}},
      {"query and query_ids",
       [](ScoreRequest& r) { r.add_query_ids(1); },
       StatusCode::INVALID_ARGUMENT,
       {"query_ids", "not both"}},
      {"no items",
       [](ScoreRequest& r) { r.clear_items(); },
       StatusCode::INVALID_ARGUMENT,
       {"items: empty"}},
      {"too many items",
       [](ScoreRequest& r) {
         while (r.items_size() <= 64) r.add_items()->set_text("more");
       },
       StatusCode::INVALID_ARGUMENT,
       {"items", "65 items", "max_items=64"}},
      {"item without content",
       [](ScoreRequest& r) { r.mutable_items(1)->clear_content(); },
       StatusCode::INVALID_ARGUMENT,
       {"items[1]", "no content"}},
      {"empty text",
       [](ScoreRequest& r) { r.mutable_items(0)->set_text(""); },
       StatusCode::INVALID_ARGUMENT,
       {"items[0].text", "empty"}},
      {"empty token ids",
       [&](ScoreRequest& r) { ids(r, 0, {}); },
       StatusCode::INVALID_ARGUMENT,
       {"items[0].token_ids", "empty"}},
      {"token id out of vocabulary",
       [&](ScoreRequest& r) {
         ids(r, 1, {5, 6, 5000});
       },
       StatusCode::INVALID_ARGUMENT,
       {"items[1].token_ids.ids[2]", "5000", "vocab_size=1024"}},
      {"negative token id",
       [&](ScoreRequest& r) { ids(r, 0, {-1}); },
       StatusCode::INVALID_ARGUMENT,
       {"items[0].token_ids.ids[0]", "vocab_size=1024"}},
      {"query id out of vocabulary",
       [](ScoreRequest& r) {
         r.clear_query();
         r.add_query_ids(1);
         r.add_query_ids(1024);
       },
       StatusCode::INVALID_ARGUMENT,
       {"query_ids[1]", "vocab_size=1024"}},
      {"too many token ids in an item",
       [&](ScoreRequest& r) { ids(r, 0, std::vector<int>(129, 7)); },
       StatusCode::INVALID_ARGUMENT,
       {"items[0].token_ids", "129 tokens", "max_item_tokens=128"}},
      {"text item with too many tokens",
       [](ScoreRequest& r) {
         std::string text;
         for (int i = 0; i < 150; ++i) absl::StrAppend(&text, "kubernetes terraform ");
         r.mutable_items(1)->set_text(text);
       },
       StatusCode::INVALID_ARGUMENT,
       {"items[1].text: at least ", "tokens exceeds max_item_tokens=128"}},
      {"text item over its byte limit",
       [](ScoreRequest& r) { r.mutable_items(1)->set_text(std::string(5000, 'a')); },
       StatusCode::INVALID_ARGUMENT,
       {"items[1].text: 5000 bytes exceeds max_item_bytes=4096"}},
      {"query over its byte limit",
       [](ScoreRequest& r) { r.set_query(std::string(2000, 'q')); },
       StatusCode::INVALID_ARGUMENT,
       {"query: 2000 bytes exceeds max_query_bytes=1024"}},
      {"query with too many tokens",
       [](ScoreRequest& r) {
         std::string text;
         for (int i = 0; i < 40; ++i) absl::StrAppend(&text, "product manager ");
         r.set_query(text);
       },
       StatusCode::INVALID_ARGUMENT,
       {"query", "exceeds max_query_tokens=32"}},
      {"too many tokens in the request",
       [](ScoreRequest& r) {
         r.clear_items();
         for (int i = 0; i < 40; ++i) {
           auto* v = r.add_items()->mutable_token_ids()->mutable_ids();
           for (int j = 0; j < 120; ++j) v->Add(7);
         }
       },
       StatusCode::INVALID_ARGUMENT,
       {"items", "4800 tokens", "max_request_tokens=4096"}},
      {"embedding of the wrong width",
       [&](ScoreRequest& r) {
         auto* e = r.mutable_items(0)->mutable_embedding();
         e->set_rows(2);
         for (int j = 0; j < 2 * hidden - 1; ++j) e->add_values(0.5f);
       },
       StatusCode::INVALID_ARGUMENT,
       {"items[0].embedding.values", absl::StrCat(2 * hidden - 1, " values for rows=2"),
        absl::StrCat("hidden_size = 2 x ", hidden)}},
      {"embedding with NaN",
       [&](ScoreRequest& r) {
         auto* e = r.mutable_items(2)->mutable_embedding();
         e->set_rows(1);
         for (int j = 0; j < hidden; ++j) e->add_values(j == 3 ? NAN : 0.5f);
       },
       StatusCode::INVALID_ARGUMENT,
       {"items[2].embedding.values[3]", "finite"}},
      {"embedding with Inf",
       [&](ScoreRequest& r) {
         auto* e = r.mutable_items(0)->mutable_embedding();
         e->set_rows(1);
         for (int j = 0; j < hidden; ++j) e->add_values(j == hidden - 1 ? INFINITY : 0.5f);
       },
       StatusCode::INVALID_ARGUMENT,
       {absl::StrCat("items[0].embedding.values[", hidden - 1, "]"), "finite"}},
      {"embedding without rows",
       [](ScoreRequest& r) { r.mutable_items(0)->mutable_embedding()->set_rows(0); },
       StatusCode::INVALID_ARGUMENT,
       {"items[0].embedding.rows", "positive"}},
      {"message over the size limit",
       [](ScoreRequest& r) { r.mutable_items(0)->set_text(std::string(70000, 'a')); },
       StatusCode::INVALID_ARGUMENT,
       {"request", "bytes exceeds max_message_bytes=65536"}},
      {"unknown model",
       [](ScoreRequest& r) { r.set_model("gpt-9"); },
       StatusCode::NOT_FOUND,
       {"model", "gpt-9", "llama-cls"}},
      {"negative depth",
       [](ScoreRequest& r) { r.set_depth(-1); },
       StatusCode::INVALID_ARGUMENT,
       {"depth"}},
      {"unknown priority",
       [](ScoreRequest& r) { r.set_priority(static_cast<rankd::v1::Priority>(7)); },
       StatusCode::INVALID_ARGUMENT,
       {"priority"}},
  };
  int invalid = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    ScoreRequest request = good;
    c.edit(request);
    ScoreResponse response;
    const grpc::Status s = Score(*server, request, &response);
    EXPECT_EQ(s.error_code(), c.code) << s.error_message();
    for (const std::string& part : c.message) EXPECT_THAT(s.error_message(), HasSubstr(part));
    invalid += c.code == StatusCode::INVALID_ARGUMENT;
    // The server keeps serving.
    ScoreResponse ok;
    const grpc::Status after = Score(*server, good, &ok);
    ASSERT_TRUE(after.ok()) << after.error_message();
    EXPECT_EQ(GoldenMismatch(ok, good_case), "");
  }
  EXPECT_EQ(server->Metric("rankd_requests_total{code=\"INVALID_ARGUMENT\"}"), invalid);
  EXPECT_EQ(server->Health("rankd.v1.Scorer"), HealthStatus::SERVING);
  EXPECT_EQ(server->WorkerPids().size(), 2u);
}

// ---- batching across requests -------------------------------------------------------------------

TEST(ServeTest, ConcurrentRequestsAreScoredTogetherEachWithItsOwnScores) {
  const Golden golden = LoadGolden("llama-cls");
  MainOptions options;
  options.max_inflight = 8;
  options.log_format = "json";
  std::string config = MainConfig("llama-cls", options);
  config.replace(config.find("  count: 2\n"), 11, "  count: 1\n");
  auto server = TestServer::Start(config);
  ASSERT_NE(server, nullptr);
  ASSERT_TRUE(server->WaitReady(1, kLiveness)) << server->Log();
  const pid_t worker = server->WorkerPids().at(0);
  const std::string nasty_id = "id with \"quotes\", a back\\slash and a\nnew line";
  auto steps_of_several = [&] {
    return server->Metric("rankd_worker_batch_requests_count").value_or(0) -
           server->Metric("rankd_worker_batch_requests_bucket{le=\"1\"}").value_or(0);
  };
  // Calls sent while the worker is stopped all wait in it when it resumes: its engine thread takes
  // the first at once and the others together (an engine step's worth) after it.
  for (int round = 0; round < 5 && steps_of_several() == 0; ++round) {
    std::vector<std::unique_ptr<AsyncScore>> calls;
    std::vector<const GoldenCase*> cases;
    ASSERT_EQ(kill(worker, SIGSTOP), 0);
    for (int i = 0; i < 6; ++i) {
      const GoldenCase& c = golden.cases[(round + i) % golden.cases.size()];
      ScoreRequest request = i % 2 ? TextRequest(c) : IdsRequest(c);  // mixed prefixes and kinds
      request.set_request_id(nasty_id);
      calls.push_back(std::make_unique<AsyncScore>(*server, std::move(request), seconds(60)));
      cases.push_back(&c);
    }
    const bool all_sent = server->WaitForMetric("rankd_calls_in_flight", 6, kLiveness);
    ASSERT_EQ(kill(worker, SIGCONT), 0);
    ASSERT_TRUE(all_sent);
    for (size_t i = 0; i < calls.size(); ++i) {
      const grpc::Status s = calls[i]->Wait();
      ASSERT_TRUE(s.ok()) << s.error_message();
      EXPECT_EQ(GoldenMismatch(calls[i]->response(), *cases[i]), "") << "call " << i;
    }
  }
  EXPECT_GT(steps_of_several(), 0) << server->Metrics();
  EXPECT_GT(server->Metric("rankd_worker_batch_items_sum").value_or(0), 0);
  EXPECT_GT(server->Metric("rankd_worker_queue_duration_seconds_count").value_or(0), 0);
  // JSON logs: every line the server and its worker wrote is one JSON object, the access log line
  // included, with the caller's request id intact.
  std::istringstream log(server->Log());
  int lines = 0, access_lines = 0;
  for (std::string line; std::getline(log, line);) {
    if (line.empty() || line[0] != '{') continue;  // gRPC's own messages
    ++lines;
    nlohmann::json j;
    ASSERT_NO_THROW(j = nlohmann::json::parse(line)) << line;
    const std::string msg = j.at("msg").get<std::string>();
    access_lines += msg.find("request_id=" + nasty_id) != std::string::npos;
  }
  EXPECT_GT(lines, 0);
  EXPECT_GE(access_lines, 6);
}

// The access log names the caller's W3C trace (traceparent metadata) on Score and ScoreStream;
// a malformed traceparent is left out rather than logged.
TEST(ServeTest, AccessLogCarriesTheCallersTraceId) {
  const Golden golden = LoadGolden("llama-cls");
  auto server = StartReady(MainConfig("llama-cls"));
  ASSERT_NE(server, nullptr);
  auto stub = server->NewScorer();
  const std::string trace = "0af7651916cd43dd8448eb211c80319c";
  auto call = [&](const std::string& id, const std::string& traceparent, bool stream) {
    ScoreRequest request = TextRequest(golden.cases[1]);
    request.set_request_id(id);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + kLiveness);
    context.AddMetadata("traceparent", traceparent);
    if (!stream) {
      ScoreResponse response;
      return stub->Score(&context, request, &response);
    }
    auto reader = stub->ScoreStream(&context, request);
    for (ScoreResponse chunk; reader->Read(&chunk);) {
    }
    return reader->Finish();
  };
  const std::string good = "00-" + trace + "-b7ad6b7169203331-01";
  ASSERT_TRUE(call("traced-unary", good, false).ok());
  ASSERT_TRUE(call("traced-stream", good, true).ok());
  ASSERT_TRUE(call("badly-traced", "00-" + trace + "-0000000000000000-01", false).ok());
  const std::string log = server->Log();
  EXPECT_THAT(log, HasSubstr("Score request_id=traced-unary trace_id=" + trace + " items=2 OK"));
  EXPECT_THAT(log,
              HasSubstr("ScoreStream request_id=traced-stream trace_id=" + trace + " items=2 OK"));
  EXPECT_THAT(log, HasSubstr("Score request_id=badly-traced items=2 OK"));
}

// ---- worker failures ---------------------------------------------------------------------------

TEST(ServeTest, WorkKilledInFlightIsSentToTheOtherWorker) {
  const Golden golden = LoadGolden("llama-cls");
  const GoldenCase& c = golden.cases[4];
  auto server = StartReady(MainConfig("llama-cls"));
  ASSERT_NE(server, nullptr);
  const std::vector<pid_t> pids = server->WorkerPids();
  ASSERT_EQ(pids.size(), 2u);
  const pid_t victim = pids[0];
  const std::optional<int> index = server->WorkerIndex(victim);
  ASSERT_TRUE(index.has_value()) << server->Log();
  const std::string victim_calls =
      absl::StrCat("rankd_worker_calls_in_flight{worker=\"", *index, "\"}");
  ASSERT_EQ(kill(victim, SIGSTOP), 0);
  // Calls alternate between the idle workers: within a few calls one sticks on the stopped one.
  // The pool's gauge for the stopped worker says so; a call that is merely slow (a sanitizer
  // build) on the live worker is not stuck, and killing the victim would not retry it.
  std::unique_ptr<AsyncScore> stuck;
  ScoreRequest request = TextRequest(c);
  request.set_skip_cache(true);  // each call must reach a worker
  for (int attempt = 0; attempt < 10 && !stuck; ++attempt) {
    auto call = std::make_unique<AsyncScore>(*server, request, seconds(60));
    const auto deadline = std::chrono::steady_clock::now() + kLiveness;
    bool on_victim = false;
    while (!call->Done(milliseconds(20)) && std::chrono::steady_clock::now() < deadline) {
      if (server->Metric(victim_calls).value_or(0) >= 1) {
        on_victim = true;
        break;
      }
    }
    if (!on_victim) {
      ASSERT_TRUE(call->Wait().ok());
      continue;
    }
    stuck = std::move(call);
  }
  ASSERT_NE(stuck, nullptr) << "no call reached the stopped worker";
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  const grpc::Status s = stuck->Wait();
  ASSERT_TRUE(s.ok()) << s.error_message() << "\n" << server->Log();
  EXPECT_EQ(GoldenMismatch(stuck->response(), c), "");
  EXPECT_GE(server->Metric("rankd_worker_retries_total").value_or(0), 1);
  // A new worker replaces the killed one.
  EXPECT_TRUE(WaitForReplacement(*server, victim)) << server->Log();
  EXPECT_GE(server->Metric("rankd_worker_restarts_total").value_or(0), 1);
}

TEST(ServeTest, KillingAWorkerUnderLoadLosesNoRequestAndThePoolRecovers) {
  const Golden golden = LoadGolden("llama-cls");
  const GoldenCase& c = golden.cases[5];  // 17 items
  auto server = StartReady(MainConfig("llama-cls"));
  ASSERT_NE(server, nullptr);
  const ScoreRequest request = TextRequest(c);
  std::atomic<bool> stop{false};
  std::atomic<int> ok{0}, unavailable{0};
  std::mutex mu;
  std::vector<std::string> failures;
  std::vector<std::thread> clients;
  for (int t = 0; t < 4; ++t) {
    clients.emplace_back([&] {
      while (!stop) {
        ScoreResponse response;
        const grpc::Status s = Score(*server, request, &response);
        std::string failure;
        if (s.ok()) {
          failure = GoldenMismatch(response, c);
          if (failure.empty()) ++ok;
        } else if (s.error_code() == StatusCode::UNAVAILABLE) {
          ++unavailable;  // retryable by contract
        } else {
          failure = absl::StrCat("code ", s.error_code(), ": ", s.error_message());
        }
        if (!failure.empty()) {
          std::lock_guard<std::mutex> lock(mu);
          failures.push_back(failure);
        }
      }
    });
  }
  auto wait_until = [&](const std::function<bool()>& done) {
    const auto deadline = std::chrono::steady_clock::now() + kLiveness;
    while (!done() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(milliseconds(10));
    }
    return done();
  };
  EXPECT_TRUE(wait_until([&] { return ok >= 20; }));
  const std::vector<pid_t> pids = server->WorkerPids();
  ASSERT_EQ(pids.size(), 2u);
  ASSERT_EQ(kill(pids[1], SIGKILL), 0);
  const int ok_at_kill = ok;
  const bool recovered =
      WaitForReplacement(*server, pids[1]) && wait_until([&] { return ok >= ok_at_kill + 20; });
  stop = true;
  for (auto& t : clients) t.join();
  EXPECT_TRUE(recovered) << server->Log();
  EXPECT_THAT(failures, ::testing::IsEmpty());
  EXPECT_GE(server->Metric("rankd_worker_restarts_total").value_or(0), 1);
  EXPECT_EQ(server->Health("rankd.v1.Scorer"), HealthStatus::SERVING);
  std::printf("ok %d, unavailable %d\n", ok.load(), unavailable.load());
}

TEST(ServeTest, HungWorkerIsKilledAndReplaced) {
  const Golden golden = LoadGolden("llama-cls");
  const GoldenCase& c = golden.cases[3];
  auto server = StartReady(MainConfig("llama-cls"));  // ping_timeout_s: 2
  ASSERT_NE(server, nullptr);
  const std::vector<pid_t> pids = server->WorkerPids();
  ASSERT_EQ(pids.size(), 2u);
  const pid_t victim = pids[0];
  ASSERT_EQ(kill(victim, SIGSTOP), 0);  // alive but answering nothing
  // Calls keep succeeding: those sent to the stopped worker move on once it is declared hung.
  for (int i = 0; i < 6; ++i) {
    ScoreResponse response;
    const grpc::Status s = Score(*server, TextRequest(c), &response);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(GoldenMismatch(response, c), "");
  }
  EXPECT_TRUE(WaitForReplacement(*server, victim)) << server->Log();
  EXPECT_FALSE(ProcessExists(victim));
  EXPECT_THAT(server->Log(), HasSubstr("did not answer a ping"));
}

TEST(ServeTest, WithItsOnlyWorkerDeadTheServerIsNotReadyAndFailsWorkRetryably) {
  const Golden golden = LoadGolden("llama-cls");
  const GoldenCase& c = golden.cases[2];
  // One worker, restarted a second after it dies: a window in which none is up.
  std::string config = absl::StrReplaceAll(
      MainConfig("llama-cls"), {{"  count: 2\n", "  count: 1\n"},
                                {"  restart_backoff_s: 0.1\n", "  restart_backoff_s: 1\n"}});
  auto server = TestServer::Start(config);
  ASSERT_NE(server, nullptr);
  ASSERT_TRUE(server->WaitReady(1, kLiveness)) << server->Log();
  const std::vector<pid_t> pids = server->WorkerPids();
  ASSERT_EQ(pids.size(), 1u);
  ASSERT_EQ(kill(pids[0], SIGSTOP), 0);
  AsyncScore in_flight(*server, TextRequest(c), seconds(60));
  ASSERT_TRUE(server->WaitForMetric("rankd_calls_in_flight", 1, kLiveness));
  ASSERT_EQ(kill(pids[0], SIGKILL), 0);
  // Nowhere to send it again: UNAVAILABLE, which the client may retry.
  const grpc::Status lost = in_flight.Wait();
  EXPECT_EQ(lost.error_code(), StatusCode::UNAVAILABLE) << lost.error_message();
  EXPECT_THAT(lost.error_message(), HasSubstr("no other worker is up"));
  const auto deadline = std::chrono::steady_clock::now() + kLiveness;
  while (server->Health("rankd.v1.Scorer") != HealthStatus::NOT_SERVING &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(10));
  }
  EXPECT_EQ(server->Health("rankd.v1.Scorer"), HealthStatus::NOT_SERVING);
  ScoreResponse response;
  grpc::Status s = Score(*server, TextRequest(c), &response);
  EXPECT_EQ(s.error_code(), StatusCode::UNAVAILABLE);
  EXPECT_THAT(s.error_message(), HasSubstr("not ready"));
  // The restarted worker brings readiness back.
  EXPECT_TRUE(server->WaitReady(1, kLiveness));
  s = Score(*server, TextRequest(c), &response);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(GoldenMismatch(response, c), "");
}

TEST(ServeTest, WorkersArePinnedToTheirCpus) {
  MainOptions options;
  options.worker_settings = "  cpu_affinity: [[0], [0]]\n";
  auto server = StartReady(MainConfig("llama-cls", options));
  ASSERT_NE(server, nullptr);
  const std::vector<pid_t> workers = server->WorkerPids();
  ASSERT_EQ(workers.size(), 2u);
  for (pid_t p : workers) {
    std::ifstream status(absl::StrCat("/proc/", p, "/status"));
    std::string line, cpus;
    while (std::getline(status, line)) {
      if (line.rfind("Cpus_allowed_list:", 0) == 0)
        cpus = line.substr(line.find_last_of("\t ") + 1);
    }
    EXPECT_EQ(cpus, "0") << "worker " << p;
  }
}

// Waits (up to kLiveness) until none of `pids` exists; whether none does.
bool AllGone(const std::vector<pid_t>& pids) {
  const auto deadline = std::chrono::steady_clock::now() + kLiveness;
  auto any_alive = [&] {
    return std::any_of(pids.begin(), pids.end(), [](pid_t p) { return ProcessExists(p); });
  };
  while (any_alive() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(20));
  }
  return !any_alive();
}

TEST(ServeTest, WorkersDieWithAKilledServer) {
  auto server = StartReady(MainConfig("llama-cls"));
  ASSERT_NE(server, nullptr);
  const std::vector<pid_t> workers = server->WorkerPids();
  ASSERT_EQ(workers.size(), 2u);
  server->Signal(SIGKILL);
  ASSERT_TRUE(server->WaitExit(kLiveness).has_value());
  EXPECT_TRUE(AllGone(workers));
}

// The directory of the server's workers' sockets ("worker sockets in DIR" in its log).
std::string SocketDir(const TestServer& server) {
  const std::string log = server.Log();
  const std::string marker = "worker sockets in ";
  const size_t at = log.find(marker);
  if (at == std::string::npos) return "";
  const size_t begin = at + marker.size();
  return log.substr(begin, log.find('\n', begin) - begin);
}

TEST(ServeTest, TheSocketDirectoryOfAKilledServerIsRemovedByTheNextStart) {
  // The default socket directory: a fresh /tmp/rankd-XXXXXX.
  auto killed = TestServer::Start(MainConfig("llama-cls"), /*default_socket_dir=*/true);
  ASSERT_NE(killed, nullptr);
  ASSERT_TRUE(killed->WaitReady(2, kLiveness)) << killed->Log();
  const std::string dir = SocketDir(*killed);
  ASSERT_THAT(dir, ::testing::StartsWith("/tmp/rankd-"));
  const std::vector<pid_t> workers = killed->WorkerPids();
  killed->Signal(SIGKILL);
  ASSERT_TRUE(killed->WaitExit(kLiveness).has_value());
  ASSERT_TRUE(AllGone(workers));
  EXPECT_TRUE(std::filesystem::exists(dir));  // nobody could remove it

  auto next = TestServer::Start(MainConfig("llama-cls"), /*default_socket_dir=*/true);
  ASSERT_NE(next, nullptr);
  ASSERT_TRUE(next->WaitReady(2, kLiveness)) << next->Log();
  EXPECT_FALSE(std::filesystem::exists(dir)) << next->Log();
  const std::string next_dir = SocketDir(*next);
  EXPECT_TRUE(std::filesystem::exists(next_dir));  // a live server's is left alone
  next->Signal(SIGTERM);
  ASSERT_TRUE(next->WaitExit(kLiveness).has_value());
  EXPECT_FALSE(std::filesystem::exists(next_dir));  // and removed when it stops
}

// ---- start-up failures: the server exits with the reason instead of restarting workers ------

// A copy of test model `model` in a fresh temporary directory (removed by the destructor), to
// break.
class ModelCopy {
 public:
  explicit ModelCopy(const std::string& model) : model_(model) {
    char dir[] = "/tmp/rankd-model-XXXXXX";
    if (mkdtemp(dir) != nullptr) dir_ = dir;
    std::filesystem::copy(ModelDir(model), dir_);
  }
  ~ModelCopy() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::string path(const std::string& file) const { return dir_ + "/" + file; }
  // MainConfig for the copy.
  std::string Config(const MainOptions& o = {}) const {
    std::string config = MainConfig(model_, o);
    const std::string original = ModelDir(model_);
    config.replace(config.find(original), original.size(), dir_);
    return config;
  }

 private:
  std::string model_;
  std::string dir_;
};

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Rewrites the header of a .safetensors file through `edit` (the data stays where it was: the
// offsets count from the end of the header).
void EditSafetensorsHeader(const std::string& path,
                           const std::function<void(nlohmann::json&)>& edit) {
  const std::string bytes = ReadBytes(path);
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);
  nlohmann::json header = nlohmann::json::parse(bytes.substr(8, header_len));
  edit(header);
  const std::string text = header.dump();
  const uint64_t n = text.size();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(&n), 8);
  out << text << bytes.substr(8 + header_len);
}

struct BadModelCase {
  std::string name;
  std::string model;
  std::function<void(const ModelCopy&)> corrupt;
  std::string message;  // what the server's exit message says
};

TEST(ServeStartTest, ABadModelMakesServeExitBeforeAnyWorkerStarts) {
  const std::vector<BadModelCase> cases = {
      {"truncated safetensors", "llama-cls",
       [](const ModelCopy& m) {
         const std::string file = m.path("model.safetensors");
         std::filesystem::resize_file(file, std::filesystem::file_size(file) / 2);
       },
       "bytes (truncated file?)"},
      {"wrong tensor shape", "llama-cls",
       [](const ModelCopy& m) {
         EditSafetensorsHeader(m.path("model.safetensors"), [](nlohmann::json& h) {
           auto& shape = h["model.layers.0.mlp.gate_proj.weight"]["shape"];
           shape = {shape[1], shape[0]};
         });
       },
       "tensor 'model.layers.0.mlp.gate_proj.weight' has shape [64, 176], config.json implies "
       "[176, 64]"},
      {"corrupt tokenizer.model", "llama-cls",
       [](const ModelCopy& m) {
         std::ofstream(m.path("tokenizer.model"), std::ios::trunc) << "not a sentencepiece model";
       },
       "tokenizer.model"},
      {"corrupt tokenizer.json", "llama3-tokjson-cls",
       [](const ModelCopy& m) {
         const std::string file = m.path("tokenizer.json");
         std::filesystem::resize_file(file, std::filesystem::file_size(file) / 2);
       },
       "tokenizer.json"},
      {"no tokenizer", "llama-cls",
       [](const ModelCopy& m) { std::filesystem::remove(m.path("tokenizer.model")); },
       "no tokenizer (tokenizer.json or tokenizer.model)"},
  };
  for (const BadModelCase& c : cases) {
    SCOPED_TRACE(c.name);
    const ModelCopy model(c.model);
    c.corrupt(model);
    auto server = TestServer::Launch(model.Config());
    ASSERT_NE(server, nullptr);
    const std::optional<int> status = server->WaitExit(kLiveness);
    ASSERT_TRUE(status.has_value()) << server->Log();
    EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 1) << server->Log();
    EXPECT_THAT(server->Log(), HasSubstr(c.message));
    EXPECT_THAT(server->Log(), ::testing::Not(HasSubstr("worker 0 started")));
  }
}

TEST(ServeStartTest, WorkersThatNeverComeUpMakeServeExitAfterMaxFailedStarts) {
  // A start-up timeout no worker can meet: every start is killed before its first ping.
  MainOptions options;
  options.worker_settings = "  startup_timeout_s: 0.001\n  max_failed_starts: 2\n";
  auto server = TestServer::Launch(MainConfig("llama-cls", options));
  ASSERT_NE(server, nullptr);
  const std::optional<int> status = server->WaitExit(kLiveness);
  ASSERT_TRUE(status.has_value()) << server->Log();
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 1) << server->Log();
  EXPECT_THAT(server->Log(),
              HasSubstr("failed 2 starts in a row (workers.max_failed_starts=2); the last one: "
                        "killed by signal 9"));
  EXPECT_THAT(server->Log(), HasSubstr("did not come up within workers.startup_timeout_s=0.001 s"));
}

// ---- issue 24: the operator's side (file descriptors, ports, socket directories, settings, a
// model directory rewritten) -------------------------------------------------------------------

// One worker (fewer descriptors), quick pings and restarts.
std::string OneWorkerConfig(const std::string& model_dir, const std::string& server_settings = "",
                            const std::string& worker_settings = "") {
  return absl::StrCat("model:\n  dir: ", model_dir,
                      "\n  threads: 1\n"
                      "server:\n",
                      server_settings,
                      "workers:\n"
                      "  count: 1\n"
                      "  ping_interval_s: 0.2\n"
                      "  restart_backoff_s: 0.1\n",
                      worker_settings);
}

int PortOf(const std::string& target) { return std::stoi(target.substr(target.rfind(':') + 1)); }

// Issue 24, item 4: under a limit of 128 descriptors, 150 connections opened at once made gRPC
// 1.51 log `Failed accept4: Too many open files` and never accept again, while /healthz and
// /readyz said 200. Now either the listener accepts again, or the server says it is neither alive
// nor ready (/healthz and /readyz 503, gRPC health NOT_SERVING on the connections still open),
// and exits 1 for a supervisor to restart it.
TEST(ServeOpsTest, AGrpcListenerOutOfDescriptorsIsReportedDeadAndTheServerExits) {
  // Pings that wait long: the worker is held stopped below so that the drain has work to wait
  // for, which keeps the process up long enough to be asked.
  auto server = TestServer::Start(
      OneWorkerConfig(ModelDir("llama-cls"), "  http_max_connections: 16\n  drain_timeout_s: 60\n",
                      "  ping_timeout_s: 60\n"),
      {.max_open_files = 128});
  ASSERT_NE(server, nullptr);
  ASSERT_TRUE(server->WaitReady(1, kLiveness)) << server->Log();
  httplib::Client http("127.0.0.1", server->metrics_port());
  http.set_connection_timeout(2);
  http.set_read_timeout(2);
  const Golden golden = LoadGolden("llama-cls");
  StoppedWorkers stopped(server->WorkerPids());
  AsyncScore held(*server, TextRequest(golden.cases[0]));  // on the connection already open
  ASSERT_TRUE(server->WaitForMetric("rankd_calls_in_flight", 1, kLiveness));

  const int port = PortOf(server->target());
  std::vector<int> connections;
  for (int i = 0; i < 150; ++i) {
    const int fd = Connect(port);
    if (fd >= 0) connections.push_back(fd);
  }
  // gRPC takes what it can until accept4 fails.
  const auto exhausted_by = std::chrono::steady_clock::now() + seconds(20);
  while (server->Log().find("accept4") == std::string::npos &&
         std::chrono::steady_clock::now() < exhausted_by) {
    std::this_thread::sleep_for(milliseconds(50));
  }
  for (int fd : connections) close(fd);

  // A fresh connection each time: the listener, not a connection kept from before.
  auto fresh_health = [&] {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    auto channel =
        grpc::CreateCustomChannel(server->target(), grpc::InsecureChannelCredentials(), args);
    auto stub = grpc::health::v1::Health::NewStub(channel);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + seconds(2));
    grpc::health::v1::HealthCheckRequest request;
    grpc::health::v1::HealthCheckResponse response;
    return stub->Check(&context, request, &response).ok();
  };
  bool accepts = false, reported = false;
  int healthz_ok = 0, polls = 0;
  const auto deadline = std::chrono::steady_clock::now() + kLiveness;
  while (!accepts && !reported && std::chrono::steady_clock::now() < deadline) {
    accepts = fresh_health();
    auto healthz = http.Get("/healthz");
    ++polls;
    if (healthz && healthz->status == 200) ++healthz_ok;
    if (healthz && healthz->status == 503) {
      reported = true;
      EXPECT_THAT(healthz->body, HasSubstr("accepts no connection"));
      auto readyz = http.Get("/readyz");
      ASSERT_TRUE(readyz);
      EXPECT_EQ(readyz->status, 503);
      EXPECT_EQ(server->Health(""), HealthStatus::NOT_SERVING);  // the connection kept open
    }
  }
  if (accepts) return;  // a gRPC that takes connections again after running out (not 1.51)
  ASSERT_TRUE(reported) << "for " << polls << " polls fresh gRPC connections were refused while "
                        << healthz_ok << " of them got /healthz 200\n"
                        << server->Log();
  for (pid_t p : server->WorkerPids()) stopped.Resume(p);
  const std::optional<int> status = server->WaitExit(kLiveness);
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 1) << *status;
  EXPECT_THAT(server->Log(), HasSubstr("open files: limit 128"));
  EXPECT_THAT(server->Log(), HasSubstr("accepts no connection"));
  EXPECT_THAT(server->Log(), HasSubstr("stopping, to be restarted"));
  EXPECT_TRUE(held.Wait().ok());  // drained: the call that was in flight was answered
}

// The HTTP ports' connection caps must leave half the descriptors to gRPC.
TEST(ServeOpsTest, HttpConnectionCapsOverHalfTheDescriptorLimitStopTheStart) {
  auto server = TestServer::Launch(OneWorkerConfig(ModelDir("llama-cls")),
                                   {.max_open_files = 256});  // 2 x 256 > 128
  ASSERT_NE(server, nullptr);
  const std::optional<int> status = server->WaitExit(kLiveness);
  ASSERT_TRUE(status.has_value()) << server->Log();
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 1);
  EXPECT_THAT(server->Log(),
              HasSubstr("server.http_max_connections: 2 HTTP ports x 256 connections may hold 512 "
                        "file descriptors, more than half of the 256"));
}

// Issue 24, item 6: a second server on the first one's socket directory started; the first one's
// restarted workers then served the second's model under the first's name, and the second's stop
// removed the first's files. A second server on the first's gRPC port bound it too
// (SO_REUSEPORT). Now each fails at start, naming the holder, and the first serves on.
TEST(ServeOpsTest, ASecondServerOnTheSameSocketDirectoryOrPortFailsNamingTheHolder) {
  char dir[] = "/tmp/rankd-shared-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string sockets = absl::StrCat(dir, "/sockets");
  const TestServer::Options own_dir{.default_socket_dir = true};
  const std::string shared = absl::StrCat("  socket_dir: ", sockets, "\n");
  auto first = TestServer::Start(OneWorkerConfig(ModelDir("llama-cls"), "", shared), own_dir);
  ASSERT_NE(first, nullptr);
  ASSERT_TRUE(first->WaitReady(1, kLiveness)) << first->Log();
  const Golden golden = LoadGolden("llama-cls");
  const GoldenCase& c = golden.cases[1];

  // Another model, the same socket directory.
  auto second =
      TestServer::Launch(OneWorkerConfig(ModelDir("qwen3-cls-wide"), "", shared), own_dir);
  ASSERT_NE(second, nullptr);
  std::optional<int> status = second->WaitExit(kLiveness);
  EXPECT_TRUE(status && WIFEXITED(*status) && WEXITSTATUS(*status) == 1) << second->Log();
  EXPECT_THAT(second->Log(), HasSubstr(absl::StrCat("workers.socket_dir: ", sockets,
                                                    " is held by another process (pid ",
                                                    first->pid(), ", named in ")));

  // The first one's port, each of its three (the others' ports are free ones: port 0).
  const std::vector<std::pair<std::string, int>> ports = {
      {"--listen", PortOf(first->target())},
      {"--http-listen", first->http_port()},
      {"--metrics-listen", first->metrics_port()}};
  for (const auto& [flag, port] : ports) {
    auto other = TestServer::Launch(OneWorkerConfig(ModelDir("llama-cls")),
                                    {.flags = {absl::StrCat(flag, "=127.0.0.1:", port)}});
    ASSERT_NE(other, nullptr);
    status = other->WaitExit(kLiveness);
    EXPECT_TRUE(status && WIFEXITED(*status) && WEXITSTATUS(*status) == 1) << flag;
    EXPECT_THAT(other->Log(), HasSubstr(absl::StrCat("cannot listen on 127.0.0.1:", port)));
    EXPECT_THAT(other->Log(), HasSubstr(absl::StrCat("(port ", port, " is held by pid ",
                                                     first->pid(), " (rankd))")))
        << flag;
  }

  // The first one is untouched: its worker, killed, comes back with its own model, and every
  // call gets its scores.
  const std::vector<pid_t> workers = first->WorkerPids();
  ASSERT_EQ(workers.size(), 1u);
  kill(workers[0], SIGKILL);
  const auto deadline = std::chrono::steady_clock::now() + kLiveness;
  while (!(first->WorkerPids().size() == 1 && first->WorkerPids()[0] != workers[0] &&
           first->Metric("rankd_workers_up") == 1) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(20));
  }
  ASSERT_TRUE(first->WaitReady(1, kLiveness)) << first->Log();
  ScoreRequest request = TextRequest(c);
  request.set_skip_cache(true);
  for (int i = 0; i < 5; ++i) {
    ScoreResponse response;
    const grpc::Status s = Score(*first, request, &response);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(GoldenMismatch(response, c), "");
  }
  first.reset();
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

// Issue 24, item 7: settings that cannot work used to start a server that then failed every call
// (or never became ready): now `rankd serve` stops at once, naming the key, its range and value.
TEST(ServeStartTest, SettingsThatCannotWorkStopTheStartNamingTheKey) {
  const std::string model = absl::StrCat("model:\n  dir: ", ModelDir("llama-cls"), "\n");
  const std::vector<std::tuple<std::string, int, std::string>> cases = {
      {"server:\n  http_read_timeout_s: 0\n", 2,
       "server.http_read_timeout_s: must be in (0, 10000000] (got 0)"},
      {"server:\n  http_max_connections: 0\n", 2,
       "server.http_max_connections: must be in [1, 1048576] (got 0)"},
      {"server:\n  http_request_timeout_s: 1e10\n", 2,
       "server.http_request_timeout_s: must be in (0, 10000000] (got 10000000000)"},
      {"result_cache:\n  ttl_s: 1e12\n", 2,
       "result_cache.ttl_s: must be in (0, 10000000] (got 1000000000000)"},
      {"server:\n  queue_size: 8\n  drain_timeout_s: 1\n  queue_size: 9\n", 2,
       "server.queue_size: given twice (lines 4 and 6)"},
      {"workers:\n  count: 2\n  min_ready: 3\n", 1,
       "workers.min_ready: 3 exceeds the 2 workers planned (workers.count=2)"},
  };
  for (const auto& [settings, code, message] : cases) {
    auto server = TestServer::Launch(model + settings);
    ASSERT_NE(server, nullptr);
    const std::optional<int> status = server->WaitExit(kLiveness);
    ASSERT_TRUE(status.has_value()) << settings;
    EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == code) << settings << server->Log();
    EXPECT_THAT(server->Log(), HasSubstr(message));
  }
}

// Issue 24, item 10: a model directory rewritten while serving: a restarted worker loaded the new
// weights while the other kept the old, so calls got scores of either. Now the restarted worker
// finds another model than the one the server started with, refuses to serve it and stays down;
// every call keeps getting the old model's scores.
TEST(ServeOpsTest, AWorkerThatFindsTheModelDirectoryRewrittenRefusesToServeIt) {
  ModelCopy model("llama-cls");
  auto server = StartReady(model.Config());
  ASSERT_NE(server, nullptr);
  const Golden golden = LoadGolden("llama-cls");
  const GoldenCase& c = golden.cases[1];
  ScoreRequest request = TextRequest(c);
  request.set_skip_cache(true);
  ScoreResponse response;
  ASSERT_TRUE(Score(*server, request, &response).ok());
  ASSERT_EQ(GoldenMismatch(response, c), "");

  // Another model of the same family copied over it, file by file.
  for (const auto& entry : std::filesystem::directory_iterator(ModelDir("mistral-cls"))) {
    std::filesystem::copy_file(entry.path(), model.path(entry.path().filename().string()),
                               std::filesystem::copy_options::overwrite_existing);
  }
  const std::vector<pid_t> workers = server->WorkerPids();
  ASSERT_EQ(workers.size(), 2u);
  kill(workers[0], SIGKILL);
  const auto deadline = std::chrono::steady_clock::now() + kLiveness;
  while (server->Log().find("now holds model sha256:") == std::string::npos &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(50));
  }
  // Calls for a while, spread over what is up: every answer is the old model's.
  int answered = 0, other_scores = 0;
  for (int i = 0; i < 40; ++i) {
    ScoreResponse r;
    if (Score(*server, request, &r).ok()) {
      ++answered;
      other_scores += !GoldenMismatch(r, c).empty();
    }
    std::this_thread::sleep_for(milliseconds(50));
  }
  EXPECT_EQ(other_scores, 0) << "of " << answered << " answered calls\n" << server->Log();
  EXPECT_GT(answered, 0);
  EXPECT_THAT(server->Log(), HasSubstr("refusing to serve it"));
  EXPECT_EQ(server->Metric("rankd_workers_up"), 1);
  EXPECT_EQ(server->Metric(absl::StrCat("rankd_worker_up{worker=\"",
                                        server->WorkerIndex(workers[0]).value_or(-1), "\"}")),
            0);
}

// ---- queue, deadlines, priorities, drain (workers held with SIGSTOP) ---------------------------

TEST(ServeControlTest, FullQueueAnswersResourceExhaustedAtOnce) {
  const Golden golden = LoadGolden("llama-cls");
  const GoldenCase& c = golden.cases[1];
  auto server = StartReady(ControlConfig());  // 2 workers x 1 call, queue of 2
  ASSERT_NE(server, nullptr);
  std::vector<std::unique_ptr<AsyncScore>> calls;
  {
    StoppedWorkers stopped(server->WorkerPids());
    for (int i = 0; i < 4; ++i)
      calls.push_back(std::make_unique<AsyncScore>(*server, TextRequest(c)));
    ASSERT_TRUE(server->WaitForMetric("rankd_calls_in_flight", 2, kLiveness));
    ASSERT_TRUE(server->WaitForMetric("rankd_queue_depth", 2, kLiveness));
    ScoreResponse response;
    const grpc::Status s = Score(*server, TextRequest(c), &response);
    EXPECT_EQ(s.error_code(), StatusCode::RESOURCE_EXHAUSTED);
    EXPECT_THAT(s.error_message(), HasSubstr("queue full"));
    EXPECT_THAT(s.error_message(), HasSubstr("queue_size=2"));
  }
  for (auto& call : calls) {
    const grpc::Status s = call->Wait();
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(GoldenMismatch(call->response(), c), "");
  }
}

TEST(ServeControlTest, QueuedWorkOfAClientThatWentAwayLeavesTheQueue) {
  const Golden golden = LoadGolden("llama-cls");
  const GoldenCase& c = golden.cases[1];
  auto server = StartReady(ControlConfig());
  ASSERT_NE(server, nullptr);
  std::vector<std::unique_ptr<AsyncScore>> fillers;
  {
    StoppedWorkers stopped(server->WorkerPids());
    for (int i = 0; i < 2; ++i) {
      fillers.push_back(std::make_unique<AsyncScore>(*server, TextRequest(c)));
    }
    ASSERT_TRUE(server->WaitForMetric("rankd_calls_in_flight", 2, kLiveness));
    AsyncScore impatient(*server, TextRequest(c), milliseconds(1500));
    ASSERT_TRUE(server->WaitForMetric("rankd_queue_depth", 1, kLiveness));
    EXPECT_EQ(impatient.Wait().error_code(), StatusCode::DEADLINE_EXCEEDED);
    // The workers are still stopped, yet the queue empties: the work was dropped, not kept.
    EXPECT_TRUE(server->WaitForMetric("rankd_queue_depth", 0, kLiveness));
    EXPECT_TRUE(server->WaitForMetric("rankd_requests_total{code=\"CANCELLED\"}", 1, kLiveness));
    EXPECT_EQ(server->Metric("rankd_calls_in_flight"), 2);
  }
  for (auto& call : fillers) EXPECT_TRUE(call->Wait().ok());
}

// server.max_queue_wait_s: interactive calls that would wait longer than it behind the work ahead
// get RESOURCE_EXHAUSTED at once (overload sheds calls instead of letting every admitted one
// wait); batch calls, which wait for idle time by design, are still queued.
TEST(ServeControlTest, InteractiveCallsOverTheQueueWaitBoundAreRefused) {
  const Golden golden = LoadGolden("llama-cls");
  const GoldenCase& big = golden.cases[5];  // 17 items
  ASSERT_EQ(big.items.size(), 17u);
  // initial_seconds_per_item 0.05: 2 calls of 17 items held by 2 workers are ~0.85 s ahead.
  auto server = StartReady(
      absl::StrReplaceAll(ControlConfig(), {{"server:\n", "server:\n  max_queue_wait_s: 0.5\n"}}));
  ASSERT_NE(server, nullptr);
  std::vector<std::unique_ptr<AsyncScore>> fillers;
  {
    StoppedWorkers stopped(server->WorkerPids());
    for (int i = 0; i < 2; ++i) {
      fillers.push_back(std::make_unique<AsyncScore>(*server, TextRequest(big)));
    }
    ASSERT_TRUE(server->WaitForMetric("rankd_calls_in_flight", 2, kLiveness));
    ScoreResponse response;
    const grpc::Status s = Score(*server, TextRequest(golden.cases[0]), &response);
    EXPECT_EQ(s.error_code(), StatusCode::RESOURCE_EXHAUSTED);
    EXPECT_THAT(s.error_message(), HasSubstr("over server.max_queue_wait_s (500 ms)"));
    ScoreRequest batch = TextRequest(golden.cases[0]);
    batch.set_priority(rankd::v1::PRIORITY_BATCH);
    fillers.push_back(std::make_unique<AsyncScore>(*server, batch));
    EXPECT_TRUE(server->WaitForMetric("rankd_queue_depth", 1, kLiveness));
  }
  for (auto& call : fillers) {
    const grpc::Status s = call->Wait();
    EXPECT_TRUE(s.ok()) << s.error_message();
  }
  ScoreResponse response;  // nothing ahead any more: served
  const grpc::Status s = Score(*server, TextRequest(golden.cases[0]), &response);
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(GoldenMismatch(response, golden.cases[0]), "");
}

TEST(ServeControlTest, DeadlineThatCannotBeMetIsRefusedAtAdmission) {
  const Golden golden = LoadGolden("llama-cls");
  auto server = StartReady(ControlConfig());  // initial_seconds_per_item: 0.05
  ASSERT_NE(server, nullptr);
  ScoreRequest request;
  request.set_query(golden.cases[0].query);
  for (int i = 0; i < 64; ++i) request.add_items()->set_text(golden.cases[5].items[i % 17].text);
  ScoreResponse response;
  grpc::Status s = Score(*server, request, &response, seconds(1));  // ~3.2 s expected
  EXPECT_EQ(s.error_code(), StatusCode::DEADLINE_EXCEEDED);
  EXPECT_THAT(s.error_message(), HasSubstr("deadline cannot be met"));
  // The same request with time to spare is scored.
  s = Score(*server, request, &response, seconds(60));
  EXPECT_TRUE(s.ok()) << s.error_message();
}

TEST(ServeControlTest, InteractiveWorkOvertakesQueuedBatchWork) {
  const Golden golden = LoadGolden("llama-cls");
  const GoldenCase& c = golden.cases[1];
  auto server = StartReady(ControlConfig());
  ASSERT_NE(server, nullptr);
  const std::vector<pid_t> pids = server->WorkerPids();
  ASSERT_EQ(pids.size(), 2u);
  StoppedWorkers stopped(pids);
  std::vector<std::unique_ptr<AsyncScore>> fillers;
  for (int i = 0; i < 2; ++i)
    fillers.push_back(std::make_unique<AsyncScore>(*server, TextRequest(c)));
  ASSERT_TRUE(server->WaitForMetric("rankd_calls_in_flight", 2, kLiveness));
  // The batch call is the heavier one by far: were it scored first, it would also finish first,
  // whatever the order in which the client sees the answers.
  ScoreRequest batch_request = TextRequest(golden.cases[5]);
  for (int i = 0; i < 3; ++i) {
    const auto items = batch_request.items();  // a copy: MergeFrom must not read itself
    batch_request.mutable_items()->MergeFrom(items);
  }
  batch_request.set_priority(rankd::v1::PRIORITY_BATCH);
  AsyncScore batch(*server, batch_request);
  ASSERT_TRUE(server->WaitForMetric("rankd_queue_depth", 1, kLiveness));
  AsyncScore interactive(*server, TextRequest(c));
  ASSERT_TRUE(server->WaitForMetric("rankd_queue_depth", 2, kLiveness));
  stopped.Resume(pids[0]);  // one worker: it takes the queued calls one at a time
  ASSERT_TRUE(interactive.Wait().ok());
  ASSERT_TRUE(batch.Wait().ok());
  EXPECT_LT(interactive.order(), batch.order());
  stopped.Resume(pids[1]);
  for (auto& call : fillers) EXPECT_TRUE(call->Wait().ok());
}

TEST(ServeControlTest, SigtermDrainsInFlightWorkThenStops) {
  const Golden golden = LoadGolden("llama-cls");
  const GoldenCase& c = golden.cases[2];
  auto server = StartReady(ControlConfig(/*max_inflight=*/2));
  ASSERT_NE(server, nullptr);
  const std::vector<pid_t> workers = server->WorkerPids();
  ASSERT_EQ(workers.size(), 2u);
  std::vector<std::unique_ptr<AsyncScore>> in_flight;
  {
    StoppedWorkers stopped(workers);
    for (int i = 0; i < 4; ++i) {
      in_flight.push_back(std::make_unique<AsyncScore>(*server, TextRequest(c)));
    }
    ASSERT_TRUE(server->WaitForMetric("rankd_calls_in_flight", 4, kLiveness));
    EXPECT_EQ(server->Metric("rankd_worker_calls_in_flight{worker=\"0\"}"), 2);
    server->Signal(SIGTERM);
    const auto deadline = std::chrono::steady_clock::now() + kLiveness;
    while (server->Health("rankd.v1.Scorer") != HealthStatus::NOT_SERVING &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(milliseconds(20));
    }
    EXPECT_EQ(server->Health("rankd.v1.Scorer"), HealthStatus::NOT_SERVING);
    EXPECT_EQ(server->Health(""), HealthStatus::SERVING);  // alive while draining
    ScoreResponse response;
    const grpc::Status s = Score(*server, TextRequest(c), &response);
    EXPECT_EQ(s.error_code(), StatusCode::UNAVAILABLE);
    EXPECT_THAT(s.error_message(), HasSubstr("draining"));
  }  // the workers resume: the work in flight finishes
  for (auto& call : in_flight) {
    const grpc::Status s = call->Wait();
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(GoldenMismatch(call->response(), c), "");
  }
  const std::optional<int> status = server->WaitExit(kLiveness);
  ASSERT_TRUE(status.has_value()) << "rankd serve did not exit after SIGTERM";
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << server->Log();
  for (pid_t p : workers) EXPECT_FALSE(ProcessExists(p));
  EXPECT_THAT(server->Log(), HasSubstr("stopped: exited with status 0"));
}

TEST(ServeControlTest, SigtermUnderLoadEndsEveryCallOkOrUnavailable) {
  const Golden golden = LoadGolden("llama-cls");
  const GoldenCase& c = golden.cases[2];
  auto server = StartReady(ControlConfig(/*max_inflight=*/2));
  ASSERT_NE(server, nullptr);
  const std::vector<pid_t> workers = server->WorkerPids();
  ASSERT_EQ(workers.size(), 2u);
  std::vector<std::unique_ptr<AsyncScore>> in_flight;
  std::mutex mu;
  std::map<StatusCode, int> codes;  // of the calls sent while the server drains and stops
  std::atomic<bool> stop{false};
  std::vector<std::thread> clients;
  {
    StoppedWorkers stopped(workers);
    for (int i = 0; i < 6; ++i) {  // 4 held by the workers, 2 queued
      in_flight.push_back(std::make_unique<AsyncScore>(*server, TextRequest(c)));
    }
    ASSERT_TRUE(server->WaitForMetric("rankd_queue_depth", 2, kLiveness));
    server->Signal(SIGTERM);
    const auto deadline = std::chrono::steady_clock::now() + kLiveness;
    while (server->Health("rankd.v1.Scorer") != HealthStatus::NOT_SERVING &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(milliseconds(20));
    }
    // Clients that keep calling through the drain and the stop.
    for (int t = 0; t < 4; ++t) {
      clients.emplace_back([&] {
        auto stub = server->NewScorer();
        while (!stop) {
          grpc::ClientContext context;
          context.set_deadline(std::chrono::system_clock::now() + kLiveness);
          ScoreResponse response;
          const grpc::Status s = stub->Score(&context, TextRequest(c), &response);
          std::lock_guard<std::mutex> lock(mu);
          ++codes[s.error_code()];
        }
      });
    }
    std::this_thread::sleep_for(milliseconds(200));  // calls during the drain
  }  // the workers resume: the work in flight finishes, then the server stops
  for (auto& call : in_flight) {
    const grpc::Status s = call->Wait();
    EXPECT_TRUE(s.ok()) << GrpcCodeName(s.error_code()) << ": " << s.error_message();
  }
  const std::optional<int> status = server->WaitExit(kLiveness);
  stop = true;
  for (auto& t : clients) t.join();
  ASSERT_TRUE(status.has_value()) << "rankd serve did not exit after SIGTERM";
  for (const auto& [code, n] : codes) {
    EXPECT_TRUE(code == StatusCode::OK || code == StatusCode::UNAVAILABLE)
        << n << " calls ended " << GrpcCodeName(code) << "\n"
        << server->Log().substr(0, 4000);
  }
  EXPECT_GT(codes[StatusCode::UNAVAILABLE], 0);
}

// server.drain_delay_s: after SIGTERM the server reports NOT_SERVING at once but still serves
// calls for the delay (a balancer checking health takes it out meanwhile), then drains.
TEST(ServeControlTest, DrainDelayServesCallsWhileNotServingThenDrains) {
  const Golden golden = LoadGolden("llama-cls");
  const GoldenCase& c = golden.cases[2];
  constexpr double kDelayS = 3;
  auto server = StartReady(ControlConfig(1, absl::StrCat("  drain_delay_s: ", kDelayS, "\n")));
  ASSERT_NE(server, nullptr);
  const auto sigterm = std::chrono::steady_clock::now();
  server->Signal(SIGTERM);
  while (server->Health("rankd.v1.Scorer") != HealthStatus::NOT_SERVING &&
         std::chrono::steady_clock::now() < sigterm + kLiveness) {
    std::this_thread::sleep_for(milliseconds(20));
  }
  EXPECT_EQ(server->Health("rankd.v1.Scorer"), HealthStatus::NOT_SERVING);
  EXPECT_EQ(server->Metric("rankd_ready"), 0);
  // Within the delay calls are served (the golden scores); after it, with nothing in flight, the
  // drain ends at once: UNAVAILABLE (refused while draining, or the connection closed).
  int served_in_delay = 0;
  grpc::Status refused;
  while (std::chrono::steady_clock::now() < sigterm + kLiveness) {
    ScoreResponse response;
    const grpc::Status s = Score(*server, TextRequest(c), &response);
    if (!s.ok()) {
      refused = s;
      break;
    }
    EXPECT_EQ(GoldenMismatch(response, c), "");
    ++served_in_delay;
  }
  const double refused_after_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - sigterm).count();
  EXPECT_GT(served_in_delay, 0);
  EXPECT_EQ(refused.error_code(), StatusCode::UNAVAILABLE) << refused.error_message();
  EXPECT_GE(refused_after_s, kDelayS);
  const std::optional<int> status = server->WaitExit(kLiveness);
  ASSERT_TRUE(status.has_value()) << "rankd serve did not exit after SIGTERM";
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << server->Log();
  EXPECT_THAT(server->Log(), HasSubstr("calls still accepted for 3 s (server.drain_delay_s)"));
}

// The value of each series of `family` in a /metrics text, by its labels ("" or {a="b",...}).
std::map<std::string, double> Series(const std::string& metrics, const std::string& family) {
  std::map<std::string, double> series;
  std::istringstream lines(metrics);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(family, 0) != 0) continue;
    const size_t space = line.rfind(' ');
    const std::string labels = line.substr(family.size(), space - family.size());
    if (labels.empty() || labels[0] == '{') series[labels] = std::stod(line.substr(space + 1));
  }
  return series;
}

// Prometheus' process metrics for the front end (unlabelled) and each worker process that runs
// ({worker="i"}: one series each, a replaced worker's with its new start time), and
// rankd_build_info.
TEST(ServeTest, MetricsHaveProcessSeriesForTheFrontEndAndEachWorkerAndTheBuild) {
  auto server = StartReady(MainConfig("llama-cls"));
  ASSERT_NE(server, nullptr);
  const double now_s = static_cast<double>(std::time(nullptr));
  const std::vector<std::string> processes = {"", "{worker=\"0\"}", "{worker=\"1\"}"};
  std::string metrics = server->Metrics();
  for (const char* family : {"process_cpu_seconds_total", "process_resident_memory_bytes",
                             "process_open_fds", "process_start_time_seconds"}) {
    const std::map<std::string, double> series = Series(metrics, family);
    ASSERT_EQ(series.size(), processes.size()) << family << "\n" << metrics;
    for (const std::string& p : processes) {
      ASSERT_EQ(series.count(p), 1u) << family << p;
      const double v = series.at(p);
      if (std::string(family) == "process_start_time_seconds") {
        EXPECT_GT(v, now_s - 3600) << p;
        EXPECT_LE(v, now_s + 2) << p;  // /proc/stat's boot time is in whole seconds
      } else if (std::string(family) == "process_cpu_seconds_total") {
        EXPECT_GE(v, 0) << p;
      } else {
        EXPECT_GT(v, 0) << family << p;
      }
    }
  }
  EXPECT_THAT(metrics, HasSubstr("# TYPE process_cpu_seconds_total counter\n"));
  const std::map<std::string, double> build = Series(metrics, "rankd_build_info");
  ASSERT_EQ(build.size(), 1u) << metrics;
  EXPECT_EQ(build.begin()->second, 1);
  EXPECT_THAT(build.begin()->first,
              ::testing::MatchesRegex("\\{version=\"[0-9.]+\",commit=\"([0-9a-f]{12}|unknown)\","
                                      "backend=\"cpu\",precision=\"float32\"\\}"));

  // A worker killed and replaced: still one series per worker, the new one's start time later.
  const pid_t victim = server->WorkerPids().at(0);
  const std::optional<int> index = server->WorkerIndex(victim);
  ASSERT_TRUE(index.has_value());
  const std::string label = absl::StrCat("{worker=\"", *index, "\"}");
  const double started = Series(metrics, "process_start_time_seconds").at(label);
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  ASSERT_TRUE(WaitForReplacement(*server, victim)) << server->Log();
  metrics = server->Metrics();
  const std::map<std::string, double> starts = Series(metrics, "process_start_time_seconds");
  EXPECT_EQ(starts.size(), processes.size()) << metrics;
  EXPECT_GT(starts.at(label), started);
}

}  // namespace
}  // namespace rankd::testing
