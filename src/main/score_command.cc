#include "score_command.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "engine_flags.h"
#include "nlohmann/json.hpp"
#include "rankd/backend/registry.h"
#include "rankd/cli/request_line.h"
#include "rankd/common/logging.h"
#include "rankd/common/status.h"
#include "spdlog/spdlog.h"

namespace rankd::cli {

absl::StatusOr<engine::ScoreRequest> ToEngineRequest(RequestLine line) {
  if (!line.model.empty()) {
    return absl::InvalidArgumentError("model: rankd score has one model (--model); leave it out");
  }
  if (line.depth != 0) {
    return absl::InvalidArgumentError("depth: rankd score scores every item; leave it out");
  }
  if (line.truncate != RequestTruncate::kNone) {
    return absl::InvalidArgumentError(
        "truncate: rankd score refuses what is over the model's limits; cut it, or score it "
        "through rankd serve");
  }
  engine::ScoreRequest req;
  req.query = std::move(line.query);
  req.query_ids = std::move(line.query_ids);
  req.apply_sigmoid = line.apply_sigmoid;
  req.items.reserve(line.items.size());
  for (RequestItem& item : line.items) {
    switch (item.kind) {
      case RequestItem::Kind::kText:
        req.items.push_back(engine::Item::Text(std::move(item.text)));
        break;
      case RequestItem::Kind::kTokenIds:
        req.items.push_back(engine::Item::Ids(std::move(item.token_ids)));
        break;
      case RequestItem::Kind::kEmbedding:
        req.items.push_back(engine::Item::Embedding(std::move(item.embedding)));
        break;
    }
  }
  return req;
}

absl::StatusOr<engine::ScoreRequest> ParseScoreLine(absl::string_view line) {
  RANKD_ASSIGN_OR_RETURN(RequestLine parsed, ParseRequestLine(line));
  return ToEngineRequest(std::move(parsed));
}

namespace {

using Json = nlohmann::json;

// The progress line of a long run (stderr, rewritten in place at most 5 times a second): lines,
// items, items/s and, when the input's size is known, the share read and the time left.
class Progress {
 public:
  Progress(size_t total_bytes, bool enabled) : total_(total_bytes), enabled_(enabled) {}

  void Update(size_t bytes, const ScoreRunStats& stats, bool final = false) {
    if (!enabled_) return;
    const auto now = std::chrono::steady_clock::now();
    if (!final && now - last_ < std::chrono::milliseconds(200)) return;
    last_ = now;
    const double secs = std::chrono::duration<double>(now - start_).count();
    const double rate = secs > 0 ? stats.items / secs : 0;
    std::string text =
        absl::StrFormat("%d lines, %d items, %.1f items/s", stats.lines, stats.items, rate);
    if (stats.failed_lines > 0) absl::StrAppendFormat(&text, ", %d failed", stats.failed_lines);
    if (total_ > 0 && bytes > 0) {
      const double frac = std::min(1.0, static_cast<double>(bytes) / total_);
      const double left = frac > 0 ? secs * (1 - frac) / frac : 0;
      text = absl::StrFormat("%3.0f%% %s, ETA %s", frac * 100, text, Duration(left));
    }
    // Pads over the end of a longer previous line.
    std::fprintf(stderr, "\r%-*s", static_cast<int>(std::max(text.size(), width_)), text.c_str());
    width_ = text.size();
    if (final) std::fprintf(stderr, "\n");
    std::fflush(stderr);
  }

 private:
  static std::string Duration(double seconds) {
    const int64_t s = static_cast<int64_t>(seconds + 0.5);
    if (s >= 3600) return absl::StrFormat("%dh%02dm", s / 3600, s / 60 % 60);
    if (s >= 60) return absl::StrFormat("%dm%02ds", s / 60, s % 60);
    return absl::StrFormat("%ds", s);
  }

