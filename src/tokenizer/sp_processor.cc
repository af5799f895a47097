// The sentencepiece shim (librankd_sentencepiece.so): see sp_processor.h. No abseil or gRPC
// header may be included here.
#include "sp_processor.h"

#include <sentencepiece_processor.h>

namespace rankd::tokenizer {
namespace {

class SpProcessorImpl final : public SpProcessor {
 public:
  bool Load(const char* path, std::string* error) {
    const auto status = sp_.Load(path);
    if (!status.ok()) *error = status.ToString();
    return status.ok();
  }

  bool Encode(std::string_view text, std::vector<int>* ids, std::string* error) const override {
    const auto status = sp_.Encode(text, ids);
    if (!status.ok()) *error = status.ToString();
    return status.ok();
  }
  int PieceToId(std::string_view piece) const override { return sp_.PieceToId(piece); }
  bool IsUnknown(int id) const override { return sp_.IsUnknown(id); }
  int bos_id() const override { return sp_.bos_id(); }
  int vocab_size() const override { return sp_.GetPieceSize(); }

 private:
  sentencepiece::SentencePieceProcessor sp_;
};

}  // namespace
}  // namespace rankd::tokenizer

extern "C" __attribute__((visibility("default"))) rankd::tokenizer::SpProcessor*
RankdSentencePieceLoad(const char* path, std::string* error) {
  auto* sp = new rankd::tokenizer::SpProcessorImpl();
  if (!sp->Load(path, error)) {
    delete sp;
    return nullptr;
  }
  return sp;
}
