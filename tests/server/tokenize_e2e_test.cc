// Tokenize against a real `rankd serve` (the Qwen3-Reranker tiny model with its templates): the
// gRPC RPC and the HTTP route POST /tokenize give the ids Score feeds the model (Hugging Face's
// golden ids, the engine's TextEncoder's, Score's token usage), the limits apply with messages
// that name the text and the limit, and API keys guard both.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "grpcpp/generic/generic_stub.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "rankd/engine/text_encoder.h"
#include "tests/common/golden.h"
#include "tests/server/test_server.h"

namespace rankd::testing {
namespace {

using Json = nlohmann::json;
using rankd::v1::TokenizeRequest;
using rankd::v1::TokenizeResponse;
using std::chrono::seconds;
using ::testing::HasSubstr;

// One worker of the Qwen3-Reranker tiny model with its golden templates; small text limits.
std::string Config(const Golden& g, const std::string& server_more = "") {
  return absl::StrCat("model:\n  dir: ", g.model_dir, "\n  name: qwen3-tiny\n",
                      "  query_template: ", Json(*g.query_template).dump(), "\n",
                      "  item_template: ", Json(*g.item_template).dump(), "\n",
                      "  threads: 1\n"
                      "server:\n",
                      server_more,
                      "limits:\n"
                      "  max_items: 20\n"
                      "  max_item_tokens: 160\n"
                      "  max_item_bytes: 4000\n"
                      "  max_request_tokens: 1000\n"
                      "workers:\n"
                      "  count: 1\n"
                      "logging:\n"
                      "  access_log: true\n");
}

grpc::Status Tokenize(const TestServer& server, const TokenizeRequest& request,
                      TokenizeResponse* response, const std::string& api_key = "") {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + seconds(30));
  if (!api_key.empty()) context.AddMetadata("authorization", "Bearer " + api_key);
  return server.NewScorer()->Tokenize(&context, request, response);
}

std::vector<int32_t> Ids(const rankd::v1::TokenizedText& t) {
  return std::vector<int32_t>(t.ids().begin(), t.ids().end());
}

TokenizeRequest Request(std::vector<std::string> texts, rankd::v1::Template t, bool special) {
  TokenizeRequest r;
  for (std::string& text : texts) r.add_texts(std::move(text));
  r.set_template_(t);
  r.set_add_special_tokens(special);
  return r;
}

struct Answer {
  int status = 0;
  Json body;
};

Answer Post(const TestServer& server, const std::string& body, httplib::Headers headers = {}) {
  httplib::Client client("127.0.0.1", server.http_port());
  client.set_read_timeout(60);
  auto res = client.Post("/tokenize", headers, body, "application/json");
  if (!res) return {};
  return {res->status, Json::parse(res->body, nullptr, false)};
}

void ExpectGrpcError(const grpc::Status& s, grpc::StatusCode code, const std::string& message) {
  EXPECT_EQ(s.error_code(), code) << s.error_message();
  EXPECT_EQ(s.error_message(), message);
}

TEST(TokenizeTest, RpcAndHttpGiveTheIdsScoreFeedsTheModel) {
  const Golden g = LoadGolden("qwen3-reranker-tiny");
  const GoldenCase& c = g.cases[4];  // 8 items
  auto server = TestServer::Start(Config(g));
  ASSERT_NE(server, nullptr);
  ASSERT_TRUE(server->WaitReady(1, seconds(60))) << server->Log();

  // The query template with special tokens: Score's prefix, as Hugging Face encodes it.
  TokenizeRequest query = Request({c.query}, rankd::v1::TEMPLATE_QUERY, true);
  query.set_request_id("tok-1");
  TokenizeResponse response;
  grpc::Status s = Tokenize(*server, query, &response);
  ASSERT_TRUE(s.ok()) << s.error_message() << server->Log();
  ASSERT_EQ(response.texts_size(), 1);
  EXPECT_EQ(Ids(response.texts(0)), c.prefix_ids);
  EXPECT_EQ(response.texts(0).count(), static_cast<int>(c.prefix_ids.size()));
  EXPECT_EQ(response.model(), "qwen3-tiny");
  EXPECT_EQ(response.request_id(), "tok-1");

  // The item template: each item's ids, in order.
  std::vector<std::string> texts;
  for (const GoldenItem& item : c.items) texts.push_back(item.text);
  s = Tokenize(*server, Request(texts, rankd::v1::TEMPLATE_ITEM, false), &response);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(response.texts_size(), static_cast<int>(c.items.size()));
  int64_t item_tokens = 0;
  for (size_t i = 0; i < c.items.size(); ++i) {
    EXPECT_EQ(Ids(response.texts(i)), c.items[i].ids) << i;
    item_tokens += response.texts(i).count();
  }

  // Score of the same texts counts exactly those tokens.
  rankd::v1::ScoreRequest score;
  score.set_query(c.query);
  for (const std::string& text : texts) score.add_items()->set_text(text);
  rankd::v1::ScoreResponse scored;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + seconds(30));
  s = server->NewScorer()->Score(&context, score, &scored);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(scored.usage().prefix_tokens(), static_cast<int>(c.prefix_ids.size()));
  EXPECT_EQ(scored.usage().item_tokens(), item_tokens);

