#include <memory>

#include "absl/strings/str_cat.h"
#include "rankd/tokenizer/tokenizer.h"
#include "sp_processor.h"

namespace rankd::tokenizer {
namespace {

class SentencePieceTokenizer final : public Tokenizer {
 public:
  SentencePieceTokenizer(std::unique_ptr<SpProcessor> sp, bool add_bos, std::string path)
      : sp_(std::move(sp)), add_bos_(add_bos && sp_->bos_id() >= 0), path_(std::move(path)) {}

  absl::StatusOr<std::vector<int32_t>> Encode(absl::string_view text,
                                              bool add_special_tokens) const override {
    std::vector<int> ids;
    std::string error;
    if (!sp_->Encode(std::string_view(text.data(), text.size()), &ids, &error)) {
      return absl::InternalError(absl::StrCat(path_, ": sentencepiece encode failed: ", error));
    }
    std::vector<int32_t> out;
    out.reserve(ids.size() + 1);
    if (add_special_tokens && add_bos_) out.push_back(sp_->bos_id());
    out.insert(out.end(), ids.begin(), ids.end());
    return out;
  }

  absl::StatusOr<int32_t> PieceToId(absl::string_view piece) const override {
    const int id = sp_->PieceToId(std::string_view(piece.data(), piece.size()));
    if (sp_->IsUnknown(id)) {
      return absl::NotFoundError(absl::StrCat("piece '", piece, "' is not in ", path_));
    }
    return id;
  }

  int vocab_size() const override { return sp_->vocab_size(); }
  std::optional<int32_t> bos_id() const override {
    if (!add_bos_) return std::nullopt;
    return sp_->bos_id();
  }
  absl::string_view kind() const override { return "sentencepiece"; }

 private:
  std::unique_ptr<SpProcessor> sp_;
  bool add_bos_;
  std::string path_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadSentencePiece(const std::string& path,
                                                              bool add_bos) {
  std::string error;
  auto sp = LoadSpProcessor(path, &error);
  if (sp == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": cannot load sentencepiece model: ", error));
  }
  return std::make_unique<SentencePieceTokenizer>(std::move(sp), add_bos, path);
}

}  // namespace rankd::tokenizer
