// The HTTP JSON API (POST /v1/rerank, POST /rerank) against a real `rankd serve`, called with a
// plain HTTP client: the scores are gRPC Score's, results are sorted and cut to top_n, truncate
// cuts, every error code the API maps is produced, API keys apply (and not to the documentation,
// GET /openapi.json and /docs).
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "tests/common/golden.h"
#include "tests/server/test_server.h"

namespace rankd::testing {
namespace {

using Json = nlohmann::json;
using rankd::v1::ScoreRequest;
using rankd::v1::ScoreResponse;
using std::chrono::milliseconds;
using std::chrono::seconds;
using ::testing::HasSubstr;

constexpr milliseconds kLiveness = seconds(60);

// `workers` workers of the tiny llama classifier, one call each, a queue of two; `server_more` and
// `workers_more` add lines to those sections.
std::string Config(int workers, const std::string& server_more = "",
                   const std::string& workers_more = "") {
  return absl::StrCat("model:\n  dir: ", ModelDir("llama-cls"),
                      "\n  threads: 1\n"
                      "server:\n"
                      "  queue_size: 2\n",
                      server_more,
                      "limits:\n"
                      "  max_item_tokens: 64\n"
                      "  max_message_bytes: 65536\n"
                      "workers:\n"
                      "  count: ",
                      workers,
                      "\n  max_inflight: 1\n"
                      "  ping_interval_s: 0.2\n"
                      "  ping_timeout_s: 60\n",
                      workers_more,
                      "logging:\n"
                      "  access_log: true\n");
}

std::unique_ptr<TestServer> StartReady(const std::string& config, int workers) {
  auto server = TestServer::Start(config);
  if (server == nullptr) return nullptr;
  EXPECT_TRUE(server->WaitReady(workers, kLiveness)) << server->Log();
  return server;
}

struct Answer {
  int status = 0;  // 0: no answer
  Json body;       // discarded when not JSON
  std::string content_type;
};

Answer Post(const TestServer& server, const std::string& path, const std::string& body,
            httplib::Headers headers = {}, const std::string& type = "application/json") {
  httplib::Client client("127.0.0.1", server.http_port());
  client.set_read_timeout(60);
  auto res = client.Post(path, headers, body, type);
  if (!res) return {};
  return {res->status, Json::parse(res->body, nullptr, false),
          res->get_header_value("Content-Type")};
}

// Expects a JSON error answer with `status` and `code` whose message holds `message`.
void ExpectError(const Answer& a, int status, const std::string& code, const std::string& message) {
  EXPECT_EQ(a.status, status) << a.body.dump();
  EXPECT_EQ(a.content_type, "application/json");
  ASSERT_TRUE(a.body.is_object()) << a.body.dump();
  EXPECT_EQ(a.body["error"]["code"], code);
  EXPECT_THAT(a.body["error"]["message"].get<std::string>(), HasSubstr(message));
}

Json Texts(const GoldenCase& c) {
  Json texts = Json::array();
  for (const GoldenItem& item : c.items) texts.push_back(item.text);
  return texts;
}

// gRPC Score of the same texts, computed afresh (skip_cache).
std::vector<float> GrpcScores(const TestServer& server, const GoldenCase& c, bool sigmoid,
                              bool truncate = false) {
  ScoreRequest request;
  request.set_query(c.query);
  for (const GoldenItem& item : c.items) request.add_items()->set_text(item.text);
  request.set_apply_sigmoid(sigmoid);
  request.set_skip_cache(true);
  if (truncate) request.set_truncate(rankd::v1::TRUNCATE_END);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + seconds(30));
  ScoreResponse response;
  const grpc::Status s = server.NewScorer()->Score(&context, request, &response);
  EXPECT_TRUE(s.ok()) << s.error_message();
  std::vector<float> scores;
  for (const auto& item : response.scores()) scores.push_back(item.score());
  return scores;
}

// The `results` (or TEI list) hold every index once, sorted by `key` best first, each with the
// score gRPC gave its index.
void ExpectSortedScores(const Json& results, const char* key, const std::vector<float>& scores,
                        size_t count) {
  ASSERT_EQ(results.size(), count) << results.dump();
  std::vector<float> sorted = scores;
  std::sort(sorted.begin(), sorted.end(), std::greater<>());
  for (size_t r = 0; r < results.size(); ++r) {
    const int index = results[r]["index"].get<int>();
    ASSERT_GE(index, 0);
    ASSERT_LT(index, static_cast<int>(scores.size()));
    EXPECT_EQ(results[r][key].get<float>(), scores[index]) << "result " << r;
    EXPECT_EQ(results[r][key].get<float>(), sorted[r]) << "result " << r;
  }
}

TEST(HttpApiTest, BothRoutesAnswerGrpcScoresSortedBestFirstAndCutToTopN) {
  const Golden golden = LoadGolden("llama-cls");
  const GoldenCase& c = golden.cases[5];  // 17 items
  auto server = StartReady(Config(2), 2);
  ASSERT_NE(server, nullptr);

  // Cohere shape: sigmoid scores by default, top_n, the documents echoed.
  Json body = {{"model", "llama-cls"}, {"query", c.query}, {"documents", Texts(c)}, {"top_n", 5}};
  body["documents"][1] = {{"text", c.items[1].text}};  // Cohere's object form
  Answer a = Post(*server, "/v1/rerank", body.dump(),
                  {{"X-Request-Id", "call-7"},
                   {"traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}});
  ASSERT_EQ(a.status, 200) << a.body.dump();
  EXPECT_EQ(a.content_type, "application/json");
  EXPECT_EQ(a.body["id"], "call-7");
  EXPECT_EQ(a.body["model"], "llama-cls");
  EXPECT_GT(a.body["usage"]["total_tokens"].get<int>(), 0);
  const std::vector<float> sigmoid = GrpcScores(*server, c, /*sigmoid=*/true);
  ExpectSortedScores(a.body["results"], "relevance_score", sigmoid, 5);
  for (const Json& r : a.body["results"]) {
    EXPECT_EQ(r["document"]["text"], c.items[r["index"].get<int>()].text);
    EXPECT_GT(r["relevance_score"].get<float>(), 0.0f);
    EXPECT_LT(r["relevance_score"].get<float>(), 1.0f);
  }

  // Raw scores, every result, no documents; a fresh id when the caller gives none.
  body = {{"query", c.query},
          {"documents", Texts(c)},
          {"raw_scores", true},
          {"return_documents", false}};
  a = Post(*server, "/v1/rerank", body.dump());
  ASSERT_EQ(a.status, 200) << a.body.dump();
  EXPECT_EQ(a.body["id"].get<std::string>().size(), 32u);
  const std::vector<float> raw = GrpcScores(*server, c, /*sigmoid=*/false);
  ExpectSortedScores(a.body["results"], "relevance_score", raw, c.items.size());
  EXPECT_FALSE(a.body["results"][0].contains("document"));

  // TEI shape: raw scores when asked, texts when asked.
  body = {{"query", c.query}, {"texts", Texts(c)}, {"raw_scores", true}, {"return_text", true}};
  a = Post(*server, "/rerank", body.dump());
  ASSERT_EQ(a.status, 200) << a.body.dump();
  ASSERT_TRUE(a.body.is_array());
  ExpectSortedScores(a.body, "score", raw, c.items.size());
  EXPECT_EQ(a.body[0]["text"], c.items[a.body[0]["index"].get<int>()].text);
  body = {{"query", c.query}, {"texts", Texts(c)}};
  a = Post(*server, "/rerank", body.dump());
  ASSERT_EQ(a.status, 200) << a.body.dump();
  ExpectSortedScores(a.body, "score", sigmoid, c.items.size());
  EXPECT_FALSE(a.body[0].contains("text"));

  // The front end's metrics count them: as calls (with gRPC's) and by route.
  EXPECT_EQ(server->Metric("rankd_http_requests_total{route=\"/v1/rerank\",code=\"200\"}"), 2);
  EXPECT_EQ(server->Metric("rankd_http_requests_total{route=\"/rerank\",code=\"200\"}"), 2);
  EXPECT_EQ(server->Metric("rankd_requests_total{code=\"OK\"}"), 6);
  EXPECT_THAT(
      server->Log(),
      HasSubstr("POST /v1/rerank request_id=call-7 trace_id=4bf92f3577b34da6a3ce929d0e0e4736 "
                "items=17 OK"));
}

TEST(HttpApiTest, TruncateCutsLongTextsAsTruncateEndDoes) {
  const Golden golden = LoadGolden("llama-cls");
  GoldenCase c = golden.cases[1];
  std::string long_text;
  for (int i = 0; i < 100; ++i) absl::StrAppend(&long_text, "software engineer ");
  c.items[1].text = long_text;  // over max_item_tokens=64
  auto server = StartReady(Config(2), 2);
  ASSERT_NE(server, nullptr);
  const Json body = {{"query", c.query}, {"texts", Texts(c)}, {"raw_scores", true}};
  ExpectError(Post(*server, "/rerank", body.dump()), 400, "INVALID_ARGUMENT",
              "texts[1]: at least ");
  Json truncated = body;
  truncated["truncate"] = true;
  const Answer a = Post(*server, "/rerank", truncated.dump());
  ASSERT_EQ(a.status, 200) << a.body.dump();
  ExpectSortedScores(a.body, "score", GrpcScores(*server, c, false, /*truncate=*/true), 2);
}

TEST(HttpApiTest, BadCallsGetTheirHttpCodeAndAJsonErrorNamingTheField) {
  const Golden golden = LoadGolden("llama-cls");
  const GoldenCase& c = golden.cases[1];
  auto server = StartReady(Config(2, "  strict_model_name: true\n"), 2);
  ASSERT_NE(server, nullptr);
  const Json good = {{"query", c.query}, {"documents", Texts(c)}};
  Json body = good;
  body["documents"] = Json::array();
  ExpectError(Post(*server, "/v1/rerank", body.dump()), 400, "INVALID_ARGUMENT",
              "documents: empty");
  body = good;
  body["documents"][1] = "";
  ExpectError(Post(*server, "/v1/rerank", body.dump()), 400, "INVALID_ARGUMENT",
              "documents[1]: empty");
  ExpectError(Post(*server, "/v1/rerank", "{\"query\": "), 400, "INVALID_ARGUMENT",
              "body: not valid JSON");
  ExpectError(Post(*server, "/v1/rerank", R"({"query": 1, "documents": ["a"]})"), 400,
              "INVALID_ARGUMENT", "query: must be a string");
  body = good;
  body["model"] = "other";
  ExpectError(Post(*server, "/v1/rerank", body.dump()), 404, "NOT_FOUND",
              "model: 'other' is not served here");
  ExpectError(Post(*server, "/v3/rerank", good.dump()), 404, "NOT_FOUND", "no such path");
  ExpectError(Post(*server, "/v1/rerank", good.dump(), {{"X-Request-Id", std::string(200, 'x')}}),
              400, "INVALID_ARGUMENT", "X-Request-Id: must be printable ASCII");
  ExpectError(Post(*server, "/v1/rerank", good.dump(), {}, "text/plain"), 415,
              "UNSUPPORTED_MEDIA_TYPE", "application/json");
  body = good;
  body["documents"] = Json::array({std::string(70000, 'a')});
  ExpectError(Post(*server, "/v1/rerank", body.dump()), 413, "PAYLOAD_TOO_LARGE",
              "exceeds the limit of 65536 bytes");
  httplib::Client client("127.0.0.1", server->http_port());
  auto res = client.Get("/v1/rerank");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 405);
  EXPECT_EQ(Json::parse(res->body)["error"]["code"], "METHOD_NOT_ALLOWED");
  // Still serving; the refusals are counted.
  EXPECT_EQ(Post(*server, "/v1/rerank", good.dump()).status, 200);
  EXPECT_EQ(server->Metric("rankd_http_requests_total{route=\"/v1/rerank\",code=\"400\"}"), 5);
  EXPECT_EQ(server->Metric("rankd_http_requests_total{route=\"other\",code=\"413\"}"), 1);
}

TEST(HttpApiTest, FullQueueAnswers429) {
  const Golden golden = LoadGolden("llama-cls");
  const Json body = {{"query", golden.cases[1].query}, {"documents", Texts(golden.cases[1])}};
  auto server = StartReady(Config(2), 2);  // 2 workers x 1 call, queue of 2
  ASSERT_NE(server, nullptr);
  std::vector<std::future<Answer>> calls;
  {
    StoppedWorkers stopped(server->WorkerPids());
    for (int i = 0; i < 4; ++i) {
      calls.push_back(
          std::async(std::launch::async, [&] { return Post(*server, "/v1/rerank", body.dump()); }));
    }
    ASSERT_TRUE(server->WaitForMetric("rankd_calls_in_flight", 2, kLiveness));
    ASSERT_TRUE(server->WaitForMetric("rankd_queue_depth", 2, kLiveness));
    ExpectError(Post(*server, "/v1/rerank", body.dump()), 429, "RESOURCE_EXHAUSTED",
                "queue_size=2");
  }
  for (auto& call : calls) EXPECT_EQ(call.get().status, 200);
}

TEST(HttpApiTest, UnmeetableDeadlineAnswers504AndNoWorkerUpAnswers503) {
  const Golden golden = LoadGolden("llama-cls");
  // One worker restarted long after it dies; HTTP calls get a second, and the cost prior says
  // 64 items take 3.2 s.
  auto server = StartReady(Config(1,
                                  "  http_request_timeout_s: 1\n"
                                  "  initial_seconds_per_item: 0.05\n",
                                  "  restart_backoff_s: 60\n"),
                           1);
  ASSERT_NE(server, nullptr);
  Json texts = Json::array();
  for (int i = 0; i < 64; ++i) texts.push_back(golden.cases[5].items[i % 17].text);
  const Json body = {{"query", golden.cases[5].query}, {"texts", texts}};
  ExpectError(Post(*server, "/rerank", body.dump()), 504, "DEADLINE_EXCEEDED",
              "deadline cannot be met");
  const std::vector<pid_t> pids = server->WorkerPids();
  ASSERT_EQ(pids.size(), 1u);
  ASSERT_EQ(kill(pids[0], SIGKILL), 0);
  ASSERT_TRUE(server->WaitForMetric("rankd_workers_up", 0, kLiveness));
  const Json small = {{"query", golden.cases[1].query}, {"texts", Texts(golden.cases[1])}};
  ExpectError(Post(*server, "/rerank", small.dump()), 503, "UNAVAILABLE", "not ready");
}

TEST(HttpApiTest, ApiKeysApplyAndAreNeverLogged) {
  const Golden golden = LoadGolden("llama-cls");
  const std::string dir = absl::StrCat(::testing::TempDir(), "/http-keys-", getpid());
  std::filesystem::create_directories(dir);
  const std::string keys = dir + "/keys";
  std::ofstream(keys) << "# the test's key\nsecret-key-1-abcdef\n";
  auto server = StartReady(Config(2, absl::StrCat("  auth:\n    api_keys_file: ", keys, "\n")), 2);
  ASSERT_NE(server, nullptr);
  const std::string body =
      Json({{"query", golden.cases[1].query}, {"documents", Texts(golden.cases[1])}}).dump();
  ExpectError(Post(*server, "/v1/rerank", body), 401, "UNAUTHENTICATED", "no API key");
  ExpectError(Post(*server, "/v1/rerank", body, {{"Authorization", "Bearer wrong-key"}}), 401,
              "UNAUTHENTICATED", "API key not accepted");
  EXPECT_EQ(
      Post(*server, "/v1/rerank", body, {{"Authorization", "Bearer secret-key-1-abcdef"}}).status,
      200);
  EXPECT_EQ(Post(*server, "/rerank",
                 Json({{"query", golden.cases[1].query}, {"texts", Texts(golden.cases[1])}}).dump(),
                 {{"Authorization", "Bearer secret-key-1-abcdef"}})
                .status,
            200);
  EXPECT_THAT(server->Log(), ::testing::Not(HasSubstr("secret-key-1-abcdef")));
  EXPECT_THAT(server->Log(), ::testing::Not(HasSubstr("wrong-key")));

  // The documentation needs no key, and declares the Bearer scheme.
  httplib::Client client("127.0.0.1", server->http_port());
  auto openapi = client.Get("/openapi.json");
  ASSERT_TRUE(openapi);
  EXPECT_EQ(openapi->status, 200);
  EXPECT_EQ(openapi->get_header_value("Content-Type"), "application/json");
  const Json doc = Json::parse(openapi->body);
  EXPECT_TRUE(doc["paths"].contains("/v1/rerank"));
  EXPECT_TRUE(doc["paths"].contains("/rerank"));
  EXPECT_EQ(doc["components"]["securitySchemes"]["bearer"]["scheme"], "bearer");
  auto docs = client.Get("/docs");
  ASSERT_TRUE(docs);
  if (RANKD_HAVE_SWAGGER_UI) {  // the build embedded swagger-ui-dist (cmake/SwaggerUi.cmake)
    EXPECT_EQ(docs->status, 200);
    EXPECT_EQ(docs->get_header_value("Content-Type"), "text/html; charset=utf-8");
    EXPECT_THAT(docs->body, HasSubstr("/openapi.json"));
    for (const char* asset : {"/docs/swagger-ui-bundle.js", "/docs/swagger-ui.css"}) {
      auto a = client.Get(asset);
      ASSERT_TRUE(a);
      EXPECT_EQ(a->status, 200) << asset;
      EXPECT_GT(a->body.size(), 10000u) << asset;
    }
  } else {
    EXPECT_EQ(docs->status, 404);
    EXPECT_THAT(docs->body, HasSubstr("built without Swagger UI"));
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace rankd::testing
