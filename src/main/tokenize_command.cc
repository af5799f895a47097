#include "tokenize_command.h"

#include <cstdio>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "engine_flags.h"
#include "nlohmann/json.hpp"
#include "rankd/common/logging.h"
#include "spdlog/spdlog.h"

namespace rankd::cli {

using Json = nlohmann::json;

absl::StatusOr<std::string> ParseTokenizeLine(absl::string_view line) {
  const Json j = Json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError("not valid JSON");
  if (j.is_string()) return j.get<std::string>();
  if (!j.is_object()) {
    return absl::InvalidArgumentError("must be a JSON string or an object {\"text\": string}");
  }
  for (const auto& [key, value] : j.items()) {
    if (key != "text") {
      return absl::InvalidArgumentError(
          absl::StrCat(Json(key).dump(-1, ' ', false, Json::error_handler_t::replace),
                       ": unknown member (the object is {\"text\": string})"));
    }
  }
  const auto text = j.find("text");
  if (text == j.end() || !text->is_string()) {
    return absl::InvalidArgumentError("text: required, a string");
  }
  return text->get<std::string>();
}

TokenizeRunStats TokenizeStream(const engine::TextEncoder& encoder, engine::TextTemplate t,
                                bool add_special_tokens, std::istream& in, std::ostream& out) {
  TokenizeRunStats stats;
  std::string line;
  while (std::getline(in, line)) {
    ++stats.lines;
    absl::StatusOr<std::vector<int32_t>> ids = absl::InvalidArgumentError("empty line");
    if (!absl::StripAsciiWhitespace(line).empty()) {
      absl::StatusOr<std::string> text = ParseTokenizeLine(line);
      ids = text.ok() ? encoder.Encode(*text, t, add_special_tokens) : text.status();
    }
    if (ids.ok()) {
      out << Json{{"ids", *ids}}.dump() << "\n";
      continue;
    }
    ++stats.failed_lines;
    const std::string msg(ids.status().message());
    spdlog::error("line {}: {}", stats.lines, msg);
    out << Json{{"error", msg}}.dump(-1, ' ', false, Json::error_handler_t::replace) << "\n";
  }
  out.flush();
  return stats;
}

int RunTokenizeCommand(int argc, char** argv, int first) {
  FlagSet flags(
      "rankd tokenize --model DIR [--template none|query|item] [--special-tokens] [flags]\n"
      "Reads JSON lines on stdin, each a JSON string or {\"text\": string}, and writes one line\n"
      "{\"ids\": [..]} (or {\"error\": ..}) per input line: the ids the engine feeds the model.\n"
      "--template query --special-tokens gives a Score call's prefix, --template item an item's.");
  EngineFlags model_flags;
  AddModelFlags(flags, &model_flags);
  std::string template_name = "none", log_level = "info";
  bool special_tokens = false;
  flags.String("template", &template_name,
               "wrap each text in the model's template first: none, query or item");
  flags.Bool("special-tokens", &special_tokens,
             "add the tokenizer's special tokens (a BOS, a post-processor's template); items "
             "never get them, so not with --template item");
  flags.String("log-level", &log_level, "trace, debug, info, warn, error, off");
  if (std::optional<int> exit_code =
          ParseCommandFlags(flags, argc, argv, first, "rankd tokenize")) {
    return *exit_code;
  }
  if (absl::Status s = SetUpLogging(log_level, LogFormat::kText, "rankd"); !s.ok()) {
    std::fprintf(stderr, "rankd tokenize: --log-level: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  const absl::StatusOr<engine::TextTemplate> t = engine::ParseTextTemplate(template_name);
  absl::Status usage =
      t.ok() ? engine::TextEncoder::CheckSpecialTokens(*t, special_tokens)
             : absl::InvalidArgumentError(absl::StrCat("--template: ", t.status().message()));
  const engine::EngineOptions options = ToEngineOptions(model_flags, flags);
  if (usage.ok() && options.model_dir.empty()) {
    usage = absl::InvalidArgumentError("--model is required");
  }
  if (!usage.ok()) {
    spdlog::error("{}", usage.message());
    return 2;
  }
  auto encoder = engine::TextEncoder::Load(options);
  if (!encoder.ok()) {
    spdlog::error("cannot load the tokenizer: {}", encoder.status().message());
    return 1;
  }
  const TokenizeRunStats stats = TokenizeStream(**encoder, *t, special_tokens, std::cin, std::cout);
  if (!std::cout) {
    spdlog::error("writing the output failed");
    return 1;
  }
  spdlog::debug("done: {} lines, {} errors", stats.lines, stats.failed_lines);
  return stats.failed_lines > 0 ? 1 : 0;
}

}  // namespace rankd::cli
