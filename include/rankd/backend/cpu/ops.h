// Float32 reference ops of the decoder forward pass. The CPU backend is built from these, and the
// CUDA kernel tests use them as the oracle, so they stay plain: no fusion, no tricks, one loop nest
// each. Shapes: T tokens, H hidden, Nq/Nkv heads, D head_dim. Row-major everywhere.
#ifndef RANKD_BACKEND_CPU_OPS_H_
#define RANKD_BACKEND_CPU_OPS_H_

#include <cstdint>
#include <vector>

#include "rankd/model/config.h"

namespace rankd::cpu {

// out[t, :] = x[t, :] / sqrt(mean(x[t, :]^2) + eps) * w.   x, out: [rows, dim]; w: [dim].
// `out` may alias `x`.
void RmsNorm(const float* x, const float* w, float eps, int rows, int dim, float* out);

// y[T, out] = x[T, in] . w[out, in]^T (+ bias[out]). Through BLAS sgemm.
void Linear(const float* x, const float* w, const float* bias, int T, int in, int out, float* y);

// x[n] += y[n]
void AddInPlace(float* x, const float* y, int64_t n);

// out[n] = silu(gate[n]) * up[n]; silu(g) = g / (1 + exp(-g)).
void SwiGlu(const float* gate, const float* up, int64_t n, float* out);

// out[n] = gelu_tanh(gate[n]) * up[n]; gelu_tanh(g) = 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715
// g^3))) (PyTorch's gelu(approximate="tanh"), HF's gelu_pytorch_tanh).
void GeGlu(const float* gate, const float* up, int64_t n, float* out);

// cap * tanh(x / cap) for cap > 0 (Gemma 2's logit soft-capping); x for cap == 0.
float SoftCap(float x, float cap);

// Rotates x [T, n_heads, D] in place, HF "rotate_half" layout: element i pairs with i + D/2,
// angle = positions[t] * inv_freq[i].
void ApplyRope(float* x, const int32_t* positions, int T, int n_heads, int head_dim,
               const float* inv_freq);

// How one layer's attention turns q . k into softmax inputs: SoftCap(scale * q . k, softcap), and
// which keys a query sees: with window > 0, only those less than `window` positions back.
struct AttentionScoring {
  float scale = 0;    // ModelConfig::attn_scale
  float softcap = 0;  // ModelConfig::attn_logit_softcapping
  int window = 0;     // ModelConfig::window(layer)
};

// Attention of one sequence segment of T query tokens over [P context tokens ++ its own T tokens],
// causal within its own tokens. Token t sits at position P + t, context token j at position j, own
// token u at P + u; t sees positions p with P + t - window < p <= P + t (all p <= P + t without a
// window).
//   q [T, Nq, D]; ctx_k, ctx_v [P, Nkv, D]; own_k, own_v [T, Nkv, D]; out [T, Nq, D].
// Query head h reads kv head h / (Nq / Nkv).
void PrefixAttention(const float* q, const float* ctx_k, const float* ctx_v, int P,
                     const float* own_k, const float* own_v, int T, int Nq, int Nkv, int D,
                     const AttentionScoring& scoring, float* out);

// Gathers token embeddings: out[t] = tokens[t] >= 0 ? table[tokens[t]] : rows[-tokens[t] - 1].
//   table [V, H]; rows [R, H]; out [T, H].
void EmbeddingGather(const int32_t* tokens, int T, const float* table, const float* rows, int H,
                     float* out);

float Dot(const float* a, const float* b, int n);

}  // namespace rankd::cpu

#endif  // RANKD_BACKEND_CPU_OPS_H_
