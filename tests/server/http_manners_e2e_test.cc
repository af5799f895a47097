// What HTTP clients expect of the API port besides the rerank shapes, against a real
// `rankd serve` (issue 27): POST /v2/rerank and `meta` on the Cohere routes; model names
// (server.served_model_names, --served-model-name, server.strict_model_name) and GET /v1/models,
// /info, /health; CORS (server.cors_allow_origins) with its preflights; Retry-After,
// WWW-Authenticate and X-Request-Id; gzip request bodies. Hostile inputs included: bad and
// truncated gzip, a body that inflates far past limits.max_message_bytes, origins that are
// almost allowed, sent twice or with odd bytes, OPTIONS on unknown paths, model names with odd
// bytes.
#include <signal.h>
#include <unistd.h>
#include <zlib.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "tests/common/golden.h"
#include "tests/server/raw_http_client.h"
#include "tests/server/test_server.h"

namespace rankd::testing {
namespace {

using Json = nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::seconds;
using ::testing::HasSubstr;

constexpr milliseconds kLiveness = seconds(60);

// One worker of the tiny llama classifier (served as "llama-cls"), a queue of one; `server_more`
// adds lines to the server section, `workers_more` to the workers'.
std::string Config(const std::string& server_more = "", const std::string& workers_more = "") {
  return absl::StrCat("model:\n  dir: ", ModelDir("llama-cls"),
                      "\n  threads: 1\n"
                      "server:\n"
                      "  queue_size: 1\n",
                      server_more,
                      "limits:\n"
                      "  max_item_tokens: 64\n"
                      "  max_message_bytes: 65536\n"
                      "workers:\n"
                      "  count: 1\n"
                      "  max_inflight: 1\n"
                      "  ping_interval_s: 0.2\n"
                      "  ping_timeout_s: 60\n",
                      workers_more);
}

std::unique_ptr<TestServer> StartReady(const std::string& config,
                                       const std::vector<std::string>& flags = {}) {
  auto server = TestServer::Start(config, TestServer::Options{.flags = flags});
  if (server == nullptr) return nullptr;
  EXPECT_TRUE(server->WaitReady(1, kLiveness)) << server->Log();
  return server;
}

struct Answer {
  int status = 0;  // 0: no answer
  Json body;       // discarded when not JSON
  httplib::Headers headers;
  std::string Header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? "" : it->second;
  }
  bool Has(const std::string& name) const { return headers.count(name) > 0; }
};

Answer Send(const TestServer& server, const std::string& method, const std::string& path,
            const std::string& body = "", httplib::Headers headers = {}) {
  httplib::Client client("127.0.0.1", server.http_port());
  client.set_read_timeout(60);
  httplib::Result res = method == "POST"      ? client.Post(path, headers, body, "application/json")
                        : method == "OPTIONS" ? client.Options(path, headers)
                                              : client.Get(path, headers);
  if (!res) return {};
  return {res->status, Json::parse(res->body, nullptr, false), res->headers};
}

Answer Post(const TestServer& server, const std::string& path, const Json& body,
            httplib::Headers headers = {}) {
  return Send(server, "POST", path, body.dump(), std::move(headers));
}

const Json kDocuments = {"Barista, Lisbon", "Rust developer, Berlin", "Go developer, Munich"};
const Json kV2 = {
    {"model", "rerank-v3.5"}, {"query", "rust engineer in berlin"}, {"documents", kDocuments}};

// `text` gzipped (one gzip member).
std::string Gzip(const std::string& text) {
  z_stream zs{};
  EXPECT_EQ(
      deflateInit2(&zs, Z_BEST_COMPRESSION, Z_DEFLATED, 16 + MAX_WBITS, 9, Z_DEFAULT_STRATEGY),
      Z_OK);
  std::string out(deflateBound(&zs, text.size()), '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  zs.avail_in = static_cast<uInt>(text.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&zs, Z_FINISH), Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

TEST(HttpMannersTest, CohereV2AndMetaAnyModelNameByDefaultTheServedNameReported) {
  auto server = StartReady(Config());
  ASSERT_NE(server, nullptr);
  // v2: the SDKs' default model names are accepted; the answer names the served model.
  Answer v2 = Post(*server, "/v2/rerank", kV2, {{"X-Request-Id", "v2-call"}});
  ASSERT_EQ(v2.status, 200) << v2.body.dump();
  EXPECT_EQ(v2.body["id"], "v2-call");
  EXPECT_EQ(v2.body["model"], "llama-cls");
  ASSERT_EQ(v2.body["results"].size(), 3u);
  for (const Json& r : v2.body["results"]) {
    EXPECT_EQ(r.size(), 2u) << r.dump();  // index and relevance_score, no document
    EXPECT_TRUE(r["relevance_score"].is_number());
  }
  EXPECT_EQ(v2.body["meta"]["api_version"]["version"], "2");
  EXPECT_EQ(v2.body["meta"]["billed_units"]["search_units"], 1);
  EXPECT_GT(v2.body["meta"]["tokens"]["input_tokens"].get<int>(), 0);
  EXPECT_FALSE(v2.body.contains("usage"));
  // The same scores as v1's, which keeps its documents and usage and says version 1.
  Json v1_body = kV2;
  v1_body["model"] = "rerank-english-v2.0";
  Answer v1 = Post(*server, "/v1/rerank", v1_body);
  ASSERT_EQ(v1.status, 200) << v1.body.dump();
  EXPECT_EQ(v1.body["model"], "llama-cls");
  EXPECT_EQ(v1.body["meta"]["api_version"]["version"], "1");
  EXPECT_EQ(v1.body["meta"]["billed_units"]["search_units"], 1);
  EXPECT_GT(v1.body["usage"]["total_tokens"].get<int>(), 0);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(v1.body["results"][i]["index"], v2.body["results"][i]["index"]);
    EXPECT_EQ(v1.body["results"][i]["relevance_score"], v2.body["results"][i]["relevance_score"]);
    EXPECT_TRUE(v1.body["results"][i].contains("document"));
  }
  // 150 documents are two search units; top_n cuts; Cohere's integer priority is taken.
  Json many = kV2;
  many["documents"] = Json::array();
  for (int i = 0; i < 150; ++i) many["documents"].push_back(absl::StrCat("posting ", i));
  many["top_n"] = 2;
  many["priority"] = 0;
  Answer m = Post(*server, "/v2/rerank", many);
  ASSERT_EQ(m.status, 200) << m.body.dump();
  EXPECT_EQ(m.body["results"].size(), 2u);
  EXPECT_EQ(m.body["meta"]["billed_units"]["search_units"], 2);
  // v2 cuts over-long documents (to limits.max_item_tokens) unless told not to; a smaller
  // max_tokens_per_doc is refused naming the limit.
  std::string long_text;
  for (int i = 0; i < 100; ++i) absl::StrAppend(&long_text, "software engineer ");
  Json cut = kV2;
  cut["documents"][1] = long_text;
  EXPECT_EQ(Post(*server, "/v2/rerank", cut).status, 200);
  cut["max_tokens_per_doc"] = 4096;
  EXPECT_EQ(Post(*server, "/v2/rerank", cut).status, 200);
  cut["truncate"] = false;
  Answer refused = Post(*server, "/v2/rerank", cut);
  EXPECT_EQ(refused.status, 400);
  EXPECT_THAT(refused.body.dump(), HasSubstr("documents[1]: at least"));
  cut.erase("truncate");
  cut["max_tokens_per_doc"] = 10;
  refused = Post(*server, "/v2/rerank", cut);
  EXPECT_EQ(refused.status, 400);
  EXPECT_THAT(refused.body["error"]["message"].get<std::string>(),
              HasSubstr("max_tokens_per_doc: documents are cut to limits.max_item_tokens=64"));
  // v2's documents are strings.
  Json object = kV2;
  object["documents"][0] = {{"text", "a"}};
  refused = Post(*server, "/v2/rerank", object);
  EXPECT_EQ(refused.status, 400);
  EXPECT_THAT(refused.body["error"]["message"].get<std::string>(),
              HasSubstr("documents[0]: must be a string"));
  // Model names with odd bytes: any name is accepted, none is echoed.
  for (const std::string& name :
       {std::string("\0\x1b[31m", 6), std::string(60000, 'm'), std::string("caf\u00e9\r\nX: 1")}) {
    Json odd = kV2;
    odd["model"] = name;
    Answer a = Post(*server, "/v2/rerank", odd);
    EXPECT_EQ(a.status, 200) << a.body.dump();
    EXPECT_EQ(a.body["model"], "llama-cls");
  }
  // Invalid UTF-8 is no JSON.
  Answer bad = Send(*server, "POST", "/v2/rerank",
                    "{\"model\": \"\xff\xfe\", \"query\": \"q\", \"documents\": [\"a\"]}");
  EXPECT_EQ(bad.status, 400);
  EXPECT_THAT(bad.body["error"]["message"].get<std::string>(), HasSubstr("body: not valid JSON"));
}

TEST(HttpMannersTest, ServedModelNamesModelsInfoHealthAndStrictNames) {
  auto server = StartReady(
      Config("  strict_model_name: true\n"),
      {"--served-model-name", "rerank-english-v3.0", "--served-model-name", "llama-cls"});
  ASSERT_NE(server, nullptr);
  // The first name is reported; with strict names, each served one is accepted, others 404.
  Json body = kV2;
  body["model"] = "llama-cls";
  Answer a = Post(*server, "/v2/rerank", body);
  ASSERT_EQ(a.status, 200) << a.body.dump();
  EXPECT_EQ(a.body["model"], "rerank-english-v3.0");
  body["model"] = "rerank-v3.5";
  a = Post(*server, "/v2/rerank", body);
  EXPECT_EQ(a.status, 404);
  EXPECT_EQ(a.body["error"]["message"],
            "model: 'rerank-v3.5' is not served here (this server serves 'rerank-english-v3.0', "
            "'llama-cls'; server.strict_model_name is on)");
  body["model"] = std::string(5000, '\x01');
  a = Post(*server, "/v2/rerank", body);
  EXPECT_EQ(a.status, 404);
  EXPECT_THAT(a.body["error"]["message"].get<std::string>(), HasSubstr("... (5000 bytes)"));
  body.erase("model");
  EXPECT_EQ(Post(*server, "/v2/rerank", body).status, 200);  // none given: the served one

  Answer models = Send(*server, "GET", "/v1/models");
  ASSERT_EQ(models.status, 200);
  EXPECT_EQ(models.body["object"], "list");
  ASSERT_EQ(models.body["data"].size(), 2u);
  EXPECT_EQ(models.body["data"][0]["id"], "rerank-english-v3.0");
  EXPECT_EQ(models.body["data"][1]["id"], "llama-cls");
  EXPECT_EQ(models.body["data"][0]["object"], "model");
  EXPECT_EQ(models.body["data"][0]["owned_by"], "rankd");
  EXPECT_GT(models.body["data"][0]["created"].get<int64_t>(), 1700000000);

  Answer info = Send(*server, "GET", "/info");
  ASSERT_EQ(info.status, 200);
  EXPECT_EQ(info.body["model_id"], "rerank-english-v3.0");
  EXPECT_EQ(info.body["model_dir_name"], "llama-cls");
  EXPECT_EQ(info.body["model_dtype"], "float32");
  EXPECT_EQ(info.body["backend"], "cpu");
  EXPECT_EQ(info.body["max_item_tokens"], 64);
  EXPECT_EQ(info.body["max_input_length"], 512 + 64);
  EXPECT_EQ(info.body["max_client_batch_size"], 1000);
  EXPECT_EQ(info.body["max_message_bytes"], 65536);
  EXPECT_EQ(info.body["auto_truncate"], false);
  EXPECT_THAT(info.body["model_sha"].get<std::string>(), ::testing::StartsWith("sha256:"));
  EXPECT_FALSE(info.body["version"].get<std::string>().empty());

  Answer health = Send(*server, "GET", "/health");
  EXPECT_EQ(health.status, 200);
  EXPECT_EQ(health.body, Json({{"status", "ok"}}));
  // Each is in the OpenAPI document.
  const Answer doc = Send(*server, "GET", "/openapi.json");
  for (const char* path : {"/v1/rerank", "/v2/rerank", "/rerank", "/tokenize"}) {
    EXPECT_TRUE(doc.body["paths"][path].contains("post")) << path;
  }
  for (const char* path : {"/v1/models", "/info", "/health"}) {
    EXPECT_TRUE(doc.body["paths"][path].contains("get")) << path;
  }
  EXPECT_EQ(server->Metric("rankd_http_requests_total{route=\"/health\",code=\"200\"}"), 1);
}

TEST(HttpMannersTest, RetryAfterWwwAuthenticateAndRequestIdsOnEveryAnswer) {
  const std::string dir = absl::StrCat(::testing::TempDir(), "/http-manners-", getpid());
  std::filesystem::create_directories(dir);
  const std::string keys = dir + "/keys";
  std::ofstream(keys) << "manners-key-0123456789\n";
  auto server = StartReady(Config(absl::StrCat("  auth:\n    api_keys_file: ", keys, "\n"),
                                  "  restart_backoff_s: 60\n"));
  ASSERT_NE(server, nullptr);
  const httplib::Headers key = {{"Authorization", "Bearer manners-key-0123456789"}};
  // 401: WWW-Authenticate: Bearer; the caller's id echoed on refusals too.
  Answer a = Post(*server, "/v2/rerank", kV2, {{"X-Request-Id", "no-key-1"}});
  EXPECT_EQ(a.status, 401);
  EXPECT_THAT(a.Header("WWW-Authenticate"), ::testing::StartsWith("Bearer"));
  EXPECT_EQ(a.Header("X-Request-Id"), "no-key-1");
  EXPECT_EQ(Send(*server, "GET", "/v1/models").status, 401);
  EXPECT_EQ(Send(*server, "GET", "/health").status, 200);  // a probe needs no key
  // 200: the caller's id, else the fresh one of the answer's `id`.
  httplib::Headers with_id = key;
  with_id.emplace("X-Request-Id", "call-42");
  a = Post(*server, "/v1/rerank", kV2, with_id);
  ASSERT_EQ(a.status, 200) << a.body.dump();
  EXPECT_EQ(a.Header("X-Request-Id"), "call-42");
  a = Post(*server, "/v1/rerank", kV2, key);
  ASSERT_EQ(a.status, 200);
  EXPECT_EQ(a.Header("X-Request-Id"), a.body["id"].get<std::string>());
  EXPECT_EQ(a.Header("X-Request-Id").size(), 32u);
  // An error of the body: still the call's id.
  Json empty = kV2;
  empty["documents"] = Json::array();
  a = Post(*server, "/v2/rerank", empty, with_id);
  EXPECT_EQ(a.status, 400);
  EXPECT_EQ(a.Header("X-Request-Id"), "call-42");
  // No CORS configured: no Access-Control headers, no Vary.
  httplib::Headers from_site = key;
  from_site.emplace("Origin", "https://app.example.com");
  a = Post(*server, "/v1/rerank", kV2, from_site);
  EXPECT_EQ(a.status, 200);
  EXPECT_FALSE(a.Has("Access-Control-Allow-Origin"));
  EXPECT_FALSE(a.Has("Vary"));

  // 429: the queue (one) full behind the worker's call (one): Retry-After.
  {
    std::optional<StoppedWorkers> stopped(std::in_place, server->WorkerPids());
    std::vector<std::future<Answer>> calls;
    for (int i = 0; i < 2; ++i) {
      calls.push_back(std::async(std::launch::async, [&, i] {
        Json b = kV2;
        b["query"] = absl::StrCat("held call ", i);  // not from the cache
        return Post(*server, "/v1/rerank", b, key);
      }));
      if (i == 0) {  // the first one held by the worker, the second one queued
        ASSERT_TRUE(server->WaitForMetric("rankd_calls_in_flight", 1, kLiveness));
      }
    }
    ASSERT_TRUE(server->WaitForMetric("rankd_queue_depth", 1, kLiveness));
    Json b = kV2;
    b["query"] = "the refused one";
    a = Post(*server, "/v1/rerank", b, key);
    EXPECT_EQ(a.status, 429) << a.body.dump();
    EXPECT_EQ(a.Header("Retry-After"), "1");
    stopped.reset();  // the worker goes on: the held calls are answered
    for (auto& call : calls) EXPECT_EQ(call.get().status, 200);
  }
  // 503: no worker up (restarted only after 60 s): Retry-After, /health 503.
  const std::vector<pid_t> pids = server->WorkerPids();
  ASSERT_EQ(pids.size(), 1u);
  ASSERT_EQ(kill(pids[0], SIGKILL), 0);
  ASSERT_TRUE(server->WaitForMetric("rankd_workers_up", 0, kLiveness));
  a = Post(*server, "/v2/rerank", kV2, key);
  EXPECT_EQ(a.status, 503) << a.body.dump();
  EXPECT_EQ(a.Header("Retry-After"), "1");
  a = Send(*server, "GET", "/health");
  EXPECT_EQ(a.status, 503);
  EXPECT_EQ(a.Header("Retry-After"), "1");
  EXPECT_EQ(a.body["error"]["code"], "UNAVAILABLE");
  std::filesystem::remove_all(dir);
}

TEST(HttpMannersTest, CorsForAllowedOriginsOnlyAndPreflightsAnswered) {
  auto server = StartReady(
      Config("  cors_allow_origins: ['https://app.example.com', 'http://localhost:3000']\n"));
  ASSERT_NE(server, nullptr);
  const httplib::Headers preflight = {
      {"Origin", "https://app.example.com"},
      {"Access-Control-Request-Method", "POST"},
      {"Access-Control-Request-Headers", "authorization, content-type, x-fern-sdk-name"}};
  Answer a = Send(*server, "OPTIONS", "/v2/rerank", "", preflight);
  EXPECT_EQ(a.status, 204);
  EXPECT_EQ(a.Header("Access-Control-Allow-Origin"), "https://app.example.com");
  EXPECT_EQ(a.Header("Access-Control-Allow-Methods"), "POST, OPTIONS");
  EXPECT_EQ(a.Header("Access-Control-Allow-Headers"),
            "authorization, content-type, x-fern-sdk-name");
  EXPECT_EQ(a.Header("Access-Control-Max-Age"), "600");
  EXPECT_EQ(a.Header("Vary"), "Origin");
  a = Send(*server, "OPTIONS", "/v1/models", "",
           {{"Origin", "http://localhost:3000"}, {"Access-Control-Request-Method", "GET"}});
  EXPECT_EQ(a.status, 204);
  EXPECT_EQ(a.Header("Access-Control-Allow-Origin"), "http://localhost:3000");
  EXPECT_EQ(a.Header("Access-Control-Allow-Methods"), "GET, OPTIONS");
  // Request headers that are no list of names are not reflected.
  a = Send(*server, "OPTIONS", "/v1/rerank", "",
           {{"Origin", "https://app.example.com"},
            {"Access-Control-Request-Headers", "x-a: b; <script>"}});
  EXPECT_EQ(a.status, 204);
  EXPECT_EQ(a.Header("Access-Control-Allow-Headers"),
            "Authorization, Content-Type, Content-Encoding, X-Request-Id, traceparent");
  // The calls themselves: the origin allowed, exposed headers named.
  a = Post(*server, "/v1/rerank", kV2, {{"Origin", "https://app.example.com"}});
  EXPECT_EQ(a.status, 200);
  EXPECT_EQ(a.Header("Access-Control-Allow-Origin"), "https://app.example.com");
  EXPECT_THAT(a.Header("Access-Control-Expose-Headers"), HasSubstr("X-Request-Id"));
  // Origins that are almost allowed, or spoofed: no Access-Control-Allow-Origin, preflight 403.
  for (const std::string& origin :
       {std::string("https://app.example.com.evil.test"), std::string("https://APP.example.com"),
        std::string("http://app.example.com"), std::string("https://app.example.com:443"),
        std::string("null"), std::string("https://evil.test")}) {
    a = Post(*server, "/v1/rerank", kV2, {{"Origin", origin}});
    EXPECT_EQ(a.status, 200) << origin;  // a call without a browser is no CORS matter
    EXPECT_FALSE(a.Has("Access-Control-Allow-Origin")) << origin;
    EXPECT_EQ(a.Header("Vary"), "Origin");
    a = Send(*server, "OPTIONS", "/v1/rerank", "",
             {{"Origin", origin}, {"Access-Control-Request-Method", "POST"}});
    EXPECT_EQ(a.status, 403) << origin;
    EXPECT_FALSE(a.Has("Access-Control-Allow-Origin")) << origin;
    EXPECT_FALSE(a.Has("Access-Control-Allow-Methods")) << origin;
    EXPECT_THAT(a.body["error"]["message"].get<std::string>(),
                HasSubstr("not in server.cors_allow_origins"));
  }
  // The Origin twice (an allowed one and another), and one with odd bytes: not allowed.
  for (const std::string& origins :
       {std::string("Origin: https://evil.test\r\nOrigin: https://app.example.com\r\n"),
        std::string("Origin: https://app.example.com\r\nOrigin: https://app.example.com\r\n"),
        std::string("Origin: https://app.example.com\x01\r\n"),
        std::string("Origin: https://app.example.com\xff\r\n")}) {
    RawHttpClient raw(server->http_port());
    ASSERT_TRUE(raw.connected());
    ASSERT_TRUE(raw.Send(absl::StrCat("OPTIONS /v1/rerank HTTP/1.1\r\nHost: x\r\n", origins,
                                      "Access-Control-Request-Method: POST\r\n\r\n")));
    const std::string answer = raw.ReadResponse();
    EXPECT_FALSE(absl::StrContains(answer, "Access-Control-Allow-Origin")) << answer;
    EXPECT_FALSE(absl::StrContains(answer, "HTTP/1.1 204")) << answer;
  }
  // OPTIONS on an unknown path: 404, no CORS headers; without an Origin: Allow.
  a = Send(*server, "OPTIONS", "/v3/rerank", "", preflight);
  EXPECT_EQ(a.status, 404);
  EXPECT_FALSE(a.Has("Access-Control-Allow-Methods"));
  a = Send(*server, "OPTIONS", "/v1/rerank");
  EXPECT_EQ(a.status, 204);
  EXPECT_EQ(a.Header("Allow"), "POST, OPTIONS");
  EXPECT_FALSE(a.Has("Access-Control-Allow-Origin"));
  EXPECT_GE(server->Metric("rankd_http_requests_total{route=\"OPTIONS\",code=\"403\"}").value_or(0),
            6);
}

TEST(HttpMannersTest, GzipBodiesAreInflatedWithinTheMessageLimit) {
  auto server = StartReady(Config());
  ASSERT_NE(server, nullptr);
  const Answer plain = Post(*server, "/v2/rerank", kV2);
  ASSERT_EQ(plain.status, 200);
  const httplib::Headers gzip = {{"Content-Encoding", "gzip"}};
  Answer a = Send(*server, "POST", "/v2/rerank", Gzip(kV2.dump()), gzip);
  ASSERT_EQ(a.status, 200) << a.body.dump();
  EXPECT_EQ(a.body["results"], plain.body["results"]);
  // Two gzip members are one body (RFC 1952).
  const std::string text = kV2.dump();
  a = Send(*server, "POST", "/v2/rerank", Gzip(text.substr(0, 10)) + Gzip(text.substr(10)),
           {{"Content-Encoding", "GZIP"}});
  EXPECT_EQ(a.status, 200) << a.body.dump();
  // Not gzip, cut short, trailing bytes, empty: 400 saying so.
  auto expect_400 = [&](const std::string& body, const std::string& message) {
    const Answer r = Send(*server, "POST", "/v2/rerank", body, gzip);
    EXPECT_EQ(r.status, 400) << r.body.dump();
    EXPECT_THAT(r.body["error"]["message"].get<std::string>(), HasSubstr(message));
  };
  expect_400(kV2.dump(), "body: not valid gzip");
  const std::string packed = Gzip(kV2.dump());
  expect_400(packed.substr(0, packed.size() / 2), "body: gzip data ends early");
  expect_400(packed + "trailing", "body: not valid gzip");
  std::string corrupt = packed;
  corrupt[corrupt.size() - 6] ^= 0x55;  // the CRC
  expect_400(corrupt, "body: not valid gzip");
  // A zip bomb: 32 MiB of one byte in a body of some 32 KB, refused as soon as the output passes
  // limits.max_message_bytes, naming it.
  const std::string bomb = Gzip(std::string(32 << 20, ' '));
  ASSERT_LT(bomb.size(), 65536u);
  a = Send(*server, "POST", "/v2/rerank", bomb, gzip);
  EXPECT_EQ(a.status, 413) << a.body.dump();
  EXPECT_EQ(a.body["error"]["message"],
            "body: gzip inflates to more than limits.max_message_bytes=65536 bytes");
  // Just within it: taken (and then read as the JSON it is not).
  a = Send(*server, "POST", "/v2/rerank", Gzip(std::string(65536, ' ')), gzip);
  EXPECT_EQ(a.status, 400) << a.body.dump();
  EXPECT_THAT(a.body["error"]["message"].get<std::string>(), HasSubstr("not valid JSON"));
  // Another encoding: 415 before the body is read.
  a = Send(*server, "POST", "/v2/rerank", kV2.dump(), {{"Content-Encoding", "br"}});
  EXPECT_EQ(a.status, 415);
  EXPECT_THAT(a.body["error"]["message"].get<std::string>(),
              HasSubstr("Content-Encoding: only gzip (or identity) is accepted (got 'br')"));
  // Tokenize takes gzip too; the server still serves.
  a = Send(*server, "POST", "/tokenize", Gzip(R"({"inputs": "a job"})"), gzip);
  EXPECT_EQ(a.status, 200) << a.body.dump();
  EXPECT_EQ(Post(*server, "/v2/rerank", kV2).status, 200);
  EXPECT_EQ(server->Metric("rankd_http_requests_total{route=\"/v2/rerank\",code=\"413\"}"), 1);
}

}  // namespace
}  // namespace rankd::testing
