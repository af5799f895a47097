// The OpenAPI document (openapi.h) against the code it describes: every route of HttpApiRoutes()
// is in it; each example is accepted by ParseRerankRequest and its answers (RerankResponseJson)
// validate against the answer's schema; every required member is one the parser requires, every
// documented member one it reads and checks (type, enum, minimum), and the Bearer scheme is
// declared exactly when keys are on.
#include "rankd/server/http/openapi.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "rankd/server/http/http_api.h"
#include "rankd/server/http/rerank_json.h"

namespace rankd::server {
namespace {

using Json = nlohmann::json;
using ::testing::StartsWith;

// The JSON Schema keywords the document uses, checked against `value`: the first violation, or
// "" when `value` conforms. `$ref`s resolve in `doc`.
std::string Violation(const Json& doc, const Json& schema, const Json& value,
                      const std::string& at = "$") {
  if (schema.contains("$ref")) {
    const std::string ref = schema["$ref"];  // "#/components/schemas/X"
    return Violation(doc, doc[Json::json_pointer(ref.substr(1))], value, at);
  }
  if (schema.contains("oneOf")) {
    int matches = 0;
    for (const Json& s : schema["oneOf"]) matches += Violation(doc, s, value, at).empty();
    return matches == 1 ? "" : absl::StrCat(at, ": matches ", matches, " of oneOf");
  }
  if (value.is_null() && schema.value("nullable", false)) return "";  // OpenAPI 3.0's null
  const std::string type = schema.value("type", "");
  const bool typed =
      type.empty() || (type == "object" && value.is_object()) ||
      (type == "array" && value.is_array()) || (type == "string" && value.is_string()) ||
      (type == "boolean" && value.is_boolean()) ||
      (type == "integer" && value.is_number_integer()) || (type == "number" && value.is_number());
  if (!typed) return absl::StrCat(at, ": not of type ", type, ": ", value.dump());
  if (schema.contains("enum") &&
      std::find(schema["enum"].begin(), schema["enum"].end(), value) == schema["enum"].end()) {
    return absl::StrCat(at, ": not in the enum: ", value.dump());
  }
  if (schema.contains("minimum") && value < schema["minimum"]) return at + ": below minimum";
  if (schema.contains("maximum") && value > schema["maximum"]) return at + ": above maximum";
  const Json required = schema.value("required", Json::array());
  for (const Json& name : required) {
    if (!value.contains(name)) return absl::StrCat(at, ": no member ", name.dump());
  }
  if (value.is_object()) {
    const Json properties = schema.value("properties", Json::object());
    for (const auto& [name, s] : properties.items()) {
      if (!value.contains(name)) continue;
      if (std::string v = Violation(doc, s, value[name], at + "." + name); !v.empty()) return v;
    }
  }
  if (value.is_array() && schema.contains("items")) {
    for (size_t i = 0; i < value.size(); ++i) {
      const std::string v =
          Violation(doc, schema["items"], value[i], absl::StrCat(at, "[", i, "]"));
      if (!v.empty()) return v;
    }
  }
  return "";
}

absl::Status Parse(RerankShape shape, const Json& body, rankd::v1::ScoreRequest* request,
                   RerankOptions* options) {
  return ParseRerankRequest(shape, body.dump(), Limits().max_items, request, options);
}

absl::Status Parse(RerankShape shape, const Json& body) {
  if (shape == RerankShape::kTokenize) {
    rankd::v1::TokenizeRequest request;
    return ParseTokenizeRequest(body.dump(), Limits().max_items, &request);
  }
  rankd::v1::ScoreRequest request;
  RerankOptions options;
  return Parse(shape, body, &request, &options);
}

// One route's operation in the document, with what the checks need.
struct Operation {
  const HttpApiRoute& route;
  Json request_schema;  // resolved
  Json example;
  Json answer_schema;  // may be a $ref
};

class OpenApiTest : public ::testing::Test {
 protected:
  OpenApiTest() : doc_(Json::parse(OpenApiJson(HttpApiRoutes(), /*api_keys=*/false))) {}

  Json Resolve(const Json& schema) const {
    return schema.contains("$ref")
               ? doc_[Json::json_pointer(schema["$ref"].get<std::string>().substr(1))]
               : schema;
  }

  // The routes with a request body (the POST ones).
  std::vector<Operation> Operations() const {
    std::vector<Operation> ops;
    for (const HttpApiRoute& route : HttpApiRoutes()) {
      if (std::string(route.method) != "POST") continue;
      const Json& op = doc_.at("paths").at(route.path).at(absl::AsciiStrToLower(route.method));
      const Json& body = op["requestBody"]["content"]["application/json"];
      ops.push_back({route, Resolve(body["schema"]), body["example"],
                     op["responses"]["200"]["content"]["application/json"]["schema"]});
    }
    return ops;
  }

