// The files of GET /docs on server.http_listen: Swagger UI (npm's swagger-ui-dist, fetched and
// embedded into the binary at build time by cmake/SwaggerUi.cmake) and rankd's page around it
// (src/server/http/api_docs/index.html), which renders /openapi.json.
#ifndef RANKD_SERVER_API_DOCS_H_
#define RANKD_SERVER_API_DOCS_H_

#include <string_view>
#include <vector>

namespace rankd::server {

struct DocsFile {
  const char* path;          // "/docs", "/docs/swagger-ui.css", ...
  const char* content_type;  // "text/html; charset=utf-8", ...
  std::string_view body;     // embedded in the binary
};

// Empty when the build had no swagger-ui-dist (npm missing or offline): GET /docs answers 404.
const std::vector<DocsFile>& DocsFiles();

}  // namespace rankd::server

#endif  // RANKD_SERVER_API_DOCS_H_
