// The request-line parser (the shorthand and proto3 JSON, snake_case and lowerCamel) and
// rankd-client's adapter to rankd.v1.ScoreRequest, checked against protobuf's own JSON parser.
#include "rankd/cli/request_line.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/message_differencer.h"
#include "request_proto.h"

namespace rankd::cli {
namespace {

RequestLine Parse(const std::string& line) {
  absl::StatusOr<RequestLine> r = ParseRequestLine(line);
  EXPECT_TRUE(r.ok()) << line << "\n" << r.status();
  return r.ok() ? *std::move(r) : RequestLine{};
}

void ExpectError(const std::string& line, const std::string& needle) {
  absl::StatusOr<RequestLine> r = ParseRequestLine(line);
  ASSERT_FALSE(r.ok()) << line;
  EXPECT_TRUE(absl::IsInvalidArgument(r.status())) << r.status();
  EXPECT_NE(r.status().message().find(needle), std::string::npos)
      << "'" << needle << "' not in: " << r.status();
}

RequestItem Text(std::string text, std::string id = "") {
  RequestItem item;
  item.text = std::move(text);
  item.id = std::move(id);
  return item;
}

RequestItem TokenIds(std::vector<int32_t> ids) {
  RequestItem item;
  item.kind = RequestItem::Kind::kTokenIds;
  item.token_ids = std::move(ids);
  return item;
}

RequestItem Embedding(int32_t rows, std::vector<float> values) {
  RequestItem item;
  item.kind = RequestItem::Kind::kEmbedding;
  item.embedding_rows = rows;
  item.embedding = std::move(values);
  return item;
}

// One request, every field set, in the three spellings.
constexpr char kShorthand[] =
    R"({"query_ids": [1, 5], "items": ["a", {"text": "b", "id": "x"}, {"ids": [7, 8]},
        {"embedding": [[0.5, 1], [2, 3]]}], "apply_sigmoid": true, "model": "m",
        "priority": "PRIORITY_BATCH", "request_id": "r1", "depth": 3, "skip_cache": true,
        "truncate": "TRUNCATE_END"})";
constexpr char kProtoSnakeCase[] =
    R"({"query_ids": [1, 5], "items": [{"text": "a"}, {"text": "b", "id": "x"},
        {"token_ids": {"ids": [7, 8]}}, {"embedding": {"rows": 2, "values": [0.5, 1, 2, 3]}}],
        "apply_sigmoid": true, "model": "m", "priority": "PRIORITY_BATCH", "request_id": "r1",
        "depth": 3, "skip_cache": true, "truncate": "TRUNCATE_END"})";
constexpr char kProtoLowerCamel[] =
    R"({"queryIds": [1, 5], "items": [{"text": "a"}, {"text": "b", "id": "x"},
        {"tokenIds": {"ids": [7, 8]}}, {"embedding": {"rows": 2, "values": [0.5, 1, 2, 3]}}],
        "applySigmoid": true, "model": "m", "priority": 2, "requestId": "r1", "depth": 3,
        "skipCache": true, "truncate": 1})";

RequestLine EveryField() {
  RequestLine want;
  want.query_ids = std::vector<int32_t>{1, 5};
  want.items = {Text("a"), Text("b", "x"), TokenIds({7, 8}), Embedding(2, {0.5, 1, 2, 3})};
  want.apply_sigmoid = true;
  want.model = "m";
  want.priority = RequestPriority::kBatch;
  want.request_id = "r1";
  want.depth = 3;
  want.skip_cache = true;
  want.truncate = RequestTruncate::kEnd;
  return want;
}

TEST(ParseRequestLineTest, EverySpellingGivesTheSameRequest) {
  EXPECT_EQ(Parse(kShorthand), EveryField());
  EXPECT_EQ(Parse(kProtoSnakeCase), EveryField());
  EXPECT_EQ(Parse(kProtoLowerCamel), EveryField());
}

TEST(ParseRequestLineTest, DefaultsAndNulls) {
  RequestLine want;
  want.query = "q";
  want.items = {Text("a")};
  EXPECT_EQ(Parse(R"({"query": "q", "items": ["a"]})"), want);
  // proto3 JSON: null is the field's default.
  EXPECT_EQ(Parse(R"({"query": "q", "items": [{"text": "a", "id": null}], "depth": null})"), want);
}

// For the proto3 spellings, the client's request is the message protobuf's parser makes.
TEST(ToProtoRequestTest, MatchesProtobufJsonParser) {
  for (
      const std::string line :
      {kProtoSnakeCase, kProtoLowerCamel,
       R"({"query": "q", "items": [{"text": "a", "id": "1"}], "priority": "PRIORITY_INTERACTIVE"})"}) {
    v1::ScoreRequest want;
    ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(line, &want).ok()) << line;
    const v1::ScoreRequest got = client::ToProtoRequest(Parse(line));
    EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(got, want))
        << "got:\n"
        << got.DebugString() << "want:\n"
        << want.DebugString();
  }
  EXPECT_EQ(client::ToProtoRequest(Parse(kShorthand)).SerializeAsString(),
            client::ToProtoRequest(Parse(kProtoSnakeCase)).SerializeAsString());
}

