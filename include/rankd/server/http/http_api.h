// The HTTP JSON API of `rankd serve` (server.http_listen): the rerank routes that reranking
// clients (Cohere's SDKs v1 and v2, the AI SDK, LangChain, LlamaIndex, Haystack, Dify, ...) call,
// in the shapes vLLM, TEI and Cohere serve, on rankd's own HttpServer, and what such clients ask
// a server besides (GET /v1/models, /info, /health). Each call is a ScoreCall (scorer_service.h),
// so it goes through the same validation, result cache, depth, queue, priorities, deadline
// admission, metrics and access log as gRPC's Score; API keys (server.auth) apply as
// `Authorization: Bearer KEY`. POST /tokenize (TEI's shape) goes to the TokenizeService
// (tokenize_service.h) instead. Bodies and answers are rerank_json.h's.
//
// Threads: the API key, Content-Type and X-Request-Id are checked on the HttpServer's thread,
// from the headers, before the body is read; the body is parsed, validated and its call started
// on a WorkQueue's threads (kHttpBodyThreads), so that no body holds the HttpServer's thread, and
// a call's answer is sent from the pool's completion thread through HttpServer::Reply.
#ifndef RANKD_SERVER_HTTP_API_H_
#define RANKD_SERVER_HTTP_API_H_

#include <cstddef>
#include <string>
#include <vector>

#include "rankd/common/work_queue.h"
#include "rankd/server/auth.h"
#include "rankd/server/http/http_server.h"
#include "rankd/server/metrics.h"
#include "rankd/server/http/rerank_json.h"
#include "rankd/server/grpc/scorer_service.h"

namespace rankd::server {

// One route of the API. HttpApiRoutes() is the one list of them: RegisterHttpApi serves it, and
// the API's documentation is made from it.
struct HttpApiRoute {
  const char* method;   // "POST" (a JSON body) or "GET" (none)
  const char* path;     // "/v1/rerank"
  RerankShape shape;    // its request and answer JSON
  const char* summary;  // one line
};
const std::vector<HttpApiRoute>& HttpApiRoutes();

// The longest X-Request-Id header accepted (it must be printable ASCII without spaces): it
// reaches the worker's request and the log. No more than the least limits.max_id_bytes, so that
// one accepted here (or the 32 bytes of an id made for a call without one) is never refused.
inline constexpr size_t kMaxRequestIdBytes = Limits::kMinIdBytes;

// The HTTP status of a gRPC status code: 400 INVALID_ARGUMENT, 401 UNAUTHENTICATED, 404
// NOT_FOUND, 429 RESOURCE_EXHAUSTED, 503 UNAVAILABLE, 504 DEADLINE_EXCEEDED, 499 CANCELLED,
// 500 otherwise.
int HttpStatusOf(grpc::StatusCode code);

// Retry-After (seconds) of every 429 and 503 answer of the API port: a queue full or a server
// not ready now is worth a retry soon, with the client's own backoff beyond.
inline constexpr int kRetryAfterSeconds = 1;
// Access-Control-Max-Age of a preflight's answer: how long a browser may reuse it.
inline constexpr int kCorsMaxAgeSeconds = 600;

// The WorkQueue of the API's bodies (RegisterHttpApi): its threads, and how many bodies may wait
// for them (429 beyond). A body's parse is linear in its bytes (limits.max_message_bytes at most).
inline constexpr int kHttpBodyThreads = 2;
inline constexpr int kMaxQueuedHttpBodies = 256;

// Serves HttpApiRoutes() on `http` through `service`: the POST routes' bodies may come gzipped
// (Content-Encoding: gzip; inflated on `bodies`' threads to limits.max_message_bytes at most,
// 413 beyond; another encoding is 415), the GET routes need no body and GET /health no key; and
// OPTIONS on every path (CORS preflights, server.cors_allow_origins), and their documentation:
// GET /openapi.json
// (openapi.h) and GET /docs, Swagger UI on it (api_docs.h; a build without it answers 404 saying
// so). The documentation is open without a key: it holds no secret, and the page's Authorize
// button takes the key for its calls. `keys`: the API keys every call must bring (null: none).
// `bodies` runs the calls' bodies (503 once it stops); it must outlive `http`'s serving.
// Every answer counts in rankd_http_requests_total{route, code}.
void RegisterHttpApi(HttpServer* http, ScorerService* service, const ApiKeys* keys,
                     WorkQueue* bodies);

// The headers every answer of the API port gets (HttpServer::Options::finish_answer): Retry-After
// on 429 and 503, `WWW-Authenticate: Bearer` on 401, the caller's X-Request-Id echoed (the rerank
// and tokenize routes send theirs, a fresh one when the caller gave none), and with
// server.cors_allow_origins, for a request from an allowed Origin, Access-Control-Allow-Origin
// (the origin, or * when "*" is listed) and Access-Control-Expose-Headers, with `Vary: Origin` on
// every answer.
HttpAnswerFn HttpApiAnswerHeaders(const ServerSection& server);

// server.auth's check of an HTTP request (the API's routes, and /metrics with
// auth.protect_metrics): ApiKeys::Check of every Authorization header it carries.
absl::Status CheckHttpApiKey(const ApiKeys& keys, const HttpRequest& request);

// The error answers of the API port's HttpServer itself (unknown path, wrong method, oversized
// body, ...), as JSON errors like the routes' own, counted under route="other".
HttpErrorFn HttpApiErrors(MetricsRegistry* registry);

}  // namespace rankd::server

#endif  // RANKD_SERVER_HTTP_API_H_
