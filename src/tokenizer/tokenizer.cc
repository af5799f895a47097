// The Tokenizer methods common to both kinds (EncodeBounded, EncodeBatch) and the loaders' choice.
#include "rankd/tokenizer/tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <mutex>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "hf_tokenizer.h"
#include "rankd/common/parallel.h"
#include "rankd/common/status.h"

namespace rankd::tokenizer {
size_t NextWordCut(absl::string_view text, size_t from) {
  for (size_t i = std::max<size_t>(from, 1); i < text.size(); ++i) {
    if (text[i] == ' ' && absl::ascii_isalnum(static_cast<unsigned char>(text[i - 1]))) return i;
  }
  return absl::string_view::npos;
}

absl::StatusOr<std::vector<int32_t>> Tokenizer::EncodeBounded(absl::string_view text,
                                                              int64_t max_tokens) const {
  const int64_t limit = std::max<int64_t>(max_tokens, 1);
  size_t want = static_cast<size_t>(limit + 1) * kBoundedFirstBytesPerToken;
  while (true) {
    const size_t cut = want < text.size() ? NextWordCut(text, want) : absl::string_view::npos;
    if (cut == absl::string_view::npos) return Encode(text, /*add_special_tokens=*/false);
    RANKD_ASSIGN_OR_RETURN(std::vector<int32_t> ids,
                           Encode(text.substr(0, cut), /*add_special_tokens=*/false));
    if (static_cast<int64_t>(ids.size()) > limit) return ids;
    want = cut * 2;
  }
}

absl::StatusOr<std::vector<std::vector<int32_t>>> Tokenizer::EncodeBatch(
    absl::Span<const std::string> texts, bool add_special_tokens, int num_threads,
    int64_t max_tokens) const {
  std::vector<std::vector<int32_t>> out(texts.size());
  std::vector<absl::Status> errors(texts.size());
  ParallelFor(texts.size(), num_threads, [&](size_t i) {
    auto ids =
        max_tokens > 0 ? EncodeBounded(texts[i], max_tokens) : Encode(texts[i], add_special_tokens);
    if (ids.ok()) {
      out[i] = *std::move(ids);
    } else {
      errors[i] = ids.status();
    }
  });
  for (size_t i = 0; i < errors.size(); ++i) {
    if (!errors[i].ok()) return Annotate(errors[i], absl::StrCat("text ", i));
  }
  return out;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizer(absl::string_view model_dir) {
  const std::string json_path = absl::StrCat(model_dir, "/tokenizer.json");
  const std::string sp_path = absl::StrCat(model_dir, "/tokenizer.model");
  if (std::filesystem::exists(json_path)) {
    return LoadHfTokenizer(json_path, absl::StrCat(model_dir, "/tokenizer_config.json"));
  }
  if (std::filesystem::exists(sp_path)) return LoadSentencePiece(sp_path, /*add_bos=*/true);
  return absl::NotFoundError(
      absl::StrCat(model_dir, ": no tokenizer (tokenizer.json or tokenizer.model)"));
}

std::string ApplyTemplate(absl::string_view tmpl, absl::string_view name, absl::string_view value) {
  const std::string key = absl::StrCat("{", name, "}");
  std::string out;
  out.reserve(tmpl.size() + value.size());
  for (size_t i = 0; i < tmpl.size();) {
    if (tmpl.compare(i, 2, "{{") == 0) {
      out += '{';
      i += 2;
    } else if (tmpl.compare(i, 2, "}}") == 0) {
      out += '}';
      i += 2;
    } else if (tmpl.compare(i, key.size(), key) == 0) {
      out.append(value.data(), value.size());
      i += key.size();
    } else {
      out += tmpl[i++];
    }
  }
  return out;
}

}  // namespace rankd::tokenizer
