// `rankd tokenize`: the token ids of JSON-lines texts, as the engine encodes them (its
// TextEncoder: the model's tokenizer, templates and special-token rules), without the weights.
#ifndef RANKD_MAIN_TOKENIZE_COMMAND_H_
#define RANKD_MAIN_TOKENIZE_COMMAND_H_

#include <cstdint>
#include <istream>
#include <ostream>
#include <string>

#include "absl/status/statusor.h"
#include "rankd/engine/text_encoder.h"

namespace rankd::cli {

// The text of one input line: a JSON string, or an object {"text": string} (other members are
// refused). Errors say what is wrong ("not valid JSON", "text: must be a string").
absl::StatusOr<std::string> ParseTokenizeLine(absl::string_view line);

struct TokenizeRunStats {
  int64_t lines = 0;
  int64_t failed_lines = 0;
};

// Encodes every line of `in` in template `t` (with the tokenizer's special tokens when
// `add_special_tokens`), writing one JSON line per input line to `out`, in input order:
// {"ids": [..]} or {"error": ".."}; errors also go to the log with the line number.
TokenizeRunStats TokenizeStream(const engine::TextEncoder& encoder, engine::TextTemplate t,
                                bool add_special_tokens, std::istream& in, std::ostream& out);

// `rankd tokenize` with its flags in argv[first..argc).
int RunTokenizeCommand(int argc, char** argv, int first);

}  // namespace rankd::cli

#endif  // RANKD_MAIN_TOKENIZE_COMMAND_H_
