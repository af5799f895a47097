#include "rankd/backend/cuda/cuda_weights.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

#include "rankd/backend/cuda/cuda_status.h"
#include "rankd/common/status.h"
#include "rankd/model/rope.h"
#include "rankd/model/weights.h"

namespace rankd::cuda {
namespace {

using bf16 = __nv_bfloat16;
using backend::HeadSpec;

// A run of elements of a checkpoint tensor, converted to bf16 on upload.
struct Piece {
  const model::TensorView* tensor;
  int64_t begin;
  int64_t count;
};

void ToBf16(const Piece& p, uint16_t* out) {
  const model::TensorView& t = *p.tensor;
  const size_t es = model::DTypeSize(t.dtype);
  const uint8_t* src = t.data + p.begin * es;
  for (int64_t i = 0; i < p.count; ++i) {
    switch (t.dtype) {
      case model::DType::kBF16:
        std::memcpy(&out[i], src + i * 2, 2);
        break;
      case model::DType::kF16: {
        uint16_t h;
        std::memcpy(&h, src + i * 2, 2);
        out[i] = model::F32ToBf16(model::F16ToF32(h));
        break;
      }
      case model::DType::kF32: {
        float f;
        std::memcpy(&f, src + i * 4, 4);
        out[i] = model::F32ToBf16(f);
        break;
      }
    }
  }
}

Piece Whole(const model::TensorView* t) { return Piece{t, 0, t->numel()}; }

}  // namespace

absl::StatusOr<CudaWeights> UploadWeights(const model::ModelConfig& config, const HeadSpec& head,
                                          const model::SafetensorsModel& st,
                                          size_t gemm_workspace_bytes) {
  RANKD_ASSIGN_OR_RETURN(model::ModelTensors t, model::BindTensors(config, st));
  const int H = config.hidden_size, L = config.num_layers;
  CudaWeights w;

  // Every device tensor: where its pointer goes and the pieces it is made of.
  struct Upload {
    const bf16** dst;
    std::vector<Piece> pieces;
  };
  std::vector<Upload> uploads;
  uploads.push_back({&w.embed, {Whole(t.embed)}});
  uploads.push_back({&w.final_norm, {Whole(t.final_norm)}});
  std::vector<Piece> head_rows;
  for (int32_t r : head.HeadRows()) head_rows.push_back(Piece{t.head, int64_t{r} * H, H});
  uploads.push_back({&w.head_rows, head_rows});
  w.layers.resize(L);
  for (int l = 0; l < L; ++l) {
    const model::LayerTensors& s = t.layers[l];
    LayerWeights& d = w.layers[l];
    uploads.push_back({&d.input_norm, {Whole(s.input_norm)}});
    uploads.push_back({&d.wqkv, {Whole(s.q_proj), Whole(s.k_proj), Whole(s.v_proj)}});
    if (config.attention_bias) {
      uploads.push_back({&d.bqkv, {Whole(s.q_bias), Whole(s.k_bias), Whole(s.v_bias)}});
    }
    if (config.qk_norm) {
      uploads.push_back({&d.q_norm, {Whole(s.q_norm)}});
      uploads.push_back({&d.k_norm, {Whole(s.k_norm)}});
    }
    uploads.push_back({&d.wo, {Whole(s.o_proj)}});
    uploads.push_back({&d.post_norm, {Whole(s.post_norm)}});
    if (config.sandwich_norms) {
      uploads.push_back({&d.attn_out_norm, {Whole(s.attn_out_norm)}});
      uploads.push_back({&d.mlp_out_norm, {Whole(s.mlp_out_norm)}});
    }
    uploads.push_back({&d.w_gate_up, {Whole(s.gate_proj), Whole(s.up_proj)}});
    uploads.push_back({&d.w_down, {Whole(s.down_proj)}});
  }
  const std::vector<float> inv_freq = model::RopeInverseFrequencies(config.rope, config.head_dim);

  // Lay out the arena: measure, allocate, carve again for real.
  auto carve = [&](Carver& c) {
    std::vector<bf16*> ptrs;
    for (const Upload& u : uploads) {
      int64_t n = 0;
      for (const Piece& p : u.pieces) n += p.count;
      ptrs.push_back(c.Take<bf16>(n));
    }
    return ptrs;
  };
  // cuBLASLt's workspace first: the block's start (cudaMalloc) is 256-byte aligned, as it needs.
  Carver measure;
  measure.Take<char>(gemm_workspace_bytes);
  carve(measure);
  measure.Take<float>(inv_freq.size());
  RANKD_ASSIGN_OR_RETURN(w.arena, Arena::Create(Arena::Kind::kDevice, measure.bytes()));
  Carver c = w.arena->carver();
  w.gemm_workspace = c.Take<char>(gemm_workspace_bytes);
  std::vector<bf16*> ptrs = carve(c);
  float* inv_freq_dev = c.Take<float>(inv_freq.size());

  std::vector<uint16_t> host;  // one tensor's bf16 bits at a time
  for (size_t i = 0; i < uploads.size(); ++i) {
    int64_t n = 0;
    for (const Piece& p : uploads[i].pieces) n += p.count;
    host.resize(n);
    int64_t at = 0;
    for (const Piece& p : uploads[i].pieces) {
      ToBf16(p, host.data() + at);
      at += p.count;
    }
    RANKD_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(ptrs[i], host.data(), n * sizeof(uint16_t), cudaMemcpyHostToDevice));
    *uploads[i].dst = ptrs[i];
  }
  RANKD_CUDA_RETURN_IF_ERROR(cudaMemcpy(inv_freq_dev, inv_freq.data(),
                                        inv_freq.size() * sizeof(float), cudaMemcpyHostToDevice));
  w.inv_freq = inv_freq_dev;
  return w;
}

}  // namespace rankd::cuda
