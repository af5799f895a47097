// tokenizer.json post-processors (HF tokenizers' `processors` module): the special tokens that
// Encode(…, add_special_tokens=true) puts around a single sequence. Every supported `type`
// (TemplateProcessing, ByteLevel, Sequence) reduces to ids before and after the text's ids.
#ifndef RANKD_TOKENIZER_HF_POST_PROCESSORS_H_
#define RANKD_TOKENIZER_HF_POST_PROCESSORS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "hf_json.h"

namespace rankd::tokenizer {

// The ids that Encode(…, add_special_tokens=true) puts around the text's ids.
struct Decorations {
  std::vector<int32_t> prefix;
  std::vector<int32_t> suffix;
};

// The post-processor object `j` found at `path` of `f`. Null gives no decorations; a `type` not
// listed above is an error that names it.
absl::StatusOr<Decorations> PostProcessorFromJson(const JsonFile& f, const Json& j,
                                                  const std::string& path);

}  // namespace rankd::tokenizer

#endif  // RANKD_TOKENIZER_HF_POST_PROCESSORS_H_