  // No template: the tokenizer's ids of the text itself, with and without special tokens.
  engine::EngineOptions o;
  o.model_dir = g.model_dir;
  auto encoder = engine::TextEncoder::Load(o);
  ASSERT_TRUE(encoder.ok()) << encoder.status();
  for (const bool special : {false, true}) {
    s = Tokenize(*server, Request({c.query}, rankd::v1::TEMPLATE_NONE, special), &response);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(Ids(response.texts(0)), *(*encoder)->tokenizer().Encode(c.query, special));
  }

  // HTTP, TEI's shape: one string or a list; special tokens by default (TEI's), a template.
  Answer a = Post(*server, Json{{"inputs", c.query}, {"template", "query"}}.dump());
  ASSERT_EQ(a.status, 200) << a.body.dump();
  ASSERT_TRUE(a.body.is_array() && a.body.size() == 1) << a.body.dump();
  std::vector<int32_t> http_ids;
  for (const Json& token : a.body[0]) http_ids.push_back(token["id"].get<int32_t>());
  EXPECT_EQ(http_ids, c.prefix_ids);
  a = Post(
      *server,
      Json{{"inputs", Json(texts)}, {"template", "item"}, {"add_special_tokens", false}}.dump());
  ASSERT_EQ(a.status, 200) << a.body.dump();
  ASSERT_EQ(a.body.size(), c.items.size());
  for (size_t i = 0; i < c.items.size(); ++i) {
    ASSERT_EQ(a.body[i].size(), c.items[i].ids.size());
    EXPECT_EQ(a.body[i][0]["id"].get<int32_t>(), c.items[i].ids[0]);
  }
  EXPECT_EQ(server->Metric("rankd_tokenize_requests_total{code=\"OK\"}"), 6);
  EXPECT_EQ(server->Metric("rankd_http_requests_total{route=\"/tokenize\",code=\"200\"}"), 2);
  EXPECT_THAT(server->Log(), HasSubstr("Tokenize request_id=tok-1 texts=1 OK"));
  EXPECT_THAT(server->Log(), HasSubstr("POST /tokenize request_id="));
}

