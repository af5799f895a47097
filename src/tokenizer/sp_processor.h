// A thin wrapper over sentencepiece that exposes only std types. Debian's sentencepiece header
// defines its own `absl::string_view`, which clashes with abseil's: so sentencepiece is included
// by sp_processor.cc alone, and that file includes no abseil or gRPC header.
#ifndef RANKD_TOKENIZER_SP_PROCESSOR_H_
#define RANKD_TOKENIZER_SP_PROCESSOR_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace rankd::tokenizer {

class SpProcessor {
 public:
  // Returns nullptr and sets *error on failure.
  static std::unique_ptr<SpProcessor> Load(const std::string& path, std::string* error);
  ~SpProcessor();

  // Encodes without BOS/EOS. Returns false and sets *error on failure. Thread-safe.
  bool Encode(std::string_view text, std::vector<int>* ids, std::string* error) const;
  int PieceToId(std::string_view piece) const;  // unk id when absent
  bool IsUnknown(int id) const;
  int bos_id() const;  // -1 when the model has none
  int vocab_size() const;

 private:
  struct Impl;
  explicit SpProcessor(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace rankd::tokenizer

#endif  // RANKD_TOKENIZER_SP_PROCESSOR_H_
