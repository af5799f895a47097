// The identity of the model in a directory: what fixes its scores besides the request and rankd's
// own settings, read in milliseconds. `rankd serve` records it at start (model.identity) and every
// worker checks it before and after loading, so that a directory rewritten while serving is
// never served beside the model it replaced (and the result cache's keys carry it).
#ifndef RANKD_MODEL_IDENTITY_H_
#define RANKD_MODEL_IDENTITY_H_

#include <string>

#include "absl/status/statusor.h"

namespace rankd::model {

// "sha256:" and 16 hex digits of SHA-256 over, each named and length-prefixed:
// - config.json, rankd.yaml, the tokenizer's files (tokenizer.json, tokenizer_config.json,
//   tokenizer.model) and model.safetensors.index.json, whole, those present;
// - each .safetensors file's size, its header (the tensors' names, dtypes, shapes and offsets)
//   and kIdentitySamples samples of kIdentitySampleBytes spread evenly over its data: not the
//   whole weights (gigabytes), yet weights rewritten with the same shapes (a fine-tune) change
//   every sample.
// Errors: a file that cannot be read, a .safetensors file too short for its header.
absl::StatusOr<std::string> ModelIdentity(const std::string& dir);

inline constexpr int kIdentitySamples = 16;
inline constexpr size_t kIdentitySampleBytes = 64 << 10;

}  // namespace rankd::model

#endif  // RANKD_MODEL_IDENTITY_H_
