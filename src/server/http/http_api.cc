// The HTTP rerank and tokenize routes (rankd/server/http/http_api.h).
#include "rankd/server/http/http_api.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <random>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "rankd/common/grpc_status.h"
#include "rankd/common/trace_context.h"
#include "rankd/server/http/api_docs.h"
#include "rankd/server/http/openapi.h"

namespace rankd::server {
namespace {

constexpr char kJson[] = "application/json";

// rankd_http_requests_total{route, code}: `route` one of HttpApiRoutes()' paths or "other".
void CountAnswer(MetricsRegistry* registry, absl::string_view route, int status) {
  registry
      ->GetCounter("rankd_http_requests_total", "HTTP API requests answered, by route and status.",
                   {{"route", std::string(route)}, {"code", absl::StrCat(status)}})
      ->Add();
}

// The "code" of an error the HTTP side answers itself (no gRPC status behind it).
const char* HttpCodeName(int status) {
  switch (status) {
    case 400:
      return "INVALID_ARGUMENT";
    case 401:
      return "UNAUTHENTICATED";
    case 404:
      return "NOT_FOUND";
    case 405:
      return "METHOD_NOT_ALLOWED";
    case 413:
      return "PAYLOAD_TOO_LARGE";
    case 415:
      return "UNSUPPORTED_MEDIA_TYPE";
    case 431:
      return "HEADERS_TOO_LARGE";
    case 501:
      return "UNIMPLEMENTED";
    default:
      return "INTERNAL";
  }
}

HttpResponse JsonError(int status, absl::string_view message, absl::string_view code) {
  return {.status = status, .content_type = kJson, .body = ErrorJson(message, code)};
}

// A fresh call id: 128 random bits in hex.
std::string NewCallId() {
  thread_local std::mt19937_64 random(std::random_device{}());
  return absl::StrCat(absl::Hex(random(), absl::kZeroPad16), absl::Hex(random(), absl::kZeroPad16));
}

// One HTTP rerank call in flight: its ScoreCall and how to answer it. It deletes itself once
// answered.
class HttpRerankCall {
 public:
  HttpRerankCall(ScorerService* service, const HttpApiRoute& route, HttpServer::Reply reply)
      : route_(route),
        max_items_(service->config().limits.max_items),
        registry_(service->metrics()->registry),
        reply_(std::move(reply)),
        call_(service, absl::StrCat(route.method, " ", route.path)) {}

  // `request_id`: the caller's (CallerRequestId), else empty for a fresh one.
  void Start(const HttpRequest& http, std::string request_id, double timeout_s) {
    // The access log's request_id and the answer's id.
    id_ = request_id.empty() ? NewCallId() : std::move(request_id);
    if (const std::string* traceparent = http.Header(kTraceparentKey)) {
      call_.set_trace_id(TraceIdOf(*traceparent).value_or(""));
    }
    rankd::v1::ScoreRequest* request = call_.mutable_request();
    const absl::Status parsed =
        ParseRerankRequest(route_.shape, http.body, max_items_, request, &options_);
    request->set_request_id(id_);
    const auto deadline = std::chrono::system_clock::now() +
                          std::chrono::duration_cast<std::chrono::system_clock::duration>(
                              std::chrono::duration<double>(timeout_s));
    call_.Start(
        parsed, deadline,
        [this](const rankd::v1::ScoreResponse& response) {
          body_ = RerankResponseJson(route_.shape, call_.request(), options_, response, id_);
          return grpc::Status::OK;
        },
        [this](const grpc::Status& status) { Finish(status); });
  }

 private:
  void Finish(const grpc::Status& status) {
    HttpResponse response =
        status.ok() ? HttpResponse{.status = 200, .content_type = kJson, .body = std::move(body_)}
                    : JsonError(HttpStatusOf(status.error_code()),
                                CallerFieldMessage(route_.shape, status.error_message()),
                                GrpcCodeName(status.error_code()));
    CountAnswer(registry_, route_.path, response.status);
    reply_(std::move(response));
    delete this;
  }