  size_t total_;
  bool enabled_;
  size_t width_ = 0;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last_{};
};

// One input line on its way: its parsed request, or the error that ends it, and its items' ids
// (empty when no item has one).
struct PendingLine {
  int64_t number = 0;
  absl::StatusOr<engine::ScoreRequest> request;
  std::vector<std::string> ids = {};
};

// Parses `line` into `pending`: the engine's request and the items' ids.
void ParseInto(absl::string_view line, PendingLine* pending) {
  absl::StatusOr<RequestLine> parsed = ParseRequestLine(line);
  if (!parsed.ok()) {
    pending->request = parsed.status();
    return;
  }
  const bool any_id = std::any_of(parsed->items.begin(), parsed->items.end(),
                                  [](const RequestItem& item) { return !item.id.empty(); });
  if (any_id) {
    for (const RequestItem& item : parsed->items) pending->ids.push_back(item.id);
  }
  pending->request = ToEngineRequest(*std::move(parsed));
}

}  // namespace

ScoreRunStats ScoreStream(engine::Engine& engine, std::istream& in, std::ostream& out,
                          const ScoreStreamOptions& options) {
  ScoreRunStats stats;
  Progress bar(options.total_bytes, options.progress);
  const auto start = std::chrono::steady_clock::now();
  const size_t jobs = static_cast<size_t>(std::max(1, options.jobs));
  std::vector<PendingLine> window;
  window.reserve(jobs);
  // Scores the window's requests together (Engine::ScoreMany: one engine step holds them all),
  // then writes one output line per input line, in input order.
  auto flush = [&]() {
    std::vector<engine::ScoreRequest> requests;
    std::vector<size_t> slot;  // window index of requests[k]
    for (size_t i = 0; i < window.size(); ++i) {
      if (window[i].request.ok()) {
        requests.push_back(*std::move(window[i].request));
        slot.push_back(i);
      }
    }
    std::vector<absl::StatusOr<engine::ScoreResult>> results(window.size());
    for (size_t i = 0; i < window.size(); ++i) {
      if (!window[i].request.ok()) results[i] = window[i].request.status();
    }
    if (!requests.empty()) {
      std::vector<absl::StatusOr<engine::ScoreResult>> scored = engine.ScoreMany(requests);
      for (size_t k = 0; k < scored.size(); ++k) results[slot[k]] = std::move(scored[k]);
    }
    for (size_t i = 0; i < window.size(); ++i) {
      if (!results[i].ok()) {
        ++stats.failed_lines;
        const std::string msg = std::string(results[i].status().message());
        spdlog::error("line {}: {}", window[i].number, msg);
        out << Json{{"error", msg}}.dump() << "\n";
      } else {
        stats.items += static_cast<int64_t>(results[i]->scores.size());
        Json answer = {{"scores", results[i]->scores}};
        if (!window[i].ids.empty()) answer["ids"] = window[i].ids;  // as the request gave them
        out << answer.dump(-1, ' ', false, Json::error_handler_t::replace) << "\n";
      }
    }
    window.clear();
  };
  std::string line;
  size_t bytes = 0;
  while (std::getline(in, line)) {
    bytes += line.size() + 1;
    ++stats.lines;
    PendingLine pending{stats.lines, absl::InvalidArgumentError("empty line")};
    if (!absl::StripAsciiWhitespace(line).empty()) ParseInto(line, &pending);
    window.push_back(std::move(pending));
    if (window.size() == jobs) {
      flush();
      bar.Update(bytes, stats);
    }
  }
  flush();
  out.flush();
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  bar.Update(bytes, stats, /*final=*/true);
  return stats;
}

int RunScoreCommand(int argc, char** argv, int first) {
  FlagSet flags(
      "rankd score --model DIR [--backend cpu|cuda] [--input FILE|-] [--output FILE|-] [flags]\n"
      "Scores request lines (README.md, \"Request lines\"), e.g. {\"query\": \"q\", \"items\": "
      "[\"a\", {\"ids\": [5, 6]}]},\n"
      "and writes one line {\"scores\": [..]} (with \"ids\": [..], the items' ids in order, when "
      "any item has an \"id\"; or {\"error\": ..}) per input line.");
  EngineFlags engine_flags;
  AddEngineFlags(flags, &engine_flags);
  std::string input = "-", output = "-", log_level = "info";
  int jobs = 1;
  bool progress = false;
  flags.String("input", &input, "JSON-lines input file, - for stdin");
  flags.Int("jobs", &jobs,
            absl::StrCat("request lines scored together in one engine step (1 to ", kMaxJobs,
                         "): more keeps a GPU busy"));
  flags.Bool("progress", &progress,
             "a progress line on stderr (default: when stderr is a terminal; --no-progress: off)");
  flags.String("output", &output, "output file, - for stdout");
  flags.String("log-level", &log_level, "trace, debug, info, warn, error, off");
  if (std::optional<int> exit_code = ParseCommandFlags(flags, argc, argv, first, "rankd score")) {
    return *exit_code;
  }
  if (absl::Status s = SetUpLogging(log_level, LogFormat::kText, "rankd"); !s.ok()) {
    std::fprintf(stderr, "rankd score: --log-level: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  if (jobs < 1 || jobs > kMaxJobs) {
    spdlog::error("--jobs must be in [1, {}] (got {})", kMaxJobs, jobs);
    return 2;
  }
  if (!flags.WasSet("progress")) progress = ::isatty(STDERR_FILENO);
  engine::EngineOptions options = ToEngineOptions(engine_flags, flags);
  if (options.model_dir.empty() || options.backend.max_batch_tokens <= 0) {
    spdlog::error("{}", options.model_dir.empty()
                            ? "--model is required"
                            : absl::StrCat("--max-batch-tokens must be positive (got ",
                                           options.backend.max_batch_tokens, ")"));
    return 2;
  }
  if (absl::Status s = backend::ApplyBackendEnvironment(&options.backend); !s.ok()) {
    spdlog::error("{}", s.message());
    return 2;
  }
  auto engine = engine::Engine::Create(options, backend::CreateBackend);
  if (!engine.ok()) {
    spdlog::error("cannot load model: {}", engine.status().message());
    return 1;
  }
  std::ifstream in_file;
  std::istream* in = &std::cin;
  size_t total_bytes = 0;
  if (input != "-") {
    in_file.open(input, std::ios::binary | std::ios::ate);
    if (!in_file) {
      spdlog::error("--input {}: cannot open", input);
      return 2;
    }
    total_bytes = static_cast<size_t>(in_file.tellg());
    in_file.seekg(0);
    in = &in_file;
  }
  std::ofstream out_file;
  std::ostream* out = &std::cout;
  if (output != "-") {
    out_file.open(output, std::ios::binary | std::ios::trunc);
    if (!out_file) {
      spdlog::error("--output {}: cannot open for writing", output);
      return 2;
    }
    out = &out_file;
  }
  ScoreRunStats stats = ScoreStream(**engine, *in, *out, {total_bytes, progress, jobs});
  spdlog::info("done: {} lines, {} items, {} errors, {:.1f} items/s, {:.3f} s wall", stats.lines,
               stats.items, stats.failed_lines,
               stats.seconds > 0 ? stats.items / stats.seconds : 0.0, stats.seconds);
  if (!*out) {
    spdlog::error("writing the output failed");
    return 1;
  }
  return stats.failed_lines > 0 ? 1 : 0;
}

}  // namespace rankd::cli
