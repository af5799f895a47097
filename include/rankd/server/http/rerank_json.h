// The JSON of the HTTP rerank routes (http_api.h), both shapes that reranking clients speak:
// Cohere/Jina/vLLM's POST /v1/rerank and TEI's POST /rerank. A request body becomes a
// rankd.v1.ScoreRequest (text items) plus what the answer needs (top_n, whether to echo the
// texts); a ScoreResponse becomes the shape's answer, results sorted best first. Nothing here
// checks limits: the ScoreRequest goes through ValidateScoreRequest like any gRPC call's.
//
// Hostile input: bodies are parsed by nlohmann::json's SAX parser (iterative; invalid UTF-8 and
// numbers out of range are parse errors) into only what the shape reads: the parse is linear in
// the body's bytes, stops at the list's item max_items + 1, and builds nothing of members nobody
// reads. Nesting deeper than kMaxJsonDepth and duplicate keys are refused, and every error names
// the field ("documents[3].text: must be a string").
#ifndef RANKD_SERVER_RERANK_JSON_H_
#define RANKD_SERVER_RERANK_JSON_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "rankd/v1/scorer.pb.h"

namespace rankd::server {

enum class RerankShape {
  kCohere,  // POST /v1/rerank: {"query", "documents", "top_n"?, ...} -> {"id", "results", ...}
  // POST /v2/rerank (Cohere's v2): {"query", "documents": [string], "top_n"?,
  // "max_tokens_per_doc"?, ...} -> {"id", "results": [{"index", "relevance_score"}], "meta"}.
  kCohereV2,
  kTei,  // POST /rerank: {"query", "texts", ...} -> [{"index", "score", "text"?}]
  // POST /tokenize (TEI's): {"inputs", ...} -> [[{"id"}, ...], ...]; a TokenizeRequest, not a
  // ScoreRequest: its functions are the Tokenize ones below, not the rerank ones.
  kTokenize,
  // The GET routes, no body: GET /v1/models (OpenAI's list, ModelsResponseJson), GET /info
  // (TEI's, InfoResponseJson), GET /health (TEI's: 200 ready, else 503).
  kModels,
  kInfo,
  kHealth,
};

// A Cohere search unit: one query with up to this many documents (Cohere's billing unit, which
// meta.billed_units.search_units counts: ceil(documents / kDocumentsPerSearchUnit)).
inline constexpr int kDocumentsPerSearchUnit = 100;

// Nesting of arrays and objects deeper than this is refused (the shapes need 3).
inline constexpr int kMaxJsonDepth = 16;

// What the answer needs besides the ScoreResponse.
struct RerankOptions {
  int top_n = 0;             // results to return, best first; 0: all
  bool return_text = false;  // echo each result's text (Cohere: "document", TEI: "text")
  bool raw_scores = false;   // rankd's scores as they are, else their sigmoid (0..1)
  // Cohere v2's max_tokens_per_doc (0: not given): documents are cut at the end to
  // limits.max_item_tokens, so the caller (http_api.cc) refuses a smaller one.
  int max_tokens_per_doc = 0;
};

// Parses `body` into `request` (query, text items, apply_sigmoid, truncate, model, priority) and
// `options`. Unknown members are ignored (as the servers these clients target ignore them), so a
// client's extra options do not fail its calls. INVALID_ARGUMENT names the field; a list of more
// than `max_items` (limits.max_items) is refused as soon as its next item begins.
absl::Status ParseRerankRequest(RerankShape shape, absl::string_view body, int max_items,
                                rankd::v1::ScoreRequest* request, RerankOptions* options);

// The answer of `request` (as parsed) from its `response`: the scored items sorted by score, best
// first (ties: the lower index first), the first top_n of them. `id` is the Cohere shape's "id".
std::string RerankResponseJson(RerankShape shape, const rankd::v1::ScoreRequest& request,
                               const RerankOptions& options,
                               const rankd::v1::ScoreResponse& response, absl::string_view id);

// GET /v1/models: OpenAI's list, {"object": "list", "data": [{"id", "object": "model",
// "created", "owned_by": "rankd"}]}, one entry per served name (server.served_model_names), the
// reported one first. `created`: when the server started (Unix seconds).
std::string ModelsResponseJson(const std::vector<std::string>& names, int64_t created);

// What GET /info tells (TEI's /info, with rankd's limits).
struct ServerInfo {
  std::vector<std::string> names;   // server.served_model_names; the first is model_id
  std::string model_dir_name;       // model.name
  std::string identity;             // model.identity ("sha256:..."), may be empty
  std::string backend;              // model.backend
  std::string dtype;                // float32 (cpu) | bf16 | fp8 (model.precision on cuda)
  int max_position_embeddings = 0;  // the model's context; 0: its config gives none
  int max_query_tokens = 0, max_item_tokens = 0;
  int64_t max_request_tokens = 0;
  int max_items = 0;  // limits.max_items: TEI's max_client_batch_size
  int64_t max_message_bytes = 0;
  int max_batch_tokens = 0;     // model.max_batch_tokens
  bool auto_truncate = false;   // limits.truncate: end
  std::string version, commit;  // the build's
};
std::string InfoResponseJson(const ServerInfo& info);

// GET /health's 200 answer: {"status": "ok"}.
std::string HealthResponseJson();

// POST /tokenize's body (TEI's shape, with rankd's template): {"inputs": string | [string],
// "add_special_tokens"?: bool (default true, as TEI's), "template"?: "none" | "query" | "item",
// "model"?: string} into `request`. Unknown members are ignored; INVALID_ARGUMENT names the field;
// more than `max_items` inputs are refused as ParseRerankRequest's items are.
absl::Status ParseTokenizeRequest(absl::string_view body, int max_items,
                                  rankd::v1::TokenizeRequest* request);

// The answer: one list per input, in order, of {"id": N} per token (TEI's "text", "special",
// "start" and "stop" are left out: rankd's tokenizer keeps no offsets).
std::string TokenizeResponseJson(const rankd::v1::TokenizeResponse& response);

// {"error": {"message": ..., "code": ...}}.
std::string ErrorJson(absl::string_view message, absl::string_view code);

// What the API's OpenAPI document (openapi.h) says of a shape: JSON Schemas (OpenAPI 3.0's
// dialect), as JSON text, of what ParseRerankRequest reads and RerankResponseJson writes, kept
// here beside them; tests/server/http/openapi_test.cc checks them against both.
struct RerankSchemas {
  const char* name;      // "CohereRerank": the document's schema names derive from it
  std::string request;   // the request body's schema; empty for the GET routes (no body)
  std::string response;  // the answer's
  std::string example;   // a request body that ParseRerankRequest accepts; empty for GET
};
RerankSchemas RerankJsonSchemas(RerankShape shape);
// The schema of ErrorJson's answers.
std::string ErrorJsonSchema();

// The message of an error answered to a caller of `shape`. An error about one of the request's
// items, or about its list, which says so as data (its FieldError, rankd/common/field_error.h:
// the validation's, the workers', the Tokenize service's) names the caller's own list instead:
// "items[3].text: empty" is "documents[3]: empty" (the caller's list holds the texts
// themselves), "items: ..." is "texts: ...", a Tokenize request's "texts[3]: ..." is
// "inputs[3]: ...". Any other error is answered as its message says; no message is read for a
// field or an index.
std::string CallerFieldMessage(RerankShape shape, const absl::Status& status);

}  // namespace rankd::server

#endif  // RANKD_SERVER_RERANK_JSON_H_
