#include "rankd/backend/cpu/cpu_backend.h"

#include <cblas.h>

#include <thread>

#include "absl/strings/str_cat.h"
#include "rankd/backend/cpu/ops.h"
#include "rankd/common/logging.h"
#include "rankd/common/parallel.h"
#include "rankd/common/status.h"
#include "rankd/model/rope.h"
#include "rankd/model/safetensors.h"
#include "rankd/model/weights.h"
#include "spdlog/spdlog.h"

extern "C" void openblas_set_num_threads(int num_threads);

namespace rankd::cpu {
namespace {

using backend::HeadSpec;
using backend::ItemBatch;
using backend::PrefixState;
using model::ModelConfig;

// Shapes: H hidden, D head_dim, Q = Nq*D, KV = Nkv*D, I intermediate. All float32, row-major.
struct Layer {
  std::vector<float> input_norm;     // [H]
  std::vector<float> wqkv;           // [Q + 2*KV, H]  q_proj, k_proj, v_proj rows stacked
  std::vector<float> bqkv;           // [Q + 2*KV]     empty without attention_bias
  std::vector<float> q_norm;         // [D]            empty without qk_norm
  std::vector<float> k_norm;         // [D]
  std::vector<float> wo;             // [H, Q]
  std::vector<float> post_norm;      // [H]      the norm in front of the MLP
  std::vector<float> attn_out_norm;  // [H]   sandwich_norms only: of the attention output
  std::vector<float> mlp_out_norm;   // [H]   sandwich_norms only: of the MLP output
  std::vector<float> w_gate_up;      // [2*I, H]  gate_proj rows, then up_proj rows
  std::vector<float> w_down;         // [H, I]
};

// K/V of the prefix after RoPE, per layer: [P, KV] each.
class CpuPrefix final : public PrefixState {
 public:
  CpuPrefix(int num_layers, int P) : k(num_layers), v(num_layers), P_(P) {}
  int num_tokens() const override { return P_; }
  // What it holds: the layers' buffers as allocated (capacity, not size) and the object itself.
  size_t bytes() const override {
    size_t n = sizeof(*this) + (k.capacity() + v.capacity()) * sizeof(std::vector<float>);
    for (size_t l = 0; l < k.size(); ++l) n += (k[l].capacity() + v[l].capacity()) * sizeof(float);
    return n;
  }
  std::vector<std::vector<float>> k, v;

 private:
  int P_;
};

absl::StatusOr<std::vector<float>> ToF32(const model::TensorView* t) {
  RANKD_RETURN_IF_ERROR(model::CheckNotFp8(*t));
  std::vector<float> out(t->numel());
  RANKD_RETURN_IF_ERROR(model::ConvertToF32(*t, absl::MakeSpan(out)));
  return out;
}

// A linear weight in float32: as stored, or an fp8 checkpoint's e4m3 values times their row
// scales (model::Fp8RowScales).
absl::StatusOr<std::vector<float>> LinearF32(const model::SafetensorsModel& st,
                                             const model::TensorView* t) {
  std::vector<float> out(t->numel());
  RANKD_RETURN_IF_ERROR(model::ConvertToF32(*t, absl::MakeSpan(out)));
  RANKD_ASSIGN_OR_RETURN(const std::vector<float> scales, model::Fp8RowScales(st, *t));
  if (!scales.empty()) {
    const size_t cols = out.size() / scales.size();
    for (size_t i = 0; i < out.size(); ++i) out[i] *= scales[i / cols];
  }
  return out;
}

absl::Status AppendLinearF32(const model::SafetensorsModel& st, const model::TensorView* t,
                             std::vector<float>* out) {
  RANKD_ASSIGN_OR_RETURN(auto v, LinearF32(st, t));
  out->insert(out->end(), v.begin(), v.end());
  return absl::OkStatus();
}

// Appends the float32 contents of `t` to `out`.
absl::Status AppendF32(const model::TensorView* t, std::vector<float>* out) {
  RANKD_ASSIGN_OR_RETURN(auto v, ToF32(t));
  out->insert(out->end(), v.begin(), v.end());
  return absl::OkStatus();
}

// A norm weight as the forward pass multiplies by it: w, or 1 + w (norm_unit_offset, Gemma: HF adds
// the one in fp32, as here).
absl::StatusOr<std::vector<float>> NormWeight(const ModelConfig& config,
                                              const model::TensorView* t) {
  RANKD_ASSIGN_OR_RETURN(auto w, ToF32(t));
  if (config.norm_unit_offset) {
    for (float& v : w) v += 1.0f;
  }
  return w;
}

class CpuBackend final : public backend::Backend {
 public:
  CpuBackend(ModelConfig config, HeadSpec head, int threads)
      : config_(std::move(config)), head_(head), pool_(threads) {}