  const HttpApiRoute& route_;
  const int max_items_;
  MetricsRegistry* const registry_;
  const HttpServer::Reply reply_;
  ScoreCall call_;
  std::string id_;
  RerankOptions options_;
  std::string body_;  // the answer, once encoded
};

// One HTTP Tokenize call: parsed here, answered by the TokenizeService on its thread.
void StartHttpTokenize(ScorerService* service, const HttpApiRoute& route, const HttpRequest& http,
                       std::string request_id, HttpServer::Reply reply) {
  rankd::v1::TokenizeRequest request;
  const absl::Status parsed =
      ParseTokenizeRequest(http.body, service->config().limits.max_items, &request);
  request.set_request_id(request_id.empty() ? NewCallId() : std::move(request_id));
  MetricsRegistry* registry = service->metrics()->registry;
  auto answer = [registry, path = route.path, reply = std::move(reply)](
                    const grpc::Status& status, const rankd::v1::TokenizeResponse& response) {
    HttpResponse r = status.ok() ? HttpResponse{.status = 200,
                                                .content_type = kJson,
                                                .body = TokenizeResponseJson(response)}
                                 : JsonError(HttpStatusOf(status.error_code()),
                                             TokenizeFieldMessage(status.error_message()),
                                             GrpcCodeName(status.error_code()));
    CountAnswer(registry, path, r.status);
    reply(std::move(r));
  };
  service->tokenize()->Tokenize(parsed, std::move(request),
                                absl::StrCat(route.method, " ", route.path), std::move(answer));
}

// The X-Request-Id header's value ("" when absent), or an error: it goes into the worker's
// request and the log, so it must be short and printable ASCII.
absl::StatusOr<std::string> CallerRequestId(const HttpRequest& request) {
  const std::string* id = request.Header("x-request-id");
  if (id == nullptr) return std::string();
  const bool printable =
      std::all_of(id->begin(), id->end(), [](char c) { return c > ' ' && c < 0x7f; });
  if (!printable || id->size() > kMaxRequestIdBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("X-Request-Id: must be printable ASCII without spaces, at most ",
                     kMaxRequestIdBytes, " bytes (got ", id->size(), " bytes)"));
  }
  return *id;
}

// application/json, with or without parameters ("application/json; charset=utf-8").
bool IsJson(const std::string* content_type) {
  if (content_type == nullptr) return false;
  const absl::string_view type = absl::StripAsciiWhitespace(
      absl::string_view(*content_type).substr(0, content_type->find(';')));
  return absl::EqualsIgnoreCase(type, kJson);
}

// GET /openapi.json and GET /docs (http_api.h, RegisterHttpApi).
void RegisterApiDocs(HttpServer* http, MetricsRegistry* registry, bool api_keys) {
  http->Handle("GET", "/openapi.json",
               [registry, openapi = OpenApiJson(HttpApiRoutes(), api_keys)](
                   const HttpRequest&, HttpServer::Reply reply) {
                 CountAnswer(registry, "/openapi.json", 200);
                 reply({.status = 200, .content_type = kJson, .body = openapi});
               });
  const std::vector<DocsFile>& files = DocsFiles();
  for (const DocsFile& file : files) {
    const DocsFile* f = &file;  // DocsFiles() lives as long as the program
    http->Handle("GET", f->path, [registry, f](const HttpRequest&, HttpServer::Reply reply) {
      CountAnswer(registry, f->path, 200);
      reply({.status = 200, .content_type = f->content_type, .body = std::string(f->body)});
    });
  }
  if (files.empty()) {
    http->Handle("GET", "/docs", [registry](const HttpRequest&, HttpServer::Reply reply) {
      CountAnswer(registry, "/docs", 404);
      reply(JsonError(404,
                      "GET /docs: this rankd was built without Swagger UI (npm could not install "
                      "swagger-ui-dist at build time; docs/config.md, \"API docs\"); the API's "
                      "OpenAPI document is at GET /openapi.json",
                      "NOT_FOUND"));
    });
  }
}

}  // namespace

