// Reading tokenizer.json and tokenizer_config.json: the parsed file and typed field accessors
// whose errors name the file and the field, shared by every component's "from JSON" factory.
#ifndef RANKD_TOKENIZER_HF_JSON_H_
#define RANKD_TOKENIZER_HF_JSON_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace rankd::tokenizer {

using Json = nlohmann::json;

// The BPE model's two big tables as tokenizer.json spells them, read straight from its text by
// JsonFile::ParseTokenizer rather than into the Json tree (Gemma's 256k-token vocab and 580k
// merges take seconds to build and free as tree nodes). Checked by BpeModel, which names the field
// of a bad entry.
struct BpeTables {
  struct Merge {
    enum class Form { kPair, kString, kBad };  // ["a", "b"], "a b", anything else
    Form form = Form::kBad;
    std::string a;  // kString: the whole string
    std::string b;
  };
  bool has_vocab = false;                              // model.vocab was an object
  bool has_merges = false;                             // model.merges was a list
  std::vector<std::pair<std::string, int64_t>> vocab;  // id -1: not a non-negative integer
  std::vector<Merge> merges;
};

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
  // Parse for tokenizer.json: model.vocab (an object) and model.merges (a list) go to *tables and
  // are left out of the Json.
  absl::StatusOr<Json> ParseTokenizer(BpeTables* tables) const;

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
