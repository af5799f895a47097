// The OpenAPI document of the HTTP API (rankd/server/http/openapi.h).
#include "rankd/server/http/openapi.h"

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "rankd/server/http/rerank_json.h"

namespace rankd::server {
namespace {

using Json = nlohmann::json;

constexpr char kJson[] = "application/json";

// The error answers of a route, by HTTP status (docs/config.md, "HTTP API"); 401 only with keys.
struct ErrorAnswer {
  const char* status;
  const char* description;
};
constexpr ErrorAnswer kErrors[] = {
    {"400",
     "INVALID_ARGUMENT: not JSON, a missing or mistyped member, a limit (the message names "
     "the field and the limit)."},
    {"401", "UNAUTHENTICATED: no API key or a wrong one (send `Authorization: Bearer KEY`)."},
    {"404",
     "NOT_FOUND: with server.strict_model_name, `model` is none of "
     "server.served_model_names."},
    {"413",
     "PAYLOAD_TOO_LARGE: the body (inflated, when gzipped) exceeds limits.max_message_bytes."},
    {"415",
     "UNSUPPORTED_MEDIA_TYPE: Content-Type is not application/json, or Content-Encoding is "
     "neither gzip nor identity."},
    {"429", "RESOURCE_EXHAUSTED: the queue is full; retry after Retry-After seconds."},
    {"503",
     "UNAVAILABLE: not ready or draining; retry after Retry-After seconds, elsewhere if "
     "possible."},
    {"504", "DEADLINE_EXCEEDED: server.http_request_timeout_s cannot be met or passed."},
    {"500", "INTERNAL: a server fault (logged)."},
};

Json Ref(absl::string_view kind, absl::string_view name) {
  return {{"$ref", absl::StrCat("#/components/", kind, "/", name)}};
}

// "POST", "/v1/rerank" -> "post_v1_rerank".
std::string OperationId(absl::string_view method, absl::string_view path) {
  std::string id = absl::AsciiStrToLower(method);
  for (char c : path) id += absl::ascii_isalnum(c) ? c : '_';
  return id;
}

}  // namespace

std::string OpenApiJson(const std::vector<HttpApiRoute>& routes, bool api_keys) {
  Json schemas = {{"Error", Json::parse(ErrorJsonSchema())}};
  std::vector<ErrorAnswer> errors;
  for (const ErrorAnswer& e : kErrors) {
    if (api_keys || std::string(e.status) != "401") errors.push_back(e);
  }
  Json responses = Json::object();
  for (const ErrorAnswer& e : errors) {
    responses[absl::StrCat("Error", e.status)] = {
        {"description", e.description},
        {"content", {{kJson, {{"schema", Ref("schemas", "Error")}}}}}};
  }
  const Json request_id = {
      {"name", "X-Request-Id"},
      {"in", "header"},
      {"required", false},
      {"description", "The call's id: the answer's `id` and the access log's request_id."},
      {"schema", {{"type", "string"}, {"maxLength", kMaxRequestIdBytes}}}};

  const Json content_encoding = {
      {"name", "Content-Encoding"},
      {"in", "header"},
      {"required", false},
      {"description",
       "gzip: the body is gzipped (inflated to limits.max_message_bytes at most, 413 beyond)."},
      {"schema", {{"type", "string"}, {"enum", {"gzip", "identity"}}}}};

  Json paths = Json::object();
  for (const HttpApiRoute& route : routes) {
    const RerankSchemas shape = RerankJsonSchemas(route.shape);
    const std::string request = absl::StrCat(shape.name, "Request");
    const std::string response = absl::StrCat(shape.name, "Response");
    const bool body = !shape.request.empty();
    schemas[response] = Json::parse(shape.response);
    Json operation = {{"summary", route.summary},
                      {"operationId", OperationId(route.method, route.path)},
                      {"parameters", {request_id}},
                      {"responses",
                       {{"200",
                         {{"description", body ? "The scores, best first." : "The answer."},
                          {"content", {{kJson, {{"schema", Ref("schemas", response)}}}}}}}}}};
    if (body) {
      schemas[request] = Json::parse(shape.request);
      operation["parameters"].push_back(content_encoding);
      operation["requestBody"] = {
          {"required", true},
          {"content",
           {{kJson,
             {{"schema", Ref("schemas", request)}, {"example", Json::parse(shape.example)}}}}}};
    }
    const bool health = route.shape == RerankShape::kHealth;
    if (health) operation["security"] = Json::array();  // open, a probe's
    for (const ErrorAnswer& e : errors) {
      const std::string status = e.status;
      // A GET has no body to refuse; /health needs no key and answers only 200 or 503.
      if (!body && (status == "400" || status == "404" || status == "413" || status == "415" ||
                    status == "429" || status == "504")) {
        continue;
      }
      if (health && status != "503") continue;
      operation["responses"][status] = Ref("responses", absl::StrCat("Error", e.status));
    }
    paths[route.path][absl::AsciiStrToLower(route.method)] = std::move(operation);
  }

  Json doc = {
      {"openapi", "3.0.3"},
      {"info",
       {{"title", "rankd HTTP API"},
        {"version", "v1"},
        {"description",
         "Scores documents against a query with rankd's model, in the shapes reranking clients "
         "speak (Cohere v1 and v2, TEI). Every call is a Score call of the same front end "
         "(validation, cache, queue, metrics). Errors are {\"error\": {\"message\", "
         "\"code\"}}; 429 and 503 carry Retry-After, every answer the call's X-Request-Id."}}},
      {"paths", std::move(paths)},
      {"components", {{"schemas", std::move(schemas)}, {"responses", std::move(responses)}}}};
  if (api_keys) {
    doc["components"]["securitySchemes"] = {
        {"bearer",
         {{"type", "http"},
          {"scheme", "bearer"},
          {"description", "An API key of server.auth.api_keys_file."}}}};
    doc["security"] = {{{"bearer", Json::array()}}};
  }
  return doc.dump(2);
}

}  // namespace rankd::server
