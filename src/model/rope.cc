#include "rankd/model/rope.h"

#include <cmath>

namespace rankd::model {

std::vector<float> RopeInverseFrequencies(const model::RopeConfig& rope, int head_dim) {
  const int half = head_dim / 2;
  std::vector<float> inv(half);
  for (int i = 0; i < half; ++i) {
    // HF: 1 / theta ** (arange(0, D, 2) / D), in float32.
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    inv[i] = 1.0f / std::pow(static_cast<float>(rope.theta), exponent);
  }
  if (rope.type == model::RopeType::kLinear) {
    for (float& f : inv) f /= static_cast<float>(rope.factor);
  } else if (rope.type == model::RopeType::kLlama3) {
    // transformers' _compute_llama3_parameters.
    const double factor = rope.factor, low = rope.low_freq_factor, high = rope.high_freq_factor;
    const double old_len = rope.original_max_position_embeddings;
    const double low_wavelen = old_len / low, high_wavelen = old_len / high;
    for (float& f : inv) {
      const double wavelen = 2.0 * M_PI / f;
      if (wavelen > low_wavelen) {
        f = static_cast<float>(f / factor);
      } else if (wavelen >= high_wavelen) {  // medium band: smooth interpolation
        const double smooth = (old_len / wavelen - low) / (high - low);
        f = static_cast<float>((1.0 - smooth) * f / factor + smooth * f);
      }
    }
  }
  return inv;
}

}  // namespace rankd::model
