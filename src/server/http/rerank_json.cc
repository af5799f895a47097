// The JSON of POST /v1/rerank and POST /rerank (rankd/server/http/rerank_json.h).
#include "rankd/server/http/rerank_json.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "nlohmann/json.hpp"
#include "rankd/common/field_error.h"
#include "rankd/common/status.h"
#include "rankd/server/call/validation.h"

namespace rankd::server {
namespace {

using Json = nlohmann::json;

// Compact JSON; invalid UTF-8 in strings becomes U+FFFD.
std::string Dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

// A boolean request member of the schemas.
Json Boolean(bool default_value, const char* description) {
  return {{"type", "boolean"}, {"default", default_value}, {"description", description}};
}

// The request members both shapes read.
void AddCommonMembers(Json* properties) {
  (*properties)["raw_scores"] =
      Boolean(false, "Scores as rankd computes them instead of their sigmoid (0..1).");
  (*properties)["truncate"] =
      Boolean(false,
              "Cut over-long texts at the end instead of refusing them; false leaves the "
              "server's limits.truncate to decide.");
  (*properties)["priority"] = {{"type", "string"},
                               {"enum", {"interactive", "batch"}},
                               {"description", "rankd's scheduling class (default: interactive)."}};
}

// What a shape's body holds: the top-level members the readers below read (RerankJsonSchemas
// lists the same: openapi_test checks that each documented member is read), and of them, its list
// of texts.
struct BodyMembers {
  absl::Span<const absl::string_view> members;
  absl::string_view list;
};
BodyMembers MembersOf(RerankShape shape) {
  static constexpr absl::string_view kCohere[] = {"query",    "documents",        "model",
                                                  "top_n",    "return_documents", "raw_scores",
                                                  "truncate", "priority"};
  static constexpr absl::string_view kCohereV2[] = {
      "query",      "documents", "model",   "top_n", "max_tokens_per_doc",
      "raw_scores", "truncate",  "priority"};
  static constexpr absl::string_view kTei[] = {"query",      "texts",    "return_text",
                                               "raw_scores", "truncate", "truncation_direction",
                                               "priority"};
  static constexpr absl::string_view kTokenize[] = {"inputs", "add_special_tokens", "template",
                                                    "model"};
  switch (shape) {
    case RerankShape::kCohere:
      return {kCohere, "documents"};
    case RerankShape::kCohereV2:
      return {kCohereV2, "documents"};
    case RerankShape::kTei:
      return {kTei, "texts"};
    case RerankShape::kTokenize:
      return {kTokenize, "inputs"};
    case RerankShape::kModels:
    case RerankShape::kInfo:
    case RerankShape::kHealth:
      break;  // no body
  }
  return {};
}

bool IsCohere(RerankShape shape) {
  return shape == RerankShape::kCohere || shape == RerankShape::kCohereV2;
}

// Builds the part of a body that `shape` reads, from nlohmann's SAX events: the top-level
// object's members (MembersOf), the elements of its list (at most `max_items`: the parse stops at
// the next one) and, in Cohere's document objects, "text". Every other value
// is parsed (its syntax, nesting and keys checked) and dropped, and a container that is kept but
// whose contents nobody reads (a list as "query") is kept empty. So a body's parse is linear in
// its bytes and what it builds is bounded by the limits, whatever the body holds: many objects
// in the list or elsewhere, members nobody reads.
class BodyReader final : public Json::json_sax_t {
 public:
  BodyReader(RerankShape shape, int max_items)
      : members_(MembersOf(shape).members),
        list_(MembersOf(shape).list),
        documents_(shape == RerankShape::kCohere),
        max_items_(max_items) {}

  Json& root() { return root_; }
  const absl::Status& status() const { return status_; }

