// The HTTP rerank and tokenize routes (rankd/server/http/http_api.h).
#include "rankd/server/http/http_api.h"

#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <random>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "rankd/common/grpc_status.h"
#include "rankd/common/trace_context.h"
#include "rankd/server/build_info.h"
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
    case 403:
      return "PERMISSION_DENIED";
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

// The answer of a call of `shape` that failed with `status`: its HTTP status and gRPC code, and
// its message in the caller's names (CallerFieldMessage).
HttpResponse JsonError(RerankShape shape, const absl::Status& status) {
  const grpc::StatusCode code = ToGrpcStatus(status).error_code();
  return JsonError(HttpStatusOf(code), CallerFieldMessage(shape, status), GrpcCodeName(code));
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
        max_item_tokens_(service->config().limits.max_item_tokens),
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
    absl::Status parsed =
        ParseRerankRequest(route_.shape, http.body, max_items_, request, &options_);
    if (parsed.ok() && options_.max_tokens_per_doc > 0 &&
        options_.max_tokens_per_doc < max_item_tokens_) {
      // rankd cuts at the end to its own limit; a cut at another length is not one it makes.
      parsed = absl::InvalidArgumentError(absl::StrCat(
          "max_tokens_per_doc: documents are cut to limits.max_item_tokens=", max_item_tokens_,
          " tokens; a smaller value (got ", options_.max_tokens_per_doc, ") is not supported"));
    }
    request->set_request_id(id_);
    const auto deadline = std::chrono::system_clock::now() +
                          std::chrono::duration_cast<std::chrono::system_clock::duration>(
                              std::chrono::duration<double>(timeout_s));
    call_.Start(
        parsed, deadline,
        [this](const rankd::v1::ScoreResponse& response) {
          body_ = RerankResponseJson(route_.shape, call_.request(), options_, response, id_);
          return absl::OkStatus();
        },
        [this](const absl::Status& status) { Finish(status); });
  }

 private:
  void Finish(const absl::Status& status) {
    HttpResponse response =
        status.ok() ? HttpResponse{.status = 200, .content_type = kJson, .body = std::move(body_)}
                    : JsonError(route_.shape, status);
    response.headers.emplace_back("X-Request-Id", id_);
    CountAnswer(registry_, route_.path, response.status);
    reply_(std::move(response));
    delete this;
  }

  const HttpApiRoute& route_;
  const int max_items_;
  const int max_item_tokens_;
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
  auto answer = [registry, shape = route.shape, path = route.path, id = request.request_id(),
                 reply = std::move(reply)](const absl::Status& status,
                                           const rankd::v1::TokenizeResponse& response) {
    HttpResponse r = status.ok() ? HttpResponse{.status = 200,
                                                .content_type = kJson,
                                                .body = TokenizeResponseJson(response)}
                                 : JsonError(shape, status);
    r.headers.emplace_back("X-Request-Id", id);
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

// Content-Encoding of a body: none (or identity), or gzip, which InflateBody reads.
enum class BodyEncoding { kIdentity, kGzip };
absl::StatusOr<BodyEncoding> EncodingOf(const HttpRequest& request) {
  const std::string* encoding = request.Header("content-encoding");
  if (encoding == nullptr) return BodyEncoding::kIdentity;
  const absl::string_view e = absl::StripAsciiWhitespace(*encoding);
  if (absl::EqualsIgnoreCase(e, "identity")) return BodyEncoding::kIdentity;
  if (absl::EqualsIgnoreCase(e, "gzip") || absl::EqualsIgnoreCase(e, "x-gzip")) {
    return BodyEncoding::kGzip;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "Content-Encoding: only gzip (or identity) is accepted (got '", e.substr(0, 64), "')"));
}

