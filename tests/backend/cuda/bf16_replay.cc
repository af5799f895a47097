// cuda_bf16_replay [MODEL_DIR...]: replays the CUDA backend's arithmetic on the CPU, rounding to
// bf16 exactly where the CUDA backend does, and compares the golden scores it gets with HF's own
// bf16 error. Runs without a GPU. It answers "is this error a bug or bf16?" for a golden model:
// the CUDA backend's scores land within a few bf16 roundings of the replay's (bench/RESULTS.md),
// and the replay with only some rounding points switched on shows where the error comes from.
//
// Rounding points of the CUDA backend (kernels/ and src/backend/cuda): weights; the RMSNorm
// outputs (GEMM inputs); the q/k/v GEMM output; q, k, v after bias/norm/RoPE; the attention
// probabilities (P of P.V); the attention output; the gate/up GEMM output; the SwiGLU output.
// The residual stream, the final norm and the head stay fp32. "bf16-residual" rounds the residual
// stream after every add (one rounding of GEMM + residual, as a bf16 GEMM epilogue with beta = 1
// would); "hf-like" adds what HF's bf16 forward rounds on top: the projection before the add and
// the logits.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "rankd/backend/backend.h"
#include "rankd/backend/cpu/ops.h"
#include "rankd/engine/engine.h"
#include "rankd/model/rope.h"
#include "rankd/model/safetensors.h"
#include "rankd/model/weights.h"
#include "tests/common/golden.h"