TEST(TokenizeTest, LimitsAndBadRequestsAreRefusedNamingTheTextAndTheLimit) {
  const Golden g = LoadGolden("qwen3-reranker-tiny");
  auto server = TestServer::Start(Config(g, "  strict_model_name: true\n"));
  ASSERT_NE(server, nullptr);
  TokenizeResponse response;
  using grpc::StatusCode;
  const auto item = rankd::v1::TEMPLATE_ITEM;
  ExpectGrpcError(Tokenize(*server, Request({"a"}, item, true), &response),
                  StatusCode::INVALID_ARGUMENT,
                  "add_special_tokens: items never get special tokens (template item)");
  ExpectGrpcError(Tokenize(*server, Request({}, item, false), &response),
                  StatusCode::INVALID_ARGUMENT, "texts: empty (give at least one text)");
  ExpectGrpcError(Tokenize(*server, Request({"a", ""}, item, false), &response),
                  StatusCode::INVALID_ARGUMENT, "texts[1]: empty");
  ExpectGrpcError(
      Tokenize(*server, Request(std::vector<std::string>(21, "a"), item, false), &response),
      StatusCode::INVALID_ARGUMENT, "texts: 21 texts exceeds max_items=20");
  ExpectGrpcError(Tokenize(*server, Request({"a", std::string(4001, 'x')}, item, false), &response),
                  StatusCode::INVALID_ARGUMENT, "texts[1]: 4001 bytes exceeds max_item_bytes=4000");
  // Within the bytes, over the tokens: the count is of what was seen when encoding stopped.
  std::string words;
  for (int i = 0; i < 300; ++i) absl::StrAppend(&words, "w", i % 10, " ");
  grpc::Status s = Tokenize(*server, Request({"a", words}, item, false), &response);
  EXPECT_EQ(s.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("texts[1]: at least "));
  EXPECT_THAT(s.error_message(), HasSubstr(" tokens exceeds max_item_tokens=160"));
  // Each text fits, all together do not.
  std::string half;
  for (int i = 0; i < 30; ++i) absl::StrAppend(&half, "w", i % 10, " ");
  s = Tokenize(*server,
               Request(std::vector<std::string>(20, half), rankd::v1::TEMPLATE_NONE, false),
               &response);
  EXPECT_EQ(s.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr(" tokens exceeds max_request_tokens=1000"));
  TokenizeRequest other = Request({"a"}, item, false);
  other.set_model("other");
  ExpectGrpcError(Tokenize(*server, other, &response), StatusCode::NOT_FOUND,
                  "model: 'other' is not served here (this server serves 'qwen3-tiny'; "
                  "server.strict_model_name is on)");
  TokenizeRequest unknown = Request({"a"}, item, false);
  unknown.set_template_(static_cast<rankd::v1::Template>(7));
  ExpectGrpcError(Tokenize(*server, unknown, &response), StatusCode::INVALID_ARGUMENT,
                  "template: unknown value 7");

  // Invalid UTF-8, as a client that does not check sends it.
  TokenizeRequest bad = Request({"ok", "caf\xc3"}, item, false);
  std::string bytes;
  ASSERT_TRUE(bad.SerializeToString(&bytes));
  grpc::GenericStub stub(server->channel());
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + seconds(30));
  grpc::Slice slice(bytes);
  grpc::ByteBuffer raw(&slice, 1), raw_response;
  std::promise<grpc::Status> done;
  stub.UnaryCall(&context, "/rankd.v1.Scorer/Tokenize", grpc::StubOptions(), &raw, &raw_response,
                 [&done](grpc::Status st) { done.set_value(std::move(st)); });
  ExpectGrpcError(done.get_future().get(), StatusCode::INVALID_ARGUMENT,
                  "the request could not be parsed as a rankd.v1.TokenizeRequest: texts[1] is not "
                  "valid UTF-8");

  // HTTP: the caller's field names, the mapped status codes.
  auto expect_http = [&](const std::string& body, int status, const std::string& message) {
    const Answer a = Post(*server, body);
    EXPECT_EQ(a.status, status) << body;
    ASSERT_TRUE(a.body.is_object()) << a.body.dump();
    EXPECT_THAT(a.body["error"]["message"].get<std::string>(), HasSubstr(message)) << body;
  };
  expect_http(R"({"inputs": ["a", "x"], "template": "item"})", 400,
              "add_special_tokens: items never get special tokens (template item)");
  expect_http(Json{{"inputs", {"a", std::string(4001, 'x')}}}.dump(), 400,
              "inputs[1]: 4001 bytes exceeds max_item_bytes=4000");
  expect_http(R"({"inputs": ["a", 5]})", 400, "inputs[1]: must be a string");
  expect_http(R"({"inputs": {"text": "a"}})", 400, "inputs: must be a string or a list of strings");
  expect_http(R"({"texts": ["a"]})", 400, "inputs: required (a string or a list of strings)");
  expect_http(R"({"inputs": "a", "template": "Query"})", 400,
              "template: must be \"none\", \"query\" or \"item\"");
  expect_http(R"({"inputs": "a", "add_special_tokens": 1})", 400,
              "add_special_tokens: must be true or false");
  expect_http(R"({"inputs": "\ud800"})", 400, "body: not valid JSON: ");
  expect_http(R"({"inputs": "\ud800"})", 400, "surrogate U+D800..U+DBFF");
  expect_http(R"({"inputs": "a", "model": "other"})", 404,
              "model: 'other' is not served here (this server serves 'qwen3-tiny'; "
              "server.strict_model_name is on)");
  // And it keeps answering.
  const Answer a = Post(*server, R"({"inputs": "a job"})");
  EXPECT_EQ(a.status, 200) << a.body.dump();
}

TEST(TokenizeTest, ApiKeysGuardTheRpcAndTheRoute) {
  const Golden g = LoadGolden("qwen3-reranker-tiny");
  const std::string keys =
      std::filesystem::temp_directory_path() / absl::StrCat("rankd_tok_keys_", ::getpid());
  std::ofstream(keys) << "tok-key-123-abcdef\n";
  auto server =
      TestServer::Start(Config(g, absl::StrCat("  auth:\n    api_keys_file: ", keys, "\n")));
  ASSERT_NE(server, nullptr);
  const TokenizeRequest request = Request({"a job"}, rankd::v1::TEMPLATE_NONE, false);
  TokenizeResponse response;
  EXPECT_EQ(Tokenize(*server, request, &response).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(Tokenize(*server, request, &response, "wrong").error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  const grpc::Status s = Tokenize(*server, request, &response, "tok-key-123-abcdef");
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(Post(*server, R"({"inputs": "a job"})").status, 401);
  EXPECT_EQ(
      Post(*server, R"({"inputs": "a job"})", {{"Authorization", "Bearer tok-key-123-abcdef"}})
          .status,
      200);
  std::filesystem::remove(keys);
}

}  // namespace
}  // namespace rankd::testing
