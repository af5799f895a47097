// The rerank routes' JSON (rerank_json.h): both request shapes, hostile bodies (each error names
// its field), and the answers' order, top_n and texts.
#include "rankd/server/http/rerank_json.h"

#include <string>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "rankd/common/field_error.h"
#include "rankd/server/call/validation.h"

namespace rankd::server {
namespace {

using rankd::v1::ScoreRequest;
using rankd::v1::ScoreResponse;
using ::testing::HasSubstr;
using Json = nlohmann::json;

constexpr int kMaxItems = 8;  // limits.max_items, small: the tests reach past it

absl::Status Parse(RerankShape shape, const std::string& body, ScoreRequest* request = nullptr,
                   RerankOptions* options = nullptr) {
  ScoreRequest r;
  RerankOptions o;
  return ParseRerankRequest(shape, body, kMaxItems, request ? request : &r, options ? options : &o);
}

std::string CohereError(const std::string& body) {
  return std::string(Parse(RerankShape::kCohere, body).message());
}

TEST(RerankJsonTest, CohereRequestBecomesAScoreRequest) {
  ScoreRequest r;
  RerankOptions o;
  ASSERT_TRUE(Parse(RerankShape::kCohere,
                    R"({"model": "m", "query": "q", "documents": ["a", {"text": "b", "x": 1}],
                        "top_n": 1, "return_documents": false, "truncate": true,
                        "priority": "batch", "max_chunks_per_doc": 10, "rank_fields": null})",
                    &r, &o)
                  .ok());
  EXPECT_EQ(r.model(), "m");
  EXPECT_EQ(r.query(), "q");
  ASSERT_EQ(r.items_size(), 2);
  EXPECT_EQ(r.items(0).text(), "a");
  EXPECT_EQ(r.items(1).text(), "b");
  EXPECT_TRUE(r.apply_sigmoid());
  EXPECT_EQ(r.truncate(), rankd::v1::TRUNCATE_END);
  EXPECT_EQ(r.priority(), rankd::v1::PRIORITY_BATCH);
  EXPECT_EQ(o.top_n, 1);
  EXPECT_FALSE(o.return_text);
  EXPECT_FALSE(o.raw_scores);
}

TEST(RerankJsonTest, DefaultsAreAllResultsWithDocumentsAndSigmoidScores) {
  ScoreRequest r;
  RerankOptions o;
  ASSERT_TRUE(
      Parse(RerankShape::kCohere, R"({"query": "q", "documents": ["a"], "top_n": null})", &r, &o)
          .ok());
  EXPECT_EQ(o.top_n, 0);
  EXPECT_TRUE(o.return_text);
  EXPECT_TRUE(r.apply_sigmoid());
  EXPECT_EQ(r.truncate(), rankd::v1::TRUNCATE_NONE);
  EXPECT_EQ(r.priority(), rankd::v1::PRIORITY_UNSPECIFIED);
  EXPECT_TRUE(r.model().empty());
}

TEST(RerankJsonTest, TeiRequestBecomesAScoreRequest) {
  ScoreRequest r;
  RerankOptions o;
  ASSERT_TRUE(Parse(RerankShape::kTei,
                    R"({"query": "q", "texts": ["a", "b"], "raw_scores": true,
                        "return_text": true, "truncate": false, "truncation_direction": "Right"})",
                    &r, &o)
                  .ok());
  ASSERT_EQ(r.items_size(), 2);
  EXPECT_FALSE(r.apply_sigmoid());
  EXPECT_TRUE(o.raw_scores);
  EXPECT_TRUE(o.return_text);
  EXPECT_EQ(r.truncate(), rankd::v1::TRUNCATE_NONE);
  ASSERT_TRUE(Parse(RerankShape::kTei, R"({"query": "q", "texts": ["a"]})", &r, &o).ok());
}

