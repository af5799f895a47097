// Fuzz targets fuzz_tokenizer_json and fuzz_tokenizer_sentencepiece: arbitrary bytes through the
// tokenizer of test model RANKD_FUZZ_MODEL (llama3-tokjson-cls: tokenizer.json BPE; llama-cls:
// sentencepiece), as the worker encodes a query (with special tokens) and an item (without).
// Ids or an error (bad UTF-8); never a crash, and every id within the vocabulary.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>

#include "rankd/tokenizer/tokenizer.h"

namespace {

const rankd::tokenizer::Tokenizer& Loaded() {
  static const std::unique_ptr<rankd::tokenizer::Tokenizer> tokenizer = [] {
    auto t =
        rankd::tokenizer::LoadTokenizer(RANKD_SOURCE_DIR "/tests/data/models/" RANKD_FUZZ_MODEL);
    if (!t.ok()) std::abort();
    return std::move(t).value();
  }();
  return *tokenizer;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const rankd::tokenizer::Tokenizer& tokenizer = Loaded();
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  for (bool special : {true, false}) {
    auto ids = tokenizer.Encode(text, special);
    if (!ids.ok()) continue;
    for (int32_t id : *ids) {
      if (id < 0 || id >= tokenizer.vocab_size()) std::abort();
    }
  }
  return 0;
}