  bool null() override { return Add(nullptr); }
  bool boolean(bool value) override { return Add(value); }
  bool number_integer(number_integer_t value) override { return Add(value); }
  bool number_unsigned(number_unsigned_t value) override { return Add(value); }
  bool number_float(number_float_t value, const string_t&) override { return Add(value); }
  bool string(string_t& value) override { return Add(std::move(value)); }
  bool binary(binary_t&) override { return Add(nullptr); }  // not in JSON text
  bool start_object(std::size_t) override { return Open(Json::value_t::object); }
  bool start_array(std::size_t) override { return Open(Json::value_t::array); }
  bool end_object() override { return Close(); }
  bool end_array() override { return Close(); }
  bool key(string_t& key) override {
    Frame& f = stack_.back();
    if (!f.keys.insert(key).second) {
      return Fail(InvalidField(Dump(Json(key)), "appears twice in one object"));
    }
    f.key = std::move(key);
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const Json::exception& e) override {
    // e.g. "[json.exception.parse_error.101] parse error at line 1, column 9: syntax error while
    // parsing value - invalid string: ill-formed UTF-8 byte; last read: '"\xFF'", or
    // "[json.exception.out_of_range.406] number overflow parsing '1e400'": the reason, and where.
    std::string what = e.what();
    if (const size_t at = what.find("] "); what[0] == '[' && at != std::string::npos) {
      what.erase(0, at + 2);
    }
    return Fail(absl::InvalidArgumentError(absl::StrCat("body: not valid JSON: ", what)));
  }

 private:
  // What an open container is to the shape.
  enum class Place {
    kRoot,      // the top-level object: members_ are kept
    kList,      // its list: every element is kept, up to max_items_
    kDocument,  // an object in Cohere's list: "text" is kept
    kDropped,   // anything else: its contents are dropped
  };
  struct Frame {
    Json* node = nullptr;  // the kept container (null: kDropped)
    Place place = Place::kDropped;
    absl::flat_hash_set<std::string> keys;  // an object's keys so far
    std::string key;                        // an object's member being read
    int count = 0;                          // a list's elements so far
  };

  bool Fail(absl::Status status) {
    status_ = std::move(status);
    return false;  // stops the parse
  }

  // Puts `value` (a scalar, or a container still empty) where it goes in the kept part (nowhere:
  // dropped); returns its place there, and what it is as a container.
  absl::StatusOr<std::pair<Json*, Place>> Put(Json value) {
    const bool object = value.is_object(), array = value.is_array();
    if (stack_.empty()) {
      root_ = std::move(value);
      return std::pair(&root_, object ? Place::kRoot : Place::kDropped);
    }
    Frame& f = stack_.back();
    switch (f.place) {
      case Place::kRoot:
        if (absl::c_linear_search(members_, f.key)) {
          Json* member = &((*f.node)[f.key] = std::move(value));
          return std::pair(member, f.key == list_ && array ? Place::kList : Place::kDropped);
        }
        break;
      case Place::kList:
        if (++f.count > max_items_) {
          return InvalidField(std::string(list_),
                              absl::StrCat("more than max_items=", max_items_, " items"));
        }
        f.node->push_back(std::move(value));
        return std::pair(&f.node->back(),
                         documents_ && object ? Place::kDocument : Place::kDropped);
      case Place::kDocument:
        if (f.key == "text")
          return std::pair(&((*f.node)[f.key] = std::move(value)), Place::kDropped);
        break;
      case Place::kDropped:
        break;
    }
    return std::pair<Json*, Place>(nullptr, Place::kDropped);
  }

  bool Add(Json value) {
    if (absl::Status s = Put(std::move(value)).status(); !s.ok()) return Fail(std::move(s));
    return true;
  }

  bool Open(Json::value_t type) {
    if (stack_.size() >= static_cast<size_t>(kMaxJsonDepth)) {
      return Fail(absl::InvalidArgumentError(
          absl::StrCat("body: nesting deeper than ", kMaxJsonDepth, " levels")));
    }
    absl::StatusOr<std::pair<Json*, Place>> put = Put(Json(type));
    if (!put.ok()) return Fail(put.status());
    Frame& f = stack_.emplace_back();
    f.place = put->second;
    if (f.place != Place::kDropped) f.node = put->first;
    return true;
  }

  bool Close() {
    stack_.pop_back();
    return true;
  }

