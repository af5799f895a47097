// The request line: one score request as one line of JSON, the input of both `rankd score` and
// `rankd-client score`. One parser for both programs; each turns the neutral RequestLine into its
// own request (engine::ScoreRequest, rankd::v1::ScoreRequest). The format is described once, in
// README.md ("Request lines").
#ifndef RANKD_CLI_REQUEST_LINE_H_
#define RANKD_CLI_REQUEST_LINE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace rankd::cli {

// rankd.v1.Priority, value for value.
enum class RequestPriority { kUnspecified = 0, kInteractive = 1, kBatch = 2 };
enum class RequestTruncate { kNone = 0, kEnd = 1 };  // rankd.v1.Truncate

struct RequestItem {
  enum class Kind { kText, kTokenIds, kEmbedding };
  Kind kind = Kind::kText;
  std::string text;
  std::vector<int32_t> token_ids;
  int32_t embedding_rows = 0;
  std::vector<float> embedding;  // [embedding_rows, width] row-major
  std::string id;                // the caller's id, echoed back by the server

  bool operator==(const RequestItem&) const = default;
};

struct RequestLine {
  std::string query;                              // used unless query_ids is set
  std::optional<std::vector<int32_t>> query_ids;  // the whole prefix, verbatim (BOS included)
  std::vector<RequestItem> items;                 // at least one
  bool apply_sigmoid = false;
  // Server-side fields (rankd.v1.ScoreRequest's); `rankd score` refuses model, depth and
  // truncate, and ignores the others.
  std::string model;
  RequestPriority priority = RequestPriority::kUnspecified;
  std::string request_id;
  int32_t depth = 0;
  bool skip_cache = false;
  RequestTruncate truncate = RequestTruncate::kNone;

  bool operator==(const RequestLine&) const = default;
};

// Parses one line in either spelling that README.md ("Request lines") describes, the shorthand or
// rankd.v1.ScoreRequest in proto3 JSON (snake_case or lowerCamel names), or a mix. Errors are
// InvalidArgument and name the field, e.g. "items[3].ids[0]: must be a non-negative integer".
absl::StatusOr<RequestLine> ParseRequestLine(absl::string_view line);

}  // namespace rankd::cli

#endif  // RANKD_CLI_REQUEST_LINE_H_
