// The sentencepiece shim (librankd_sentencepiece.so): the C interface of sp_processor.h over
// sentencepiece::SentencePieceProcessor. No abseil or gRPC header may be included here.
#include "sp_processor.h"

#include <sentencepiece_processor.h>

#include <cstdio>

namespace {

using sentencepiece::SentencePieceProcessor;

const SentencePieceProcessor& Sp(const void* model) {
  return *static_cast<const SentencePieceProcessor*>(model);
}

void SetError(const sentencepiece::util::Status& status, char* error, size_t error_size) {
  std::snprintf(error, error_size, "%s", status.ToString().c_str());
}

void* Load(const char* path, char* error, size_t error_size) {
  auto* sp = new SentencePieceProcessor();
  const auto status = sp->Load(path);
  if (status.ok()) return sp;
  SetError(status, error, error_size);
  delete sp;
  return nullptr;
}

void Unload(void* model) { delete static_cast<SentencePieceProcessor*>(model); }

int Encode(const void* model, const char* text, size_t text_size,
           void (*sink)(void* sink_ctx, const int* ids, size_t n), void* sink_ctx, char* error,
           size_t error_size) {
  std::vector<int> ids;
  const auto status = Sp(model).Encode(std::string_view(text, text_size), &ids);
  if (!status.ok()) {
    SetError(status, error, error_size);
    return 1;
  }
  sink(sink_ctx, ids.data(), ids.size());
  return 0;
}

int PieceToId(const void* model, const char* piece, size_t piece_size) {
  return Sp(model).PieceToId(std::string_view(piece, piece_size));
}
int IsUnknown(const void* model, int id) { return Sp(model).IsUnknown(id) ? 1 : 0; }
int BosId(const void* model) { return Sp(model).bos_id(); }
int VocabSize(const void* model) { return Sp(model).GetPieceSize(); }

}  // namespace

extern "C" __attribute__((visibility("default"))) const RankdSpApi RankdSentencePieceApi = {
    Load, Unload, Encode, PieceToId, IsUnknown, BosId, VocabSize};
