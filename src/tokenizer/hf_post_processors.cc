#include "hf_post_processors.h"

#include "absl/strings/str_cat.h"
#include "rankd/common/status.h"

namespace rankd::tokenizer {
namespace {

// Adds the decorations of the post-processor `j` to *d (a Sequence adds each part's in turn).
absl::Status AddPostProcessor(const JsonFile& f, const Json& j, const std::string& path,
                              Decorations* d) {
  if (j.is_null()) return absl::OkStatus();
  RANKD_ASSIGN_OR_RETURN(const std::string type, TypeOf(f, j, path));
  if (type == "ByteLevel") return absl::OkStatus();  // only trims offsets
  if (type == "Sequence") {
    const std::string list_path = JsonFile::Join(path, "processors");
    auto it = j.find("processors");
    if (it == j.end() || !it->is_array()) return f.Error(list_path, "must be a list");
    for (size_t i = 0; i < it->size(); ++i) {
      RANKD_RETURN_IF_ERROR(AddPostProcessor(f, (*it)[i], absl::StrCat(list_path, "[", i, "]"), d));
    }
    return absl::OkStatus();
  }
  if (type == "TemplateProcessing") {
    const std::string single_path = JsonFile::Join(path, "single");
    auto single = j.find("single");
    if (single == j.end() || !single->is_array()) return f.Error(single_path, "must be a list");
    auto specials = j.find("special_tokens");
    std::vector<int32_t> before, after;
    bool seen_sequence = false;
    for (size_t i = 0; i < single->size(); ++i) {
      const Json& piece = (*single)[i];
      const std::string piece_path = absl::StrCat(single_path, "[", i, "]");
      if (piece.is_object() && piece.contains("Sequence")) {
        const Json& seq = piece["Sequence"];
        if (!seq.is_object() || seq.value("id", "") != "A" || seen_sequence) {
          return f.Error(piece_path, "a single-sequence template holds sequence A once");
        }
        seen_sequence = true;
      } else if (piece.is_object() && piece.contains("SpecialToken")) {
        const Json& st = piece["SpecialToken"];
        if (!st.is_object() || !st.contains("id") || !st["id"].is_string()) {
          return f.Error(piece_path, "SpecialToken needs a string id");
        }
        const std::string name = st["id"].get<std::string>();
        if (specials == j.end() || !specials->is_object() || !specials->contains(name)) {
          return f.Error(JsonFile::Join(path, "special_tokens"),
                         absl::StrCat("'", name, "' is missing"));
        }
        const Json& ids = (*specials)[name]["ids"];
        if (!ids.is_array() || ids.empty()) {
          return f.Error(absl::StrCat(path, ".special_tokens[\"", name, "\"].ids"),
                         "must be a non-empty list of ids");
        }
        for (const Json& id : ids) {
          if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
            return f.Error(absl::StrCat(path, ".special_tokens[\"", name, "\"].ids"),
                           "must hold non-negative integer ids");
          }
          (seen_sequence ? after : before).push_back(id.get<int32_t>());
        }
      } else {
        return f.Error(piece_path, "must be {\"Sequence\": ...} or {\"SpecialToken\": ...}");
      }
    }
    if (!seen_sequence) return f.Error(single_path, "has no sequence A");
    d->prefix.insert(d->prefix.begin(), before.begin(), before.end());
    d->suffix.insert(d->suffix.end(), after.begin(), after.end());
    return absl::OkStatus();
  }
  return f.Error(JsonFile::Join(path, "type"),
                 absl::StrCat("post-processor '", type,
                              "' is not supported (TemplateProcessing, ByteLevel, Sequence)"));
}

}  // namespace

absl::StatusOr<Decorations> PostProcessorFromJson(const JsonFile& f, const Json& j,
                                                  const std::string& path) {
  Decorations d;
  RANKD_RETURN_IF_ERROR(AddPostProcessor(f, j, path, &d));
  return d;
}

}  // namespace rankd::tokenizer