  absl::Status Load(const model::SafetensorsModel& st) {
    RANKD_ASSIGN_OR_RETURN(model::ModelTensors t, model::BindTensors(config_, st));
    RANKD_ASSIGN_OR_RETURN(embed_, ToF32(t.embed));
    RANKD_ASSIGN_OR_RETURN(final_norm_, NormWeight(config_, t.final_norm));
    layers_.resize(config_.num_layers);
    for (int l = 0; l < config_.num_layers; ++l) {
      const model::LayerTensors& s = t.layers[l];
      Layer& d = layers_[l];
      RANKD_ASSIGN_OR_RETURN(d.input_norm, NormWeight(config_, s.input_norm));
      for (auto* w : {s.q_proj, s.k_proj, s.v_proj}) {
        RANKD_RETURN_IF_ERROR(AppendLinearF32(st, w, &d.wqkv));
      }
      if (config_.attention_bias) {
        for (auto* b : {s.q_bias, s.k_bias, s.v_bias}) RANKD_RETURN_IF_ERROR(AppendF32(b, &d.bqkv));
      }
      if (config_.qk_norm) {
        RANKD_ASSIGN_OR_RETURN(d.q_norm, NormWeight(config_, s.q_norm));
        RANKD_ASSIGN_OR_RETURN(d.k_norm, NormWeight(config_, s.k_norm));
      }
      RANKD_ASSIGN_OR_RETURN(d.wo, LinearF32(st, s.o_proj));
      RANKD_ASSIGN_OR_RETURN(d.post_norm, NormWeight(config_, s.post_norm));
      if (config_.sandwich_norms) {
        RANKD_ASSIGN_OR_RETURN(d.attn_out_norm, NormWeight(config_, s.attn_out_norm));
        RANKD_ASSIGN_OR_RETURN(d.mlp_out_norm, NormWeight(config_, s.mlp_out_norm));
      }
      RANKD_RETURN_IF_ERROR(AppendLinearF32(st, s.gate_proj, &d.w_gate_up));
      RANKD_RETURN_IF_ERROR(AppendLinearF32(st, s.up_proj, &d.w_gate_up));
      RANKD_ASSIGN_OR_RETURN(d.w_down, LinearF32(st, s.down_proj));
    }
    // Only the head rows the score needs: [1, H] for classifier and logit, [2, H] (yes, no) for
    // yes_no.
    RANKD_ASSIGN_OR_RETURN(auto head_all, ToF32(t.head));
    const int H = config_.hidden_size;
    for (int32_t r : head_.HeadRows()) {
      head_rows_.insert(head_rows_.end(), head_all.begin() + static_cast<int64_t>(r) * H,
                        head_all.begin() + static_cast<int64_t>(r + 1) * H);
    }
    inv_freq_ = model::RopeInverseFrequencies(config_.rope, config_.head_dim);
    return absl::OkStatus();
  }

  absl::string_view name() const override { return backend::kCpuBackend; }
  const ModelConfig& config() const override { return config_; }
  const HeadSpec& head() const override { return head_; }

  absl::StatusOr<std::shared_ptr<const PrefixState>> EncodePrefix(
      absl::Span<const int32_t> ids) override {
    RANKD_RETURN_IF_ERROR(backend::ValidatePrefixIds(config_, ids));
    const int P = static_cast<int>(ids.size());
    auto prefix = std::make_shared<CpuPrefix>(config_.num_layers, P);
    std::vector<float> x(static_cast<size_t>(P) * config_.hidden_size);
    Embed(ids.data(), P, nullptr, x.data());
    std::vector<int32_t> positions(P);
    for (int i = 0; i < P; ++i) positions[i] = i;
    const std::vector<int32_t> offsets = {0, P};
    Forward(x.data(), positions, offsets, /*ctx=*/nullptr, prefix.get());
    return std::shared_ptr<const PrefixState>(std::move(prefix));
  }

