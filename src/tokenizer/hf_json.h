// Reading tokenizer.json and tokenizer_config.json: the parsed file and typed field accessors
// whose errors name the file and the field, shared by every component's "from JSON" factory.
#ifndef RANKD_TOKENIZER_HF_JSON_H_
#define RANKD_TOKENIZER_HF_JSON_H_

#include <optional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace rankd::tokenizer {

using Json = nlohmann::json;

// One JSON file, named in its errors (e.g. `tokenizer.json: pre_tokenizer.pretokenizers[0].type`).
// `path` arguments are the dotted field path of `obj` inside the file ("" for the top level).
// Immutable; thread-safe.
class JsonFile {
 public:
  explicit JsonFile(std::string path) : path_(std::move(path)) {}

  const std::string& path() const { return path_; }

  absl::Status Error(absl::string_view field, absl::string_view why) const;

  // Reads and parses the file, which must hold an object.
  absl::StatusOr<Json> Parse() const;

  absl::StatusOr<std::string> String(const Json& obj, const std::string& path,
                                     const char* key) const;
  // Null or absent gives `default_value`.
  absl::StatusOr<bool> Bool(const Json& obj, const std::string& path, const char* key,
                            bool default_value) const;
  // An optional string field: null or absent gives nullopt.
  absl::StatusOr<std::optional<std::string>> OptString(const Json& obj, const std::string& path,
                                                       const char* key) const;

  // `path`.`key`, or `key` at the top level.
  static std::string Join(const std::string& path, absl::string_view key);

 private:
  std::string path_;
};

// The `type` of a component object at `path`.
absl::StatusOr<std::string> TypeOf(const JsonFile& f, const Json& j, const std::string& path);

}  // namespace rankd::tokenizer

#endif  // RANKD_TOKENIZER_HF_JSON_H_
