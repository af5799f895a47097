#include "rankd/model/config.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"
#include "rankd/common/status.h"

namespace rankd::model {
namespace {

using Json = nlohmann::json;

absl::Status FieldError(absl::string_view source, absl::string_view field, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(source, ": field '", field, "' ", why));
}

// Reads an integer field; `required` fields that are missing are an error.
absl::StatusOr<std::optional<int64_t>> GetInt(const Json& j, absl::string_view source,
                                              const char* field, bool required) {
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) {
    if (required) return FieldError(source, field, "is missing");
    return std::optional<int64_t>();
  }
  if (!it->is_number_integer()) return FieldError(source, field, "must be an integer");
  return std::optional<int64_t>(it->get<int64_t>());
}

absl::StatusOr<std::optional<double>> GetNumber(const Json& j, absl::string_view source,
                                                const char* field) {
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) return std::optional<double>();
  if (!it->is_number()) return FieldError(source, field, "must be a number");
  return std::optional<double>(it->get<double>());
}

absl::StatusOr<int> RequirePositive(const Json& j, absl::string_view source, const char* field) {
  RANKD_ASSIGN_OR_RETURN(auto v, GetInt(j, source, field, /*required=*/true));
  if (*v <= 0 || *v > (1 << 30)) return FieldError(source, field, "must be a positive integer");
  return static_cast<int>(*v);
}

// Rope settings: 5.x `rope_parameters` {rope_type, rope_theta, factor, ...}, or 4.x top-level
// `rope_theta` plus an optional `rope_scaling` {rope_type|type, factor, ...}.
absl::StatusOr<RopeConfig> ParseRope(const Json& j, absl::string_view source) {
  RopeConfig rope;
  const Json* params = nullptr;
  std::string params_name;
  if (auto it = j.find("rope_parameters"); it != j.end() && it->is_object()) {
    params = &*it;
    params_name = "rope_parameters";
  } else if (auto it2 = j.find("rope_scaling"); it2 != j.end() && it2->is_object()) {
    params = &*it2;
    params_name = "rope_scaling";
  }
  RANKD_ASSIGN_OR_RETURN(auto top_theta, GetNumber(j, source, "rope_theta"));
  if (top_theta) rope.theta = *top_theta;
  if (params == nullptr) return rope;

  const std::string ctx = absl::StrCat(source, " ", params_name);
  RANKD_ASSIGN_OR_RETURN(auto theta, GetNumber(*params, ctx, "rope_theta"));
  if (theta) rope.theta = *theta;
  std::string type = "default";
  for (const char* key : {"rope_type", "type"}) {
    if (auto it = params->find(key); it != params->end() && it->is_string()) {
      type = it->get<std::string>();
      break;
    }
  }
  RANKD_ASSIGN_OR_RETURN(auto factor, GetNumber(*params, ctx, "factor"));
  if (type == "default") {
    rope.type = RopeType::kDefault;
  } else if (type == "linear") {
    rope.type = RopeType::kLinear;
    if (!factor) return FieldError(ctx, "factor", "is missing (required by rope_type linear)");
    rope.factor = *factor;
  } else if (type == "llama3") {
    rope.type = RopeType::kLlama3;
    if (!factor) return FieldError(ctx, "factor", "is missing (required by rope_type llama3)");
    rope.factor = *factor;
    RANKD_ASSIGN_OR_RETURN(auto low, GetNumber(*params, ctx, "low_freq_factor"));
    RANKD_ASSIGN_OR_RETURN(auto high, GetNumber(*params, ctx, "high_freq_factor"));
    RANKD_ASSIGN_OR_RETURN(auto orig,
                           GetInt(*params, ctx, "original_max_position_embeddings", false));
    if (low) rope.low_freq_factor = *low;
    if (high) rope.high_freq_factor = *high;
    if (orig) rope.original_max_position_embeddings = static_cast<int>(*orig);
    if (rope.high_freq_factor <= rope.low_freq_factor) {
      return FieldError(ctx, "high_freq_factor", "must be greater than low_freq_factor");
    }
  } else {
    return FieldError(ctx, "rope_type",
                      absl::StrCat("'", type, "' is not supported (default, linear, llama3)"));
  }
  if (rope.factor <= 0) return FieldError(ctx, "factor", "must be positive");
  if (rope.theta <= 0) return FieldError(ctx, "rope_theta", "must be positive");
  return rope;
}