  absl::Status ScoreItems(const PrefixState& prefix_base, const ItemBatch& items,
                          absl::Span<float> scores) override {
    const auto* prefix = dynamic_cast<const CpuPrefix*>(&prefix_base);
    if (prefix == nullptr) {
      return absl::InvalidArgumentError("prefix was not made by the cpu backend");
    }
    RANKD_RETURN_IF_ERROR(backend::ValidateItemBatch(config_, items, scores.size()));
    const int N = items.num_items(), T = items.num_tokens(), H = config_.hidden_size;
    const int P = prefix->num_tokens();
    std::vector<float> x(static_cast<size_t>(T) * H);
    Embed(items.tokens.data(), T, items.embeddings.data(), x.data());
    std::vector<int32_t> positions(T);
    for (int i = 0; i < N; ++i) {
      for (int t = items.offsets[i]; t < items.offsets[i + 1]; ++t) {
        positions[t] = P + (t - items.offsets[i]);
      }
    }
    Forward(x.data(), positions, items.offsets, prefix, nullptr);

    // Last token of each item -> final norm -> head.
    std::vector<float> last(H);
    for (int i = 0; i < N; ++i) {
      const float* h = x.data() + static_cast<int64_t>(items.offsets[i + 1] - 1) * H;
      RmsNorm(h, final_norm_.data(), config_.rms_norm_eps, 1, H, last.data());
      const float cap =
          config_.head_kind == model::HeadKind::kCausalLm ? config_.final_logit_softcapping : 0.0f;
      float s = SoftCap(Dot(head_rows_.data(), last.data(), H), cap);
      if (head_.type == HeadSpec::Type::kYesNo) {
        s -= SoftCap(Dot(head_rows_.data() + H, last.data(), H), cap);
      }
      scores[i] = s;
    }
    return absl::OkStatus();
  }

 private:
  // x [T, H] = the input embeddings of `tokens`: table rows times the model's embedding scale
  // (Gemma: sqrt(hidden)) for ids, rows of `rows` as given for negative ids. Embedding items stand
  // for what the embedding layer outputs: transformers 5 scales inside Gemma's embedding module
  // (GemmaTextScaledWordEmbedding), so inputs_embeds given by a caller are not scaled.
  void Embed(const int32_t* tokens, int T, const float* rows, float* x) const {
    const int H = config_.hidden_size;
    EmbeddingGather(tokens, T, embed_.data(), rows, H, x);
    const float scale = config_.embedding_scale();
    if (scale == 1.0f) return;
    for (int t = 0; t < T; ++t) {
      if (tokens[t] < 0) continue;
      float* row = x + static_cast<int64_t>(t) * H;
      for (int i = 0; i < H; ++i) row[i] *= scale;
    }
  }

