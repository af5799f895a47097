#include "rankd/backend/cpu/ops.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace rankd::cpu {

void RmsNorm(const float* x, const float* w, float eps, int rows, int dim, float* out) {
  for (int r = 0; r < rows; ++r) {
    const float* xr = x + static_cast<int64_t>(r) * dim;
    float* orow = out + static_cast<int64_t>(r) * dim;
    double ss = 0;
    for (int i = 0; i < dim; ++i) ss += static_cast<double>(xr[i]) * xr[i];
    const float inv = 1.0f / std::sqrt(static_cast<float>(ss / dim) + eps);
    for (int i = 0; i < dim; ++i) orow[i] = xr[i] * inv * w[i];
  }
}

void Linear(const float* x, const float* w, const float* bias, int T, int in, int out, float* y) {
  if (T == 0) return;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, out, in, 1.0f, x, in, w, in, 0.0f, y,
              out);
  if (bias != nullptr) {
    for (int t = 0; t < T; ++t) AddInPlace(y + static_cast<int64_t>(t) * out, bias, out);
  }
}

void AddInPlace(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

void SwiGlu(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void GeGlu(const float* gate, const float* up, int64_t n, float* out) {
  const float k = std::sqrt(2.0f / static_cast<float>(M_PI));
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = 0.5f * g * (1.0f + std::tanh(k * (g + 0.044715f * g * g * g))) * up[i];
  }
}

float SoftCap(float x, float cap) { return cap > 0 ? cap * std::tanh(x / cap) : x; }

void ApplyRope(float* x, const int32_t* positions, int T, int n_heads, int head_dim,
               const float* inv_freq) {
  const int half = head_dim / 2;
  for (int t = 0; t < T; ++t) {
    for (int i = 0; i < half; ++i) {
      const float angle = static_cast<float>(positions[t]) * inv_freq[i];
      const float c = std::cos(angle), s = std::sin(angle);
      for (int h = 0; h < n_heads; ++h) {
        float* v = x + (static_cast<int64_t>(t) * n_heads + h) * head_dim;
        const float a = v[i], b = v[i + half];
        v[i] = a * c - b * s;
        v[i + half] = b * c + a * s;
      }
    }
  }
}

void PrefixAttention(const float* q, const float* ctx_k, const float* ctx_v, int P,
                     const float* own_k, const float* own_v, int T, int Nq, int Nkv, int D,
                     const AttentionScoring& scoring, float* out) {
  const int group = Nq / Nkv;
  std::vector<float> logits(P + T);
  for (int t = 0; t < T; ++t) {
    for (int h = 0; h < Nq; ++h) {
      const int kvh = h / group;
      const float* qv = q + (static_cast<int64_t>(t) * Nq + h) * D;
      // Keys at positions [first, n): the causal limit, and the window's start.
      const int n = P + t + 1;
      const int first = scoring.window > 0 ? std::max(0, n - scoring.window) : 0;
      float mx = -INFINITY;
      for (int j = first; j < n; ++j) {
        const float* kv = j < P ? ctx_k + (static_cast<int64_t>(j) * Nkv + kvh) * D
                                : own_k + (static_cast<int64_t>(j - P) * Nkv + kvh) * D;
        logits[j] = SoftCap(Dot(qv, kv, D) * scoring.scale, scoring.softcap);
        mx = std::max(mx, logits[j]);
      }
      double sum = 0;
      for (int j = first; j < n; ++j) {
        logits[j] = std::exp(logits[j] - mx);
        sum += logits[j];
      }
      float* o = out + (static_cast<int64_t>(t) * Nq + h) * D;
      std::fill(o, o + D, 0.0f);
      for (int j = first; j < n; ++j) {
        const float p = static_cast<float>(logits[j] / sum);
        const float* vv = j < P ? ctx_v + (static_cast<int64_t>(j) * Nkv + kvh) * D
                                : own_v + (static_cast<int64_t>(j - P) * Nkv + kvh) * D;
        for (int d = 0; d < D; ++d) o[d] += p * vv[d];
      }
    }
  }
}

void EmbeddingGather(const int32_t* tokens, int T, const float* table, const float* rows, int H,
                     float* out) {
  for (int t = 0; t < T; ++t) {
    const float* src = tokens[t] >= 0 ? table + static_cast<int64_t>(tokens[t]) * H
                                      : rows + static_cast<int64_t>(-tokens[t] - 1) * H;
    std::memcpy(out + static_cast<int64_t>(t) * H, src, sizeof(float) * H);
  }
}

float Dot(const float* a, const float* b, int n) {
  float s = 0;
  for (int i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

}  // namespace rankd::cpu
