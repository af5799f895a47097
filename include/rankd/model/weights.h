// Binds a checkpoint's tensors to the roles the forward pass needs, checking every shape against
// the ModelConfig. Backends convert the bound views to their own dtype and layout (float32 on the
// CPU, bf16 on the GPU); nothing here copies data.
//
// Shapes below use H = hidden_size, D = head_dim, Nq = num_heads, Nkv = num_kv_heads,
// I = intermediate_size, V = vocab_size. Linear weights are [out, in], row-major, as HF stores
// them.
#ifndef RANKD_MODEL_WEIGHTS_H_
#define RANKD_MODEL_WEIGHTS_H_

#include <vector>

#include "absl/status/statusor.h"
#include "rankd/model/config.h"
#include "rankd/model/safetensors.h"

namespace rankd::model {

struct LayerTensors {
  const TensorView* input_norm = nullptr;  // [H]
  const TensorView* q_proj = nullptr;      // [Nq*D, H]
  const TensorView* k_proj = nullptr;      // [Nkv*D, H]
  const TensorView* v_proj = nullptr;      // [Nkv*D, H]
  const TensorView* q_bias = nullptr;      // [Nq*D]   attention_bias only
  const TensorView* k_bias = nullptr;      // [Nkv*D]  attention_bias only
  const TensorView* v_bias = nullptr;      // [Nkv*D]  attention_bias only
  const TensorView* q_norm = nullptr;      // [D]      qk_norm only
  const TensorView* k_norm = nullptr;      // [D]      qk_norm only
  const TensorView* o_proj = nullptr;      // [H, Nq*D]
  // The norm in front of the MLP: post_attention_layernorm, or (sandwich_norms, Gemma 2)
  // pre_feedforward_layernorm.
  const TensorView* post_norm = nullptr;      // [H]
  const TensorView* attn_out_norm = nullptr;  // [H] sandwich_norms only: post_attention_layernorm
  const TensorView* mlp_out_norm = nullptr;   // [H] sandwich_norms only: post_feedforward_layernorm
  const TensorView* gate_proj = nullptr;      // [I, H]
  const TensorView* up_proj = nullptr;        // [I, H]
  const TensorView* down_proj = nullptr;      // [H, I]
};

struct ModelTensors {
  const TensorView* embed = nullptr;       // [V, H]
  std::vector<LayerTensors> layers;        // L entries
  const TensorView* final_norm = nullptr;  // [H]
  // The output projection: lm_head [V, H] (embed when tied) for CausalLM, score [num_labels, H]
  // for SequenceClassification.
  const TensorView* head = nullptr;
};

// Finds and shape-checks all tensors. Names are tried with and without the "model." prefix.
// Errors name the directory, the tensor, and the expected and actual shapes.
absl::StatusOr<ModelTensors> BindTensors(const ModelConfig& config, const SafetensorsModel& st);

// fp8 checkpoints (config.json `quantization_config` with quant_method "fp8") store each linear
// weight `<name>` as F8_E4M3 with its dequantisation scale `<name>_scale`: one value (per tensor)
// or one per output row ([rows] or [rows, 1]), F32, BF16 or F16; w[r, :] = q[r, :] * scale[r].
// Returns the weight's scale per row, [rows], or an empty vector when the weight is not F8_E4M3.
// An `input_scale` (static activation scales) is ignored: activations are quantised per token.
// Block-wise scales (`<name>_scale_inv`, DeepSeek-style 128x128 blocks) and a missing or
// misshapen scale are errors naming the tensor.
absl::StatusOr<std::vector<float>> Fp8RowScales(const SafetensorsModel& st,
                                                const TensorView& weight);

// OK unless `t` is F8_E4M3: only the linear layers' weights may be (their scales are above), not
// norms, embeddings, biases or the head.
absl::Status CheckNotFp8(const TensorView& t);

}  // namespace rankd::model

#endif  // RANKD_MODEL_WEIGHTS_H_
