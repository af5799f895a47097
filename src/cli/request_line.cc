// ParseRequestLine: the request-line JSON of `rankd score` and `rankd-client score`, both
// spellings (the shorthand and proto3 JSON), into a RequestLine.
#include "rankd/cli/request_line.h"

#include <cstdint>
#include <initializer_list>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "rankd/common/status.h"

namespace rankd::cli {
namespace {

using Json = nlohmann::json;

constexpr char kItemKinds[] = "text, ids, token_ids, embedding";

absl::Status FieldError(absl::string_view field, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", why));
}

std::string Join(absl::string_view path, absl::string_view name) {
  return path.empty() ? std::string(name) : absl::StrCat(path, ".", name);
}

// proto3 JSON's name of a field: the lowerCamel form of its snake_case name.
std::string LowerCamel(absl::string_view snake) {
  std::string out;
  bool upper = false;
  for (char c : snake) {
    if (c == '_') {
      upper = true;
      continue;
    }
    out += upper ? static_cast<char>(c - 'a' + 'A') : c;
    upper = false;
  }
  return out;
}

// The members of one JSON object, each under its snake_case name, whichever spelling the line
// used. A null member counts as absent (as in proto3 JSON).
class Fields {
 public:
  // `path` names the object in errors ("" at the top, "items[2]", ...).
  static absl::StatusOr<Fields> Read(const Json& object, std::string path,
                                     std::initializer_list<absl::string_view> names) {
    Fields fields;
    fields.path_ = std::move(path);
    for (const auto& [key, value] : object.items()) {
      const absl::string_view* name = nullptr;
      for (const absl::string_view& n : names) {
        if (key == n || key == LowerCamel(n)) name = &n;
      }
      if (name == nullptr) {
        return FieldError(Join(fields.path_, key), absl::StrCat("unknown field (expected one of ",
                                                                absl::StrJoin(names, ", "), ")"));
      }
      if (value.is_null()) continue;
      auto [it, inserted] = fields.members_.try_emplace(std::string(*name), Member{key, &value});
      if (!inserted) {
        return FieldError(Join(fields.path_, key),
                          absl::StrCat("give ", it->second.key, " or ", key, ", not both"));
      }
    }
    return fields;
  }

  // The member named `name` (snake_case), or nullptr.
  const Json* Get(absl::string_view name) const {
    auto it = members_.find(name);
    return it == members_.end() ? nullptr : it->second.value;
  }
  // The member's name as the line spells it, and its path.
  absl::string_view Key(absl::string_view name) const {
    auto it = members_.find(name);
    return it == members_.end() ? name : absl::string_view(it->second.key);
  }
  std::string Path(absl::string_view name) const { return Join(path_, Key(name)); }

