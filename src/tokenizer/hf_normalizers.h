// tokenizer.json normalizers (HF tokenizers' `normalizers` module): the text rewrite that runs
// before pre-tokenization, one class per `type` (NFC, NFD, NFKC, NFKD, Sequence) in
// hf_normalizers.cc, built from JSON by NormalizerFromJson.
#ifndef RANKD_TOKENIZER_HF_NORMALIZERS_H_
#define RANKD_TOKENIZER_HF_NORMALIZERS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "hf_json.h"

namespace rankd::tokenizer {

// Immutable once built; Normalize is thread-safe.
class Normalizer {
 public:
  virtual ~Normalizer() = default;
  // `text` must be valid UTF-8.
  virtual absl::StatusOr<std::string> Normalize(std::string text) const = 0;
};

// The normalizer object `j` found at `path` of `f`. Null gives nullptr (no normalizer); a `type`
// not listed above is an error that names it.
absl::StatusOr<std::unique_ptr<Normalizer>> NormalizerFromJson(const JsonFile& f, const Json& j,
                                                               const std::string& path);

}  // namespace rankd::tokenizer

#endif  // RANKD_TOKENIZER_HF_NORMALIZERS_H_