// The gzip `body` inflated: at most `limit` bytes (limits.max_message_bytes, as a plain body's),
// refused (RESOURCE_EXHAUSTED, answered 413) as soon as the output would pass it, so that a
// small body that inflates to much (a "zip bomb") costs `limit` bytes of memory at most. Several
// gzip members one after the other are one body (RFC 1952); bytes after the last are an error.
absl::StatusOr<std::string> InflateBody(const std::string& body, int64_t limit) {
  z_stream zs{};
  // 16 + MAX_WBITS: the gzip wrapper, its header and CRC checked.
  if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) {
    return absl::InternalError("body: zlib inflateInit2 failed");
  }
  std::string out;
  constexpr size_t kChunk = 64 << 10;
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(body.data()));
  zs.avail_in = static_cast<uInt>(body.size());  // <= limits.max_message_bytes < 4 GiB
  absl::Status status;
  while (true) {
    const size_t before = out.size();
    const size_t room = static_cast<size_t>(std::min<int64_t>(kChunk, limit + 1 - before));
    out.resize(before + room);
    zs.next_out = reinterpret_cast<Bytef*>(out.data() + before);
    zs.avail_out = static_cast<uInt>(room);
    const int rc = inflate(&zs, Z_NO_FLUSH);
    out.resize(before + room - zs.avail_out);
    if (static_cast<int64_t>(out.size()) > limit) {
      status = absl::ResourceExhaustedError(absl::StrCat(
          "body: gzip inflates to more than limits.max_message_bytes=", limit, " bytes"));
      break;
    }
    if (rc == Z_STREAM_END) {
      if (zs.avail_in == 0) break;
      inflateReset(&zs);  // the next gzip member
      continue;
    }
    if (rc == Z_BUF_ERROR && zs.avail_in == 0) {
      status = absl::InvalidArgumentError("body: gzip data ends early (truncated)");
      break;
    }
    if (rc != Z_OK) {
      status = absl::InvalidArgumentError(
          absl::StrCat("body: not valid gzip: ", zs.msg != nullptr ? zs.msg : "inflate failed"));
      break;
    }
  }
  inflateEnd(&zs);
  if (!status.ok()) return status;
  return out;
}

// CORS (server.cors_allow_origins): whether `request` comes from an origin allowed to read the
// answers; `*origin` is what Access-Control-Allow-Origin says ("*" or the origin itself). A
// request with its Origin header twice is not (a browser sends one).
bool AllowedOrigin(const std::vector<std::string>& allowed, const HttpRequest& request,
                   std::string* origin) {
  const std::string* first = nullptr;
  int count = 0;
  for (const auto& [name, value] : request.headers) {
    if (name == "origin") {
      first = count == 0 ? &value : first;
      ++count;
    }
  }
  if (allowed.empty() || count != 1) return false;
  for (const std::string& a : allowed) {
    if (a == "*") {
      *origin = "*";
      return true;
    }
    if (a == *first) {  // exact bytes: an origin is compared as browsers send it
      *origin = a;
      return true;
    }
  }
  return false;
}