 private:
  struct Member {
    std::string key;  // as spelt in the line
    const Json* value;
  };
  std::string path_;
  std::map<std::string, Member, std::less<>> members_;
};

absl::StatusOr<Fields> ReadObject(const Json& j, std::string path,
                                  std::initializer_list<absl::string_view> names) {
  if (!j.is_object()) return FieldError(path, "must be an object");
  return Fields::Read(j, std::move(path), names);
}

absl::StatusOr<std::string> String(const Json& j, const std::string& path) {
  if (!j.is_string()) return FieldError(path, "must be a string");
  return j.get<std::string>();
}

absl::StatusOr<int32_t> NonNegativeInt(const Json& j, const std::string& path) {
  if (!j.is_number_integer() || j.get<int64_t>() < 0 || j.get<int64_t>() > INT32_MAX) {
    return FieldError(path, "must be a non-negative integer");
  }
  return j.get<int32_t>();
}

absl::StatusOr<std::vector<int32_t>> Ids(const Json& j, const std::string& path) {
  if (!j.is_array()) return FieldError(path, "must be a list of token ids");
  std::vector<int32_t> ids;
  ids.reserve(j.size());
  for (size_t i = 0; i < j.size(); ++i) {
    RANKD_ASSIGN_OR_RETURN(int32_t id, NonNegativeInt(j[i], absl::StrCat(path, "[", i, "]")));
    ids.push_back(id);
  }
  return ids;
}

// Appends the numbers of the list `j` to `values`.
absl::Status AppendNumbers(const Json& j, const std::string& path, std::vector<float>& values) {
  if (!j.is_array() || j.empty()) return FieldError(path, "must be a non-empty list of numbers");
  for (size_t c = 0; c < j.size(); ++c) {
    if (!j[c].is_number()) return FieldError(absl::StrCat(path, "[", c, "]"), "must be a number");
    values.push_back(j[c].get<float>());
  }
  return absl::OkStatus();
}

// An embedding item: rows as lists of equal width (shorthand), or {"rows": N, "values": [..]}
// (rankd.v1.Embedding, row-major).
absl::Status ParseEmbedding(const Json& j, const std::string& path, RequestItem& item) {
  item.kind = RequestItem::Kind::kEmbedding;
  if (j.is_array()) {
    if (j.empty()) return FieldError(path, "must be a non-empty list of rows");
    const size_t width = j[0].is_array() ? j[0].size() : 0;
    for (size_t r = 0; r < j.size(); ++r) {
      const std::string row = absl::StrCat(path, "[", r, "]");
      RANKD_RETURN_IF_ERROR(AppendNumbers(j[r], row, item.embedding));
      if (j[r].size() != width) {
        return FieldError(row, absl::StrCat("has ", j[r].size(), " values, row 0 has ", width));
      }
    }
    item.embedding_rows = static_cast<int32_t>(j.size());
    return absl::OkStatus();
  }
  if (!j.is_object()) {
    return FieldError(path, "must be a list of rows or an object {\"rows\", \"values\"}");
  }
  RANKD_ASSIGN_OR_RETURN(Fields f, Fields::Read(j, path, {"rows", "values"}));
  if (f.Get("rows") == nullptr) return FieldError(f.Path("rows"), "is missing");
  if (f.Get("values") == nullptr) return FieldError(f.Path("values"), "is missing");
  RANKD_ASSIGN_OR_RETURN(item.embedding_rows, NonNegativeInt(*f.Get("rows"), f.Path("rows")));
  if (item.embedding_rows == 0) return FieldError(f.Path("rows"), "must be positive");
  RANKD_RETURN_IF_ERROR(AppendNumbers(*f.Get("values"), f.Path("values"), item.embedding));
  if (item.embedding.size() % item.embedding_rows != 0) {
    return FieldError(f.Path("values"),
                      absl::StrCat(item.embedding.size(), " values do not make rows=",
                                   item.embedding_rows, " rows of one width"));
  }
  return absl::OkStatus();
}

absl::StatusOr<RequestItem> ParseItem(const Json& j, const std::string& path) {
  RequestItem item;
  if (j.is_string()) {
    item.text = j.get<std::string>();
    return item;
  }
  if (!j.is_object()) {
    return FieldError(path, absl::StrCat("must be a string or an object with one of ", kItemKinds));
  }
  RANKD_ASSIGN_OR_RETURN(Fields f,
                         Fields::Read(j, path, {"text", "ids", "token_ids", "embedding", "id"}));
  std::vector<std::string> contents;
  for (absl::string_view kind : {"text", "ids", "token_ids", "embedding"}) {
    if (f.Get(kind) != nullptr) contents.push_back(std::string(f.Key(kind)));
  }
  if (contents.size() != 1) {
    const std::string has = contents.empty() ? "none" : absl::StrJoin(contents, " and ");
    return FieldError(path, absl::StrCat("has ", has, "; give one of ", kItemKinds));
  }
  if (const Json* text = f.Get("text")) {
    RANKD_ASSIGN_OR_RETURN(item.text, String(*text, f.Path("text")));
  } else if (const Json* ids = f.Get("ids")) {
    item.kind = RequestItem::Kind::kTokenIds;
    RANKD_ASSIGN_OR_RETURN(item.token_ids, Ids(*ids, f.Path("ids")));
  } else if (const Json* token_ids = f.Get("token_ids")) {
    item.kind = RequestItem::Kind::kTokenIds;
    RANKD_ASSIGN_OR_RETURN(Fields t, ReadObject(*token_ids, f.Path("token_ids"), {"ids"}));
    if (t.Get("ids") == nullptr) return FieldError(t.Path("ids"), "is missing");
    RANKD_ASSIGN_OR_RETURN(item.token_ids, Ids(*t.Get("ids"), t.Path("ids")));
  } else {
    RANKD_RETURN_IF_ERROR(ParseEmbedding(*f.Get("embedding"), f.Path("embedding"), item));
  }
  if (const Json* id = f.Get("id")) {
    RANKD_ASSIGN_OR_RETURN(item.id, String(*id, f.Path("id")));
  }
  return item;
}

// A proto3 enum field: the value's name or its number, one of `names` (in number order).
template <typename Enum, size_t N>
absl::StatusOr<Enum> ParseEnum(const Json& j, const std::string& path,
                               const char* const (&names)[N]) {
  for (size_t i = 0; i < N; ++i) {
    if ((j.is_string() && j.get<std::string>() == names[i]) ||
        (j.is_number_integer() && j.get<int64_t>() == static_cast<int64_t>(i))) {
      return static_cast<Enum>(i);
    }
  }
  return FieldError(path, absl::StrCat("must be one of ", absl::StrJoin(names, ", ")));
}

constexpr const char* kPriorityNames[] = {"PRIORITY_UNSPECIFIED", "PRIORITY_INTERACTIVE",
                                          "PRIORITY_BATCH"};
constexpr const char* kTruncateNames[] = {"TRUNCATE_NONE", "TRUNCATE_END"};

absl::StatusOr<bool> Bool(const Json& j, const std::string& path) {
  if (!j.is_boolean()) return FieldError(path, "must be true or false");
  return j.get<bool>();
}

}  // namespace

absl::StatusOr<RequestLine> ParseRequestLine(absl::string_view line) {
  const Json j = Json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError("not valid JSON");
  if (!j.is_object()) return absl::InvalidArgumentError("not a JSON object");
  RANKD_ASSIGN_OR_RETURN(
      Fields f, Fields::Read(j, "",
                             {"query", "query_ids", "items", "apply_sigmoid", "model", "priority",
                              "request_id", "depth", "skip_cache", "truncate"}));
  RequestLine req;
  const Json* query = f.Get("query");
  if (const Json* query_ids = f.Get("query_ids")) {
    if (query != nullptr) {
      return FieldError(f.Path("query_ids"), "give either query or query_ids, not both");
    }
    RANKD_ASSIGN_OR_RETURN(req.query_ids, Ids(*query_ids, f.Path("query_ids")));
    if (req.query_ids->empty()) return FieldError(f.Path("query_ids"), "must not be empty");
  } else if (query != nullptr) {
    RANKD_ASSIGN_OR_RETURN(req.query, String(*query, "query"));
  } else {
    return FieldError("query", "is missing (or give query_ids)");
  }
  const Json* items = f.Get("items");
  if (items == nullptr) return FieldError("items", "is missing");
  if (!items->is_array() || items->empty()) return FieldError("items", "must be a non-empty list");
  req.items.reserve(items->size());
  for (size_t i = 0; i < items->size(); ++i) {
    RANKD_ASSIGN_OR_RETURN(RequestItem item,
                           ParseItem((*items)[i], absl::StrCat("items[", i, "]")));
    req.items.push_back(std::move(item));
  }
  if (const Json* s = f.Get("apply_sigmoid")) {
    RANKD_ASSIGN_OR_RETURN(req.apply_sigmoid, Bool(*s, f.Path("apply_sigmoid")));
  }
  if (const Json* model = f.Get("model")) {
    RANKD_ASSIGN_OR_RETURN(req.model, String(*model, "model"));
  }
  if (const Json* priority = f.Get("priority")) {
    RANKD_ASSIGN_OR_RETURN(req.priority,
                           ParseEnum<RequestPriority>(*priority, "priority", kPriorityNames));
  }
  if (const Json* request_id = f.Get("request_id")) {
    RANKD_ASSIGN_OR_RETURN(req.request_id, String(*request_id, f.Path("request_id")));
  }
  if (const Json* depth = f.Get("depth")) {
    RANKD_ASSIGN_OR_RETURN(req.depth, NonNegativeInt(*depth, "depth"));
  }
  if (const Json* skip = f.Get("skip_cache")) {
    RANKD_ASSIGN_OR_RETURN(req.skip_cache, Bool(*skip, f.Path("skip_cache")));
  }
  if (const Json* truncate = f.Get("truncate")) {
    RANKD_ASSIGN_OR_RETURN(
        req.truncate, ParseEnum<RequestTruncate>(*truncate, f.Path("truncate"), kTruncateNames));
  }
  return req;
}

}  // namespace rankd::cli
