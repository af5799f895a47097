#include "hf_json.h"

#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"

namespace rankd::tokenizer {

absl::Status JsonFile::Error(absl::string_view field, absl::string_view why) const {
  return absl::InvalidArgumentError(absl::StrCat(path_, ": ", field, ": ", why));
}

absl::StatusOr<Json> JsonFile::Parse() const {
  std::ifstream in(path_, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path_, ": cannot open"));
  std::stringstream buf;
  buf << in.rdbuf();
  Json j = Json::parse(buf.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(path_, ": not valid JSON"));
  if (!j.is_object()) return absl::InvalidArgumentError(absl::StrCat(path_, ": not an object"));
  return j;
}

absl::StatusOr<std::string> JsonFile::String(const Json& obj, const std::string& path,
                                             const char* key) const {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_string()) return Error(Join(path, key), "must be a string");
  return it->get<std::string>();
}

absl::StatusOr<bool> JsonFile::Bool(const Json& obj, const std::string& path, const char* key,
                                    bool default_value) const {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return default_value;
  if (!it->is_boolean()) return Error(Join(path, key), "must be true or false");
  return it->get<bool>();
}

absl::StatusOr<std::optional<std::string>> JsonFile::OptString(const Json& obj,
                                                               const std::string& path,
                                                               const char* key) const {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return std::nullopt;
  if (!it->is_string()) return Error(Join(path, key), "must be a string or null");
  return it->get<std::string>();
}

std::string JsonFile::Join(const std::string& path, absl::string_view key) {
  return path.empty() ? std::string(key) : absl::StrCat(path, ".", key);
}

absl::StatusOr<std::string> TypeOf(const JsonFile& f, const Json& j, const std::string& path) {
  if (!j.is_object()) return f.Error(path, "must be an object");
  return f.String(j, path, "type");
}

}  // namespace rankd::tokenizer
