// The tokenizer.json loader: reads tokenizer.json (and tokenizer_config.json), builds the pipeline
// from the components of hf_normalizers.h, hf_pre_tokenizers.h, hf_bpe.h, hf_added_tokens.h and
// hf_post_processors.h, and runs it in Encode.
#include "hf_tokenizer.h"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "hf_added_tokens.h"
#include "hf_bpe.h"
#include "hf_json.h"
#include "hf_normalizers.h"
#include "hf_post_processors.h"
#include "hf_pre_tokenizers.h"
#include "hf_unicode.h"
#include "rankd/common/status.h"

namespace rankd::tokenizer {
namespace {

// The pipeline of one tokenizer.json. Immutable after Load but for cache_, which locks its own
// shards: Encode and PieceToId are thread-safe.
class HfTokenizer final : public Tokenizer {
 public:
  static absl::StatusOr<std::unique_ptr<HfTokenizer>> Load(const std::string& json_path,
                                                           const std::string& config_path);

  absl::StatusOr<std::vector<int32_t>> Encode(absl::string_view text,
                                              bool add_special_tokens) const override;

  absl::StatusOr<int32_t> PieceToId(absl::string_view piece) const override {
    if (auto id = added_->Find(piece)) return *id;
    if (auto id = model_->Find(piece)) return *id;
    // A piece given as plain text (" yes") is also looked up in its byte-level form ("Ġyes").
    if (byte_level_) {
      if (auto id = model_->Find(ToByteLevel(piece))) return *id;
    }
    return absl::NotFoundError(absl::StrCat("piece '", piece, "' is not in ", path_));
  }

  int vocab_size() const override { return vocab_size_; }
  std::optional<int32_t> bos_id() const override {
    if (decorations_.prefix.empty()) return std::nullopt;
    return decorations_.prefix.front();
  }
  absl::string_view kind() const override { return "tokenizer.json"; }

 private:
  // Appends the ids of a text piece that holds no added token (before normalization);
  // `at_origin`: it starts at byte 0 of the text given to Encode.
  absl::Status EncodeText(absl::string_view text, bool at_origin, std::vector<int32_t>* ids) const;

