#include "score_command.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>

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

class Progress {
 public:
  Progress(size_t total_bytes, bool enabled) : total_(total_bytes), enabled_(enabled) {}

  void Update(size_t bytes, int64_t lines, int64_t items, bool final = false) {
    if (!enabled_) return;
    const auto now = std::chrono::steady_clock::now();
    if (!final && now - last_ < std::chrono::milliseconds(200)) return;
    last_ = now;
    const double secs = std::chrono::duration<double>(now - start_).count();
    const double rate = secs > 0 ? items / secs : 0;
    if (total_ > 0) {
      const double frac = std::min(1.0, static_cast<double>(bytes) / total_);
      const int width = 30, filled = static_cast<int>(frac * width);
      std::fprintf(stderr, "\r[%s%s] %3.0f%% %lld lines, %.1f items/s ",
                   std::string(filled, '#').c_str(), std::string(width - filled, ' ').c_str(),
                   frac * 100, static_cast<long long>(lines), rate);
    } else {
      std::fprintf(stderr, "\r%lld lines, %.1f items/s ", static_cast<long long>(lines), rate);
    }
    if (final) std::fprintf(stderr, "\n");
    std::fflush(stderr);
  }

 private:
  size_t total_;
  bool enabled_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last_{};
};

}  // namespace

ScoreRunStats ScoreStream(engine::Engine& engine, std::istream& in, std::ostream& out,
                          size_t total_bytes, bool progress) {
  ScoreRunStats stats;
  Progress bar(total_bytes, progress);
  const auto start = std::chrono::steady_clock::now();
  std::string line;
  size_t bytes = 0;
  while (std::getline(in, line)) {
    bytes += line.size() + 1;
    ++stats.lines;
    if (absl::StripAsciiWhitespace(line).empty()) {
      out << Json{{"error", "empty line"}}.dump() << "\n";
      spdlog::error("line {}: empty line", stats.lines);
      ++stats.failed_lines;
      continue;
    }
    auto result = [&]() -> absl::StatusOr<engine::ScoreResult> {
      RANKD_ASSIGN_OR_RETURN(auto req, ParseScoreLine(line));
      return engine.Score(req);
    }();
    if (!result.ok()) {
      ++stats.failed_lines;
      const std::string msg = std::string(result.status().message());
      spdlog::error("line {}: {}", stats.lines, msg);
      out << Json{{"error", msg}}.dump() << "\n";
    } else {
      stats.items += static_cast<int64_t>(result->scores.size());
      out << Json{{"scores", result->scores}}.dump() << "\n";
    }
    bar.Update(bytes, stats.lines, stats.items);
  }
  out.flush();
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  bar.Update(bytes, stats.lines, stats.items, /*final=*/true);
  return stats;
}

int RunScoreCommand(int argc, char** argv, int first) {
  FlagSet flags(
      "rankd score --model DIR [--backend cpu|cuda] [--input FILE|-] [--output FILE|-] [flags]\n"
      "Scores request lines (README.md, \"Request lines\"), e.g. {\"query\": \"q\", \"items\": "
      "[\"a\", {\"ids\": [5, 6]}]},\n"
      "and writes one line {\"scores\": [..]} (or {\"error\": ..}) per input line.");
  EngineFlags engine_flags;
  AddEngineFlags(flags, &engine_flags);
  std::string input = "-", output = "-", log_level = "info";
  flags.String("input", &input, "JSON-lines input file, - for stdin");
  flags.String("output", &output, "output file, - for stdout");
  flags.String("log-level", &log_level, "trace, debug, info, warn, error, off");
  if (std::optional<int> exit_code = ParseCommandFlags(flags, argc, argv, first, "rankd score")) {
    return *exit_code;
  }
  if (absl::Status s = SetUpLogging(log_level, LogFormat::kText, "rankd"); !s.ok()) {
    std::fprintf(stderr, "rankd score: --log-level: %s\n", std::string(s.message()).c_str());
    return 2;
  }
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
  const bool progress = ::isatty(STDERR_FILENO) && total_bytes > (64 << 10);
  ScoreRunStats stats = ScoreStream(**engine, *in, *out, total_bytes, progress);
  spdlog::info("scored {} items on {} lines in {:.3f} s ({:.1f} items/s), {} failed lines",
               stats.items, stats.lines, stats.seconds,
               stats.seconds > 0 ? stats.items / stats.seconds : 0.0, stats.failed_lines);
  if (!*out) {
    spdlog::error("writing the output failed");
    return 1;
  }
  return stats.failed_lines > 0 ? 1 : 0;
}

}  // namespace rankd::cli
