// The HTTP room (src/server/http): server.http_listen and server.metrics_listen.
//   http_server.h          the epoll HTTP/1.1 server both ports run on
//   http_request_parser.h  one request from a connection's bytes (Boost.Beast)
//   http_api.h             the routes (Cohere/TEI/OpenAI-shaped rerank, tokenize, docs)
//   rerank_json.h          the routes' JSON bodies and schemas
//   openapi.h, api_docs.h  GET /openapi.json and GET /docs
// Each rerank call is a ScoreCall of the gRPC room's service. May include: grpc, call, config,
// metrics, auth; never pool.
#ifndef RANKD_SERVER_HTTP_HTTP_H_
#define RANKD_SERVER_HTTP_HTTP_H_

#include "rankd/server/http/api_docs.h"
#include "rankd/server/http/http_api.h"
#include "rankd/server/http/http_request_parser.h"
#include "rankd/server/http/http_server.h"
#include "rankd/server/http/openapi.h"
#include "rankd/server/http/rerank_json.h"

#endif  // RANKD_SERVER_HTTP_HTTP_H_