// Access-Control-Request-Headers, when it is a list of header names (tokens), for the preflight's
// Access-Control-Allow-Headers; else the headers the API reads.
std::string AllowedHeaders(const HttpRequest& request) {
  constexpr char kApiHeaders[] =
      "Authorization, Content-Type, Content-Encoding, X-Request-Id, traceparent";
  const std::string* asked = request.Header("access-control-request-headers");
  if (asked == nullptr || asked->empty() || asked->size() > 1024) return kApiHeaders;
  const bool tokens = std::all_of(asked->begin(), asked->end(), [](char c) {
    return absl::ascii_isalnum(c) || c == '-' || c == '_' || c == ',' || c == ' ' || c == '.';
  });
  return tokens ? *asked : kApiHeaders;
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

// The answer of a GET route (GET /v1/models, /info, /health): made from the config once, but
// /health's, which follows the pool.
HttpServer::Handler GetHandler(ScorerService* service, const HttpApiRoute& route) {
  MetricsRegistry* registry = service->metrics()->registry;
  const ServeConfig& config = service->config();
  const ModelInfo& model = service->model();
  std::string body;
  switch (route.shape) {
    case RerankShape::kModels: {
      const int64_t created = std::chrono::duration_cast<std::chrono::seconds>(
                                  std::chrono::system_clock::now().time_since_epoch())
                                  .count();
      body = ModelsResponseJson(
          model.names.empty() ? std::vector<std::string>{model.name} : model.names, created);
      break;
    }
    case RerankShape::kInfo: {
      const auto& backend = config.model.engine.backend;
      ServerInfo info{
          .names = model.names.empty() ? std::vector<std::string>{model.name} : model.names,
          .model_dir_name = config.model.name,
          .identity = config.model.identity,
          .backend = backend.kind,
          .dtype = backend.kind == "cuda" ? backend.precision : "float32",
          .max_position_embeddings = model.max_position_embeddings,
          .max_query_tokens = config.limits.max_query_tokens,
          .max_item_tokens = config.limits.max_item_tokens,
          .max_request_tokens = config.limits.max_request_tokens,
          .max_items = config.limits.max_items,
          .max_message_bytes = config.limits.max_message_bytes,
          .max_batch_tokens = backend.max_batch_tokens,
          .auto_truncate = config.limits.truncate == Limits::Truncate::kEnd,
          .version = kVersion,
          .commit = std::string(kCommit) == "unknown" ? "" : kCommit};
      body = InfoResponseJson(info);
      break;
    }
    default:
      break;
  }
  const bool health = route.shape == RerankShape::kHealth;
  WorkerPool* pool = service->pool();
  return [registry, path = route.path, health, pool, body = std::move(body)](
             const HttpRequest&, HttpServer::Reply reply) {
    HttpResponse r{.status = 200, .content_type = kJson, .body = body};
    if (health) {
      r = pool->ready()
              ? HttpResponse{.status = 200, .content_type = kJson, .body = HealthResponseJson()}
              : JsonError(503, "not ready: no worker is up yet, or the server is draining",
                          "UNAVAILABLE");
    }
    CountAnswer(registry, path, r.status);
    reply(std::move(r));
  };
}

// OPTIONS on each of the API's paths: a CORS preflight (Origin and
// Access-Control-Request-Method) from an allowed origin gets 204 with what it may send; from
// another origin, or with CORS off, 403 naming server.cors_allow_origins. Without an Origin: 204
// with Allow (RFC 9110's OPTIONS). Counted under route="OPTIONS".
void RegisterOptions(HttpServer* http, MetricsRegistry* registry,
                     const std::vector<std::string>& origins,
                     const std::vector<std::pair<std::string, std::string>>& path_methods) {
  absl::flat_hash_map<std::string, std::string> allow;  // path -> "POST, OPTIONS"
  std::vector<std::string> paths;
  for (const auto& [path, method] : path_methods) {
    std::string& a = allow[path];
    if (a.empty()) paths.push_back(path);
    absl::StrAppend(&a, method, ", ");
  }
  for (const std::string& path : paths) {
    http->Handle(
        "OPTIONS", path,
        [registry, origins, methods = allow[path] + "OPTIONS"](const HttpRequest& request,
                                                               HttpServer::Reply reply) {
          HttpResponse r{.status = 204, .content_type = "text/plain", .body = ""};
          std::string origin;
          if (request.Header("origin") == nullptr) {
            r.headers.emplace_back("Allow", methods);
          } else if (AllowedOrigin(origins, request, &origin)) {
            r.headers.emplace_back("Access-Control-Allow-Methods", methods);
            r.headers.emplace_back("Access-Control-Allow-Headers", AllowedHeaders(request));
            r.headers.emplace_back("Access-Control-Max-Age", absl::StrCat(kCorsMaxAgeSeconds));
          } else {
            r = JsonError(403,
                          origins.empty()
                              ? "CORS is off: server.cors_allow_origins is empty"
                              : "Origin: not in server.cors_allow_origins (or sent more than once)",
                          HttpCodeName(403));
          }
          CountAnswer(registry, "OPTIONS", r.status);
          reply(std::move(r));
        });
  }
}

}  // namespace