  // The answer to `body` (parsed OK), with made-up scores, validated against the schema.
  void ExpectAnswerConforms(const Operation& op, const Json& body) const {
    if (op.route.shape == RerankShape::kTokenize) {
      rankd::v1::TokenizeRequest request;
      ASSERT_TRUE(ParseTokenizeRequest(body.dump(), Limits().max_items, &request).ok())
          << body.dump();
      rankd::v1::TokenizeResponse response;
      for (int i = 0; i < request.texts_size(); ++i) {
        rankd::v1::TokenizedText* text = response.add_texts();
        for (int id = 1; id <= i + 2; ++id) text->add_ids(id);
        text->set_count(text->ids_size());
      }
      const Json answer = Json::parse(TokenizeResponseJson(response));
      EXPECT_EQ(Violation(doc_, op.answer_schema, answer), "") << answer.dump();
      return;
    }
    rankd::v1::ScoreRequest request;
    RerankOptions options;
    ASSERT_TRUE(Parse(op.route.shape, body, &request, &options).ok()) << body.dump();
    rankd::v1::ScoreResponse response;
    response.set_model("tiny");
    for (int i = 0; i < request.items_size(); ++i) {
      auto* score = response.add_scores();
      score->set_score(0.1f * i);
      score->set_scored(true);
    }
    response.mutable_usage()->set_item_tokens(12);
    const Json answer =
        Json::parse(RerankResponseJson(op.route.shape, request, options, response, "call-1"));
    EXPECT_EQ(Violation(doc_, op.answer_schema, answer), "") << answer.dump();
  }

