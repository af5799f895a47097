// The OpenAPI 3 document of the HTTP API (GET /openapi.json on server.http_listen), made from the
// route table (http_api.h's HttpApiRoutes) and the shapes' schemas (rerank_json.h's
// RerankJsonSchemas), so that it follows the code; Swagger UI (GET /docs) renders it.
#ifndef RANKD_SERVER_OPENAPI_H_
#define RANKD_SERVER_OPENAPI_H_

#include <string>
#include <vector>

#include "rankd/server/http/http_api.h"

namespace rankd::server {

// The document of `routes`, as JSON text. `api_keys`: the routes need `Authorization: Bearer KEY`
// (server.auth.api_keys_file is set): the document then declares the Bearer scheme and 401.
std::string OpenApiJson(const std::vector<HttpApiRoute>& routes, bool api_keys);

}  // namespace rankd::server

#endif  // RANKD_SERVER_OPENAPI_H_
