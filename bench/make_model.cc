#include "make_model.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "rankd/cli/flag_set.h"
#include "rankd/common/logging.h"
#include "rankd/model/safetensors.h"

namespace rankd::bench {
namespace {

namespace fs = std::filesystem;
using model::DType;

struct Preset {
  const char* name;
  int hidden, layers, heads, kv_heads, intermediate, vocab;
};

// 379m is ARCHITECTURE.md's standard workload model; tiny matches tests/data's llama-cls shape.
constexpr Preset kPresets[] = {
    {"379m", 1024, 24, 16, 16, 3328, 32000},
    {"tiny", 64, 2, 4, 4, 176, 1024},
};

// Fills `n` values ~ uniform with standard deviation `stddev` around `mean`, as bf16 or f32 bytes.
// Uniform rather than normal: same variance, much cheaper for 379M values.
void Fill(std::mt19937_64& rng, int64_t n, float mean, float stddev, DType dtype,
          std::vector<uint8_t>* out) {
  const float a = stddev * std::sqrt(3.0f);
  std::uniform_real_distribution<float> u(-a, a);
  out->resize(n * model::DTypeSize(dtype));
  for (int64_t i = 0; i < n; ++i) {
    const float v = mean + u(rng);
    if (dtype == DType::kBF16) {
      const uint16_t b = model::F32ToBf16(v);
      std::memcpy(out->data() + 2 * i, &b, 2);
    } else {
      std::memcpy(out->data() + 4 * i, &v, 4);
    }
  }
}

}  // namespace

int RunMakeModel(int argc, char** argv, int first) {
  cli::FlagSet flags(
      "rankd-bench make-model --preset 379m|tiny --out DIR [--dtype bf16|f32] [--seed N]\n"
      "Writes a random-weight LlamaForSequenceClassification (or ForCausalLM with --causal-lm) in\n"
      "HF layout: config.json, model.safetensors, tokenizer.model.");
  std::string preset_name = "379m", out, dtype_name = "bf16";
  std::string tokenizer_from = std::string(RANKD_SOURCE_DIR) + "/tests/data/models/llama-cls";
  int seed = 1;
  bool causal_lm = false;
  flags.String("preset", &preset_name, "379m or tiny");
  flags.String("out", &out, "output directory (created)");
  flags.String("dtype", &dtype_name, "bf16 or f32");
  flags.Int("seed", &seed, "random seed");
  flags.Bool("causal-lm", &causal_lm, "write LlamaForCausalLM (yes_no head) instead of a classifier");
  flags.String("tokenizer-from", &tokenizer_from, "model dir whose tokenizer.model is copied");
  if (std::optional<int> exit_code = ParseCommandFlags(flags, argc, argv, first, "make-model")) {
    return *exit_code;
  }
  const Preset* preset = nullptr;
  for (const Preset& p : kPresets) {
    if (preset_name == p.name) preset = &p;
  }
  if (preset == nullptr || out.empty() || (dtype_name != "bf16" && dtype_name != "f32")) {
    std::fprintf(stderr, "make-model: need --preset 379m|tiny, --out DIR, --dtype bf16|f32\n");
    return 2;
  }
  const DType dtype = dtype_name == "bf16" ? DType::kBF16 : DType::kF32;
  std::error_code ec;
  fs::create_directories(out, ec);
  if (ec) {
    std::fprintf(stderr, "make-model: --out %s: %s\n", out.c_str(), ec.message().c_str());
    return 1;
  }
  const Preset& p = *preset;
  const int D = p.hidden / p.heads;
  nlohmann::json config = {
      {"architectures", {causal_lm ? "LlamaForCausalLM" : "LlamaForSequenceClassification"}},
      {"model_type", "llama"},
      {"hidden_size", p.hidden},
      {"num_hidden_layers", p.layers},
      {"num_attention_heads", p.heads},
      {"num_key_value_heads", p.kv_heads},
      {"head_dim", D},
      {"intermediate_size", p.intermediate},
      {"vocab_size", p.vocab},
      {"max_position_embeddings", 4096},
      {"rms_norm_eps", 1e-6},
      {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 10000.0}}},
      {"hidden_act", "silu"},
      {"attention_bias", false},
      {"mlp_bias", false},
      {"tie_word_embeddings", false},
      {"bos_token_id", 1},
      {"eos_token_id", 2},
      {"pad_token_id", 3},
      {"dtype", dtype == DType::kBF16 ? "bfloat16" : "float32"},
      {"transformers_version", "5.17.0"},
  };
  if (!causal_lm) {
    config["id2label"] = {{"0", "LABEL_0"}};
    config["label2id"] = {{"LABEL_0", 0}};
  }
  std::ofstream(fs::path(out) / "config.json") << config.dump(2) << "\n";

  // HF's tensor names and [out, in] shapes; init as tests/data/tools: norms 1 + 0.1 N, embeddings
  // N(0, 1), linears N(0, 1 / fan_in).
  struct Spec {
    std::string name;
    std::vector<int64_t> shape;
    float mean, stddev;
  };
  std::vector<Spec> specs;
  const int64_t H = p.hidden, Q = p.heads * D, KV = p.kv_heads * D, I = p.intermediate;
  const float lin_h = 1.0f / std::sqrt(static_cast<float>(H));
  specs.push_back({"model.embed_tokens.weight", {p.vocab, H}, 0, 1});
  for (int l = 0; l < p.layers; ++l) {
    const std::string pre = absl::StrCat("model.layers.", l, ".");
    specs.push_back({pre + "input_layernorm.weight", {H}, 1, 0.1f});
    specs.push_back({pre + "self_attn.q_proj.weight", {Q, H}, 0, lin_h});
    specs.push_back({pre + "self_attn.k_proj.weight", {KV, H}, 0, lin_h});
    specs.push_back({pre + "self_attn.v_proj.weight", {KV, H}, 0, lin_h});
    specs.push_back({pre + "self_attn.o_proj.weight", {H, Q}, 0, 1.0f / std::sqrt(float(Q))});
    specs.push_back({pre + "post_attention_layernorm.weight", {H}, 1, 0.1f});
    specs.push_back({pre + "mlp.gate_proj.weight", {I, H}, 0, lin_h});
    specs.push_back({pre + "mlp.up_proj.weight", {I, H}, 0, lin_h});
    specs.push_back({pre + "mlp.down_proj.weight", {H, I}, 0, 1.0f / std::sqrt(float(I))});
  }
  specs.push_back({"model.norm.weight", {H}, 1, 0.1f});
  if (causal_lm) {
    specs.push_back({"lm_head.weight", {p.vocab, H}, 0, lin_h});
  } else {
    specs.push_back({"score.weight", {1, H}, 0, lin_h});
  }
  std::mt19937_64 rng(seed);
  std::vector<std::vector<uint8_t>> data(specs.size());
  std::vector<model::TensorToWrite> tensors;
  int64_t params = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    int64_t n = 1;
    for (int64_t d : specs[i].shape) n *= d;
    params += n;
    Fill(rng, n, specs[i].mean, specs[i].stddev, dtype, &data[i]);
    tensors.push_back({specs[i].name, dtype, specs[i].shape, data[i].data(), data[i].size()});
  }
  const std::string st_path = (fs::path(out) / "model.safetensors").string();
  if (auto s = model::WriteSafetensors(st_path, tensors, {{"format", "pt"}}); !s.ok()) {
    std::fprintf(stderr, "make-model: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  fs::copy_file(fs::path(tokenizer_from) / "tokenizer.model", fs::path(out) / "tokenizer.model",
                fs::copy_options::overwrite_existing, ec);
  if (ec) {
    std::fprintf(stderr, "make-model: --tokenizer-from %s: %s\n", tokenizer_from.c_str(),
                 ec.message().c_str());
    return 1;
  }
  std::printf("wrote %s: %s, %.1fM parameters, %s\n", out.c_str(), preset->name, params / 1e6,
              dtype_name.c_str());
  return 0;
}

}  // namespace rankd::bench