  const Json doc_;
};

TEST_F(OpenApiTest, EveryRouteIsDocumentedAndNothingElse) {
  size_t operations = 0;
  for (const auto& [path, methods] : doc_["paths"].items()) operations += methods.size();
  EXPECT_EQ(operations, HttpApiRoutes().size());
  for (const HttpApiRoute& route : HttpApiRoutes()) {
    const Json& op = doc_.at("paths").at(route.path).at(absl::AsciiStrToLower(route.method));
    EXPECT_EQ(op["summary"], route.summary) << route.path;
    EXPECT_TRUE(op["responses"].contains("200")) << route.path;
    // A body can be refused; a GET has none.
    const bool post = std::string(route.method) == "POST";
    EXPECT_EQ(op["responses"].contains("400"), post) << route.path;
    EXPECT_EQ(op.contains("requestBody"), post) << route.path;
  }
  for (const char* path : {"/v1/rerank", "/v2/rerank", "/rerank", "/tokenize"}) {
    EXPECT_TRUE(doc_["paths"][path].contains("post")) << path;
  }
  for (const char* path : {"/v1/models", "/info", "/health"}) {
    EXPECT_TRUE(doc_["paths"][path].contains("get")) << path;
  }
  EXPECT_TRUE(doc_["paths"]["/health"]["get"]["responses"].contains("503"));
  EXPECT_EQ(doc_["openapi"], "3.0.3");
}

TEST_F(OpenApiTest, ExamplesAreAcceptedAndTheirAnswersConformWithEveryBooleanEitherWay) {
  for (const Operation& op : Operations()) {
    SCOPED_TRACE(op.route.path);
    EXPECT_EQ(Violation(doc_, op.request_schema, op.example), "");
    ExpectAnswerConforms(op, op.example);
    for (const auto& [name, schema] : op.request_schema["properties"].items()) {
      if (schema["type"] != "boolean") continue;
      for (bool value : {false, true}) {
        Json body = op.example;
        body[name] = value;
        ExpectAnswerConforms(op, body);
      }
    }
  }
}

TEST_F(OpenApiTest, RequiredMembersAreThoseTheParserRequires) {
  for (const Operation& op : Operations()) {
    SCOPED_TRACE(op.route.path);
    Json minimal = Json::object();
    for (const Json& name : op.request_schema["required"]) {
      ASSERT_TRUE(op.example.contains(name)) << name;
      minimal[name] = op.example[name];
      Json body = op.example;
      body.erase(name.get<std::string>());
      const absl::Status s = Parse(op.route.shape, body);
      EXPECT_TRUE(absl::IsInvalidArgument(s)) << name << ": " << s;
      EXPECT_THAT(std::string(s.message()), StartsWith(name.get<std::string>() + ":"));
    }
    // The others are not required.
    EXPECT_TRUE(Parse(op.route.shape, minimal).ok()) << minimal.dump();
  }
}

TEST_F(OpenApiTest, EveryDocumentedMemberIsReadAndItsConstraintsChecked) {
  for (const Operation& op : Operations()) {
    SCOPED_TRACE(op.route.path);
    for (const auto& [name, schema] : op.request_schema["properties"].items()) {
      auto expect_refused = [&, &name = name](const Json& value) {
        Json body = op.example;
        body[name] = value;
        ASSERT_NE(Violation(doc_, op.request_schema, body), "") << name << "=" << value;
        const absl::Status s = Parse(op.route.shape, body);
        EXPECT_TRUE(absl::IsInvalidArgument(s)) << name << "=" << value << ": " << s;
        EXPECT_THAT(std::string(s.message()), StartsWith(name)) << value;
      };
      // A value of another type (a member of several types, a oneOf: a boolean, which none is).
      expect_refused(!schema.contains("type") ? Json(true)
                     : schema["type"] == "string"
                         ? Json(7)
                         : Json("not-a-" + schema["type"].get<std::string>()));
      if (schema.contains("enum")) {
        expect_refused("none-of-the-enum");
        for (const Json& value : schema["enum"]) {
          Json body = op.example;
          body[name] = value;
          EXPECT_TRUE(Parse(op.route.shape, body).ok()) << name << "=" << value;
        }
      }
      if (schema.contains("minimum")) expect_refused(schema["minimum"].get<int64_t>() - 1);
      if (schema.contains("maximum")) expect_refused(schema["maximum"].get<int64_t>() + 1);
      if (schema["type"] == "array") expect_refused(Json::array({Json::array()}));
    }
  }
}

TEST_F(OpenApiTest, ErrorAnswersConformToTheErrorSchema) {
  const Json error = Json::parse(ErrorJson("query: required (a string)", "INVALID_ARGUMENT"));
  EXPECT_EQ(Violation(doc_, doc_["components"]["schemas"]["Error"], error), "");
  EXPECT_NE(Violation(doc_, doc_["components"]["schemas"]["Error"], Json{{"message", "x"}}), "");
}

TEST_F(OpenApiTest, TheBearerSchemeIsDeclaredExactlyWhenKeysAreOn) {
  EXPECT_FALSE(doc_.contains("security"));
  EXPECT_FALSE(doc_["components"].contains("securitySchemes"));
  const Json keyed = Json::parse(OpenApiJson(HttpApiRoutes(), /*api_keys=*/true));
  EXPECT_EQ(keyed["components"]["securitySchemes"]["bearer"]["scheme"], "bearer");
  EXPECT_EQ(keyed["security"], Json::parse(R"([{"bearer": []}])"));
  for (const HttpApiRoute& route : HttpApiRoutes()) {
    const std::string method = absl::AsciiStrToLower(route.method);
    // GET /health needs no key (a probe's).
    const bool open = route.shape == RerankShape::kHealth;
    EXPECT_EQ(keyed["paths"][route.path][method]["responses"].contains("401"), !open);
    EXPECT_EQ(keyed["paths"][route.path][method].contains("security"), open);
    EXPECT_FALSE(doc_.at("paths").at(route.path).at(method)["responses"].contains("401"));
  }
}

// The GET routes' answers against their schemas.
TEST_F(OpenApiTest, GetAnswersConformToTheirSchemas) {
  auto schema = [&](const char* path) {
    return doc_["paths"][path]["get"]["responses"]["200"]["content"]["application/json"]["schema"];
  };
  const Json models = Json::parse(ModelsResponseJson({"rerank-v3.5", "tiny"}, 1764800000));
  EXPECT_EQ(Violation(doc_, schema("/v1/models"), models), "") << models.dump();
  EXPECT_EQ(models["data"][1]["id"], "tiny");
  ServerInfo info;
  info.names = {"tiny"};
  info.model_dir_name = "tiny";
  info.backend = "cuda";
  info.dtype = "bf16";
  info.max_query_tokens = 32;
  info.max_item_tokens = 64;
  info.version = "0.1.0";
  Json answer = Json::parse(InfoResponseJson(info));
  EXPECT_EQ(Violation(doc_, schema("/info"), answer), "") << answer.dump();
  EXPECT_EQ(answer["max_input_length"], 96);
  EXPECT_EQ(answer["model_sha"], nullptr);
  info.dtype = "int4";  // no dtype rankd has
  answer = Json::parse(InfoResponseJson(info));
  EXPECT_NE(Violation(doc_, schema("/info"), answer), "");
  const Json health = Json::parse(HealthResponseJson());
  EXPECT_EQ(Violation(doc_, schema("/health"), health), "");
}

}  // namespace
}  // namespace rankd::server
