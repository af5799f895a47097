// RoPE's frequency table, a property of the model config that every backend needs (the CPU
// backend's reference RoPE, the CUDA backend's rotation tables): one home, beside the config.
#ifndef RANKD_MODEL_ROPE_H_
#define RANKD_MODEL_ROPE_H_

#include <vector>

#include "rankd/model/config.h"

namespace rankd::model {

// inv_freq [head_dim / 2] float32, exactly as transformers computes it (default, linear and llama3
// scaling): position p rotates pair i by p * inv_freq[i].
std::vector<float> RopeInverseFrequencies(const RopeConfig& rope, int head_dim);

}  // namespace rankd::model

#endif  // RANKD_MODEL_ROPE_H_