  std::string path_;
  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::optional<BpeModel> model_;
  std::optional<AddedVocabulary> added_;
  WordCache cache_;
  Decorations decorations_;
  bool byte_level_ = false;
  int vocab_size_ = 0;
};

absl::Status HfTokenizer::EncodeText(absl::string_view text, bool at_origin,
                                     std::vector<int32_t>* ids) const {
  std::string normalized;
  if (normalizer_ != nullptr) {
    RANKD_ASSIGN_OR_RETURN(normalized, normalizer_->Normalize(std::string(text)));
  } else {
    normalized = std::string(text);
  }
  std::vector<Segment> segments;
  added_->SplitNormalized(normalized, &segments);
  std::vector<std::string> words;
  for (const Segment& seg : segments) {
    if (seg.id >= 0) {
      ids->push_back(seg.id);
      continue;
    }
    words.clear();
    words.emplace_back(normalized, seg.begin, seg.end - seg.begin);
    bool first_at_origin = at_origin && seg.begin == 0;
    if (pre_tokenizer_ != nullptr) {
      RANKD_RETURN_IF_ERROR(pre_tokenizer_->Apply(&words, &first_at_origin));
    }
    for (const std::string& w : words) {
      if (cache_.Lookup(w, ids)) continue;
      const size_t first = ids->size();
      model_->Tokenize(w, ids);
      cache_.Insert(w, ids->data() + first, ids->size() - first);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int32_t>> HfTokenizer::Encode(absl::string_view text,
                                                         bool add_special_tokens) const {
  if (const size_t bad = unicode::FindInvalidUtf8(text); bad != absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat("text is not valid UTF-8 (byte ", bad, ")"));
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 8);
  if (add_special_tokens) ids = decorations_.prefix;
  std::vector<Segment> segments;
  added_->SplitRaw(text, &segments);
  for (const Segment& seg : segments) {
    if (seg.id >= 0) {
      ids.push_back(seg.id);
    } else {
      RANKD_RETURN_IF_ERROR(
          EncodeText(text.substr(seg.begin, seg.end - seg.begin), seg.begin == 0, &ids));
    }
  }
  if (add_special_tokens) {
    ids.insert(ids.end(), decorations_.suffix.begin(), decorations_.suffix.end());
  }
  return ids;
}

// A bos_token / eos_token entry of tokenizer_config.json: a string, {"content": str}, or null.
absl::StatusOr<std::optional<std::string>> ConfigToken(const JsonFile& f, const Json& config,
                                                       const char* key) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
    return (*it)["content"].get<std::string>();
  }
  return f.Error(key, "must be a string, {\"content\": str} or null");
}

constexpr char kSentencePieceSpace[] = "\xE2\x96\x81";  // U+2581 "▁"

// transformers 5 builds the pipeline of a tokenizer class that has its own __init__ itself, from
// tokenizer.json's vocabulary, merges and added tokens only (TokenizersBackend.
// convert_to_native_format reads tokenizer.json whole only for classes without an __init__, such
// as PreTrainedTokenizerFast). This rewrites `j` (tokenizer.json) to the pipeline that
// AutoTokenizer builds for the `tokenizer_class` of `config` (tokenizer_config.json, read through
// `cf`); other classes keep tokenizer.json as it is.
// `tables` holds model.vocab when ParseTokenizer took it out of `j`.
absl::Status FollowTransformersClass(const JsonFile& cf, const Json& config,
                                     const BpeTables& tables, Json* j) {
  auto cls = config.find("tokenizer_class");
  if (cls == config.end() || !cls->is_string() || !(*j)["model"].is_object()) {
    return absl::OkStatus();
  }
  const std::string name = cls->get<std::string>();
  Json& model = (*j)["model"];
  if (name == "LlamaTokenizer" || name == "LlamaTokenizerFast") {
    // models/llama/tokenization_llama.py (LlamaTokenizer.__init__): no normalizer (tokenizer.json's
    // Prepend + Replace is dropped), Metaspace("▁", prepend_scheme=_get_prepend_scheme(
    // add_prefix_space, self), split=False), BPE(fuse_unk=True, byte_fallback=True) without an
    // unk_token. The scheme:
    // "never" without add_prefix_space (default true), else "always" when `legacy` is truthy and
    // "first" when it is false, null or absent (the __init__ default is legacy=False).
    RANKD_ASSIGN_OR_RETURN(const bool add_prefix_space,
                           cf.Bool(config, "", "add_prefix_space", true));
    RANKD_ASSIGN_OR_RETURN(const bool legacy, cf.Bool(config, "", "legacy", false));
    const char* scheme = !add_prefix_space ? "never" : legacy ? "always" : "first";
    (*j)["normalizer"] = nullptr;
    (*j)["pre_tokenizer"] = {{"type", "Metaspace"},
                             {"replacement", kSentencePieceSpace},
                             {"prepend_scheme", scheme},
                             {"split", false}};
    model["fuse_unk"] = true;
    model["byte_fallback"] = true;
    model["ignore_merges"] = false;  // BPE()'s default
    model["unk_token"] = nullptr;    // not passed to BPE()
  } else if (name == "GemmaTokenizer" || name == "GemmaTokenizerFast") {
    // models/gemma/tokenization_gemma.py (GemmaTokenizer.__init__): normalizer Replace(" ", "▁"),
    // pre-tokenizer Split(" ", "merged_with_previous"), BPE(fuse_unk=True, unk_token=unk_token,
    // byte_fallback=True).
    RANKD_ASSIGN_OR_RETURN(auto unk, ConfigToken(cf, config, "unk_token"));
    (*j)["normalizer"] = {
        {"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kSentencePieceSpace}};
    (*j)["pre_tokenizer"] = {{"type", "Split"},
                             {"pattern", {{"String", " "}}},
                             {"behavior", "MergedWithPrevious"},
                             {"invert", false}};
    model["fuse_unk"] = true;
    model["byte_fallback"] = true;
    model["ignore_merges"] = false;
    model["unk_token"] = unk.value_or("<unk>");
    // Its mask_token (default "<mask>") is one of the special tokens that __init__ adds to the
    // added tokens, when the vocab has it (Gemma 1's tokenizer.json lists it in the vocab only).
    RANKD_ASSIGN_OR_RETURN(auto mask, ConfigToken(cf, config, "mask_token"));
    const std::string mask_token = mask.value_or("<mask>");
    Json& added = (*j)["added_tokens"];
    if (!added.is_array()) return absl::OkStatus();  // AddedVocabulary names the error
    for (const Json& a : added) {
      if (a.is_object() && a.value("content", "") == mask_token) return absl::OkStatus();
    }
    std::optional<int64_t> mask_id;
    if (tables.has_vocab) {
      for (const auto& [token, id] : tables.vocab) {
        if (token == mask_token && id >= 0) mask_id = id;
      }
    } else if (model.contains("vocab") && model["vocab"].is_object() &&
               model["vocab"].contains(mask_token) &&
               model["vocab"][mask_token].is_number_integer()) {
      mask_id = model["vocab"][mask_token].get<int64_t>();
    }
    if (mask_id) {
      added.push_back({{"id", *mask_id},
                       {"content", mask_token},
                       {"single_word", false},
                       {"lstrip", false},
                       {"rstrip", false},
                       {"normalized", false},
                       {"special", true}});
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<HfTokenizer>> HfTokenizer::Load(const std::string& json_path,
                                                               const std::string& config_path) {
  JsonFile f(json_path);
  BpeTables tables;
  RANKD_ASSIGN_OR_RETURN(Json j, f.ParseTokenizer(&tables));
  std::optional<Json> config;
  JsonFile cf(config_path);
  if (std::filesystem::exists(config_path)) {
    RANKD_ASSIGN_OR_RETURN(config, cf.Parse());
    RANKD_RETURN_IF_ERROR(FollowTransformersClass(cf, *config, tables, &j));
  }
  auto tok = std::unique_ptr<HfTokenizer>(new HfTokenizer());
  tok->path_ = json_path;

  auto model = j.find("model");
  if (model == j.end()) return f.Error("model", "is missing");
  RANKD_ASSIGN_OR_RETURN(tok->model_, BpeModel::FromJson(f, *model, std::move(tables)));
  tok->vocab_size_ = tok->model_->max_id() + 1;

  static const Json kNull;
  auto member = [&](const char* key) -> const Json& {
    auto it = j.find(key);
    return it == j.end() ? kNull : *it;
  };
  RANKD_ASSIGN_OR_RETURN(tok->normalizer_,
                         NormalizerFromJson(f, member("normalizer"), "normalizer"));
  RANKD_ASSIGN_OR_RETURN(
      tok->pre_tokenizer_,
      PreTokenizerFromJson(f, member("pre_tokenizer"), "pre_tokenizer", &tok->byte_level_));
  RANKD_ASSIGN_OR_RETURN(
      tok->added_, AddedVocabulary::FromJson(f, member("added_tokens"), tok->normalizer_.get()));
  tok->vocab_size_ = std::max(tok->vocab_size_, tok->added_->max_id() + 1);

  // transformers 5 rebuilds the post-processor from tokenizer_config.json when that file sets
  // add_bos_token or add_eos_token, or when tokenizer.json has none.
  const bool from_config =
      config && (config->contains("add_bos_token") || config->contains("add_eos_token"));
  if (from_config || member("post_processor").is_null()) {
    for (const char* which : {"bos", "eos"}) {
      if (!config) break;
      const std::string add_key = absl::StrCat("add_", which, "_token");
      const std::string token_key = absl::StrCat(which, "_token");
      RANKD_ASSIGN_OR_RETURN(const bool add, cf.Bool(*config, "", add_key.c_str(), false));
      RANKD_ASSIGN_OR_RETURN(auto token, ConfigToken(cf, *config, token_key.c_str()));
      if (!add || !token) continue;  // no token to add: transformers turns the flag off
      auto id = tok->PieceToId(*token);
      if (!id.ok()) return cf.Error(token_key, absl::StrCat("'", *token, "' is not a token"));
      (which[0] == 'b' ? tok->decorations_.prefix : tok->decorations_.suffix).push_back(*id);
    }
  } else {
    RANKD_ASSIGN_OR_RETURN(tok->decorations_,
                           PostProcessorFromJson(f, member("post_processor"), "post_processor"));
  }
  return tok;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadHfTokenizer(const std::string& json_path,
                                                           const std::string& config_path) {
  RANKD_ASSIGN_OR_RETURN(auto tok, HfTokenizer::Load(json_path, config_path));
  return std::unique_ptr<Tokenizer>(std::move(tok));
}

}  // namespace rankd::tokenizer
