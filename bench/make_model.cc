#include "make_model.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "lzma.h"
#include "nlohmann/json.hpp"
#include "rankd/cli/flag_set.h"
#include "rankd/common/logging.h"
#include "rankd/model/safetensors.h"

namespace rankd::bench {
namespace {

namespace fs = std::filesystem;
using model::DType;

// The architectures make-model writes. kLlama: LlamaForSequenceClassification (or ForCausalLM with
// --causal-lm), SentencePiece tokenizer.model. kQwen3: Qwen3ForCausalLM scored by its "yes"/"no"
// logits as Qwen3-Reranker is (q/k RMSNorm, rope_theta 1e6, tied embeddings), Qwen3's
// tokenizer.json and rankd.yaml naming the qwen3-reranker prompt preset.
enum class Family { kLlama, kQwen3 };

struct Preset {
  const char* name;
  Family family;
  int hidden, layers, heads, kv_heads, head_dim, intermediate, vocab;
};

// 379m is ARCHITECTURE.md's standard workload model; tiny matches tests/data's llama-cls shape;
// tiny-h64 and tiny-h128 are Llamas at test size with the heads of 379m and of Qwen3-0.6B (64 and
// 128 dims; what the Hopper GEMM's RoPE epilogue takes) and an intermediate size it takes too.
// qwen3-0.6b is Qwen3-Reranker-0.6B's config.json; qwen3-tiny the same family at test size, and
// qwen3-tiny-h64 / qwen3-tiny-h128 with heads of 64 and 128 (the q/k norms of the Hopper GEMM's
// RoPE epilogue). The qwen3 presets have Qwen3's vocabulary (151,669 ids: the tokenizer's 151,643
// plus its specials).
constexpr Preset kPresets[] = {
    {"379m", Family::kLlama, 1024, 24, 16, 16, 64, 3328, 32000},
    {"tiny", Family::kLlama, 64, 2, 4, 4, 16, 176, 1024},
    {"tiny-h64", Family::kLlama, 128, 2, 2, 2, 64, 256, 1024},
    {"tiny-h128", Family::kLlama, 256, 2, 4, 2, 128, 320, 1024},
    {"qwen3-0.6b", Family::kQwen3, 1024, 28, 16, 8, 128, 3072, 151669},
    {"qwen3-tiny", Family::kQwen3, 64, 2, 4, 2, 32, 160, 151669},
    {"qwen3-tiny-h64", Family::kQwen3, 128, 2, 4, 2, 64, 256, 151669},
    {"qwen3-tiny-h128", Family::kQwen3, 256, 2, 4, 2, 128, 320, 151669},
};

// Where --tokenizer-from points by default: a dir with the family's tokenizer files.
std::string DefaultTokenizerDir(Family family) {
  return std::string(RANKD_SOURCE_DIR) + (family == Family::kLlama
                                              ? "/tests/data/models/llama-cls"
                                              : "/tests/data/tokenizers/qwen3");
}

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

// Writes `from` (xz-compressed) decompressed to `to`.
absl::Status Unxz(const fs::path& from, const fs::path& to) {
  std::ifstream in(from, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(from.string(), ": cannot open"));
  const std::string packed((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  lzma_stream strm = LZMA_STREAM_INIT;
  if (lzma_stream_decoder(&strm, UINT64_MAX, 0) != LZMA_OK) {
    return absl::InternalError("liblzma: cannot start a decoder");
  }
  std::ofstream out(to, std::ios::binary);
  std::vector<uint8_t> buf(1 << 20);
  strm.next_in = reinterpret_cast<const uint8_t*>(packed.data());
  strm.avail_in = packed.size();
  lzma_ret ret = LZMA_OK;
  while (ret == LZMA_OK) {
    strm.next_out = buf.data();
    strm.avail_out = buf.size();
    ret = lzma_code(&strm, LZMA_FINISH);
    out.write(reinterpret_cast<const char*>(buf.data()), buf.size() - strm.avail_out);
  }
  lzma_end(&strm);
  if (ret != LZMA_STREAM_END) {
    return absl::DataLossError(absl::StrCat(from.string(), ": not a whole xz stream (", ret, ")"));
  }
  if (!out) return absl::InternalError(absl::StrCat(to.string(), ": write failed"));
  return absl::OkStatus();
}

// Copies the tokenizer files that `from` has (tokenizer.json.xz decompressed where it has no
// tokenizer.json) into `to`; a tokenizer.model or a tokenizer.json must be among them.
absl::Status CopyTokenizer(const fs::path& from, const fs::path& to) {
  if (!fs::exists(from / "tokenizer.model") && !fs::exists(from / "tokenizer.json") &&
      !fs::exists(from / "tokenizer.json.xz")) {
    return absl::NotFoundError(
        absl::StrCat(from.string(), ": no tokenizer.model, tokenizer.json or tokenizer.json.xz"));
  }
  for (const char* name :
       {"tokenizer.model", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"}) {
    if (!fs::exists(from / name)) continue;
    std::error_code ec;
    fs::copy_file(from / name, to / name, fs::copy_options::overwrite_existing, ec);
    if (ec) return absl::InternalError(absl::StrCat((from / name).string(), ": ", ec.message()));
  }
  if (!fs::exists(from / "tokenizer.json") && fs::exists(from / "tokenizer.json.xz")) {
    return Unxz(from / "tokenizer.json.xz", to / "tokenizer.json");
  }
  return absl::OkStatus();
}

// config.json in the transformers 5.x style of the family (Qwen3: as Qwen3-Reranker-0.6B ships
// it).
nlohmann::json ModelConfigJson(const Preset& p, bool causal_lm, DType dtype) {
  nlohmann::json c = {
      {"hidden_size", p.hidden},
      {"num_hidden_layers", p.layers},
      {"num_attention_heads", p.heads},
      {"num_key_value_heads", p.kv_heads},
      {"head_dim", p.head_dim},
      {"intermediate_size", p.intermediate},
      {"vocab_size", p.vocab},
      {"rms_norm_eps", 1e-6},
      {"hidden_act", "silu"},
      {"attention_bias", false},
      {"dtype", dtype == DType::kBF16 ? "bfloat16" : "float32"},
      {"transformers_version", "5.17.0"},
  };
  if (p.family == Family::kQwen3) {
    c.update({
        {"architectures", {"Qwen3ForCausalLM"}},
        {"model_type", "qwen3"},
        {"max_position_embeddings", 40960},
        {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 1000000.0}}},
        {"attention_dropout", 0.0},
        {"layer_types", std::vector<std::string>(p.layers, "full_attention")},
        {"max_window_layers", 28},
        {"sliding_window", nullptr},
        {"use_sliding_window", false},
        {"use_cache", true},
        {"tie_word_embeddings", true},
        {"bos_token_id", 151643},  // <|endoftext|>
        {"eos_token_id", 151645},  // <|im_end|>
    });
    return c;
  }
  c.update({
      {"architectures", {causal_lm ? "LlamaForCausalLM" : "LlamaForSequenceClassification"}},
      {"model_type", "llama"},
      {"max_position_embeddings", 4096},
      {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 10000.0}}},
      {"mlp_bias", false},
      {"tie_word_embeddings", false},
      {"bos_token_id", 1},
      {"eos_token_id", 2},
      {"pad_token_id", 3},
  });
  if (!causal_lm) {
    c["id2label"] = {{"0", "LABEL_0"}};
    c["label2id"] = {{"LABEL_0", 0}};
  }
  return c;
}

}  // namespace