  const absl::Span<const absl::string_view> members_;
  const absl::string_view list_;
  const bool documents_;  // Cohere: the list's objects are documents
  const int max_items_;
  Json root_;
  std::vector<Frame> stack_;  // the containers open, outermost first
  absl::Status status_;
};

// Parses `body` as `shape` reads it (BodyReader): a JSON document within kMaxJsonDepth whose
// objects repeat no key, with at most `max_items` elements in the shape's list.
absl::StatusOr<Json> ParseBody(RerankShape shape, absl::string_view body, int max_items) {
  BodyReader reader(shape, max_items);
  try {
    if (!Json::sax_parse(body.begin(), body.end(), &reader)) {
      return reader.status().ok() ? absl::InvalidArgumentError("body: not valid JSON")
                                  : reader.status();
    }
  } catch (const Json::exception& e) {
    // BodyReader builds only what nlohmann takes without throwing; were it ever to throw, the
    // call fails, not the process.
    return absl::InternalError(absl::StrCat("body: ", e.what()));
  }
  return std::move(reader.root());
}

// The members of the top-level object that the shape reads; null counts as absent.
class Members {
 public:
  explicit Members(const Json& object) : object_(object) {}
  const Json* Get(const char* name) const {
    auto it = object_.find(name);
    return it == object_.end() || it->is_null() ? nullptr : &*it;
  }