const std::vector<HttpApiRoute>& HttpApiRoutes() {
  static const std::vector<HttpApiRoute> routes = {
      {"POST", "/v1/rerank", RerankShape::kCohere,
       "Rerank documents against a query (Cohere v1, Jina and vLLM shape)"},
      {"POST", "/v2/rerank", RerankShape::kCohereV2,
       "Rerank documents against a query (Cohere v2 shape)"},
      {"POST", "/rerank", RerankShape::kTei,
       "Rerank texts against a query (Hugging Face text-embeddings-inference shape)"},
      {"POST", "/tokenize", RerankShape::kTokenize,
       "Token ids of texts as the model is fed them (text-embeddings-inference shape)"},
      {"GET", "/v1/models", RerankShape::kModels,
       "The served model's names (OpenAI's model list shape)"},
      {"GET", "/info", RerankShape::kInfo,
       "The served model, its precision and the server's limits (text-embeddings-inference "
       "shape)"},
      {"GET", "/health", RerankShape::kHealth,
       "200 while ready to score (a worker up, not draining), else 503; needs no API key"},
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
  const ServeConfig& config = service->config();
  const double timeout_s = config.server.http_request_timeout_s;
  const int64_t max_body_bytes = config.limits.max_message_bytes;
  // The methods of each path, for OPTIONS (its Allow and the preflight's Allow-Methods).
  std::vector<std::pair<std::string, std::string>> path_methods;
  for (const HttpApiRoute& route : HttpApiRoutes()) {
    const HttpApiRoute* r = &route;  // HttpApiRoutes() lives as long as the program
    path_methods.emplace_back(route.path, route.method);
    // Counted under the route, as its answers are.
    auto refusal = [registry, r](int status, absl::string_view message, absl::string_view code) {
      CountAnswer(registry, r->path, status);
      return JsonError(status, message, code);
    };
    auto refuse = [refusal](const absl::Status& s, const HttpServer::Reply& reply) {
      const grpc::StatusCode code = ToGrpcStatus(s).error_code();
      reply(refusal(HttpStatusOf(code), s.message(), GrpcCodeName(code)));
    };
    const bool get = std::string(route.method) == "GET";
    // What needs no body, checked before it is read. GET /health needs no key (a probe's).
    auto check = [keys, refusal, get, open = route.shape == RerankShape::kHealth](
                     const HttpRequest& request) -> std::optional<HttpResponse> {
      if (keys != nullptr && !open) {
        if (absl::Status s = CheckHttpApiKey(*keys, request); !s.ok()) {
          return refusal(401, s.message(), HttpCodeName(401));
        }
      }
      if (absl::Status s = CallerRequestId(request).status(); !s.ok()) {
        return refusal(400, s.message(), HttpCodeName(400));
      }
      if (get) return std::nullopt;
      if (!IsJson(request.Header("content-type"))) {
        return refusal(415, "Content-Type must be application/json", HttpCodeName(415));
      }
      if (absl::Status s = EncodingOf(request).status(); !s.ok()) {
        return refusal(415, s.message(), HttpCodeName(415));
      }
      return std::nullopt;
    };
    if (get) {
      http->Handle(route.method, route.path, GetHandler(service, *r), std::move(check));
      continue;
    }
    // The body: inflated, parsed, validated and its call started on `bodies`' threads, never on
    // the HttpServer's (a body's parse costs time in proportion to its bytes).
    auto handle = [service, timeout_s, max_body_bytes, r, bodies, refuse, refusal](
                      HttpRequest request, HttpServer::Reply reply) {
      absl::Status queued =
          bodies->Post([service, timeout_s, max_body_bytes, r, refuse, refusal,
                        request = std::move(request), reply](const absl::Status& run) mutable {
            if (!run.ok()) {
              refuse(run, reply);
              return;
            }
            if (*EncodingOf(request) == BodyEncoding::kGzip) {  // `check` accepted the encoding
              absl::StatusOr<std::string> inflated = InflateBody(request.body, max_body_bytes);
              if (!inflated.ok()) {
                const bool too_large = absl::IsResourceExhausted(inflated.status());
                reply(refusal(too_large ? 413 : 400, inflated.status().message(),
                              HttpCodeName(too_large ? 413 : 400)));
                return;
              }
              request.body = *std::move(inflated);
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
  path_methods.emplace_back("/openapi.json", "GET");
  RegisterOptions(http, registry, config.server.cors_allow_origins, path_methods);
}

HttpAnswerFn HttpApiAnswerHeaders(const ServerSection& server) {
  return [origins = server.cors_allow_origins](const HttpRequest& request, HttpResponse* response) {
    auto add = [response](const char* name, std::string value) {
      if (response->Header(name) == nullptr) response->headers.emplace_back(name, std::move(value));
    };
    if (response->status == 429 || response->status == 503) {
      add("Retry-After", absl::StrCat(kRetryAfterSeconds));
    }
    if (response->status == 401) add("WWW-Authenticate", "Bearer realm=\"rankd\"");
    if (absl::StatusOr<std::string> id = CallerRequestId(request); id.ok() && !id->empty()) {
      add("X-Request-Id", *std::move(id));
    }
    if (std::string origin; AllowedOrigin(origins, request, &origin)) {
      add("Access-Control-Allow-Origin", origin);
      add("Access-Control-Expose-Headers", "X-Request-Id, Retry-After");
    }
    // The answer depends on the Origin whenever CORS is on: caches must not share it across them.
    if (!origins.empty()) add("Vary", "Origin");
  };
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
