// tokenizer.json pre-tokenizers (HF tokenizers' `pre_tokenizers` module): cut normalized text into
// the words that the model merges, one class per `type` (Split, Metaspace, ByteLevel, Sequence) in
// hf_pre_tokenizers.cc, built from JSON by PreTokenizerFromJson; and the byte-level alphabet that
// ByteLevel maps words into.
#ifndef RANKD_TOKENIZER_HF_PRE_TOKENIZERS_H_
#define RANKD_TOKENIZER_HF_PRE_TOKENIZERS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "hf_json.h"

namespace rankd::tokenizer {

// A pre-tokenizer replaces each piece of text by the words it cuts it into (none empty).
// Immutable once built; Apply is thread-safe.
class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Every piece must be valid UTF-8. *first_at_origin says whether pieces->front() starts at byte 0
  // of the text given to Encode (HF's `offsets_original().0 == 0`, which Metaspace's
  // prepend_scheme "first" tests); a step that drops the start of that piece clears it.
  virtual absl::Status Apply(std::vector<std::string>* pieces, bool* first_at_origin) const = 0;
};

// The pre-tokenizer object `j` found at `path` of `f`. Null gives nullptr (each piece is one
// word); a `type` not listed above is an error that names it. Sets *byte_level when a ByteLevel
// step is present.
absl::StatusOr<std::unique_ptr<PreTokenizer>> PreTokenizerFromJson(const JsonFile& f, const Json& j,
                                                                   const std::string& path,
                                                                   bool* byte_level);

// `text` in GPT-2's reversible byte -> printable character map, each character UTF-8 encoded:
// printable Latin-1 bytes map to themselves, the others to U+0100 onward (space -> "Ġ",
// '\n' -> "Ċ").
std::string ToByteLevel(absl::string_view text);

}  // namespace rankd::tokenizer

#endif  // RANKD_TOKENIZER_HF_PRE_TOKENIZERS_H_