 private:
  const Json& object_;
};

absl::Status ReadString(const Json* j, const char* name, std::string* out) {
  if (j == nullptr) return absl::OkStatus();
  if (!j->is_string()) return InvalidField(name, "must be a string");
  *out = j->get<std::string>();
  return absl::OkStatus();
}

absl::Status ReadBool(const Json* j, const char* name, bool* out) {
  if (j == nullptr) return absl::OkStatus();
  if (!j->is_boolean()) return InvalidField(name, "must be true or false");
  *out = j->get<bool>();
  return absl::OkStatus();
}

absl::Status ReadTexts(const Json* j, RerankShape shape, rankd::v1::ScoreRequest* request) {
  const absl::string_view name = MembersOf(shape).list;
  if (j == nullptr) return InvalidField(std::string(name), "required (a list of strings)");
  if (!j->is_array()) return InvalidField(std::string(name), "must be a list of strings");
  request->mutable_items()->Reserve(static_cast<int>(std::min<size_t>(j->size(), INT32_MAX)));
  for (size_t i = 0; i < j->size(); ++i) {
    const Json& d = (*j)[i];
    const std::string at = absl::StrCat(name, "[", i, "]");
    if (d.is_string()) {
      request->add_items()->set_text(d.get<std::string>());
    } else if (shape == RerankShape::kCohere && d.is_object()) {
      // Cohere's and Jina's document objects: {"text": ...} (other members ignored).
      auto text = d.find("text");
      if (text == d.end() || !text->is_string()) {
        return InvalidField(at + ".text", "required, a string");
      }
      request->add_items()->set_text(text->get<std::string>());
    } else {
      return InvalidField(at, shape == RerankShape::kCohere
                                  ? "must be a string or {\"text\": string}"
                                  : "must be a string");  // v2: strings
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ParseRerankRequest(RerankShape shape, absl::string_view body, int max_items,
                                rankd::v1::ScoreRequest* request, RerankOptions* options) {
  RANKD_ASSIGN_OR_RETURN(const Json j, ParseBody(shape, body, max_items));
  if (!j.is_object()) return absl::InvalidArgumentError("body: must be a JSON object");
  const Members m(j);
  const bool cohere = IsCohere(shape);
  if (m.Get("query") == nullptr) return InvalidField("query", "required (a string)");
  RANKD_RETURN_IF_ERROR(ReadString(m.Get("query"), "query", request->mutable_query()));
  RANKD_RETURN_IF_ERROR(ReadTexts(m.Get(cohere ? "documents" : "texts"), shape, request));
  // Cohere v2 cuts long documents (to max_tokens_per_doc, default 4096) instead of refusing them:
  // so does rankd's v2 route, at limits.max_item_tokens, unless "truncate": false.
  bool truncate = shape == RerankShape::kCohereV2;
  if (shape == RerankShape::kCohereV2) {
    if (const Json* max_tokens = m.Get("max_tokens_per_doc")) {
      if (!max_tokens->is_number_unsigned() || max_tokens->get<uint64_t>() < 1 ||
          max_tokens->get<uint64_t>() > INT32_MAX) {
        return InvalidField("max_tokens_per_doc", "must be a positive integer");
      }
      options->max_tokens_per_doc = max_tokens->get<int32_t>();
    }
  }
  if (cohere) {
    RANKD_RETURN_IF_ERROR(ReadString(m.Get("model"), "model", request->mutable_model()));
    if (const Json* top_n = m.Get("top_n")) {
      // JSON's non-negative integers parse as unsigned; anything else is no positive int32.
      if (!top_n->is_number_unsigned() || top_n->get<uint64_t>() < 1 ||
          top_n->get<uint64_t>() > INT32_MAX) {
        return InvalidField("top_n", "must be a positive integer");
      }
      options->top_n = top_n->get<int32_t>();
    }
    // v1: vLLM's and Jina's default; v2's results carry no documents.
    options->return_text = shape == RerankShape::kCohere;
    RANKD_RETURN_IF_ERROR(
        ReadBool(m.Get("return_documents"), "return_documents", &options->return_text));
  } else {
    RANKD_RETURN_IF_ERROR(ReadBool(m.Get("return_text"), "return_text", &options->return_text));
    if (const Json* direction = m.Get("truncation_direction")) {
      if (!direction->is_string() ||
          !absl::EqualsIgnoreCase(direction->get<std::string>(), "right")) {
        return InvalidField("truncation_direction", "only \"Right\" is supported (the end is cut)");
      }
    }
  }
  RANKD_RETURN_IF_ERROR(ReadBool(m.Get("raw_scores"), "raw_scores", &options->raw_scores));
  request->set_apply_sigmoid(!options->raw_scores);
  RANKD_RETURN_IF_ERROR(ReadBool(m.Get("truncate"), "truncate", &truncate));
  // false leaves the server's limits.truncate to decide, as TRUNCATE_NONE does over gRPC.
  request->set_truncate(truncate ? rankd::v1::TRUNCATE_END : rankd::v1::TRUNCATE_NONE);
  if (const Json* priority = m.Get("priority")) {
    // rankd's names, or (Cohere's routes) Cohere's integer, lower first: 0 is interactive, more
    // is batch work.
    const bool number = cohere && priority->is_number_unsigned();
    const std::string p = number ? (priority->get<uint64_t>() == 0 ? "interactive" : "batch")
                          : priority->is_string() ? priority->get<std::string>()
                                                  : "";
    if (p != "interactive" && p != "batch") {
      return InvalidField("priority", cohere ? "must be \"interactive\", \"batch\" or a "
                                               "non-negative integer (Cohere's: 0 interactive)"
                                             : "must be \"interactive\" or \"batch\"");
    }
    request->set_priority(p == "batch" ? rankd::v1::PRIORITY_BATCH
                                       : rankd::v1::PRIORITY_INTERACTIVE);
  }
  return absl::OkStatus();
}

std::string RerankResponseJson(RerankShape shape, const rankd::v1::ScoreRequest& request,
                               const RerankOptions& options,
                               const rankd::v1::ScoreResponse& response, absl::string_view id) {
  std::vector<int> order;  // scored items (the depth controller may leave some unscored)
  for (int i = 0; i < response.scores_size(); ++i) {
    if (response.scores(i).scored()) order.push_back(i);
  }
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return response.scores(a).score() > response.scores(b).score();
  });
  if (options.top_n > 0 && static_cast<int>(order.size()) > options.top_n) {
    order.resize(options.top_n);
  }
  const bool cohere = IsCohere(shape);
  Json results = Json::array();
  for (int i : order) {
    Json r = {{"index", i}, {cohere ? "relevance_score" : "score", response.scores(i).score()}};
    if (options.return_text) {
      const std::string& text = request.items(i).text();
      if (cohere) {
        r["document"] = {{"text", text}};
      } else {
        r["text"] = text;
      }
    }
    results.push_back(std::move(r));
  }
  Json out;
  if (cohere) {
    const int64_t tokens =
        int64_t{response.usage().prefix_tokens()} + response.usage().item_tokens();
    const int documents = request.items_size();
    out = {{"id", std::string(id)},
           {"model", response.model()},
           {"results", std::move(results)},
           {"meta",
            {{"api_version", {{"version", shape == RerankShape::kCohere ? "1" : "2"}}},
             {"billed_units",
              {{"search_units",
                std::max(1, (documents + kDocumentsPerSearchUnit - 1) / kDocumentsPerSearchUnit)}}},
             {"tokens", {{"input_tokens", tokens}}}}}};
    if (shape == RerankShape::kCohere) out["usage"] = {{"total_tokens", tokens}};
  } else {
    out = std::move(results);
  }
  return Dump(out);
}

std::string ModelsResponseJson(const std::vector<std::string>& names, int64_t created) {
  Json data = Json::array();
  for (const std::string& name : names) {
    data.push_back(
        {{"id", name}, {"object", "model"}, {"created", created}, {"owned_by", "rankd"}});
  }
  return Dump({{"object", "list"}, {"data", std::move(data)}});
}

std::string InfoResponseJson(const ServerInfo& info) {
  Json out = {
      {"model_id", info.names.empty() ? info.model_dir_name : info.names[0]},
      {"served_model_names", info.names},
      {"model_dir_name", info.model_dir_name},
      {"model_sha", info.identity.empty() ? Json(nullptr) : Json(info.identity)},
      {"model_dtype", info.dtype},
      {"backend", info.backend},
      {"max_input_length", info.max_query_tokens + info.max_item_tokens},
      {"max_position_embeddings",
       info.max_position_embeddings > 0 ? Json(info.max_position_embeddings) : Json(nullptr)},
      {"max_query_tokens", info.max_query_tokens},
      {"max_item_tokens", info.max_item_tokens},
      {"max_request_tokens", info.max_request_tokens},
      {"max_client_batch_size", info.max_items},
      {"max_message_bytes", info.max_message_bytes},
      {"max_batch_tokens", info.max_batch_tokens},
      {"auto_truncate", info.auto_truncate},
      {"version", info.version},
      {"sha", info.commit.empty() ? Json(nullptr) : Json(info.commit)}};
  return Dump(out);
}

std::string HealthResponseJson() { return Dump({{"status", "ok"}}); }

absl::Status ParseTokenizeRequest(absl::string_view body, int max_items,
                                  rankd::v1::TokenizeRequest* request) {
  RANKD_ASSIGN_OR_RETURN(const Json j, ParseBody(RerankShape::kTokenize, body, max_items));
  if (!j.is_object()) return absl::InvalidArgumentError("body: must be a JSON object");
  const Members m(j);
  const Json* inputs = m.Get("inputs");
  if (inputs == nullptr) return InvalidField("inputs", "required (a string or a list of strings)");
  if (inputs->is_string()) {
    request->add_texts(inputs->get<std::string>());
  } else if (inputs->is_array()) {
    request->mutable_texts()->Reserve(
        static_cast<int>(std::min<size_t>(inputs->size(), INT32_MAX)));
    for (size_t i = 0; i < inputs->size(); ++i) {
      const Json& t = (*inputs)[i];
      if (!t.is_string()) return InvalidField(absl::StrCat("inputs[", i, "]"), "must be a string");
      request->add_texts(t.get<std::string>());
    }
  } else {
    return InvalidField("inputs", "must be a string or a list of strings");
  }
  bool special = true;  // TEI's default
  RANKD_RETURN_IF_ERROR(ReadBool(m.Get("add_special_tokens"), "add_special_tokens", &special));
  request->set_add_special_tokens(special);
  if (const Json* t = m.Get("template")) {
    const std::string name = t->is_string() ? t->get<std::string>() : "";
    if (name == "query") {
      request->set_template_(rankd::v1::TEMPLATE_QUERY);
    } else if (name == "item") {
      request->set_template_(rankd::v1::TEMPLATE_ITEM);
    } else if (name != "none") {
      return InvalidField("template", "must be \"none\", \"query\" or \"item\"");
    }
  }
  return ReadString(m.Get("model"), "model", request->mutable_model());
}

std::string TokenizeResponseJson(const rankd::v1::TokenizeResponse& response) {
  Json out = Json::array();
  for (const rankd::v1::TokenizedText& text : response.texts()) {
    Json tokens = Json::array();
    for (int32_t id : text.ids()) tokens.push_back({{"id", id}});
    out.push_back(std::move(tokens));
  }
  return out.dump();
}

std::string ErrorJson(absl::string_view message, absl::string_view code) {
  const Json j = {{"error", {{"message", std::string(message)}, {"code", std::string(code)}}}};
  return Dump(j);
}

// The `meta` of Cohere's answers (what the Cohere SDKs read of it).
Json CohereMetaSchema() {
  const Json count = {{"type", "integer"}, {"minimum", 0}};
  return {{"type", "object"},
          {"required", {"api_version", "billed_units"}},
          {"properties",
           {{"api_version",
             {{"type", "object"},
              {"required", {"version"}},
              {"properties", {{"version", {{"type", "string"}, {"enum", {"1", "2"}}}}}}}},
            {"billed_units",
             {{"type", "object"},
              {"required", {"search_units"}},
              {"properties",
               {{"search_units",
                 {{"type", "integer"},
                  {"minimum", 1},
                  {"description", "ceil(documents / 100), as Cohere bills a search."}}}}}}},
            {"tokens",
             {{"type", "object"},
              {"properties", {{"input_tokens", count}}},
              {"description", "Tokens scored, query prefix and documents."}}}}}};
}

RerankSchemas RerankJsonSchemas(RerankShape shape) {
  const Json string = {{"type", "string"}};
  const Json index = {{"type", "integer"},
                      {"minimum", 0},
                      {"description", "The item's position in the request's list."}};
  const Json model_member = {
      {"type", "string"},
      {"description",
       "Any name is accepted, the answer naming the served model, unless "
       "server.strict_model_name is on: then one of server.served_model_names, else 404."}};
  const Json answer_id = {
      {"type", "string"},
      {"description", "The caller's X-Request-Id, else a fresh one (the access log's)."}};
  Json properties = {{"query", {{"type", "string"}, {"description", "The query."}}}};
  const Json cohere_priority = {
      {"oneOf",
       {{{"type", "string"}, {"enum", {"interactive", "batch"}}},
        {{"type", "integer"}, {"minimum", 0}}}},
      {"description",
       "rankd's scheduling class (default: interactive), or Cohere's integer: 0 interactive, "
       "more batch."}};
  switch (shape) {
    case RerankShape::kCohere: {
      properties["documents"] = {
          {"type", "array"},
          {"items",
           {{"oneOf",
             {string,
              {{"type", "object"},
               {"required", {"text"}},
               {"properties", {{"text", string}}},
               {"description", "Cohere's form (other members ignored)."}}}}}},
          {"description", "The texts to score against the query."}};
      properties["model"] = model_member;
      properties["top_n"] = {{"type", "integer"},
                             {"minimum", 1},
                             {"maximum", INT32_MAX},
                             {"description", "Results to return, best first (default: all)."}};
      properties["return_documents"] = Boolean(true, "Each result carries its document's text.");
      AddCommonMembers(&properties);
      properties["priority"] = cohere_priority;
      const Json result = {
          {"type", "object"},
          {"required", {"index", "relevance_score"}},
          {"properties",
           {{"index", index},
            {"relevance_score", {{"type", "number"}}},
            {"document",
             {{"type", "object"}, {"required", {"text"}}, {"properties", {{"text", string}}}}}}}};
      const Json response = {
          {"type", "object"},
          {"required", {"id", "model", "results", "meta", "usage"}},
          {"properties",
           {{"id", answer_id},
            {"model", string},
            {"results",
             {{"type", "array"}, {"items", result}, {"description", "Sorted best first."}}},
            {"meta", CohereMetaSchema()},
            {"usage",
             {{"type", "object"},
              {"required", {"total_tokens"}},
              {"properties", {{"total_tokens", {{"type", "integer"}, {"minimum", 0}}}}}}}}}};
      const Json example = {
          {"query", "rust engineer in berlin"},
          {"documents",
           {"Barista, Lisbon", "Rust developer, Berlin", {{"text", "Go developer, Munich"}}}},
          {"top_n", 2}};
      return {.name = "CohereRerank",
              .request = Dump({{"type", "object"},
                               {"required", {"query", "documents"}},
                               {"properties", properties}}),
              .response = Dump(response),
              .example = Dump(example)};
    }
    case RerankShape::kCohereV2: {
      properties["documents"] = {{"type", "array"},
                                 {"items", string},
                                 {"description", "The texts to score against the query."}};
      properties["model"] = model_member;
      properties["top_n"] = {{"type", "integer"},
                             {"minimum", 1},
                             {"maximum", INT32_MAX},
                             {"description", "Results to return, best first (default: all)."}};
      properties["max_tokens_per_doc"] = {
          {"type", "integer"},
          {"minimum", 1},
          {"maximum", INT32_MAX},
          {"description",
           "Documents are cut at the end to limits.max_item_tokens (GET /info's "
           "max_item_tokens); a smaller value is refused."}};
      AddCommonMembers(&properties);
      properties["truncate"] = Boolean(
          true, "Cut over-long texts at the end (Cohere v2's default); false refuses them.");
      properties["priority"] = cohere_priority;
      const Json result = {
          {"type", "object"},
          {"required", {"index", "relevance_score"}},
          {"properties", {{"index", index}, {"relevance_score", {{"type", "number"}}}}}};
      const Json response = {
          {"type", "object"},
          {"required", {"id", "model", "results", "meta"}},
          {"properties",
           {{"id", answer_id},
            {"model", string},
            {"results",
             {{"type", "array"}, {"items", result}, {"description", "Sorted best first."}}},
            {"meta", CohereMetaSchema()}}}};
      const Json example = {
          {"model", "rerank-v3.5"},
          {"query", "rust engineer in berlin"},
          {"documents", {"Barista, Lisbon", "Rust developer, Berlin", "Go developer, Munich"}},
          {"top_n", 2}};
      return {.name = "CohereV2Rerank",
              .request = Dump({{"type", "object"},
                               {"required", {"query", "documents"}},
                               {"properties", properties}}),
              .response = Dump(response),
              .example = Dump(example)};
    }
    case RerankShape::kModels: {
      const Json model = {
          {"type", "object"},
          {"required", {"id", "object", "created", "owned_by"}},
          {"properties",
           {{"id", string},
            {"object", {{"type", "string"}, {"enum", {"model"}}}},
            {"created", {{"type", "integer"}, {"description", "Server start, Unix seconds."}}},
            {"owned_by", string}}}};
      return {
          .name = "Models",
          .request = "",
          .response = Dump(
              {{"type", "object"},
               {"required", {"object", "data"}},
               {"properties",
                {{"object", {{"type", "string"}, {"enum", {"list"}}}},
                 {"data",
                  {{"type", "array"},
                   {"items", model},
                   {"description", "One per server.served_model_names, the reported first."}}}}}}),
          .example = ""};
    }
    case RerankShape::kInfo: {
      const Json integer = {{"type", "integer"}, {"minimum", 0}};
      const Json nullable_string = {{"type", "string"}, {"nullable", true}};
      return {
          .name = "Info",
          .request = "",
          .response = Dump(
              {{"type", "object"},
               {"required",
                {"model_id", "served_model_names", "model_dtype", "max_input_length",
                 "max_client_batch_size", "version"}},
               {"properties",
                {{"model_id", {{"type", "string"}, {"description", "The name answers report."}}},
                 {"served_model_names", {{"type", "array"}, {"items", string}}},
                 {"model_dir_name", {{"type", "string"}, {"description", "model.name."}}},
                 {"model_sha",
                  {{"type", "string"}, {"nullable", true}, {"description", "model.identity."}}},
                 {"model_dtype", {{"type", "string"}, {"enum", {"float32", "bf16", "fp8"}}}},
                 {"backend", {{"type", "string"}, {"enum", {"cpu", "cuda"}}}},
                 {"max_input_length",
                  {{"type", "integer"}, {"description", "max_query_tokens + max_item_tokens."}}},
                 {"max_position_embeddings", {{"type", "integer"}, {"nullable", true}}},
                 {"max_query_tokens", integer},
                 {"max_item_tokens", integer},
                 {"max_request_tokens", integer},
                 {"max_client_batch_size",
                  {{"type", "integer"}, {"description", "limits.max_items."}}},
                 {"max_message_bytes", integer},
                 {"max_batch_tokens", integer},
                 {"auto_truncate",
                  {{"type", "boolean"}, {"description", "limits.truncate is end."}}},
                 {"version", string},
                 {"sha", nullable_string}}}}),
          .example = ""};
    }
    case RerankShape::kHealth:
      return {
          .name = "Health",
          .request = "",
          .response = Dump({{"type", "object"},
                            {"required", {"status"}},
                            {"properties", {{"status", {{"type", "string"}, {"enum", {"ok"}}}}}}}),
          .example = ""};
    case RerankShape::kTei: {
      properties["texts"] = {{"type", "array"},
                             {"items", string},
                             {"description", "The texts to score against the query."}};
      properties["return_text"] = Boolean(false, "Each result carries its text.");
      properties["truncation_direction"] = {
          {"type", "string"},
          {"enum", {"Right"}},
          {"description", "Only Right (any case): rankd cuts the end."}};
      AddCommonMembers(&properties);
      const Json result = {
          {"type", "object"},
          {"required", {"index", "score"}},
          {"properties", {{"index", index}, {"score", {{"type", "number"}}}, {"text", string}}}};
      const Json example = {{"query", "rust engineer in berlin"},
                            {"texts", {"Barista, Lisbon", "Rust developer, Berlin"}},
                            {"return_text", true}};
      return {
          .name = "TeiRerank",
          .request = Dump(
              {{"type", "object"}, {"required", {"query", "texts"}}, {"properties", properties}}),
          .response =
              Dump({{"type", "array"}, {"items", result}, {"description", "Sorted best first."}}),
          .example = Dump(example)};
    }
    case RerankShape::kTokenize: {  // ParseTokenizeRequest / TokenizeResponseJson
      Json tp = {
          {"inputs",
           {{"oneOf", {string, {{"type", "array"}, {"items", string}}}},
            {"description", "The text, or texts, to tokenize."}}},
          {"add_special_tokens", Boolean(true, "Add the tokenizer's special tokens (a BOS).")},
          {"template",
           {{"type", "string"},
            {"enum", {"none", "query", "item"}},
            {"description",
             "none (default): the text as it is; query / item: the model's query or item "
             "template applied, as Score does. item with add_special_tokens is refused."}}},
          {"model", model_member}};
      const Json token = {{"type", "object"},
                          {"required", {"id"}},
                          {"properties", {{"id", {{"type", "integer"}, {"minimum", 0}}}}}};
      const Json example = {{"inputs", {"rust engineer in berlin", "Barista, Lisbon"}},
                            {"add_special_tokens", false}};
      return {.name = "TeiTokenize",
              .request = Dump({{"type", "object"}, {"required", {"inputs"}}, {"properties", tp}}),
              .response = Dump({{"type", "array"},
                                {"items", {{"type", "array"}, {"items", token}}},
                                {"description", "One list of tokens per input, in order."}}),
              .example = Dump(example)};
    }
  }
  return {};
}

std::string ErrorJsonSchema() {
  const Json string = {{"type", "string"}};
  return Dump({{"type", "object"},
               {"required", {"error"}},
               {"properties",
                {{"error",
                  {{"type", "object"},
                   {"required", {"message", "code"}},
                   {"properties",
                    {{"message",
                      {{"type", "string"}, {"description", "What was wrong, naming the field."}}},
                     {"code",
                      {{"type", "string"},
                       {"description",
                        "The gRPC code's name (INVALID_ARGUMENT, ...) or the HTTP "
                        "status's (PAYLOAD_TOO_LARGE, ...)."}}}}}}}}}});
}

std::string CallerFieldMessage(RerankShape shape, const absl::Status& status) {
  std::optional<rankd::FieldError> error = GetFieldError(status);
  const bool tokenize = shape == RerankShape::kTokenize;
  // What the request behind the route calls its list: a ScoreRequest's items, a
  // TokenizeRequest's texts.
  const absl::string_view request_list = tokenize ? kTokenizeTexts : kScoreItems;
  if (!error || (error->item < 0 && error->field != request_list)) {
    return std::string(status.message());
  }
  const absl::string_view list = MembersOf(shape).list;
  if (error->item < 0) return absl::StrCat(list, ": ", error->what);  // the list itself
  // items[3].text is documents[3] / texts[3]: the caller's list holds the texts themselves.
  if (!tokenize && error->field == ".text") error->field.clear();
  return error->Message(list);
}

}  // namespace rankd::server
