#include "rankd/model/weights.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "rankd/common/status.h"

namespace rankd::model {
namespace {

class Binder {
 public:
  explicit Binder(const SafetensorsModel& st) : st_(st) {}

  // `name` without the "model." prefix for body tensors; `top_level` names (lm_head, score) are
  // looked up as given.
  absl::StatusOr<const TensorView*> Get(const std::string& name, std::vector<int64_t> shape,
                                        bool top_level = false) {
    const std::string full = top_level ? name : absl::StrCat("model.", name);
    const TensorView* t = nullptr;
    if (st_.Has(full)) {
      t = *st_.Find(full);
    } else if (!top_level && st_.Has(name)) {
      t = *st_.Find(name);
    } else {
      return st_.Find(full).status();
    }
    if (t->shape != shape) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", t->name, "' has shape ",
                                                     t->ShapeString(), ", config.json implies [",
                                                     absl::StrJoin(shape, ", "), "]"));
    }
    return t;
  }

  bool Has(const std::string& name) { return st_.Has(name); }

 private:
  const SafetensorsModel& st_;
};

}  // namespace

absl::StatusOr<ModelTensors> BindTensors(const ModelConfig& c, const SafetensorsModel& st) {
  Binder b(st);
  const int64_t H = c.hidden_size, D = c.head_dim, Q = c.q_width(), KV = c.kv_width(),
                I = c.intermediate_size, V = c.vocab_size;
  ModelTensors m;
  RANKD_ASSIGN_OR_RETURN(m.embed, b.Get("embed_tokens.weight", {V, H}));
  RANKD_ASSIGN_OR_RETURN(m.final_norm, b.Get("norm.weight", {H}));
  m.layers.resize(c.num_layers);
  for (int l = 0; l < c.num_layers; ++l) {
    const std::string p = absl::StrCat("layers.", l, ".");
    LayerTensors& t = m.layers[l];
    RANKD_ASSIGN_OR_RETURN(t.input_norm, b.Get(p + "input_layernorm.weight", {H}));
    RANKD_ASSIGN_OR_RETURN(t.q_proj, b.Get(p + "self_attn.q_proj.weight", {Q, H}));
    RANKD_ASSIGN_OR_RETURN(t.k_proj, b.Get(p + "self_attn.k_proj.weight", {KV, H}));
    RANKD_ASSIGN_OR_RETURN(t.v_proj, b.Get(p + "self_attn.v_proj.weight", {KV, H}));
    RANKD_ASSIGN_OR_RETURN(t.o_proj, b.Get(p + "self_attn.o_proj.weight", {H, Q}));
    if (c.attention_bias) {
      RANKD_ASSIGN_OR_RETURN(t.q_bias, b.Get(p + "self_attn.q_proj.bias", {Q}));
      RANKD_ASSIGN_OR_RETURN(t.k_bias, b.Get(p + "self_attn.k_proj.bias", {KV}));
      RANKD_ASSIGN_OR_RETURN(t.v_bias, b.Get(p + "self_attn.v_proj.bias", {KV}));
    }
    if (c.qk_norm) {
      RANKD_ASSIGN_OR_RETURN(t.q_norm, b.Get(p + "self_attn.q_norm.weight", {D}));
      RANKD_ASSIGN_OR_RETURN(t.k_norm, b.Get(p + "self_attn.k_norm.weight", {D}));
    }
    if (c.sandwich_norms) {
      RANKD_ASSIGN_OR_RETURN(t.attn_out_norm, b.Get(p + "post_attention_layernorm.weight", {H}));
      RANKD_ASSIGN_OR_RETURN(t.post_norm, b.Get(p + "pre_feedforward_layernorm.weight", {H}));
      RANKD_ASSIGN_OR_RETURN(t.mlp_out_norm, b.Get(p + "post_feedforward_layernorm.weight", {H}));
    } else {
      RANKD_ASSIGN_OR_RETURN(t.post_norm, b.Get(p + "post_attention_layernorm.weight", {H}));
    }
    RANKD_ASSIGN_OR_RETURN(t.gate_proj, b.Get(p + "mlp.gate_proj.weight", {I, H}));
    RANKD_ASSIGN_OR_RETURN(t.up_proj, b.Get(p + "mlp.up_proj.weight", {I, H}));
    RANKD_ASSIGN_OR_RETURN(t.down_proj, b.Get(p + "mlp.down_proj.weight", {H, I}));
  }
  if (c.head_kind == HeadKind::kSequenceClassification) {
    RANKD_ASSIGN_OR_RETURN(m.head, b.Get("score.weight", {c.num_labels, H}, /*top_level=*/true));
  } else if (b.Has("lm_head.weight") && !c.tie_word_embeddings) {
    RANKD_ASSIGN_OR_RETURN(m.head, b.Get("lm_head.weight", {V, H}, /*top_level=*/true));
  } else if (c.tie_word_embeddings || !b.Has("lm_head.weight")) {
    // Tied: transformers writes no lm_head tensor; an untied config without one is an error.
    if (!c.tie_word_embeddings) {
      return absl::NotFoundError(
          "tensor 'lm_head.weight' not found and tie_word_embeddings is false");
    }
    m.head = m.embed;
  }
  return m;
}

absl::StatusOr<std::vector<float>> Fp8RowScales(const SafetensorsModel& st,
                                                const TensorView& weight) {
  if (weight.dtype != DType::kF8E4M3) return std::vector<float>{};
  const std::string name = absl::StrCat(weight.name, "_scale");
  if (st.Has(absl::StrCat(name, "_inv"))) {
    return absl::UnimplementedError(
        absl::StrCat("tensor '", name,
                     "_inv': block-wise fp8 weight scales (weight_scale_inv) are not "
                     "supported; fp8 checkpoints need a per-tensor or per-channel weight_scale"));
  }
  if (!st.Has(name)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", weight.name, "' is F8_E4M3 but the checkpoint has no '", name, "'"));
  }
  const TensorView& scale = **st.Find(name);
  const int64_t rows = weight.shape.empty() ? 1 : weight.shape[0];
  const int64_t n = scale.numel();
  const bool per_row =
      n == rows && (scale.shape.size() == 1 || (scale.shape.size() == 2 && scale.shape[1] == 1));
  if (scale.dtype == DType::kF8E4M3 || (n != 1 && !per_row)) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", name, "' is ", DTypeName(scale.dtype), " ", scale.ShapeString(),
                     ": an fp8 weight scale is one F32/BF16/F16 value or one per row of '",
                     weight.name, "' [", rows, "]"));
  }
  std::vector<float> values(n);
  RANKD_RETURN_IF_ERROR(ConvertToF32(scale, absl::MakeSpan(values)));
  if (n == 1) values.assign(rows, values[0]);
  return values;
}

absl::Status CheckNotFp8(const TensorView& t) {
  if (t.dtype != DType::kF8E4M3) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("tensor '", t.name, "' is F8_E4M3; only the linear layers' weights may be fp8"));
}

}  // namespace rankd::model
