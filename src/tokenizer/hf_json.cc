#include "hf_json.h"

#include <fstream>
#include <iterator>
#include <utility>

#include "absl/strings/str_cat.h"
#include "rankd/common/status.h"

namespace rankd::tokenizer {

absl::Status JsonFile::Error(absl::string_view field, absl::string_view why) const {
  return absl::InvalidArgumentError(absl::StrCat(path_, ": ", field, ": ", why));
}

namespace {

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::string text(static_cast<size_t>(in.tellg()), '\0');
  in.seekg(0);
  if (!in.read(text.data(), static_cast<std::streamsize>(text.size()))) {
    return absl::DataLossError(absl::StrCat(path, ": cannot read"));
  }
  return text;
}

// nlohmann's SAX events: the tree builder gets all of them but those of model.vocab and
// model.merges, which fill a BpeTables.
class TokenizerSax {
 public:
  using Int = Json::number_integer_t;
  using Uint = Json::number_unsigned_t;
  using Float = Json::number_float_t;

  TokenizerSax(Json* root, BpeTables* tables)
      : dom_(*root, /*allow_exceptions=*/false), tables_(tables) {}

  bool null() {
    return Value([&] { return dom_.null(); });
  }
  bool boolean(bool v) {
    return Value([&] { return dom_.boolean(v); });
  }
  bool number_integer(Int v) {
    return Value([&] { return dom_.number_integer(v); }, v);
  }
  bool number_unsigned(Uint v) {
    return Value([&] { return dom_.number_unsigned(v); }, v <= INT64_MAX ? Int(v) : -1);
  }
  bool number_float(Float v, const std::string& s) {
    return Value([&] { return dom_.number_float(v, s); });
  }
  bool binary(Json::binary_t& v) {
    return Value([&] { return dom_.binary(v); });
  }
  bool string(std::string& v) {
    if (capture_ == Capture::kMerges && skip_ == 0) {
      if (pair_depth_ == 0) {
        tables_->merges.push_back({BpeTables::Merge::Form::kString, std::move(v), ""});
      } else if (pair_.size() < 3) {
        pair_.push_back(std::move(v));
      }
      return true;
    }
    return Value([&] { return dom_.string(v); });
  }

  bool key(std::string& k) {
    if (capture_ == Capture::kVocab && skip_ == 0) {
      vocab_key_ = std::move(k);
      return true;
    }
    if (capture_ != Capture::kNone) return true;
    last_key_ = k;
    return dom_.key(k);
  }

  bool start_object(std::size_t n) {
    if (capture_ != Capture::kNone) return StartNested();
    if (depth_ == 2 && in_model_ && last_key_ == "vocab") {
      capture_ = Capture::kVocab;
      tables_->has_vocab = true;
      return true;
    }
    const bool model = depth_ == 1 && last_key_ == "model";
    ++depth_;
    if (model) in_model_ = true;
    return dom_.start_object(n);
  }
  bool end_object() {
    if (capture_ != Capture::kNone) return EndNested();
    if (--depth_ == 1) in_model_ = false;
    return dom_.end_object();
  }
  bool start_array(std::size_t n) {
    if (capture_ == Capture::kMerges && skip_ == 0 && pair_depth_ == 0) {
      pair_depth_ = 1;
      pair_.clear();
      pair_bad_ = false;
      return true;
    }
    if (capture_ != Capture::kNone) return StartNested();
    if (depth_ == 2 && in_model_ && last_key_ == "merges") {
      capture_ = Capture::kMerges;
      tables_->has_merges = true;
      return true;
    }
    ++depth_;
    return dom_.start_array(n);
  }
  bool end_array() {
    if (capture_ == Capture::kMerges && skip_ == 0) {
      if (pair_depth_ == 1) {
        pair_depth_ = 0;
        const bool ok = !pair_bad_ && pair_.size() == 2;
        tables_->merges.push_back(ok ? BpeTables::Merge{BpeTables::Merge::Form::kPair,
                                                        std::move(pair_[0]), std::move(pair_[1])}
                                     : BpeTables::Merge{});
        return true;
      }
      capture_ = Capture::kNone;  // the end of model.merges
      return true;
    }
    if (capture_ != Capture::kNone) return EndNested();
    --depth_;
    return dom_.end_array();
  }

  bool parse_error(std::size_t pos, const std::string& token,
                   const nlohmann::detail::exception& e) {
    return dom_.parse_error(pos, token, e);
  }
  bool is_errored() const { return dom_.is_errored(); }

 private:
  enum class Capture { kNone, kVocab, kMerges };

  // A scalar: the tree's, or an entry of the table being captured (`id` for a vocab entry).
  template <typename ToDom>
  bool Value(ToDom to_dom, Int id = -1) {
    if (capture_ == Capture::kNone) return to_dom();
    if (skip_ > 0) return true;
    if (capture_ == Capture::kVocab) {
      tables_->vocab.emplace_back(std::move(vocab_key_), id >= 0 ? id : -1);
    } else if (pair_depth_ == 1) {
      pair_bad_ = true;
    } else {
      tables_->merges.push_back({});
    }
    return true;
  }
  // An object or list inside a captured table: one bad entry, skipped to its end.
  bool StartNested() {
    if (skip_++ == 0) {
      if (capture_ == Capture::kVocab) {
        tables_->vocab.emplace_back(std::move(vocab_key_), -1);
      } else if (pair_depth_ == 1) {
        pair_bad_ = true;
      } else {
        tables_->merges.push_back({});
      }
    }
    return true;
  }
  bool EndNested() {
    if (skip_ > 0) {
      --skip_;
    } else {
      capture_ = Capture::kNone;  // the end of model.vocab
    }
    return true;
  }

  nlohmann::detail::json_sax_dom_parser<Json> dom_;
  BpeTables* tables_;
  int depth_ = 0;          // open containers of the tree
  bool in_model_ = false;  // the open object at depth 2 is the root's "model"
  std::string last_key_;
  Capture capture_ = Capture::kNone;
  int skip_ = 0;  // open containers inside a bad captured entry
  std::string vocab_key_;
  int pair_depth_ = 0;  // 1 inside a merge's ["a", "b"]
  std::vector<std::string> pair_;
  bool pair_bad_ = false;
};

}  // namespace

absl::StatusOr<Json> JsonFile::Parse() const {
  RANKD_ASSIGN_OR_RETURN(const std::string text, ReadFile(path_));
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(path_, ": not valid JSON"));
  if (!j.is_object()) return absl::InvalidArgumentError(absl::StrCat(path_, ": not an object"));
  return j;
}

absl::StatusOr<Json> JsonFile::ParseTokenizer(BpeTables* tables) const {
  RANKD_ASSIGN_OR_RETURN(const std::string text, ReadFile(path_));
  Json j;
  TokenizerSax sax(&j, tables);
  if (!Json::sax_parse(text, &sax, nlohmann::detail::input_format_t::json, /*strict=*/true,
                       /*ignore_comments=*/false) ||
      sax.is_errored()) {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": not valid JSON"));
  }
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