// The MLP activation: Gemma 2 reads `hidden_activation`; Gemma reads it too when set (older Gemma
// configs carry it beside `hidden_act`), else `hidden_act`; both default to gelu_pytorch_tanh, as
// their transformers configs do. The others read `hidden_act` (default silu).
absl::StatusOr<Activation> ParseActivation(const Json& j, absl::string_view source, Family family) {
  const bool gemma = family == Family::kGemma || family == Family::kGemma2;
  std::vector<const char*> keys = {"hidden_act"};
  if (family == Family::kGemma) keys = {"hidden_activation", "hidden_act"};
  if (family == Family::kGemma2) keys = {"hidden_activation"};
  for (const char* key : keys) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) continue;
    const std::string act = it->is_string() ? it->get<std::string>() : it->dump();
    if (act == "silu" || act == "swish") return Activation::kSilu;
    if (act == "gelu_pytorch_tanh") return Activation::kGeluTanh;
    return FieldError(source, key,
                      absl::StrCat("'", act, "' is not supported (silu, gelu_pytorch_tanh)"));
  }
  return gemma ? Activation::kGeluTanh : Activation::kSilu;
}

// A soft-capping value: missing takes the transformers default `fallback`, null turns it off.
absl::StatusOr<float> ParseSoftcap(const Json& j, absl::string_view source, const char* field,
                                   double fallback) {
  if (j.find(field) == j.end()) return static_cast<float>(fallback);
  RANKD_ASSIGN_OR_RETURN(auto v, GetNumber(j, source, field));
  if (!v) return 0.0f;
  if (!(*v > 0) || !std::isfinite(*v)) return FieldError(source, field, "must be positive or null");
  return static_cast<float>(*v);
}