TEST(RerankJsonTest, HostileBodiesGetAnErrorNamingTheField) {
  struct Case {
    std::string body, message;
  };
  const std::string deep = std::string(17, '[') + std::string(17, ']');
  const Case cases[] = {
      {"", "body: not valid JSON: parse error"},
      {"{\"query\": \"q\",", "body: not valid JSON: parse error"},
      {"{\"query\": \"\xff\", \"documents\": [\"a\"]}", "body: not valid JSON"},
      {"{\"query\": \"q\", \"documents\": [\"\xc3\x28\"]}", "body: not valid JSON"},
      {R"({"query": "q", "documents": ["a"], "top_n": 1e400})", "body: not valid JSON"},
      {"[1, 2]", "body: must be a JSON object"},
      {R"({"query": "q", "documents": )" + deep + "}", "body: nesting deeper than 16 levels"},
      {R"({"query": "q", "query": "r", "documents": ["a"]})", "\"query\": appears twice"},
      {R"({"query": "q", "documents": [{"text": "a", "text": "b"}]})", "\"text\": appears twice"},
      {R"({"documents": ["a"]})", "query: required"},
      {R"({"query": null, "documents": ["a"]})", "query: required"},
      {R"({"query": 7, "documents": ["a"]})", "query: must be a string"},
      {R"({"query": "q"})", "documents: required"},
      {R"({"query": "q", "documents": "a"})", "documents: must be a list of strings"},
      {R"({"query": "q", "documents": ["a", 3]})", "documents[1]: must be a string or"},
      {R"({"query": "q", "documents": [{"txt": "a"}]})", "documents[0].text: required"},
      {R"({"query": "q", "documents": [{"text": ["a"]}]})", "documents[0].text: required"},
      {R"({"query": "q", "documents": ["a"], "model": 1})", "model: must be a string"},
      {R"({"query": "q", "documents": ["a"], "top_n": 0})", "top_n: must be a positive integer"},
      {R"({"query": "q", "documents": ["a"], "top_n": -2})", "top_n: must be a positive integer"},
      {R"({"query": "q", "documents": ["a"], "top_n": 2.5})", "top_n: must be a positive integer"},
      {R"({"query": "q", "documents": ["a"], "top_n": "2"})", "top_n: must be a positive integer"},
      {R"({"query": "q", "documents": ["a"], "top_n": 99999999999999999999999})",
       "top_n: must be a positive integer"},
      {R"({"query": "q", "documents": ["a"], "top_n": 4294967297})",
       "top_n: must be a positive integer"},
      {R"({"query": "q", "documents": ["a"], "return_documents": "yes"})",
       "return_documents: must be true or false"},
      {R"({"query": "q", "documents": ["a"], "raw_scores": 1})",
       "raw_scores: must be true or false"},
      {R"({"query": "q", "documents": ["a"], "truncate": "END"})",
       "truncate: must be true or false"},
      {R"({"query": "q", "documents": ["a"], "priority": 1.5})",
       "priority: must be \"interactive\""},
      {R"({"query": "q", "documents": ["a"], "priority": -1})",
       "priority: must be \"interactive\""},
  };
  for (const Case& c : cases) {
    EXPECT_THAT(CohereError(c.body), HasSubstr(c.message)) << c.body;
  }
  EXPECT_THAT(Parse(RerankShape::kTei, R"({"query": "q", "texts": [{"text": "a"}]})").message(),
              HasSubstr("texts[0]: must be a string"));
  EXPECT_THAT(Parse(RerankShape::kTei, R"({"query": "q"})").message(),
              HasSubstr("texts: required"));
  EXPECT_THAT(
      Parse(RerankShape::kTei, R"({"query": "q", "texts": ["a"], "truncation_direction": "Left"})")
          .message(),
      HasSubstr("truncation_direction: only \"Right\""));
  // Nesting within the limit is no error of its own; brackets inside strings do not count.
  EXPECT_TRUE(
      Parse(RerankShape::kCohere, R"({"query": "[[[[[[[[[[[[[[[[[[[[", "documents": ["a"], "x": )" +
                                      std::string(15, '[') + std::string(15, ']') + "}")
          .ok());
}

// `count` copies of `element` in a JSON list.
std::string List(const std::string& element, int count) {
  std::string s = "[";
  for (int i = 0; i < count; ++i) absl::StrAppend(&s, i > 0 ? "," : "", element);
  return s + "]";
}

TEST(RerankJsonTest, ListsStopAtMaxItemsAndWhatNobodyReadsIsDropped) {
  const std::string nine = List("\"a\"", kMaxItems + 1);
  EXPECT_EQ(CohereError(R"({"query": "q", "documents": )" + nine + "}"),
            "documents: more than max_items=8 items");
  EXPECT_EQ(Parse(RerankShape::kTei, R"({"query": "q", "texts": )" + nine + "}").message(),
            "texts: more than max_items=8 items");
  rankd::v1::TokenizeRequest tokenize;
  EXPECT_EQ(ParseTokenizeRequest(R"({"inputs": )" + nine + "}", kMaxItems, &tokenize).message(),
            "inputs: more than max_items=8 items");
  // The parse stops at the item past the limit: what follows is never read, not even its syntax.
  EXPECT_EQ(CohereError(R"({"query": "q", "documents": [{}, {}, {}, {}, {}, {}, {}, {}, {}, ]])"),
            "documents: more than max_items=8 items");
  // A list at the limit is whole.
  ScoreRequest request;
  ASSERT_TRUE(Parse(RerankShape::kCohere,
                    R"({"query": "q", "documents": )" +
                        List(R"({"text": "a", "meta": [1, {}]})", kMaxItems) + "}",
                    &request)
                  .ok());
  EXPECT_EQ(request.items_size(), kMaxItems);
  // Members nobody reads hold any number of values (parsed, checked, dropped); a top-level list
  // is refused as before.
  const std::string many = List("{}", 200000);
  EXPECT_TRUE(
      Parse(RerankShape::kCohere, R"({"query": "q", "documents": ["a"], "x": )" + many + "}").ok());
  EXPECT_EQ(CohereError(List(R"({"text": "a"})", 200000)), "body: must be a JSON object");
  // Dropped values are still checked: their keys, their nesting, their syntax.
  EXPECT_THAT(CohereError(R"({"query": "q", "documents": ["a"], "x": [{"k": 1, "k": 2}]})"),
              HasSubstr("\"k\": appears twice"));
  EXPECT_THAT(CohereError(R"({"query": "q", "documents": ["a"], "x": [{"k": 1,]})"),
              HasSubstr("body: not valid JSON"));
  // The list member as an object: no list, its contents dropped.
  EXPECT_EQ(CohereError(R"({"query": "q", "documents": {"text": "a", "b": [1]}})"),
            "documents: must be a list of strings");
}

ScoreResponse Scores(std::initializer_list<float> scores) {
  ScoreResponse response;
  for (float s : scores) {
    auto* item = response.add_scores();
    item->set_score(s);
    item->set_scored(true);
  }
  response.set_model("tiny");
  response.mutable_usage()->set_prefix_tokens(5);
  response.mutable_usage()->set_item_tokens(12);
  return response;
}

TEST(RerankJsonTest, CohereAnswerIsSortedBestFirstAndCutToTopN) {
  ScoreRequest r;
  RerankOptions o;
  ASSERT_TRUE(Parse(RerankShape::kCohere,
                    R"({"query": "q", "documents": ["a", "b", "c", "d"], "top_n": 3})", &r, &o)
                  .ok());
  const Json j = Json::parse(
      RerankResponseJson(RerankShape::kCohere, r, o, Scores({0.1f, 0.9f, 0.5f, 0.9f}), "call-1"));
  EXPECT_EQ(j["id"], "call-1");
  EXPECT_EQ(j["model"], "tiny");
  EXPECT_EQ(j["usage"]["total_tokens"], 17);
  ASSERT_EQ(j["results"].size(), 3u);
  // Ties keep the request's order.
  EXPECT_EQ(j["results"][0]["index"], 1);
  EXPECT_EQ(j["results"][1]["index"], 3);
  EXPECT_EQ(j["results"][2]["index"], 2);
  EXPECT_EQ(j["results"][0]["relevance_score"].get<float>(), 0.9f);
  EXPECT_EQ(j["results"][2]["document"]["text"], "c");
}

TEST(RerankJsonTest, CohereAnswersCarryMetaAndV2IsItsOwnShape) {
  ScoreRequest r;
  RerankOptions o;
  ASSERT_TRUE(
      Parse(RerankShape::kCohere, R"({"query": "q", "documents": ["a", "b"]})", &r, &o).ok());
  Json j = Json::parse(RerankResponseJson(RerankShape::kCohere, r, o, Scores({0.1f, 0.9f}), "x"));
  EXPECT_EQ(j["meta"], Json::parse(R"({"api_version": {"version": "1"},
      "billed_units": {"search_units": 1}, "tokens": {"input_tokens": 17}})"));
  // v2: strings only, max_tokens_per_doc read, truncation on by default, no documents echoed.
  r.Clear();
  o = {};
  ASSERT_TRUE(Parse(RerankShape::kCohereV2,
                    R"({"model": "rerank-v3.5", "query": "q", "documents": ["a", "b"],
                        "max_tokens_per_doc": 512, "priority": 3, "return_documents": true})",
                    &r, &o)
                  .ok());
  EXPECT_EQ(o.max_tokens_per_doc, 512);
  EXPECT_EQ(r.truncate(), rankd::v1::TRUNCATE_END);
  EXPECT_EQ(r.priority(), rankd::v1::PRIORITY_BATCH);  // Cohere's integer: above 0 is batch
  EXPECT_EQ(r.model(), "rerank-v3.5");
  j = Json::parse(RerankResponseJson(RerankShape::kCohereV2, r, o, Scores({0.1f, 0.9f}), "y"));
  EXPECT_EQ(j["results"], Json::parse(R"([{"index": 1, "relevance_score": 0.8999999761581421},
      {"index": 0, "relevance_score": 0.10000000149011612}])"));
  EXPECT_EQ(j["meta"]["api_version"]["version"], "2");
  EXPECT_FALSE(j.contains("usage"));
  r.Clear();
  ASSERT_TRUE(Parse(RerankShape::kCohereV2, R"({"query": "q", "documents": ["a"], "truncate": false,
                        "priority": 0})",
                    &r, &o)
                  .ok());
  EXPECT_EQ(r.truncate(), rankd::v1::TRUNCATE_NONE);
  EXPECT_EQ(r.priority(), rankd::v1::PRIORITY_INTERACTIVE);
  EXPECT_EQ(
      std::string(Parse(RerankShape::kCohereV2, R"({"query": "q", "documents": [{"text": "a"}]})")
                      .message()),
      "documents[0]: must be a string");
  EXPECT_EQ(std::string(Parse(RerankShape::kCohereV2,
                              R"({"query": "q", "documents": ["a"], "max_tokens_per_doc": 0})")
                            .message()),
            "max_tokens_per_doc: must be a positive integer");
  EXPECT_EQ(std::string(Parse(RerankShape::kCohereV2,
                              R"({"query": "q", "documents": ["a"], "priority": -1})")
                            .message()),
            "priority: must be \"interactive\", \"batch\" or a non-negative integer (Cohere's: 0 "
            "interactive)");
  // 201 documents are three search units.
  r.Clear();
  for (int i = 0; i < 201; ++i) r.add_items()->set_text("d");
  ScoreResponse many;
  many.set_model("tiny");
  j = Json::parse(RerankResponseJson(RerankShape::kCohereV2, r, o, many, "z"));
  EXPECT_EQ(j["meta"]["billed_units"]["search_units"], 3);
}

TEST(RerankJsonTest, TeiAnswerIsAListWithTextsOnlyWhenAsked) {
  ScoreRequest r;
  RerankOptions o;
  ASSERT_TRUE(Parse(RerankShape::kTei, R"({"query": "q", "texts": ["a", "b"]})", &r, &o).ok());
  ScoreResponse response = Scores({-1.5f, 2.25f});
  Json j = Json::parse(RerankResponseJson(RerankShape::kTei, r, o, response, "id"));
  ASSERT_TRUE(j.is_array());
  ASSERT_EQ(j.size(), 2u);
  EXPECT_EQ(j[0], Json({{"index", 1}, {"score", 2.25}}));
  EXPECT_EQ(j[1], Json({{"index", 0}, {"score", -1.5}}));
  o.return_text = true;
  // Items the depth left unscored are no result.
  response.mutable_scores(0)->set_scored(false);
  j = Json::parse(RerankResponseJson(RerankShape::kTei, r, o, response, "id"));
  ASSERT_EQ(j.size(), 1u);
  EXPECT_EQ(j[0]["text"], "b");
}

TEST(RerankJsonTest, ErrorsAreJsonAndNameTheCallersList) {
  EXPECT_EQ(Json::parse(ErrorJson("query: empty", "INVALID_ARGUMENT")),
            Json({{"error", {{"message", "query: empty"}, {"code", "INVALID_ARGUMENT"}}}}));
  // The validation's and the workers' errors about items, as they carry them (FieldError).
  EXPECT_EQ(CallerFieldMessage(RerankShape::kCohere, InvalidItemField(3, ".text", "empty")),
            "documents[3]: empty");
  EXPECT_EQ(CallerFieldMessage(RerankShape::kCohereV2, InvalidItemField(3, ".text",
                                                                        "at least 9 tokens exceeds "
                                                                        "max_item_tokens=8",
                                                                        "max_item_tokens")),
            "documents[3]: at least 9 tokens exceeds max_item_tokens=8");
  EXPECT_EQ(CallerFieldMessage(RerankShape::kTei, InvalidItemField(3, "", "prefix 5 + item 9")),
            "texts[3]: prefix 5 + item 9");
  EXPECT_EQ(CallerFieldMessage(RerankShape::kCohere, InvalidItemField(2, ".id", "too long")),
            "documents[2].id: too long");
  EXPECT_EQ(CallerFieldMessage(RerankShape::kTei, InvalidField("items",
                                                               "70 items exceeds "
                                                               "max_items=64")),
            "texts: 70 items exceeds max_items=64");
  EXPECT_EQ(CallerFieldMessage(RerankShape::kCohere, InvalidField("query", "empty")),
            "query: empty");
  // A Tokenize request's texts are the caller's inputs.
  const absl::Status text =
      FieldErrorStatus(absl::StatusCode::kInvalidArgument,
                       {.item = 1, .field = "", .limit = "", .what = "empty"}, kTokenizeTexts);
  EXPECT_EQ(text.message(), "texts[1]: empty");
  EXPECT_EQ(CallerFieldMessage(RerankShape::kTokenize, text), "inputs[1]: empty");
  EXPECT_EQ(CallerFieldMessage(RerankShape::kTokenize, InvalidField("texts", "9 texts")),
            "inputs: 9 texts");
  // The body's own errors name the caller's fields already.
  EXPECT_EQ(CallerFieldMessage(RerankShape::kTokenize, InvalidField("inputs[1]", "not a string")),
            "inputs[1]: not a string");
  EXPECT_EQ(CallerFieldMessage(RerankShape::kTei, InvalidField("texts", "required")),
            "texts: required");
}

// The item and the field come from the data, never from the message: a message without a
// FieldError is answered as it is, whatever it looks like, and one with a FieldError is rendered
// from it whatever its message says.
TEST(RerankJsonTest, CallerFieldMessageReadsNoMessage) {
  for (const char* message :
       {"items[3].text: empty", "items: 70 items exceeds max_items=64", "items[",
        "items[99999999999999999999].text: x", "texts[1]: empty", "", "items"}) {
    const absl::Status plain = absl::InvalidArgumentError(message);
    EXPECT_EQ(CallerFieldMessage(RerankShape::kCohere, plain), message);
    EXPECT_EQ(CallerFieldMessage(RerankShape::kTei, plain), message);
    EXPECT_EQ(CallerFieldMessage(RerankShape::kTokenize, plain), message);
  }
  // A status whose message disagrees with its FieldError (the FieldError's payload copied onto
  // it): rendered from the FieldError.
  const absl::Status item7 = InvalidItemField(7, ".text", "empty");
  absl::Status s = absl::InvalidArgumentError("items[1].text: not what the data says");
  item7.ForEachPayload(
      [&](absl::string_view url, const absl::Cord& payload) { s.SetPayload(url, payload); });
  EXPECT_EQ(CallerFieldMessage(RerankShape::kCohere, s), "documents[7]: empty");
  // A payload that is no FieldError is no field: the message as it is.
  item7.ForEachPayload(
      [&](absl::string_view url, const absl::Cord&) { s.SetPayload(url, absl::Cord("items[2]")); });
  EXPECT_FALSE(GetFieldError(s).has_value());
  EXPECT_EQ(CallerFieldMessage(RerankShape::kCohere, s), "items[1].text: not what the data says");
  // Hostile data renders as data: a huge index, a field with separators in it.
  EXPECT_EQ(CallerFieldMessage(RerankShape::kTei,
                               InvalidItemField(2147483647, ".text]: [x", "what: is: this")),
            "texts[2147483647].text]: [x: what: is: this");
}

}  // namespace
}  // namespace rankd::server