const std::vector<HttpApiRoute>& HttpApiRoutes() {
  static const std::vector<HttpApiRoute> routes = {
      {"POST", "/v1/rerank", RerankShape::kCohere,
       "Rerank documents against a query (Cohere, Jina and vLLM shape)"},
      {"POST", "/rerank", RerankShape::kTei,
       "Rerank texts against a query (Hugging Face text-embeddings-inference shape)"},
      {"POST", "/tokenize", RerankShape::kTokenize,
       "Token ids of texts as the model is fed them (text-embeddings-inference shape)"},
  };
  return routes;
}

int HttpStatusOf(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK:
      return 200;
    case grpc::StatusCode::INVALID_ARGUMENT:
      return 400;
    case grpc::StatusCode::UNAUTHENTICATED:
      return 401;
    case grpc::StatusCode::NOT_FOUND:
      return 404;
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return 429;
    case grpc::StatusCode::CANCELLED:
      return 499;  // the client went away (nginx's code): nobody reads it
    case grpc::StatusCode::UNAVAILABLE:
      return 503;
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return 504;
    default:
      return 500;
  }
}

void RegisterHttpApi(HttpServer* http, ScorerService* service, const ApiKeys* keys,
                     WorkQueue* bodies) {
  MetricsRegistry* registry = service->metrics()->registry;
  const double timeout_s = service->config().server.http_request_timeout_s;
  for (const HttpApiRoute& route : HttpApiRoutes()) {
    const HttpApiRoute* r = &route;  // HttpApiRoutes() lives as long as the program
    // Counted under the route, as its answers are.
    auto refusal = [registry, r](int status, absl::string_view message, absl::string_view code) {
      CountAnswer(registry, r->path, status);
      return JsonError(status, message, code);
    };
    auto refuse = [refusal](const absl::Status& s, const HttpServer::Reply& reply) {
      const grpc::StatusCode code = ToGrpcStatus(s).error_code();
      reply(refusal(HttpStatusOf(code), s.message(), GrpcCodeName(code)));
    };
    // What needs no body, checked before it is read.
    auto check = [keys, refusal](const HttpRequest& request) -> std::optional<HttpResponse> {
      if (keys != nullptr) {
        if (absl::Status s = CheckHttpApiKey(*keys, request); !s.ok()) {
          return refusal(401, s.message(), HttpCodeName(401));
        }
      }
      if (!IsJson(request.Header("content-type"))) {
        return refusal(415, "Content-Type must be application/json", HttpCodeName(415));
      }
      if (absl::Status s = CallerRequestId(request).status(); !s.ok()) {
        return refusal(400, s.message(), HttpCodeName(400));
      }
      return std::nullopt;
    };
    // The body: parsed, validated and its call started on `bodies`' threads, never on the
    // HttpServer's (a body's parse costs time in proportion to its bytes).
    auto handle = [service, timeout_s, r, bodies, refuse](HttpRequest request,
                                                          HttpServer::Reply reply) {
      absl::Status queued =
          bodies->Post([service, timeout_s, r, refuse, request = std::move(request),
                        reply](const absl::Status& run) {
            if (!run.ok()) {
              refuse(run, reply);
              return;
            }
            std::string request_id = *CallerRequestId(request);  // `check` accepted it
            if (r->shape == RerankShape::kTokenize) {
              StartHttpTokenize(service, *r, request, std::move(request_id), reply);
            } else {
              (new HttpRerankCall(service, *r, reply))
                  ->Start(request, std::move(request_id), timeout_s);
            }
          });
      if (!queued.ok()) refuse(queued, reply);
    };
    http->Handle(route.method, route.path, std::move(handle), std::move(check));
  }
  RegisterApiDocs(http, registry, keys != nullptr);
}

absl::Status CheckHttpApiKey(const ApiKeys& keys, const HttpRequest& request) {
  std::vector<absl::string_view> authorization;
  for (const auto& [name, value] : request.headers) {
    if (name == "authorization") authorization.push_back(value);
  }
  return keys.Check(authorization);
}

HttpErrorFn HttpApiErrors(MetricsRegistry* registry) {
  return [registry](int status, std::string message) {
    CountAnswer(registry, "other", status);
    return JsonError(status, message, HttpCodeName(status));
  };
}

}  // namespace rankd::server