// The sliding window and which layers use it. `sliding_window` (Mistral, Gemma 2; null: none;
// missing: the transformers default 4096) and `layer_types` ("sliding_attention" or
// "full_attention" per layer). Without layer_types, Mistral slides on every layer and Gemma 2 on
// the even ones (transformers' Gemma2Config default: layer i slides when (i + 1) % 2 == 1).
absl::Status ParseSlidingWindow(const Json& j, absl::string_view source, ModelConfig* c) {
  c->sliding_layers.assign(c->num_layers, false);
  const bool windowed = c->family == Family::kMistral || c->family == Family::kGemma2;
  if (windowed) {
    if (j.find("sliding_window") == j.end()) {
      c->sliding_window = 4096;
    } else {
      RANKD_ASSIGN_OR_RETURN(auto w, GetInt(j, source, "sliding_window", false));
      if (w && (*w <= 0 || *w > (1 << 30))) {
        return FieldError(source, "sliding_window", "must be a positive integer or null");
      }
      c->sliding_window = w ? static_cast<int>(*w) : 0;
    }
  }
  auto it = j.find("layer_types");
  if (it == j.end() || it->is_null()) {
    for (int l = 0; l < c->num_layers; ++l) {
      c->sliding_layers[l] = c->family == Family::kMistral  ? c->sliding_window > 0
                             : c->family == Family::kGemma2 ? (l + 1) % 2 == 1
                                                            : false;
    }
  } else {
    if (!it->is_array() || static_cast<int>(it->size()) != c->num_layers) {
      return FieldError(
          source, "layer_types",
          absl::StrCat("must be a list of num_hidden_layers (", c->num_layers, ") names"));
    }
    for (int l = 0; l < c->num_layers; ++l) {
      const Json& t = (*it)[l];
      const std::string type = t.is_string() ? t.get<std::string>() : t.dump();
      if (type == "sliding_attention") {
        c->sliding_layers[l] = true;
      } else if (type != "full_attention") {
        return FieldError(source, "layer_types",
                          absl::StrCat("[", l, "] '", type,
                                       "' is not supported (sliding_attention, full_attention)"));
      }
    }
  }
  for (int l = 0; l < c->num_layers; ++l) {
    if (c->sliding_layers[l] && c->sliding_window == 0) {
      return FieldError(source, "layer_types",
                        absl::StrCat("[", l, "] is sliding_attention but sliding_window is not set",
                                     windowed ? "" : " (not read for this architecture)"));
    }
  }
  if (std::find(c->sliding_layers.begin(), c->sliding_layers.end(), true) ==
      c->sliding_layers.end()) {
    c->sliding_window = 0;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModelConfig> ModelConfig::FromJson(absl::string_view json_text,
                                                  absl::string_view source) {
  Json j = Json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": not a JSON object"));
  }
  ModelConfig c;
  auto arch_it = j.find("architectures");
  if (arch_it == j.end() || !arch_it->is_array() || arch_it->empty() ||
      !(*arch_it)[0].is_string()) {
    return FieldError(source, "architectures", "is missing or not a list of names");
  }
  c.architecture = (*arch_it)[0].get<std::string>();
  struct Known {
    const char* name;
    Family family;
    HeadKind head;
  };
  static constexpr Known kKnown[] = {
      {"LlamaForCausalLM", Family::kLlama, HeadKind::kCausalLm},
      {"LlamaForSequenceClassification", Family::kLlama, HeadKind::kSequenceClassification},
      {"Qwen2ForCausalLM", Family::kQwen2, HeadKind::kCausalLm},
      {"Qwen2ForSequenceClassification", Family::kQwen2, HeadKind::kSequenceClassification},
      {"Qwen3ForCausalLM", Family::kQwen3, HeadKind::kCausalLm},
      {"Qwen3ForSequenceClassification", Family::kQwen3, HeadKind::kSequenceClassification},
      {"MistralForCausalLM", Family::kMistral, HeadKind::kCausalLm},
      {"MistralForSequenceClassification", Family::kMistral, HeadKind::kSequenceClassification},
      {"GemmaForCausalLM", Family::kGemma, HeadKind::kCausalLm},
      {"Gemma2ForCausalLM", Family::kGemma2, HeadKind::kCausalLm},
  };
  bool known = false;
  for (const Known& k : kKnown) {
    if (c.architecture == k.name) {
      c.family = k.family;
      c.head_kind = k.head;
      known = true;
    }
  }
  if (!known) {
    return FieldError(
        source, "architectures",
        absl::StrCat("'", c.architecture,
                     "' is not supported (Llama, Qwen2, Qwen3, Mistral For CausalLM or "
                     "SequenceClassification; GemmaForCausalLM, "
                     "Gemma2ForCausalLM)"));
  }

  RANKD_ASSIGN_OR_RETURN(c.hidden_size, RequirePositive(j, source, "hidden_size"));
  RANKD_ASSIGN_OR_RETURN(c.num_layers, RequirePositive(j, source, "num_hidden_layers"));
  RANKD_ASSIGN_OR_RETURN(c.num_heads, RequirePositive(j, source, "num_attention_heads"));
  RANKD_ASSIGN_OR_RETURN(c.intermediate_size, RequirePositive(j, source, "intermediate_size"));
  RANKD_ASSIGN_OR_RETURN(c.vocab_size, RequirePositive(j, source, "vocab_size"));
  RANKD_ASSIGN_OR_RETURN(auto kv, GetInt(j, source, "num_key_value_heads", false));
  c.num_kv_heads = kv ? static_cast<int>(*kv) : c.num_heads;
  if (c.num_kv_heads <= 0 || c.num_heads % c.num_kv_heads != 0) {
    return FieldError(source, "num_key_value_heads",
                      absl::StrFormat("(%d) must be positive and divide num_attention_heads (%d)",
                                      c.num_kv_heads, c.num_heads));
  }
  RANKD_ASSIGN_OR_RETURN(auto head_dim, GetInt(j, source, "head_dim", false));
  if (head_dim) {
    c.head_dim = static_cast<int>(*head_dim);
  } else {
    if (c.hidden_size % c.num_heads != 0) {
      return FieldError(source, "head_dim",
                        "is missing and hidden_size is not a multiple of num_attention_heads");
    }
    c.head_dim = c.hidden_size / c.num_heads;
  }
  if (c.head_dim <= 0 || c.head_dim % 2 != 0 || c.head_dim > 512) {
    return FieldError(source, "head_dim",
                      absl::StrCat("(", c.head_dim, ") must be even and in 2..512"));
  }
  RANKD_ASSIGN_OR_RETURN(auto max_pos, GetInt(j, source, "max_position_embeddings", false));
  c.max_position_embeddings = max_pos ? static_cast<int>(*max_pos) : 0;
  RANKD_ASSIGN_OR_RETURN(auto eps, GetNumber(j, source, "rms_norm_eps"));
  if (eps) c.rms_norm_eps = static_cast<float>(*eps);
  RANKD_ASSIGN_OR_RETURN(c.rope, ParseRope(j, source));

  RANKD_ASSIGN_OR_RETURN(c.activation, ParseActivation(j, source, c.family));
  if (auto it = j.find("mlp_bias"); it != j.end() && it->is_boolean() && it->get<bool>()) {
    return FieldError(source, "mlp_bias", "true is not supported");
  }
  if (auto it = j.find("use_sliding_window");
      it != j.end() && it->is_boolean() && it->get<bool>()) {
    return FieldError(source, "use_sliding_window", "true is not supported");
  }
  // transformers 5.x drops tie_word_embeddings when it is the class default (false for Llama
  // and Mistral, true for Gemma); Qwen configs always write it.
  const bool gemma = c.family == Family::kGemma || c.family == Family::kGemma2;
  c.tie_word_embeddings = gemma;
  if (auto it = j.find("tie_word_embeddings"); it != j.end() && it->is_boolean()) {
    c.tie_word_embeddings = it->get<bool>();
  }
  c.attention_bias = c.family == Family::kQwen2;
  if (auto it = j.find("attention_bias");
      it != j.end() && it->is_boolean() && c.family != Family::kQwen2) {
    c.attention_bias = it->get<bool>();
  }
  c.qk_norm = c.family == Family::kQwen3;
  c.norm_unit_offset = gemma;
  c.scale_embeddings = gemma;
  c.sandwich_norms = c.family == Family::kGemma2;
  c.attn_scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  if (c.family == Family::kGemma2) {
    // transformers' Gemma2Config defaults: query_pre_attn_scalar 256, soft-caps 50 and 30.
    double scalar = 256;
    RANKD_ASSIGN_OR_RETURN(auto qpas, GetNumber(j, source, "query_pre_attn_scalar"));
    if (qpas) scalar = *qpas;
    if (!(scalar > 0) || !std::isfinite(scalar)) {
      return FieldError(source, "query_pre_attn_scalar", "must be positive");
    }
    c.attn_scale = static_cast<float>(std::pow(scalar, -0.5));
    RANKD_ASSIGN_OR_RETURN(c.attn_logit_softcapping,
                           ParseSoftcap(j, source, "attn_logit_softcapping", 50.0));
    RANKD_ASSIGN_OR_RETURN(c.final_logit_softcapping,
                           ParseSoftcap(j, source, "final_logit_softcapping", 30.0));
  }
  RANKD_RETURN_IF_ERROR(ParseSlidingWindow(j, source, &c));

  if (c.head_kind == HeadKind::kSequenceClassification) {
    RANKD_ASSIGN_OR_RETURN(auto n, GetInt(j, source, "num_labels", false));
    if (n) {
      c.num_labels = static_cast<int>(*n);
    } else if (auto it = j.find("id2label"); it != j.end() && it->is_object() && !it->empty()) {
      c.num_labels = static_cast<int>(it->size());
    } else {
      c.num_labels = 2;  // transformers' PretrainedConfig default
    }
    if (c.num_labels <= 0) return FieldError(source, "num_labels", "must be positive");
  }
  RANKD_ASSIGN_OR_RETURN(auto bos, GetInt(j, source, "bos_token_id", false));
  if (bos) c.bos_token_id = static_cast<int32_t>(*bos);
  RANKD_ASSIGN_OR_RETURN(auto pad, GetInt(j, source, "pad_token_id", false));
  if (pad) c.pad_token_id = static_cast<int32_t>(*pad);
  return c;
}

