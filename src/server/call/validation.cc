#include "rankd/server/call/validation.h"

#include <algorithm>

#include "absl/algorithm/container.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/message.h"
#include "rankd/common/status.h"
#include "rankd/model/input_checks.h"
#include "rankd/protocol/protocol.h"

namespace rankd::server {
namespace {

absl::Status Invalid(absl::string_view field, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", why));
}

absl::Status CheckIds(const google::protobuf::RepeatedField<int32_t>& ids, absl::string_view field,
                      int vocab_size) {
  return model::CheckTokenIds(absl::MakeConstSpan(ids.data(), ids.size()), field, vocab_size);
}

// Text over its byte limit is refused before it is queued: tokenizing it would cost the worker
// time and memory in proportion to its size, whatever its token count turns out to be. Ids too:
// each is echoed in the answer, which the front end holds until the client reads it.
absl::Status CheckTextBytes(const std::string& text, absl::string_view field, absl::string_view key,
                            int64_t limit) {
  if (static_cast<int64_t>(text.size()) <= limit) return absl::OkStatus();
  return Invalid(field, absl::StrCat(text.size(), " bytes exceeds ", key, "=", limit));
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
  return absl::NotFoundError(
      absl::StrCat("model: ", quoted, " is not served here (this server serves '",
                   absl::StrJoin(names, "', '"), "'; server.strict_model_name is on)"));
}

// A request over limits.max_message_bytes, whichever its kind.
absl::Status CheckMessageBytes(const google::protobuf::Message& request, const Limits& limits) {
  const size_t bytes = request.ByteSizeLong();
  if (bytes > static_cast<size_t>(limits.max_message_bytes)) {
    return Invalid(
        "request",
        absl::StrCat(bytes, " bytes exceeds max_message_bytes=", limits.max_message_bytes));
  }
  return absl::OkStatus();
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
    return Invalid("template", absl::StrCat("unknown value ", request.template_()));
  }
  if (request.texts_size() == 0) return Invalid("texts", "empty (give at least one text)");
  if (request.texts_size() > limits.max_items) {
    return Invalid(
        "texts", absl::StrCat(request.texts_size(), " texts exceeds max_items=", limits.max_items));
  }
  const bool query = request.template_() == rankd::v1::TEMPLATE_QUERY;
  for (int i = 0; i < request.texts_size(); ++i) {
    const std::string f = absl::StrCat("texts[", i, "]");
    if (request.texts(i).empty()) return Invalid(f, "empty");
    RANKD_RETURN_IF_ERROR(
        query ? CheckTextBytes(request.texts(i), f, "max_query_bytes", limits.QueryByteLimit())
              : CheckTextBytes(request.texts(i), f, "max_item_bytes", limits.ItemByteLimit()));
  }
  return absl::OkStatus();
}

absl::Status ValidateScoreRequest(const rankd::v1::ScoreRequest& request, const Limits& limits,
                                  const ModelInfo& model) {
  RANKD_RETURN_IF_ERROR(CheckMessageBytes(request, limits));
  RANKD_RETURN_IF_ERROR(CheckModel(request.model(), model));
  if (!rankd::v1::Priority_IsValid(request.priority())) {
    return Invalid("priority", absl::StrCat("unknown value ", request.priority()));
  }
  if (request.depth() < 0) {
    return Invalid("depth", absl::StrCat("must not be negative (got ", request.depth(), ")"));
  }
  if (!rankd::v1::Truncate_IsValid(request.truncate())) {
    return Invalid("truncate", absl::StrCat("unknown value ", request.truncate()));
  }
  RANKD_RETURN_IF_ERROR(
      CheckTextBytes(request.request_id(), "request_id", "max_id_bytes", limits.max_id_bytes));
  // TRUNCATE_END: lengths over a limit are no error here; the worker cuts them (PrepareWorkItem:
  // text to its byte limit, then to its token limit), and the context check needs the prefix as
  // the worker leaves it.
  const bool cut = rankd::protocol::TruncatesAtEnd(request, limits);
  if (request.query_ids_size() > 0) {
    if (!request.query().empty()) {
      return Invalid("query_ids", "give either query or query_ids, not both");
    }
    if (!cut && request.query_ids_size() > limits.max_query_tokens) {
      return Invalid("query_ids",
                     absl::StrCat(request.query_ids_size(),
                                  " tokens exceeds max_query_tokens=", limits.max_query_tokens));
    }
    if (absl::Status s = CheckIds(request.query_ids(), "query_ids", model.vocab_size); !s.ok()) {
      return s;
    }
  } else if (request.query().empty()) {
    return Invalid("query", "empty (give query or query_ids)");
  } else if (!cut) {
    RANKD_RETURN_IF_ERROR(
        CheckTextBytes(request.query(), "query", "max_query_bytes", limits.QueryByteLimit()));
  }
  if (request.items_size() == 0) return Invalid("items", "empty (give at least one item)");
  if (request.items_size() > limits.max_items) {
    return Invalid(
        "items", absl::StrCat(request.items_size(), " items exceeds max_items=", limits.max_items));
  }
  // Tokens known before tokenization (ids and embedding rows, as many as are kept when cut); text
  // is counted by the worker.
  int64_t known_tokens = 0;
  const int scored = ItemsToScore(request);
  for (int i = 0; i < request.items_size(); ++i) {
    const rankd::v1::Item& item = request.items(i);
    const std::string f = absl::StrCat("items[", i, "]");
    RANKD_RETURN_IF_ERROR(
        CheckTextBytes(item.id(), f + ".id", "max_id_bytes", limits.max_id_bytes));
    switch (item.content_case()) {
      case rankd::v1::Item::kText:
        if (item.text().empty()) return Invalid(f + ".text", "empty");
        if (!cut) {
          RANKD_RETURN_IF_ERROR(
              CheckTextBytes(item.text(), f + ".text", "max_item_bytes", limits.ItemByteLimit()));
        }
        break;
      case rankd::v1::Item::kTokenIds: {
        const int n = item.token_ids().ids_size();
        if (n == 0) return Invalid(f + ".token_ids", "empty");
        if (!cut && n > limits.max_item_tokens) {
          return Invalid(
              f + ".token_ids",
              absl::StrCat(n, " tokens exceeds max_item_tokens=", limits.max_item_tokens));
        }
        if (absl::Status s =
                CheckIds(item.token_ids().ids(), f + ".token_ids.ids", model.vocab_size);
            !s.ok()) {
          return s;
        }
        if (!cut && request.query_ids_size() > 0) {
          RANKD_RETURN_IF_ERROR(model::CheckContextLength(request.query_ids_size(), n,
                                                          model.max_position_embeddings, f));
        }
        if (i < scored) known_tokens += std::min(n, limits.max_item_tokens);
        break;
      }
      case rankd::v1::Item::kEmbedding: {
        const rankd::v1::Embedding& e = item.embedding();
        if (e.rows() <= 0) {
          return Invalid(f + ".embedding.rows",
                         absl::StrCat("must be positive (got ", e.rows(), ")"));
        }
        if (!cut && e.rows() > limits.max_item_tokens) {
          return Invalid(
              f + ".embedding.rows",
              absl::StrCat(e.rows(), " rows exceeds max_item_tokens=", limits.max_item_tokens));
        }
        const int64_t expected = int64_t{e.rows()} * model.hidden_size;
        if (e.values_size() != expected) {
          return Invalid(f + ".embedding.values",
                         absl::StrCat(e.values_size(), " values for rows=", e.rows(),
                                      ", expected rows x hidden_size = ", e.rows(), " x ",
                                      model.hidden_size, " = ", expected));
        }
        RANKD_RETURN_IF_ERROR(
            model::CheckEmbeddingValues(absl::MakeConstSpan(e.values().data(), e.values_size()),
                                        f + ".embedding.values", model.hidden_size));
        if (!cut && request.query_ids_size() > 0) {
          RANKD_RETURN_IF_ERROR(model::CheckContextLength(request.query_ids_size(), e.rows(),
                                                          model.max_position_embeddings, f));
        }
        if (i < scored) known_tokens += std::min(e.rows(), limits.max_item_tokens);
        break;
      }
      case rankd::v1::Item::CONTENT_NOT_SET:
        return Invalid(f, "no content (set text, token_ids or embedding)");
    }
  }
  if (known_tokens > limits.max_request_tokens) {
    return Invalid("items", absl::StrCat(known_tokens, " tokens exceeds max_request_tokens=",
                                         limits.max_request_tokens));
  }
  return absl::OkStatus();
}

}  // namespace rankd::server