// examples/requests.jsonl, the documented example, holds every item kind and parses.
TEST(ParseRequestLineTest, ExampleRequests) {
  std::ifstream in(RANKD_EXAMPLES_DIR "/requests.jsonl");
  ASSERT_TRUE(in);
  int lines = 0, text = 0, token_ids = 0, embedding = 0;
  for (std::string line; std::getline(in, line);) {
    ++lines;
    absl::StatusOr<RequestLine> r = ParseRequestLine(line);
    ASSERT_TRUE(r.ok()) << "line " << lines << ": " << r.status();
    const v1::ScoreRequest proto = client::ToProtoRequest(*r);
    EXPECT_EQ(proto.items_size(), static_cast<int>(r->items.size()));
    for (const RequestItem& item : r->items) {
      text += item.kind == RequestItem::Kind::kText;
      token_ids += item.kind == RequestItem::Kind::kTokenIds;
      embedding += item.kind == RequestItem::Kind::kEmbedding;
    }
  }
  EXPECT_GT(lines, 0);
  EXPECT_GT(text, 0);
  EXPECT_GT(token_ids, 0);
  EXPECT_GT(embedding, 0);
}

TEST(ParseRequestLineTest, ErrorsNameTheField) {
  ExpectError("{", "not valid JSON");
  ExpectError("[]", "not a JSON object");
  ExpectError(R"({"items": ["a"]})", "query: is missing");
  ExpectError(R"({"query": 3, "items": ["a"]})", "query: must be a string");
  ExpectError(R"({"query": "q", "query_ids": [1], "items": ["a"]})", "not both");
  ExpectError(R"({"query_ids": "1 2", "items": ["a"]})", "query_ids: must be a list");
  ExpectError(R"({"queryIds": [], "items": ["a"]})", "queryIds: must not be empty");
  ExpectError(R"({"query": "q"})", "items: is missing");
  ExpectError(R"({"query": "q", "items": []})", "items: must be a non-empty list");
  ExpectError(R"({"query": "q", "items": ["a", 5]})", "items[1]: must be a string or");
  ExpectError(R"({"query": "q", "items": [{"ids": [1, -2]}]})",
              "items[0].ids[1]: must be a non-negative integer");
  ExpectError(R"({"query": "q", "items": [{"ids": [1.5]}]})", "items[0].ids[0]");
  ExpectError(R"({"query": "q", "items": [{"ids": [1], "text": "x"}]})",
              "items[0]: has text and ids; give one of");
  ExpectError(R"({"query": "q", "items": [{"id": "x"}]})", "items[0]: has none; give one of");
  ExpectError(R"({"query": "q", "items": [{"txt": "x"}]})", "items[0].txt: unknown field");
  ExpectError(R"({"query": "q", "items": [{"text": "x", "id": 7}]})", "items[0].id: must be a");
  ExpectError(R"({"query": "q", "items": [{"tokenIds": [1]}]})",
              "items[0].tokenIds: must be an object");
  ExpectError(R"({"query": "q", "items": [{"token_ids": {}}]})",
              "items[0].token_ids.ids: is missing");
  ExpectError(R"({"query": "q", "items": [{"embedding": [[1, 2], [3]]}]})",
              "items[0].embedding[1]: has 1 values, row 0 has 2");
  ExpectError(R"({"query": "q", "items": [{"embedding": [[1, "x"]]}]})",
              "items[0].embedding[0][1]: must be a number");
  ExpectError(R"({"query": "q", "items": [{"embedding": {"values": [1]}}]})",
              "items[0].embedding.rows: is missing");
  ExpectError(R"({"query": "q", "items": [{"embedding": {"rows": 0, "values": [1]}}]})",
              "items[0].embedding.rows: must be positive");
  ExpectError(R"({"query": "q", "items": [{"embedding": {"rows": 2, "values": [1, 2, 3]}}]})",
              "items[0].embedding.values: 3 values do not make rows=2 rows");
  ExpectError(R"({"query": "q", "items": ["a"], "apply_sigmoid": 1})",
              "apply_sigmoid: must be true or false");
  ExpectError(R"({"query": "q", "items": ["a"], "apply_sigmod": true})",
              "apply_sigmod: unknown field");
  ExpectError(R"({"query": "q", "items": ["a"], "request_id": "a", "requestId": "b"})",
              "give requestId or request_id, not both");
  ExpectError(R"({"query": "q", "items": ["a"], "priority": "URGENT"})", "priority: must be");
  ExpectError(R"({"query": "q", "items": ["a"], "depth": -1})", "depth: must be a non-negative");
  ExpectError(R"({"query": "q", "items": ["a"], "truncate": "END"})",
              "truncate: must be one of TRUNCATE_NONE, TRUNCATE_END");
  ExpectError(R"({"query": "q", "items": ["a"], "truncate": 2})", "truncate: must be one of");
  ExpectError(R"({"query": "q", "items": ["a"], "skip_cache": 1})",
              "skip_cache: must be true or false");
}

}  // namespace
}  // namespace rankd::cli