absl::StatusOr<ModelConfig> ModelConfig::FromHfDir(absl::string_view dir) {
  const std::string path = absl::StrCat(dir, "/config.json");
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open (is this a model dir?)"));
  std::stringstream ss;
  ss << in.rdbuf();
  return FromJson(ss.str(), path);
}

float ModelConfig::embedding_scale() const {
  return scale_embeddings ? static_cast<float>(std::sqrt(static_cast<double>(hidden_size))) : 1.0f;
}

std::string ModelConfig::Summary() const {
  std::string extra;
  if (activation == Activation::kGeluTanh) absl::StrAppend(&extra, ", gelu_pytorch_tanh");
  if (attn_logit_softcapping > 0) {
    absl::StrAppend(&extra, ", attention soft-cap ", attn_logit_softcapping);
  }
  if (final_logit_softcapping > 0) {
    absl::StrAppend(&extra, ", final soft-cap ", final_logit_softcapping);
  }
  if (sliding_window > 0) {
    int n = 0;
    for (bool b : sliding_layers) n += b;
    absl::StrAppend(&extra, ", sliding window ", sliding_window, " on ", n, " layers");
  }
  return absl::StrFormat(
      "%s: hidden %d, layers %d, heads %d, kv heads %d, head_dim %d, intermediate %d, vocab %d, "
      "rope theta %g%s%s%s%s",
      architecture, hidden_size, num_layers, num_heads, num_kv_heads, head_dim, intermediate_size,
      vocab_size, rope.theta, rope.type == RopeType::kLlama3 ? " (llama3)" : "",
      tie_word_embeddings ? ", tied embeddings" : "", qk_norm ? ", q/k norm" : "", extra);
}

}  // namespace rankd::model