  // Runs all layers over x [T, H] in place. Segment s = tokens [offsets[s], offsets[s+1]) attends
  // to `ctx` (the prefix K/V, or none) and causally to its own tokens. With `keep`, the K/V of all
  // T tokens are stored into it (prefix encoding).
  void Forward(float* x, const std::vector<int32_t>& positions, const std::vector<int32_t>& offsets,
               const CpuPrefix* ctx, CpuPrefix* keep) {
    const int T = static_cast<int>(positions.size());
    const int H = config_.hidden_size, D = config_.head_dim, Nq = config_.num_heads,
              Nkv = config_.num_kv_heads, Q = config_.q_width(), KV = config_.kv_width(),
              I = config_.intermediate_size;
    const int QKV = Q + 2 * KV;
    const int P = ctx ? ctx->num_tokens() : 0;
    const int num_segments = static_cast<int>(offsets.size()) - 1;

    std::vector<float> normed(static_cast<size_t>(T) * H);       // [T, H]
    std::vector<float> qkv(static_cast<size_t>(T) * QKV);        // [T, Q + 2KV]
    std::vector<float> q(static_cast<size_t>(T) * Q);            // [T, Nq, D]
    std::vector<float> k(static_cast<size_t>(T) * KV);           // [T, Nkv, D]
    std::vector<float> v(static_cast<size_t>(T) * KV);           // [T, Nkv, D]
    std::vector<float> attn(static_cast<size_t>(T) * Q);         // [T, Nq, D]
    std::vector<float> proj(static_cast<size_t>(T) * H);         // [T, H]
    std::vector<float> gate_up(static_cast<size_t>(T) * 2 * I);  // [T, 2I]
    std::vector<float> act(static_cast<size_t>(T) * I);          // [T, I]

    for (int l = 0; l < config_.num_layers; ++l) {
      const Layer& w = layers_[l];
      RmsNorm(x, w.input_norm.data(), config_.rms_norm_eps, T, H, normed.data());
      Linear(normed.data(), w.wqkv.data(), w.bqkv.empty() ? nullptr : w.bqkv.data(), T, H, QKV,
             qkv.data());
      for (int t = 0; t < T; ++t) {
        const float* row = qkv.data() + static_cast<int64_t>(t) * QKV;
        std::copy(row, row + Q, q.data() + static_cast<int64_t>(t) * Q);
        std::copy(row + Q, row + Q + KV, k.data() + static_cast<int64_t>(t) * KV);
        std::copy(row + Q + KV, row + QKV, v.data() + static_cast<int64_t>(t) * KV);
      }
      if (config_.qk_norm) {
        RmsNorm(q.data(), w.q_norm.data(), config_.rms_norm_eps, T * Nq, D, q.data());
        RmsNorm(k.data(), w.k_norm.data(), config_.rms_norm_eps, T * Nkv, D, k.data());
      }
      ApplyRope(q.data(), positions.data(), T, Nq, D, inv_freq_.data());
      ApplyRope(k.data(), positions.data(), T, Nkv, D, inv_freq_.data());
      if (keep != nullptr) {
        keep->k[l] = k;
        keep->v[l] = v;
      }
      const float* ck = ctx ? ctx->k[l].data() : nullptr;
      const float* cv = ctx ? ctx->v[l].data() : nullptr;
      const AttentionScoring scoring{config_.attn_scale, config_.attn_logit_softcapping,
                                     config_.window(l)};
      pool_.ParallelFor(0, num_segments, [&](size_t s) {
        const int begin = offsets[s], len = offsets[s + 1] - offsets[s];
        PrefixAttention(q.data() + static_cast<int64_t>(begin) * Q, ck, cv, P,
                        k.data() + static_cast<int64_t>(begin) * KV,
                        v.data() + static_cast<int64_t>(begin) * KV, len, Nq, Nkv, D, scoring,
                        attn.data() + static_cast<int64_t>(begin) * Q);
      });
      Linear(attn.data(), w.wo.data(), nullptr, T, Q, H, proj.data());
      if (config_.sandwich_norms) {
        RmsNorm(proj.data(), w.attn_out_norm.data(), config_.rms_norm_eps, T, H, proj.data());
      }
      AddInPlace(x, proj.data(), static_cast<int64_t>(T) * H);

      RmsNorm(x, w.post_norm.data(), config_.rms_norm_eps, T, H, normed.data());
      Linear(normed.data(), w.w_gate_up.data(), nullptr, T, H, 2 * I, gate_up.data());
      for (int t = 0; t < T; ++t) {
        const float* g = gate_up.data() + static_cast<int64_t>(t) * 2 * I;
        float* a = act.data() + static_cast<int64_t>(t) * I;
        if (config_.activation == model::Activation::kGeluTanh) {
          GeGlu(g, g + I, I, a);
        } else {
          SwiGlu(g, g + I, I, a);
        }
      }
      Linear(act.data(), w.w_down.data(), nullptr, T, I, H, proj.data());
      if (config_.sandwich_norms) {
        RmsNorm(proj.data(), w.mlp_out_norm.data(), config_.rms_norm_eps, T, H, proj.data());
      }
      AddInPlace(x, proj.data(), static_cast<int64_t>(T) * H);
    }
  }

  ModelConfig config_;
  HeadSpec head_;
  ThreadPool pool_;                // the attention of a layer's segments, in parallel
  std::vector<float> embed_;       // [V, H]
  std::vector<Layer> layers_;      // [L]
  std::vector<float> final_norm_;  // [H]
  std::vector<float> head_rows_;   // [1 or 2, H]
  std::vector<float> inv_freq_;    // [D/2]
};

}  // namespace

absl::StatusOr<std::unique_ptr<backend::Backend>> CreateCpuBackend(
    const backend::BackendOptions& options, const std::string& model_dir,
    const backend::HeadSpec& head) {
  // precision names the CUDA backend's linear-layer arithmetic; this backend is the float32
  // reference and has no other.
  if (options.precision != backend::kPrecisionBf16) {
    return absl::InvalidArgumentError(absl::StrCat(
        "precision '", options.precision,
        "' is for the cuda backend; the cpu backend computes in float32 (leave precision bf16)"));
  }
  RANKD_ASSIGN_OR_RETURN(auto config, model::ModelConfig::FromHfDir(model_dir));
  RANKD_RETURN_IF_ERROR(backend::ValidateHead(config, head));
  RANKD_ASSIGN_OR_RETURN(auto st, model::SafetensorsModel::OpenDir(model_dir));
  int threads =
      options.threads > 0 ? options.threads : static_cast<int>(std::thread::hardware_concurrency());
  threads = std::max(1, threads);
  // OpenBLAS keeps one thread count for the whole process: the backend created last sets it for
  // every backend of the process (a rankd worker has one).
  openblas_set_num_threads(threads);
  auto backend = std::make_unique<CpuBackend>(config, head, threads);
  RANKD_RETURN_IF_ERROR(Annotate(backend->Load(*st), model_dir));
  spdlog::info("cpu backend: {} ({} threads), head {}", config.Summary(), threads, head.ToString());
  return backend;
}

}  // namespace rankd::cpu
