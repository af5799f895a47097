#include "hf_normalizers.h"

#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "hf_unicode.h"
#include "rankd/common/status.h"

namespace rankd::tokenizer {
namespace {

// NFC, NFD, NFKC, NFKD.
class UnicodeNormalizer final : public Normalizer {
 public:
  explicit UnicodeNormalizer(unicode::Normalizer impl) : impl_(impl) {}
  absl::StatusOr<std::string> Normalize(std::string text) const override {
    return impl_.Normalize(std::move(text));
  }

 private:
  unicode::Normalizer impl_;
};

class SequenceNormalizer final : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> parts)
      : parts_(std::move(parts)) {}
  absl::StatusOr<std::string> Normalize(std::string text) const override {
    for (const auto& p : parts_) {
      RANKD_ASSIGN_OR_RETURN(text, p->Normalize(std::move(text)));
    }
    return text;
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Normalizer>> NormalizerFromJson(const JsonFile& f, const Json& j,
                                                               const std::string& path) {
  if (j.is_null()) return nullptr;
  RANKD_ASSIGN_OR_RETURN(const std::string type, TypeOf(f, j, path));
  using Form = unicode::Normalizer::Form;
  std::optional<Form> form;
  if (type == "NFC") form = Form::kNfc;
  if (type == "NFD") form = Form::kNfd;
  if (type == "NFKC") form = Form::kNfkc;
  if (type == "NFKD") form = Form::kNfkd;
  if (form) {
    RANKD_ASSIGN_OR_RETURN(auto impl, unicode::Normalizer::Create(*form));
    return std::make_unique<UnicodeNormalizer>(impl);
  }
  if (type == "Sequence") {
    const std::string list_path = JsonFile::Join(path, "normalizers");
    auto it = j.find("normalizers");
    if (it == j.end() || !it->is_array()) return f.Error(list_path, "must be a list");
    std::vector<std::unique_ptr<Normalizer>> parts;
    for (size_t i = 0; i < it->size(); ++i) {
      RANKD_ASSIGN_OR_RETURN(auto part,
                             NormalizerFromJson(f, (*it)[i], absl::StrCat(list_path, "[", i, "]")));
      if (part != nullptr) parts.push_back(std::move(part));
    }
    return std::make_unique<SequenceNormalizer>(std::move(parts));
  }
  return f.Error(
      JsonFile::Join(path, "type"),
      absl::StrCat("normalizer '", type, "' is not supported (NFC, NFD, NFKC, NFKD, Sequence)"));
}

}  // namespace rankd::tokenizer