namespace rankd::cuda {
namespace {

struct Rounding {
  const char* name;
  bool weights, normed, qkv, qkv_out, probs, attn, gate_up, act, proj, residual, logits;
};

// clang-format off
constexpr Rounding kVariants[] = {
    // name            w  norm qkv  q/k/v  P  attn  g/u  act  proj resid logits
    {"fp32",           0, 0,   0,   0,     0, 0,    0,   0,   0,   0,    0},
    {"weights-only",   1, 0,   0,   0,     0, 0,    0,   0,   0,   0,    0},
    {"cuda-backend",   1, 1,   1,   1,     1, 1,    1,   1,   0,   0,    0},
    {"bf16-residual",  1, 1,   1,   1,     1, 1,    1,   1,   0,   1,    0},
    {"hf-like",        1, 1,   1,   1,     1, 1,    1,   1,   1,   1,    1},
};
// clang-format on

float Bf16(float x) { return model::Bf16ToF32(model::F32ToBf16(x)); }
void Round(std::vector<float>& v, bool on) {
  if (on) {
    for (float& x : v) x = Bf16(x);
  }
}

std::vector<float> Load(const model::TensorView* t, bool round) {
  std::vector<float> v(t->numel());
  (void)model::ConvertToF32(*t, absl::MakeSpan(v));
  Round(v, round);
  return v;
}

// One sequence (prefix ++ item, from scratch) through the model; returns the score.
double Score(const model::ModelConfig& c, const model::ModelTensors& t,
             const backend::HeadSpec& head, const std::vector<int32_t>& ids, const Rounding& r) {
  const int T = static_cast<int>(ids.size()), H = c.hidden_size, D = c.head_dim, Nq = c.num_heads,
            Nkv = c.num_kv_heads, Q = c.q_width(), KV = c.kv_width(), I = c.intermediate_size;
  const float eps = c.rms_norm_eps;
  const std::vector<float> embed = Load(t.embed, r.weights);
  const std::vector<float> inv_freq = model::RopeInverseFrequencies(c.rope, D);
  std::vector<float> x(static_cast<size_t>(T) * H);
  cpu::EmbeddingGather(ids.data(), T, embed.data(), nullptr, H, x.data());
  std::vector<int32_t> pos(T);
  for (int i = 0; i < T; ++i) pos[i] = i;

  for (int l = 0; l < c.num_layers; ++l) {
    const model::LayerTensors& w = t.layers[l];
    std::vector<float> normed(x.size()), q(static_cast<size_t>(T) * Q),
        k(static_cast<size_t>(T) * KV), v(static_cast<size_t>(T) * KV), attn(q.size()),
        proj(x.size()), gate(static_cast<size_t>(T) * I), up(gate.size()), act(gate.size());
    cpu::RmsNorm(x.data(), Load(w.input_norm, r.weights).data(), eps, T, H, normed.data());
    Round(normed, r.normed);
    cpu::Linear(normed.data(), Load(w.q_proj, r.weights).data(), nullptr, T, H, Q, q.data());
    cpu::Linear(normed.data(), Load(w.k_proj, r.weights).data(), nullptr, T, H, KV, k.data());
    cpu::Linear(normed.data(), Load(w.v_proj, r.weights).data(), nullptr, T, H, KV, v.data());
    for (auto* m : {&q, &k, &v}) Round(*m, r.qkv);
    if (c.attention_bias) {
      const auto bq = Load(w.q_bias, r.weights), bk = Load(w.k_bias, r.weights),
                 bv = Load(w.v_bias, r.weights);
      for (int i = 0; i < T; ++i) {
        cpu::AddInPlace(q.data() + static_cast<size_t>(i) * Q, bq.data(), Q);
        cpu::AddInPlace(k.data() + static_cast<size_t>(i) * KV, bk.data(), KV);
        cpu::AddInPlace(v.data() + static_cast<size_t>(i) * KV, bv.data(), KV);
      }
    }
    if (c.qk_norm) {
      cpu::RmsNorm(q.data(), Load(w.q_norm, r.weights).data(), eps, T * Nq, D, q.data());
      cpu::RmsNorm(k.data(), Load(w.k_norm, r.weights).data(), eps, T * Nkv, D, k.data());
    }
    cpu::ApplyRope(q.data(), pos.data(), T, Nq, D, inv_freq.data());
    cpu::ApplyRope(k.data(), pos.data(), T, Nkv, D, inv_freq.data());
    for (auto* m : {&q, &k, &v}) Round(*m, r.qkv_out);

    // cpu::PrefixAttention with the probabilities rounded before P.V (and normalised after).
    const float scale = 1.0f / std::sqrt(static_cast<float>(D));
    for (int i = 0; i < T; ++i) {
      for (int h = 0; h < Nq; ++h) {
        const int kvh = h / (Nq / Nkv);
        std::vector<float> p(i + 1);
        float mx = -INFINITY;
        for (int j = 0; j <= i; ++j) {
          p[j] = cpu::Dot(&q[(static_cast<size_t>(i) * Nq + h) * D],
                          &k[(static_cast<size_t>(j) * Nkv + kvh) * D], D) *
                 scale;
          mx = std::max(mx, p[j]);
        }
        double sum = 0;
        for (float& e : p) {
          e = std::exp(e - mx);
          sum += e;
        }
        float* o = &attn[(static_cast<size_t>(i) * Nq + h) * D];
        std::fill(o, o + D, 0.0f);
        for (int j = 0; j <= i; ++j) {
          const float pj = r.probs ? Bf16(p[j]) : p[j];
          for (int d = 0; d < D; ++d) o[d] += pj * v[(static_cast<size_t>(j) * Nkv + kvh) * D + d];
        }
        for (int d = 0; d < D; ++d) o[d] = static_cast<float>(o[d] / sum);
      }
    }
    Round(attn, r.attn);
    cpu::Linear(attn.data(), Load(w.o_proj, r.weights).data(), nullptr, T, Q, H, proj.data());
    Round(proj, r.proj);
    cpu::AddInPlace(x.data(), proj.data(), static_cast<int64_t>(x.size()));
    Round(x, r.residual);

    cpu::RmsNorm(x.data(), Load(w.post_norm, r.weights).data(), eps, T, H, normed.data());
    Round(normed, r.normed);
    cpu::Linear(normed.data(), Load(w.gate_proj, r.weights).data(), nullptr, T, H, I, gate.data());
    cpu::Linear(normed.data(), Load(w.up_proj, r.weights).data(), nullptr, T, H, I, up.data());
    Round(gate, r.gate_up);
    Round(up, r.gate_up);
    cpu::SwiGlu(gate.data(), up.data(), static_cast<int64_t>(act.size()), act.data());
    Round(act, r.act);
    cpu::Linear(act.data(), Load(w.down_proj, r.weights).data(), nullptr, T, I, H, proj.data());
    Round(proj, r.proj);
    cpu::AddInPlace(x.data(), proj.data(), static_cast<int64_t>(x.size()));
    Round(x, r.residual);
  }
  std::vector<float> last(H);
  cpu::RmsNorm(x.data() + static_cast<size_t>(T - 1) * H, Load(t.final_norm, r.weights).data(), eps,
               1, H, last.data());
  Round(last, r.logits);
  const std::vector<float> w_head = Load(t.head, r.weights);
  auto logit = [&](int row) {
    const float z = cpu::Dot(w_head.data() + static_cast<size_t>(row) * H, last.data(), H);
    return r.logits ? Bf16(z) : z;
  };
  if (head.type == backend::HeadSpec::Type::kClassifier) return logit(head.index);
  return static_cast<double>(logit(head.yes_id)) - logit(head.no_id);
}

int Replay(const std::string& name) {
  const rankd::testing::Golden g = rankd::testing::LoadGolden(name);
  auto config = model::ModelConfig::FromHfDir(g.model_dir);
  auto st = config.ok() ? model::SafetensorsModel::OpenDir(g.model_dir)
                        : absl::StatusOr<std::unique_ptr<model::SafetensorsModel>>(config.status());
  auto tensors = st.ok() ? model::BindTensors(*config, **st)
                         : absl::StatusOr<model::ModelTensors>(st.status());
  auto head = tensors.ok() ? engine::ParseHeadSpec(g.head, *config, nullptr)
                           : absl::StatusOr<backend::HeadSpec>(tensors.status());
  if (!head.ok()) {
    std::fprintf(stderr, "%s: %s\n", name.c_str(), std::string(head.status().message()).c_str());
    return 1;
  }
  // The replay knows the Llama / Qwen layout only (SwiGLU, plain norms, full attention, a yes/no
  // or classifier head).
  const model::ModelConfig& m = *config;
  if (m.activation != model::Activation::kSilu || m.norm_unit_offset || m.scale_embeddings ||
      m.sandwich_norms || m.sliding_window > 0 || m.attn_logit_softcapping > 0 ||
      m.final_logit_softcapping > 0 || head->type == backend::HeadSpec::Type::kLogit) {
    std::fprintf(stderr, "%s: %s is not replayed (Llama / Qwen layouts only)\n", name.c_str(),
                 m.architecture.c_str());
    return 1;
  }
  for (const Rounding& r : kVariants) {
    double sq = 0, hf_sq = 0, worst = 0;
    int n = 0, outside = 0;
    for (const auto& c : g.cases) {
      for (const auto& it : c.items) {
        std::vector<int32_t> ids = c.prefix_ids;
        ids.insert(ids.end(), it.ids.begin(), it.ids.end());
        const double err = std::abs(Score(*config, *tensors, *head, ids, r) - it.score);
        const double hf_err = it.score_bf16_cuda ? std::abs(*it.score_bf16_cuda - it.score) : 0;
        sq += err * err;
        hf_sq += hf_err * hf_err;
        worst = std::max(worst, err);
        outside +=
            !rankd::testing::WithinBf16Tolerance(it.score + err, it.score, it.score_bf16_cuda);
        ++n;
      }
    }
    std::printf(
        "%-20s %-13s items %3d  rms err %.4g  HF bf16 rms err %.4g  max err %.4g  "
        "outside README tolerance %d\n",
        name.c_str(), r.name, n, std::sqrt(sq / n), std::sqrt(hf_sq / n), worst, outside);
  }
  return 0;
}

}  // namespace
}  // namespace rankd::cuda

int main(int argc, char** argv) {
  std::vector<std::string> names;
  for (int i = 1; i < argc; ++i) names.push_back(argv[i]);
  if (names.empty()) names = rankd::testing::GoldenModelNames();
  int rc = 0;
  for (const std::string& name : names) rc |= rankd::cuda::Replay(name);
  return rc;
}