int RunMakeModel(int argc, char** argv, int first) {
  cli::FlagSet flags(
      "rankd-bench make-model --preset PRESET --out DIR [--dtype bf16|f32] [--seed N]\n"
      "Writes a random-weight model in HF layout: config.json, model.safetensors and the\n"
      "tokenizer files. 379m, tiny, tiny-h64, tiny-h128: LlamaForSequenceClassification\n"
      "(ForCausalLM with --causal-lm) with a tokenizer.model. qwen3-0.6b (Qwen3-Reranker-0.6B's\n"
      "shape), qwen3-tiny, qwen3-tiny-h64, qwen3-tiny-h128: Qwen3ForCausalLM scored by its yes/no\n"
      "logits, Qwen3's tokenizer.json, and a rankd.yaml with the qwen3-reranker prompt preset.");
  std::string preset_name = "379m", out, dtype_name = "bf16", tokenizer_from;
  int seed = 1;
  bool causal_lm = false;
  flags.String("preset", &preset_name,
               "379m, tiny, tiny-h64, tiny-h128, qwen3-0.6b, qwen3-tiny, qwen3-tiny-h64 or "
               "qwen3-tiny-h128");
  flags.String("out", &out, "output directory (created)");
  flags.String("dtype", &dtype_name, "bf16 or f32");
  flags.Int("seed", &seed, "random seed");
  flags.Bool("causal-lm", &causal_lm,
             "llama presets: write LlamaForCausalLM (yes_no head) instead of a classifier");
  flags.String("tokenizer-from", &tokenizer_from,
               "dir whose tokenizer files are copied (default: tests/data/models/llama-cls for "
               "llama presets, tests/data/tokenizers/qwen3 for qwen3 presets)");
  if (std::optional<int> exit_code = ParseCommandFlags(flags, argc, argv, first, "make-model")) {
    return *exit_code;
  }
  const Preset* preset = nullptr;
  for (const Preset& p : kPresets) {
    if (preset_name == p.name) preset = &p;
  }
  if (preset == nullptr || out.empty() || (dtype_name != "bf16" && dtype_name != "f32")) {
    std::fprintf(
        stderr,
        "make-model: need --preset "
        "379m|tiny|tiny-h64|tiny-h128|qwen3-0.6b|qwen3-tiny|qwen3-tiny-h64|qwen3-tiny-h128, "
        "--out DIR, --dtype "
        "bf16|f32\n");
    return 2;
  }
  const Preset& p = *preset;
  const bool qwen3 = p.family == Family::kQwen3;
  if (qwen3 && causal_lm) {
    std::fprintf(stderr, "make-model: --causal-lm: %s is always Qwen3ForCausalLM\n", p.name);
    return 2;
  }
  causal_lm |= qwen3;
  if (tokenizer_from.empty()) tokenizer_from = DefaultTokenizerDir(p.family);
  const DType dtype = dtype_name == "bf16" ? DType::kBF16 : DType::kF32;
  std::error_code ec;
  fs::create_directories(out, ec);
  if (ec) {
    std::fprintf(stderr, "make-model: --out %s: %s\n", out.c_str(), ec.message().c_str());
    return 1;
  }
  std::ofstream(fs::path(out) / "config.json")
      << ModelConfigJson(p, causal_lm, dtype).dump(2) << "\n";

  // HF's tensor names and [out, in] shapes; init as tests/data/tools: norms 1 + 0.1 N, embeddings
  // N(0, 1), linears N(0, 1 / fan_in).
  struct Spec {
    std::string name;
    std::vector<int64_t> shape;
    float mean, stddev;
  };
  std::vector<Spec> specs;
  const int64_t H = p.hidden, D = p.head_dim, Q = p.heads * D, KV = p.kv_heads * D,
                I = p.intermediate;
  const float lin_h = 1.0f / std::sqrt(static_cast<float>(H));
  specs.push_back({"model.embed_tokens.weight", {p.vocab, H}, 0, 1});
  for (int l = 0; l < p.layers; ++l) {
    const std::string pre = absl::StrCat("model.layers.", l, ".");
    specs.push_back({pre + "input_layernorm.weight", {H}, 1, 0.1f});
    specs.push_back({pre + "self_attn.q_proj.weight", {Q, H}, 0, lin_h});
    specs.push_back({pre + "self_attn.k_proj.weight", {KV, H}, 0, lin_h});
    specs.push_back({pre + "self_attn.v_proj.weight", {KV, H}, 0, lin_h});
    if (qwen3) {  // RMSNorm over each head's q and k, before RoPE
      specs.push_back({pre + "self_attn.q_norm.weight", {D}, 1, 0.1f});
      specs.push_back({pre + "self_attn.k_norm.weight", {D}, 1, 0.1f});
    }
    specs.push_back({pre + "self_attn.o_proj.weight", {H, Q}, 0, 1.0f / std::sqrt(float(Q))});
    specs.push_back({pre + "post_attention_layernorm.weight", {H}, 1, 0.1f});
    specs.push_back({pre + "mlp.gate_proj.weight", {I, H}, 0, lin_h});
    specs.push_back({pre + "mlp.up_proj.weight", {I, H}, 0, lin_h});
    specs.push_back({pre + "mlp.down_proj.weight", {H, I}, 0, 1.0f / std::sqrt(float(I))});
  }
  specs.push_back({"model.norm.weight", {H}, 1, 0.1f});
  // Qwen3's LM head is tied to embed_tokens: no lm_head.weight, as Qwen3-0.6B ships.
  if (!qwen3) {
    specs.push_back(causal_lm ? Spec{"lm_head.weight", {p.vocab, H}, 0, lin_h}
                              : Spec{"score.weight", {1, H}, 0, lin_h});
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
  if (auto s = CopyTokenizer(tokenizer_from, out); !s.ok()) {
    std::fprintf(stderr, "make-model: --tokenizer-from: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  // What `rankd score --model DIR` needs beyond the weights: Qwen3-Reranker's prompt (its head,
  // yes_no:yes,no, is the *ForCausalLM default).
  if (qwen3) std::ofstream(fs::path(out) / "rankd.yaml") << "preset: qwen3-reranker\n";
  std::printf("wrote %s: %s, %.1fM parameters, %s\n", out.c_str(), preset->name, params / 1e6,
              dtype_name.c_str());
  return 0;
}

}  // namespace rankd::bench
