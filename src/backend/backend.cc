#include "rankd/backend/backend.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "rankd/common/status.h"
#include "rankd/model/input_checks.h"

namespace rankd::backend {

std::vector<int32_t> HeadSpec::HeadRows() const {
  switch (type) {
    case Type::kClassifier:
      return {index};
    case Type::kYesNo:
      return {yes_id, no_id};
    case Type::kLogit:
      return {token_id};
  }
  return {};
}

std::string HeadSpec::ToString() const {
  switch (type) {
    case Type::kClassifier:
      return absl::StrCat("classifier:", index);
    case Type::kYesNo:
      return absl::StrCat("yes_no:", yes_id, ",", no_id);
    case Type::kLogit:
      return absl::StrCat("logit:", token_id);
  }
  return "";
}

void ItemBatch::AddIds(absl::Span<const int32_t> ids) {
  tokens.insert(tokens.end(), ids.begin(), ids.end());
  offsets.push_back(static_cast<int32_t>(tokens.size()));
}

void ItemBatch::AddEmbeddings(absl::Span<const float> rows, int hidden) {
  const int first_row = static_cast<int>(embeddings.size()) / hidden;
  const int k = static_cast<int>(rows.size()) / hidden;
  for (int r = 0; r < k; ++r) tokens.push_back(-(first_row + r) - 1);
  embeddings.insert(embeddings.end(), rows.begin(), rows.end());
  offsets.push_back(static_cast<int32_t>(tokens.size()));
}

void ItemBatch::Clear() {
  tokens.clear();
  offsets.assign(1, 0);
  embeddings.clear();
}

ItemBatch ItemBatch::Slice(int begin, int end, int hidden) const {
  ItemBatch out;
  for (int i = begin; i < end; ++i) {
    const int32_t* b = tokens.data() + offsets[i];
    const int32_t* e = tokens.data() + offsets[i + 1];
    if (b == e || *b >= 0) {  // an empty item stays one (ValidateItemBatch refuses it)
      out.AddIds(absl::MakeConstSpan(b, e));
    } else {
      const int64_t first_row = -static_cast<int64_t>(*b) - 1;
      out.AddEmbeddings(absl::MakeConstSpan(embeddings.data() + first_row * hidden,
                                            static_cast<size_t>(e - b) * hidden),
                        hidden);
    }
  }
  return out;
}

absl::Status Backend::ScoreGroups(absl::Span<const ScoreGroup> groups) {
  for (const ScoreGroup& g : groups) {
    if (g.prefix == nullptr || g.items == nullptr) {
      return absl::InvalidArgumentError("ScoreGroups: a group has no prefix or no items");
    }
    absl::Status s = ScoreItems(*g.prefix, *g.items, g.scores);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

namespace {

// The assertion's words for token `id` outside the vocabulary, at `where` ("prefix token 3").
absl::Status IdOutsideVocabulary(absl::string_view where, int32_t id, int vocab_size) {
  return absl::InvalidArgumentError(
      absl::StrCat(where, ": id ", id, " is outside the vocabulary (vocab_size ", vocab_size, ")"));
}

}  // namespace

absl::Status ValidatePrefixIds(const model::ModelConfig& config, absl::Span<const int32_t> ids) {
  for (size_t j = 0; j < ids.size(); ++j) {
    if (ids[j] < 0 || ids[j] >= config.vocab_size) {
      return IdOutsideVocabulary(absl::StrCat("prefix token ", j), ids[j], config.vocab_size);
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateItemBatch(const model::ModelConfig& config, const ItemBatch& items,
                               size_t num_scores) {
  const int N = items.num_items(), H = config.hidden_size;
  if (num_scores != static_cast<size_t>(N)) {
    return absl::InvalidArgumentError(
        absl::StrCat("scores has ", num_scores, " slots for ", N, " items"));
  }
  if (items.offsets.empty() || items.offsets[0] != 0 ||
      items.offsets.back() != items.num_tokens()) {
    return absl::InvalidArgumentError("item offsets do not cover the tokens");
  }
  for (int i = 0; i < N; ++i) {
    if (items.item_length(i) <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("item ", i, " has no tokens"));
    }
  }
  if (items.embeddings.size() % H != 0) {
    return absl::InvalidArgumentError(absl::StrCat("embeddings hold ", items.embeddings.size(),
                                                   " values, not a multiple of hidden_size ", H));
  }
  const int64_t rows = static_cast<int64_t>(items.embeddings.size()) / H;
  for (int i = 0; i < N; ++i) {
    for (int t = items.offsets[i]; t < items.offsets[i + 1]; ++t) {
      const int32_t tok = items.tokens[t];
      // The words are built only for a bad token: this loop runs over every token of every
      // pass (a string per token cost the multi-item standard workload 3% on an H200).
      if (tok >= config.vocab_size) {
        return IdOutsideVocabulary(absl::StrCat("item ", i, " token ", t - items.offsets[i]), tok,
                                   config.vocab_size);
      }
      if (tok < 0 && -static_cast<int64_t>(tok) > rows) {
        return absl::InvalidArgumentError(absl::StrCat(
            "item ", i, " token ", t - items.offsets[i], ": embedding row ",
            -static_cast<int64_t>(tok) - 1, " is outside the batch's ", rows, " rows"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateHead(const model::ModelConfig& config, const HeadSpec& head) {
  if (head.type == HeadSpec::Type::kClassifier) {
    if (config.head_kind != model::HeadKind::kSequenceClassification) {
      return absl::InvalidArgumentError(
          absl::StrCat("head classifier needs a *ForSequenceClassification model; ",
                       config.architecture, " has an LM head (use --head yes_no:YES,NO)"));
    }
    if (head.index < 0 || head.index >= config.num_labels) {
      return absl::InvalidArgumentError(
          absl::StrCat("head classifier index ", head.index,
                       " is outside [0, num_labels=", config.num_labels, ")"));
    }
  } else {
    const char* name = head.type == HeadSpec::Type::kYesNo ? "yes_no" : "logit";
    if (config.head_kind != model::HeadKind::kCausalLm) {
      return absl::InvalidArgumentError(absl::StrCat("head ", name, " needs a *ForCausalLM model; ",
                                                     config.architecture,
                                                     " has a classifier (use --head classifier)"));
    }
    for (int32_t id : head.HeadRows()) {
      RANKD_RETURN_IF_ERROR(
          model::CheckTokenId(id, absl::StrCat("head ", name, " token id"), config.vocab_size));
    }
  }
  return absl::OkStatus();
}

}  // namespace rankd::backend
