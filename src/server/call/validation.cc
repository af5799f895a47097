#include "rankd/server/call/validation.h"

#include <algorithm>

#include "absl/algorithm/container.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/message.h"
#include "rankd/common/field_error.h"
#include "rankd/common/status.h"
#include "rankd/model/input_checks.h"
#include "rankd/protocol/protocol.h"

namespace rankd::server {
namespace {

// Every error below is about one field of the request, or of one of its items (or texts), and
// carries it as data (FieldError): the HTTP routes name their own lists from it
// (rerank_json.h's CallerFieldMessage), never from the message.

// Text over its byte limit is refused before it is queued: tokenizing it would cost the worker
// time and memory in proportion to its size, whatever its token count turns out to be. Ids too:
// each is echoed in the answer, which the front end holds until the client reads it. `item` and
// `field` name the text (FieldError); `list` the request's items in the message.
absl::Status CheckTextBytes(const std::string& text, int item, std::string field,
                            absl::string_view key, int64_t limit,
                            absl::string_view list = kScoreItems) {
  if (static_cast<int64_t>(text.size()) <= limit) return absl::OkStatus();
  return FieldErrorStatus(absl::StatusCode::kInvalidArgument,
                          {.item = item,
                           .field = std::move(field),
                           .limit = std::string(key),
                           .what = absl::StrCat(text.size(), " bytes exceeds ", key, "=", limit)},
                          list);
}

// `name` (a request's model field): any without model.strict_name; with it, empty or one of the
// served names, else NOT_FOUND. The message quotes at most kQuotedNameBytes of the name (a caller's
// bytes: its length is bounded only by the message's).
constexpr size_t kQuotedNameBytes = 128;
absl::Status CheckModel(const std::string& name, const ModelInfo& model) {
  if (!model.strict_name || name.empty() || name == model.name ||
      absl::c_linear_search(model.names, name)) {
    return absl::OkStatus();
  }
  const std::vector<std::string>& names =
      model.names.empty() ? std::vector<std::string>{model.name} : model.names;
  const std::string quoted =
      name.size() <= kQuotedNameBytes
          ? absl::StrCat("'", name, "'")
          : absl::StrCat("'", name.substr(0, kQuotedNameBytes), "'... (", name.size(), " bytes)");
  return FieldErrorStatus(
      absl::StatusCode::kNotFound,
      {.item = -1,
       .field = "model",
       .limit = "",
       .what = absl::StrCat(quoted, " is not served here (this server serves '",
                            absl::StrJoin(names, "', '"), "'; server.strict_model_name is on)")});
}

// A request over limits.max_message_bytes, whichever its kind.
absl::Status CheckMessageBytes(const google::protobuf::Message& request, const Limits& limits) {
  const size_t bytes = request.ByteSizeLong();
  if (bytes > static_cast<size_t>(limits.max_message_bytes)) {
    return InvalidField(
        "request",
        absl::StrCat(bytes, " bytes exceeds max_message_bytes=", limits.max_message_bytes),
        "max_message_bytes");
  }
  return absl::OkStatus();
}

// An item's "N tokens exceeds max_item_tokens=M" (token ids, embedding rows).
absl::Status ItemOverTokens(int item, std::string field, int n, absl::string_view unit,
                            const Limits& limits) {
  return InvalidItemField(
      item, std::move(field),
      absl::StrCat(n, " ", unit, " exceeds max_item_tokens=", limits.max_item_tokens),
      "max_item_tokens");
}

}  // namespace

ModelInfo ServedModel(const ServeConfig& config) {
  ModelInfo model;
  const std::vector<std::string>& names = config.server.served_model_names;
  model.name = names.empty() ? config.model.name : names[0];
  model.names = names.empty() ? std::vector<std::string>{model.name} : names;
  model.strict_name = config.server.strict_model_name;
  return model;
}

int ItemsToScore(const rankd::v1::ScoreRequest& request, int default_depth) {
  const int n = request.items_size();
  const int depth = request.depth() > 0 ? request.depth() : default_depth;
  return depth > 0 && depth < n ? depth : n;
}

absl::Status ValidateTokenizeRequest(const rankd::v1::TokenizeRequest& request,
                                     const Limits& limits, const ModelInfo& model) {
  RANKD_RETURN_IF_ERROR(CheckMessageBytes(request, limits));
  RANKD_RETURN_IF_ERROR(CheckModel(request.model(), model));
  if (!rankd::v1::Template_IsValid(request.template_())) {
    return InvalidField("template", absl::StrCat("unknown value ", request.template_()));
  }
  if (request.texts_size() == 0) {
    return InvalidField(std::string(kTokenizeTexts), "empty (give at least one text)");
  }
  if (request.texts_size() > limits.max_items) {
    return InvalidField(
        std::string(kTokenizeTexts),
        absl::StrCat(request.texts_size(), " texts exceeds max_items=", limits.max_items),
        "max_items");
  }
  const bool query = request.template_() == rankd::v1::TEMPLATE_QUERY;
  for (int i = 0; i < request.texts_size(); ++i) {
    if (request.texts(i).empty()) {
      return FieldErrorStatus(absl::StatusCode::kInvalidArgument,
                              {.item = i, .field = "", .limit = "", .what = "empty"},
                              kTokenizeTexts);
    }
    RANKD_RETURN_IF_ERROR(query ? CheckTextBytes(request.texts(i), i, "", "max_query_bytes",
                                                 limits.QueryByteLimit(), kTokenizeTexts)
                                : CheckTextBytes(request.texts(i), i, "", "max_item_bytes",
                                                 limits.ItemByteLimit(), kTokenizeTexts));
  }
  return absl::OkStatus();
}

absl::Status ValidateScoreRequest(const rankd::v1::ScoreRequest& request, const Limits& limits,
                                  const ModelInfo& model) {
  RANKD_RETURN_IF_ERROR(CheckMessageBytes(request, limits));
  RANKD_RETURN_IF_ERROR(CheckModel(request.model(), model));
  if (!rankd::v1::Priority_IsValid(request.priority())) {
    return InvalidField("priority", absl::StrCat("unknown value ", request.priority()));
  }
  if (request.depth() < 0) {
    return InvalidField("depth", absl::StrCat("must not be negative (got ", request.depth(), ")"));
  }
  if (!rankd::v1::Truncate_IsValid(request.truncate())) {
    return InvalidField("truncate", absl::StrCat("unknown value ", request.truncate()));
  }
  RANKD_RETURN_IF_ERROR(
      CheckTextBytes(request.request_id(), -1, "request_id", "max_id_bytes", limits.max_id_bytes));
  // TRUNCATE_END: lengths over a limit are no error here; the worker cuts them (PrepareWorkItem:
  // text to its byte limit, then to its token limit), and the context check needs the prefix as
  // the worker leaves it.
  const bool cut = rankd::protocol::TruncatesAtEnd(request, limits);
  if (request.query_ids_size() > 0) {
    if (!request.query().empty()) {
      return InvalidField("query_ids", "give either query or query_ids, not both");
    }
    if (!cut && request.query_ids_size() > limits.max_query_tokens) {
      return InvalidField(
          "query_ids",
          absl::StrCat(request.query_ids_size(),
                       " tokens exceeds max_query_tokens=", limits.max_query_tokens),
          "max_query_tokens");
    }
    RANKD_RETURN_IF_ERROR(model::CheckTokenIds(
        absl::MakeConstSpan(request.query_ids().data(), request.query_ids_size()), "query_ids",
        model.vocab_size));
  } else if (request.query().empty()) {
    return InvalidField("query", "empty (give query or query_ids)");
  } else if (!cut) {
    RANKD_RETURN_IF_ERROR(
        CheckTextBytes(request.query(), -1, "query", "max_query_bytes", limits.QueryByteLimit()));
  }
  if (request.items_size() == 0)
    return InvalidField(std::string(kScoreItems), "empty (give at least one item)");
  if (request.items_size() > limits.max_items) {
    return InvalidField(
        std::string(kScoreItems),
        absl::StrCat(request.items_size(), " items exceeds max_items=", limits.max_items),
        "max_items");
  }
  // Tokens known before tokenization (ids and embedding rows, as many as are kept when cut); text
  // is counted by the worker.
  int64_t known_tokens = 0;
  const int scored = ItemsToScore(request);
  for (int i = 0; i < request.items_size(); ++i) {
    const rankd::v1::Item& item = request.items(i);
    RANKD_RETURN_IF_ERROR(CheckTextBytes(item.id(), i, ".id", "max_id_bytes", limits.max_id_bytes));
    switch (item.content_case()) {
      case rankd::v1::Item::kText:
        if (item.text().empty()) return InvalidItemField(i, ".text", "empty");
        if (!cut) {
          RANKD_RETURN_IF_ERROR(
              CheckTextBytes(item.text(), i, ".text", "max_item_bytes", limits.ItemByteLimit()));
        }
        break;
      case rankd::v1::Item::kTokenIds: {
        const auto& ids = item.token_ids().ids();
        const int n = ids.size();
        if (n == 0) return InvalidItemField(i, ".token_ids", "empty");
        if (!cut && n > limits.max_item_tokens) {
          return ItemOverTokens(i, ".token_ids", n, "tokens", limits);
        }
        RANKD_RETURN_IF_ERROR(AtItem(i, model::CheckTokenIds(absl::MakeConstSpan(ids.data(), n),
                                                             ".token_ids.ids", model.vocab_size)));
        if (!cut && request.query_ids_size() > 0) {
          RANKD_RETURN_IF_ERROR(
              AtItem(i, model::CheckContextLength(request.query_ids_size(), n,
                                                  model.max_position_embeddings, "")));
        }
        if (i < scored) known_tokens += std::min(n, limits.max_item_tokens);
        break;
      }
      case rankd::v1::Item::kEmbedding: {
        const rankd::v1::Embedding& e = item.embedding();
        if (e.rows() <= 0) {
          return InvalidItemField(i, ".embedding.rows",
                                  absl::StrCat("must be positive (got ", e.rows(), ")"));
        }
        if (!cut && e.rows() > limits.max_item_tokens) {
          return ItemOverTokens(i, ".embedding.rows", e.rows(), "rows", limits);
        }
        const int64_t expected = int64_t{e.rows()} * model.hidden_size;
        if (e.values_size() != expected) {
          return InvalidItemField(i, ".embedding.values",
                                  absl::StrCat(e.values_size(), " values for rows=", e.rows(),
                                               ", expected rows x hidden_size = ", e.rows(), " x ",
                                               model.hidden_size, " = ", expected));
        }
        RANKD_RETURN_IF_ERROR(AtItem(
            i, model::CheckEmbeddingValues(absl::MakeConstSpan(e.values().data(), e.values_size()),
                                           ".embedding.values", model.hidden_size)));
        if (!cut && request.query_ids_size() > 0) {
          RANKD_RETURN_IF_ERROR(
              AtItem(i, model::CheckContextLength(request.query_ids_size(), e.rows(),
                                                  model.max_position_embeddings, "")));
        }
        if (i < scored) known_tokens += std::min(e.rows(), limits.max_item_tokens);
        break;
      }
      case rankd::v1::Item::CONTENT_NOT_SET:
        return InvalidItemField(i, "", "no content (set text, token_ids or embedding)");
    }
  }
  if (known_tokens > limits.max_request_tokens) {
    return InvalidField(std::string(kScoreItems),
                        absl::StrCat(known_tokens, " tokens exceeds max_request_tokens=",
                                     limits.max_request_tokens),
                        "max_request_tokens");
  }
  return absl::OkStatus();
}

}  // namespace rankd::server
