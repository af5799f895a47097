// `rankd score`: offline batch scoring of JSON lines.
#ifndef RANKD_MAIN_SCORE_COMMAND_H_
#define RANKD_MAIN_SCORE_COMMAND_H_

#include <istream>
#include <ostream>
#include <string>

#include "absl/status/statusor.h"
#include "rankd/cli/request_line.h"
#include "rankd/engine/engine.h"

namespace rankd::cli {

// The engine's request for a parsed request line. The server-side fields that would change the
// result, model and depth, are refused (an error naming the field); priority, request_id and the
// items' ids are ignored (the output is in input order).
absl::StatusOr<engine::ScoreRequest> ToEngineRequest(RequestLine line);

// ParseRequestLine (rankd/cli/request_line.h), then ToEngineRequest. Errors name the field (e.g.
// "items[3].ids[0]: must be a non-negative integer").
absl::StatusOr<engine::ScoreRequest> ParseScoreLine(absl::string_view line);

struct ScoreRunStats {
  int64_t lines = 0;
  int64_t failed_lines = 0;
  int64_t items = 0;
  double seconds = 0;
};

// The most request lines `rankd score --jobs` scores together (they are held in memory).
inline constexpr int kMaxJobs = 256;

struct ScoreStreamOptions {
  size_t total_bytes = 0;  // the input's size, 0 if unknown: the progress line's share and ETA
  bool progress = false;   // a progress line on stderr
  int jobs = 1;            // lines scored together (Engine::ScoreMany), at most kMaxJobs
};

// Scores every line of `in`, writing one JSON line per input line to `out`, in input order
// ({"scores": [..]} or {"error": ".."}); errors also go to the log with the line number. Lines
// go to the engine `jobs` at a time, together, so that one engine step holds all of them.
ScoreRunStats ScoreStream(engine::Engine& engine, std::istream& in, std::ostream& out,
                          const ScoreStreamOptions& options);

// `rankd score` with its flags in argv[first..argc).
int RunScoreCommand(int argc, char** argv, int first);

}  // namespace rankd::cli

#endif  // RANKD_MAIN_SCORE_COMMAND_H_
