// The engine's text encoding (rankd/engine/text_encoder.h).
#include "rankd/engine/text_encoder.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "rankd/common/status.h"
#include "rankd/engine/engine.h"

namespace rankd::engine {

absl::StatusOr<TextTemplate> ParseTextTemplate(absl::string_view name) {
  if (name == "none") return TextTemplate::kNone;
  if (name == "query") return TextTemplate::kQuery;
  if (name == "item") return TextTemplate::kItem;
  return absl::InvalidArgumentError(
      absl::StrCat("template '", name, "' is not one of none, query, item"));
}

absl::StatusOr<std::unique_ptr<TextEncoder>> TextEncoder::Load(const EngineOptions& options) {
  std::unique_ptr<TextEncoder> e(new TextEncoder());
  RANKD_ASSIGN_OR_RETURN(auto file_settings, ModelSettings::FromModelDir(options.model_dir));
  RANKD_ASSIGN_OR_RETURN(e->settings_, ApplyPreset(file_settings.MergedWith(options.settings)));
  RANKD_ASSIGN_OR_RETURN(e->tokenizer_, tokenizer::LoadTokenizer(options.model_dir));
  e->query_template_ = e->settings_.query_template.value_or(std::string(kQueryPlaceholder));
  e->item_template_ = e->settings_.item_template.value_or(std::string(kItemPlaceholder));
  if (!absl::StrContains(e->query_template_, kQueryPlaceholder)) {
    return absl::InvalidArgumentError(
        absl::StrCat("query template '", e->query_template_, "' has no ", kQueryPlaceholder));
  }
  if (!absl::StrContains(e->item_template_, kItemPlaceholder)) {
    return absl::InvalidArgumentError(
        absl::StrCat("item template '", e->item_template_, "' has no ", kItemPlaceholder));
  }
  RANKD_ASSIGN_OR_RETURN(e->query_ends_, FindTemplateEnds(*e->tokenizer_, e->query_template_,
                                                          "query", /*add_special_tokens=*/true));
  RANKD_ASSIGN_OR_RETURN(e->item_ends_, FindTemplateEnds(*e->tokenizer_, e->item_template_, "item",
                                                         /*add_special_tokens=*/false));
  return e;
}

absl::Status TextEncoder::CheckSpecialTokens(TextTemplate t, bool add_special_tokens) {
  if (t == TextTemplate::kItem && add_special_tokens) {
    return absl::InvalidArgumentError(
        "add_special_tokens: items never get special tokens (template item)");
  }
  return absl::OkStatus();
}

std::string TextEncoder::Apply(absl::string_view text, TextTemplate t) const {
  switch (t) {
    case TextTemplate::kQuery:
      return tokenizer::ApplyTemplate(query_template_, "query", text);
    case TextTemplate::kItem:
      return tokenizer::ApplyTemplate(item_template_, "item", text);
    case TextTemplate::kNone:
      break;
  }
  return std::string(text);
}

absl::StatusOr<std::vector<int32_t>> TextEncoder::Encode(absl::string_view text, TextTemplate t,
                                                         bool add_special_tokens,
                                                         int64_t max_tokens) const {
  RANKD_RETURN_IF_ERROR(CheckSpecialTokens(t, add_special_tokens));
  const std::string applied = Apply(text, t);
  if (max_tokens > 0 && !add_special_tokens) return tokenizer_->EncodeBounded(applied, max_tokens);
  return tokenizer_->Encode(applied, add_special_tokens);
}

absl::StatusOr<std::vector<int32_t>> TextEncoder::EncodeQuery(absl::string_view query) const {
  return Encode(query, TextTemplate::kQuery, /*add_special_tokens=*/true);
}

absl::StatusOr<std::vector<std::vector<int32_t>>> TextEncoder::EncodeItems(
    absl::Span<const std::string> texts, int num_threads, int64_t max_tokens) const {
  std::vector<std::string> applied;
  applied.reserve(texts.size());
  for (const std::string& text : texts) applied.push_back(Apply(text, TextTemplate::kItem));
  return tokenizer_->EncodeBatch(applied, /*add_special_tokens=*/false, num_threads, max_tokens);
}

absl::StatusOr<TextEncoder::TemplateEnds> TextEncoder::FindTemplateEnds(
    const tokenizer::Tokenizer& tok, const std::string& tmpl, absl::string_view name,
    bool add_special_tokens) {
  // The tail: what the encodings of the template around two values that differ in their last
  // character end with in common. Taken from whole encodings, it is what the tail is within one
  // (a sentencepiece dummy-prefix space or a merge that starts in the value stays out of it), and
  // it holds the special tokens the tokenizer appends.
  auto encode = [&](absl::string_view value) {
    return tok.Encode(tokenizer::ApplyTemplate(tmpl, name, value), add_special_tokens);
  };
  RANKD_ASSIGN_OR_RETURN(const std::vector<int32_t> a, encode("a"));
  RANKD_ASSIGN_OR_RETURN(const std::vector<int32_t> b, encode("b"));
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[a.size() - 1 - n] == b[b.size() - 1 - n]) ++n;
  TemplateEnds ends;
  ends.tail.assign(a.end() - n, a.end());
  RANKD_ASSIGN_OR_RETURN(const std::vector<int32_t> empty, encode(""));
  ends.empty = static_cast<int64_t>(empty.size());
  return ends;
}

std::optional<std::vector<int32_t>> TextEncoder::Cut(absl::Span<const int32_t> ids, int64_t limit,
                                                     const TemplateEnds& ends) {
  const int64_t tail = static_cast<int64_t>(ends.tail.size());
  if (limit <= ends.empty || limit < tail) return std::nullopt;
  std::vector<int32_t> out;
  out.reserve(limit);
  out.insert(out.end(), ids.begin(), ids.begin() + std::min<int64_t>(ids.size(), limit - tail));
  out.insert(out.end(), ends.tail.begin(), ends.tail.end());
  return out;
}

std::optional<std::vector<int32_t>> TextEncoder::CutQuery(absl::Span<const int32_t> ids,
                                                          int64_t limit) const {
  return Cut(ids, limit, query_ends_);
}

std::optional<std::vector<int32_t>> TextEncoder::CutTextItem(absl::Span<const int32_t> ids,
                                                             int64_t limit) const {
  return Cut(ids, limit, item_ends_);
}

}  // namespace rankd::engine
