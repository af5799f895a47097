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
#include "rankd/common/logging.h"
#include "rankd/common/status.h"
#include "spdlog/spdlog.h"

namespace rankd::cli {
namespace {

using Json = nlohmann::json;

absl::Status FieldError(absl::string_view field, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", why));
}

absl::StatusOr<std::vector<int32_t>> ParseIds(const Json& j, const std::string& field) {
  if (!j.is_array()) return FieldError(field, "must be a list of token ids");
  std::vector<int32_t> ids;
  ids.reserve(j.size());
  for (size_t i = 0; i < j.size(); ++i) {
    if (!j[i].is_number_integer() || j[i].get<int64_t>() < 0 || j[i].get<int64_t>() > INT32_MAX) {
      return FieldError(absl::StrCat(field, "[", i, "]"), "must be a non-negative integer");
    }
    ids.push_back(j[i].get<int32_t>());
  }
  return ids;
}

absl::StatusOr<std::vector<float>> ParseEmbedding(const Json& j, const std::string& field) {
  if (!j.is_array() || j.empty()) return FieldError(field, "must be a non-empty list of rows");
  std::vector<float> values;
  size_t width = 0;
  for (size_t r = 0; r < j.size(); ++r) {
    const Json& row = j[r];
    const std::string rf = absl::StrCat(field, "[", r, "]");
    if (!row.is_array() || row.empty())
      return FieldError(rf, "must be a non-empty list of numbers");
    if (r == 0) width = row.size();
    if (row.size() != width) {
      return FieldError(rf, absl::StrCat("has ", row.size(), " values, row 0 has ", width));
    }
    for (size_t c = 0; c < row.size(); ++c) {
      if (!row[c].is_number()) return FieldError(absl::StrCat(rf, "[", c, "]"), "must be a number");
      values.push_back(row[c].get<float>());
    }
  }
  return values;
}

}  // namespace

absl::StatusOr<engine::ScoreRequest> ParseScoreLine(absl::string_view line) {
  Json j = Json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError("not valid JSON");
  if (!j.is_object()) return absl::InvalidArgumentError("not a JSON object");
  engine::ScoreRequest req;
  auto q = j.find("query");
  auto qi = j.find("query_ids");
  if (qi != j.end()) {
    if (q != j.end()) return FieldError("query_ids", "give either query or query_ids, not both");
    RANKD_ASSIGN_OR_RETURN(auto ids, ParseIds(*qi, "query_ids"));
    req.query_ids = std::move(ids);
  } else if (q != j.end()) {
    if (!q->is_string()) return FieldError("query", "must be a string");
    req.query = q->get<std::string>();
  } else {
    return FieldError("query", "is missing (or give query_ids)");
  }
  auto items = j.find("items");
  if (items == j.end()) return FieldError("items", "is missing");
  if (!items->is_array() || items->empty()) return FieldError("items", "must be a non-empty list");
  for (size_t i = 0; i < items->size(); ++i) {
    const Json& it = (*items)[i];
    const std::string f = absl::StrCat("items[", i, "]");
    if (it.is_string()) {
      req.items.push_back(engine::Item::Text(it.get<std::string>()));
    } else if (it.is_object() && it.size() == 1 && it.contains("text")) {
      if (!it["text"].is_string()) return FieldError(f + ".text", "must be a string");
      req.items.push_back(engine::Item::Text(it["text"].get<std::string>()));
    } else if (it.is_object() && it.size() == 1 && it.contains("ids")) {
      RANKD_ASSIGN_OR_RETURN(auto ids, ParseIds(it["ids"], f + ".ids"));
      req.items.push_back(engine::Item::Ids(std::move(ids)));
    } else if (it.is_object() && it.size() == 1 && it.contains("embedding")) {
      RANKD_ASSIGN_OR_RETURN(auto values, ParseEmbedding(it["embedding"], f + ".embedding"));
      req.items.push_back(engine::Item::Embedding(std::move(values)));
    } else {
      return FieldError(f, "must be a string or an object with one of text, ids, embedding");
    }
  }
  if (auto s = j.find("apply_sigmoid"); s != j.end()) {
    if (!s->is_boolean()) return FieldError("apply_sigmoid", "must be true or false");
    req.apply_sigmoid = s->get<bool>();
  }
  return req;
}

namespace {

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
      "Scores JSON lines {\"query\": str, \"items\": [str | {\"text\"} | {\"ids\"} | "
      "{\"embedding\"}]} and writes one line {\"scores\": [..]} per input line.");
  EngineFlags engine_flags;
  AddEngineFlags(flags, &engine_flags);
  std::string input = "-", output = "-", log_level = "info";
  flags.String("input", &input, "JSON-lines input file, - for stdin");
  flags.String("output", &output, "output file, - for stdout");
  flags.String("log-level", &log_level, "trace, debug, info, warn, error, off");
  if (absl::Status s = flags.Parse(argc, argv, first, nullptr); !s.ok()) {
    if (absl::IsCancelled(s)) return 0;
    std::fprintf(stderr, "rankd score: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  if (absl::Status s = SetUpLogging(log_level, LogFormat::kText, "rankd"); !s.ok()) {
    std::fprintf(stderr, "rankd score: --log-level: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  const engine::EngineOptions options = ToEngineOptions(engine_flags, flags);
  if (options.model_dir.empty() || options.backend.max_batch_tokens <= 0) {
    spdlog::error("{}", options.model_dir.empty()
                            ? "--model is required"
                            : absl::StrCat("--max-batch-tokens must be positive (got ",
                                           options.backend.max_batch_tokens, ")"));
    return 2;
  }
  auto engine = engine::Engine::Create(options);
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
