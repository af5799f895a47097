// Ready prompt settings for model families whose scoring prompt is fixed by their authors.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "rankd/engine/engine.h"

namespace rankd::engine {
namespace {

// Braces in free text would read as template fields: `{` and `}` become `{{` and `}}`.
std::string EscapeBraces(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    out += c;
    if (c == '{' || c == '}') out += c;
  }
  return out;
}

// Qwen3-Reranker's prompt (its model card's format_instruction with the chat template around
// it), split where the query ends so that the long shared prefix is encoded once per query.
ModelSettings Qwen3Reranker(absl::string_view instruction) {
  ModelSettings s;
  s.query_template = absl::StrCat(
      "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query "
      "and the Instruct provided. Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n"
      "<|im_start|>user\n<Instruct>: ",
      EscapeBraces(instruction), "\n<Query>: {query}\n");
  s.item_template = "<Document>: {item}<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n";
  s.head = "yes_no:yes,no";
  return s;
}

// bge-reranker-v2-gemma's prompt, as FlagEmbedding builds it (FlagEmbedding's LLM reranker,
// get_inputs / _get_inputs, the same in its model card): [bos] "A: {query}" "\n" "B: {passage}"
// "\n" prompt, each part tokenized on its own without special tokens, and the score is the logit
// of "Yes" (tokenizer('Yes')['input_ids'][0]) at the last position. Split after the query's "\n"
// so that the query part is encoded once; the BOS comes from encoding the query with special
// tokens. (Here each template is tokenized whole, so a merge across "\n" would differ from the
// part-by-part ids; Gemma's tokenizer has "\n" as a piece of its own.)
ModelSettings BgeRerankerV2Gemma() {
  ModelSettings s;
  s.query_template = "A: {query}\n";
  s.item_template =
      "B: {item}\nGiven a query A and a passage B, determine whether the passage contains an "
      "answer to the query by providing a prediction of either 'Yes' or 'No'.";
  s.head = "logit:Yes";
  return s;
}

}  // namespace

std::vector<std::string> PresetNames() { return {"qwen3-reranker", "bge-reranker-v2-gemma"}; }

absl::StatusOr<ModelSettings> ApplyPreset(const ModelSettings& s) {
  if (!s.preset) {
    if (s.instruction) {
      return absl::InvalidArgumentError(
          absl::StrCat("instruction: set without a preset that uses it (presets: ",
                       absl::StrJoin(PresetNames(), ", "), ")"));
    }
    return s;
  }
  ModelSettings base;
  if (*s.preset == "qwen3-reranker") {
    base = Qwen3Reranker(s.instruction.value_or(kQwen3RerankerInstruction));
  } else if (*s.preset == "bge-reranker-v2-gemma") {
    if (s.instruction) {
      return absl::InvalidArgumentError(
          "instruction: preset 'bge-reranker-v2-gemma' has a fixed prompt and takes none");
    }
    base = BgeRerankerV2Gemma();
  } else {
    return absl::InvalidArgumentError(absl::StrCat("preset: '", *s.preset, "' is unknown (",
                                                   absl::StrJoin(PresetNames(), ", "), ")"));
  }
  base.preset = s.preset;
  base.instruction = s.instruction;
  ModelSettings explicit_fields;
  explicit_fields.query_template = s.query_template;
  explicit_fields.item_template = s.item_template;
  explicit_fields.head = s.head;
  return base.MergedWith(explicit_fields);
}

}  // namespace rankd::engine
