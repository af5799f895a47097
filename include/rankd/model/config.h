// rankd/model: what a checkpoint is, with no compute: config.json (this header), safetensors
// (safetensors.h), tensor binding (weights.h), RoPE's frequency table (rope.h) and the input checks
// every layer shares (input_checks.h: token ids, finite embeddings, context length).
//
// ModelConfig: the architecture facts of a Hugging Face checkpoint, read from its config.json.
// Both config styles that real checkpoints use are accepted: transformers 4.x (`rope_theta` and
// `rope_scaling` at top level) and 5.x (`rope_parameters`).
#ifndef RANKD_MODEL_CONFIG_H_
#define RANKD_MODEL_CONFIG_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace rankd::model {

// Decoder family. What differs between families is spelled out as ModelConfig fields (biases,
// norms, activation, soft-capping, sliding windows), so that the backends read those, not this.
enum class Family {
  kLlama,    // LlamaFor*: no biases.
  kQwen2,    // Qwen2For*: q/k/v projections carry biases.
  kQwen3,    // Qwen3For*: per-head RMSNorm on q and k (q_norm, k_norm) before RoPE.
  kMistral,  // MistralFor*: Llama's layout, optional sliding window on every layer.
  kGemma,    // GemmaForCausalLM: scaled embeddings, (1 + w) norms, GeGLU, tied.
  kGemma2,   // Gemma2ForCausalLM: Gemma plus soft-capping, four norms a layer, sliding layers.
};

// The MLP's activation: out = act(gate) * up.
enum class Activation {
  kSilu,      // silu / swish (SwiGLU)
  kGeluTanh,  // gelu_pytorch_tanh: 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3)))  (GeGLU)
};

// Which output head the checkpoint has.
enum class HeadKind {
  kCausalLm,                // *ForCausalLM: lm_head [vocab, hidden] (or tied to embed_tokens).
  kSequenceClassification,  // *ForSequenceClassification: score [num_labels, hidden].
};

enum class RopeType {
  kDefault,  // inv_freq[i] = theta^(-2i/head_dim)
  kLinear,   // inv_freq / factor
  kLlama3,   // Llama 3.1 frequency-dependent scaling (factor, low/high_freq_factor, orig. max pos)
};

struct RopeConfig {
  RopeType type = RopeType::kDefault;
  double theta = 10000.0;
  double factor = 1.0;                          // linear and llama3
  double low_freq_factor = 1.0;                 // llama3
  double high_freq_factor = 4.0;                // llama3
  int original_max_position_embeddings = 8192;  // llama3
};

struct ModelConfig {
  std::string architecture;  // e.g. "LlamaForSequenceClassification", as config.json names it
  Family family = Family::kLlama;
  HeadKind head_kind = HeadKind::kCausalLm;

  int hidden_size = 0;        // model width H
  int num_layers = 0;         // decoder layers L
  int num_heads = 0;          // query heads
  int num_kv_heads = 0;       // key/value heads (GQA when < num_heads, MQA when 1)
  int head_dim = 0;           // per-head width D; num_heads * D may differ from H (Qwen3)
  int intermediate_size = 0;  // MLP width I
  int vocab_size = 0;         // rows of embed_tokens
  int num_labels = 1;         // rows of the classifier `score` (SequenceClassification only)
  int max_position_embeddings = 0;
  float rms_norm_eps = 1e-6f;
  RopeConfig rope;
  bool tie_word_embeddings = false;  // lm_head shares embed_tokens
  bool attention_bias = false;       // q/k/v projections have biases (Qwen2; Llama attention_bias)
  bool qk_norm = false;              // per-head RMSNorm of q and k (Qwen3)
  Activation activation = Activation::kSilu;
  // Gemma: every RMSNorm multiplies by (1 + weight), in fp32.
  bool norm_unit_offset = false;
  // Gemma: token embeddings are multiplied by sqrt(hidden_size), a constant HF rounds to the
  // model's dtype. Embedding items are not: they stand for the embedding layer's output, which is
  // where transformers 5 scales (GemmaTextScaledWordEmbedding), so its inputs_embeds are used as
  // given.
  bool scale_embeddings = false;
  // Gemma 2: post_attention_layernorm normalises the attention output before its residual add,
  // pre_feedforward_layernorm feeds the MLP, post_feedforward_layernorm normalises its output.
  bool sandwich_norms = false;
  float attn_scale = 0;               // softmax scale: head_dim^-0.5 or query_pre_attn_scalar^-0.5
  float attn_logit_softcapping = 0;   // Gemma 2: scores = cap * tanh(scores / cap); 0: off
  float final_logit_softcapping = 0;  // Gemma 2: on the LM logits; 0: off
  // Sliding-window attention: on layer l with sliding_layers[l], query position i sees key
  // positions j with i - sliding_window < j <= i. 0: no layer slides.
  int sliding_window = 0;
  std::vector<bool> sliding_layers;  // [num_layers]
  std::optional<int32_t> bos_token_id;
  std::optional<int32_t> pad_token_id;

  int q_width() const { return num_heads * head_dim; }
  int kv_width() const { return num_kv_heads * head_dim; }
  // The attention window of `layer` (0: none).
  int window(int layer) const { return sliding_layers[layer] ? sliding_window : 0; }
  // The factor embeddings are multiplied by: sqrt(hidden_size), or 1.
  float embedding_scale() const;

  // Parses `<dir>/config.json`. Errors name the file and the field.
  static absl::StatusOr<ModelConfig> FromHfDir(absl::string_view dir);
  // Parses the text of a config.json; `source` names it in error messages.
  static absl::StatusOr<ModelConfig> FromJson(absl::string_view json_text,
                                              absl::string_view source);

  // One line for logs: family, head, widths.
  std::string Summary() const;
};

}  // namespace rankd::model

#endif  // RANKD_MODEL_CONFIG_H_
