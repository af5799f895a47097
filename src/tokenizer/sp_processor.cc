// No abseil or gRPC header may be included here: see sp_processor.h.
#include "sp_processor.h"

#include <sentencepiece_processor.h>

namespace rankd::tokenizer {

struct SpProcessor::Impl {
  sentencepiece::SentencePieceProcessor sp;
};

SpProcessor::SpProcessor(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SpProcessor::~SpProcessor() = default;

std::unique_ptr<SpProcessor> SpProcessor::Load(const std::string& path, std::string* error) {
  auto impl = std::make_unique<Impl>();
  const auto status = impl->sp.Load(path);
  if (!status.ok()) {
    *error = status.ToString();
    return nullptr;
  }
  return std::unique_ptr<SpProcessor>(new SpProcessor(std::move(impl)));
}

bool SpProcessor::Encode(std::string_view text, std::vector<int>* ids, std::string* error) const {
  const auto status = impl_->sp.Encode(text, ids);
  if (!status.ok()) {
    *error = status.ToString();
    return false;
  }
  return true;
}

int SpProcessor::PieceToId(std::string_view piece) const { return impl_->sp.PieceToId(piece); }
bool SpProcessor::IsUnknown(int id) const { return impl_->sp.IsUnknown(id); }
int SpProcessor::bos_id() const { return impl_->sp.bos_id(); }
int SpProcessor::vocab_size() const { return impl_->sp.GetPieceSize(); }

}  // namespace rankd::tokenizer
