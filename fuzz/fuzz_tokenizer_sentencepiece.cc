// Fuzz target: arbitrary bytes through the sentencepiece tokenizer of a test model (llama-cls), as
// the worker encodes a query (with special tokens) and an item (without). Ids or an error (bad
// UTF-8); never a crash, and every id within the vocabulary.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>

#include "rankd/tokenizer/tokenizer.h"

namespace {

const rankd::tokenizer::Tokenizer& Loaded() {
  static const std::unique_ptr<rankd::tokenizer::Tokenizer> tokenizer = [] {
    auto t = rankd::tokenizer::LoadTokenizer(RANKD_SOURCE_DIR "/tests/data/models/llama-cls");
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
