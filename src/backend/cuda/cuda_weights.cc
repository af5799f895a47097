#include "rankd/backend/cuda/cuda_weights.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <initializer_list>

#include "absl/strings/str_cat.h"
#include "kernels/hopper_gemm.cuh"
#include "kernels/quantize_fp8.cuh"
#include "rankd/backend/cuda/cuda_status.h"
#include "rankd/common/status.h"
#include "rankd/model/rope.h"
#include "rankd/model/weights.h"

namespace rankd::cuda {
namespace {

using bf16 = __nv_bfloat16;
using backend::HeadSpec;

// A run of elements of a checkpoint tensor, converted on upload. An F8_E4M3 tensor (a linear weight
// of an fp8 checkpoint) carries its per-row dequantisation scales.
struct Piece {
  const model::TensorView* tensor;
  int64_t begin;
  int64_t count;
  std::vector<float> scales;  // [rows of the tensor], F8_E4M3 only
};

absl::Status ToBf16(const Piece& p, uint16_t* out) {
  const model::TensorView& t = *p.tensor;
  const size_t es = model::DTypeSize(t.dtype);
  const uint8_t* src = t.data + p.begin * es;
  if (p.scales.empty()) RANKD_RETURN_IF_ERROR(model::CheckNotFp8(t));
  const int64_t cols = p.scales.empty() ? 1 : t.numel() / static_cast<int64_t>(p.scales.size());
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
      case model::DType::kF8E4M3:
        out[i] = model::F32ToBf16(model::F8E4M3ToF32(src[i]) * p.scales[(p.begin + i) / cols]);
        break;
    }
  }
  return absl::OkStatus();
}

Piece Whole(const model::TensorView* t) { return Piece{t, 0, t->numel(), {}}; }

// A linear weight, with its fp8 scales when the checkpoint stores it in fp8.
absl::StatusOr<Piece> LinearWeight(const model::SafetensorsModel& st, const model::TensorView* t) {
  RANKD_ASSIGN_OR_RETURN(std::vector<float> scales, model::Fp8RowScales(st, *t));
  return Piece{t, 0, t->numel(), std::move(scales)};
}

// Device memory freed on destruction.
struct DeviceFree {
  void operator()(void* p) const { cudaFree(p); }
};

}  // namespace

absl::StatusOr<CudaWeights> UploadWeights(const model::ModelConfig& config, const HeadSpec& head,
                                          const model::SafetensorsModel& st,
                                          size_t gemm_workspace_bytes, Precision precision,
                                          const Fp8Linears& fp8_linears, GateUpLayout gate_up,
                                          bool fold_norms) {
  RANKD_ASSIGN_OR_RETURN(model::ModelTensors t, model::BindTensors(config, st));
  const int H = config.hidden_size, L = config.num_layers;
  const bool fp8 = precision == Precision::kFp8;
  const bool interleaved = gate_up == GateUpLayout::kInterleaved;
  if (interleaved && config.intermediate_size % kernels::kHopperGluHalf != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("gate_up's interleaved layout needs intermediate_size a multiple of ",
                     kernels::kHopperGluHalf, " (it is ", config.intermediate_size, ")"));
  }
  if (fold_norms && fp8 && (fp8_linears.qkv || fp8_linears.gate_up)) {
    return absl::InvalidArgumentError(
        "the norm fold takes bf16 qkv and gate_up weights (precision fp8 quantises them)");
  }
  CudaWeights w;

  // Every device tensor: where its pointer goes and the pieces it is made of. A linear weight with
  // precision fp8 goes to `fp8` instead of `dst`, as [rows, cols] e4m3 and [rows] scales.
  struct Upload {
    const bf16** dst = nullptr;
    std::vector<Piece> pieces;
    Fp8Matrix* fp8 = nullptr;
    int64_t cols = 0;
    // fold_norms: column c (of H) times (offset + fold[c]).
    const model::TensorView* fold = nullptr;
    int64_t numel() const {
      int64_t n = 0;
      for (const Piece& p : pieces) n += p.count;
      return n;
    }
  };
  std::vector<Upload> uploads;
  uploads.push_back({&w.embed, {Whole(t.embed)}});
  uploads.push_back({&w.final_norm, {Whole(t.final_norm)}});
  std::vector<Piece> head_rows;
  for (int32_t r : head.HeadRows()) head_rows.push_back(Piece{t.head, int64_t{r} * H, H, {}});
  uploads.push_back({&w.head_rows, head_rows});
  // A linear weight [rows, cols] stacked from `tensors`, in e4m3 when `in_fp8` (and precision fp8).
  auto linear = [&](const bf16** dst, Fp8Matrix* fp8_dst,
                    std::initializer_list<const model::TensorView*> tensors, int64_t cols,
                    bool in_fp8) -> absl::Status {
    Upload u;
    for (const model::TensorView* tensor : tensors) {
      RANKD_ASSIGN_OR_RETURN(Piece p, LinearWeight(st, tensor));
      u.pieces.push_back(std::move(p));
    }
    if (fp8 && in_fp8) {
      u.fp8 = fp8_dst;
      u.cols = cols;
    } else {
      u.dst = dst;
    }
    uploads.push_back(std::move(u));
    return absl::OkStatus();
  };
  w.layers.resize(L);
  for (int l = 0; l < L; ++l) {
    const model::LayerTensors& s = t.layers[l];
    LayerWeights& d = w.layers[l];
    uploads.push_back({&d.input_norm, {Whole(s.input_norm)}});
    RANKD_RETURN_IF_ERROR(
        linear(&d.wqkv, &d.wqkv_fp8, {s.q_proj, s.k_proj, s.v_proj}, H, fp8_linears.qkv));
    if (fold_norms) uploads.back().fold = s.input_norm;
    if (config.attention_bias) {
      uploads.push_back({&d.bqkv, {Whole(s.q_bias), Whole(s.k_bias), Whole(s.v_bias)}});
    }
    if (config.qk_norm) {
      uploads.push_back({&d.q_norm, {Whole(s.q_norm)}});
      uploads.push_back({&d.k_norm, {Whole(s.k_norm)}});
    }
    RANKD_RETURN_IF_ERROR(
        linear(&d.wo, &d.wo_fp8, {s.o_proj}, config.q_width(), fp8_linears.o_proj));
    uploads.push_back({&d.post_norm, {Whole(s.post_norm)}});
    if (config.sandwich_norms) {
      uploads.push_back({&d.attn_out_norm, {Whole(s.attn_out_norm)}});
      uploads.push_back({&d.mlp_out_norm, {Whole(s.mlp_out_norm)}});
    }
    RANKD_RETURN_IF_ERROR(
        linear(&d.w_gate_up, &d.w_gate_up_fp8, {s.gate_proj, s.up_proj}, H, fp8_linears.gate_up));
    if (fold_norms) uploads.back().fold = s.post_norm;
    if (interleaved) {
      // Chunks of kHopperGluHalf rows, gate's then up's in turn (GateUpSourceRow): the same
      // pieces of the same tensors, in the kernel's order.
      Upload& u = uploads.back();
      const std::vector<Piece> stacked = std::move(u.pieces);
      const int64_t chunk = int64_t{kernels::kHopperGluHalf} * H;
      u.pieces.clear();
      for (int64_t at = 0; at < stacked[0].count; at += chunk) {
        for (const Piece& p : stacked) u.pieces.push_back(Piece{p.tensor, at, chunk, p.scales});
      }
    }
    RANKD_RETURN_IF_ERROR(linear(&d.w_down, &d.w_down_fp8, {s.down_proj}, config.intermediate_size,
                                 fp8_linears.down));
  }
  const std::vector<float> inv_freq = model::RopeInverseFrequencies(config.rope, config.head_dim);

  // Lay out the arena: measure, allocate, carve again for real.
  struct Dst {
    void* data;
    float* scale;  // fp8 only
  };
  auto carve = [&](Carver& c) {
    std::vector<Dst> dsts;
    for (const Upload& u : uploads) {
      const int64_t n = u.numel();
      if (u.fp8 != nullptr) {
        __nv_fp8_e4m3* data = c.Take<__nv_fp8_e4m3>(n);
        dsts.push_back(Dst{data, c.Take<float>(n / u.cols)});
      } else {
        dsts.push_back(Dst{c.Take<bf16>(n), nullptr});
      }
    }
    return dsts;
  };
  // cuBLASLt's workspace first: the block's start (cudaMalloc) is 256-byte aligned, as it needs.
  Carver measure;
  measure.Take<char>(gemm_workspace_bytes);
  carve(measure);
  measure.Take<float>(inv_freq.size());
  RANKD_ASSIGN_OR_RETURN(w.arena, Arena::Create(Arena::Kind::kDevice, measure.bytes()));
  Carver c = w.arena->carver();
  w.gemm_workspace = c.Take<char>(gemm_workspace_bytes);
  const std::vector<Dst> dsts = carve(c);
  float* inv_freq_dev = c.Take<float>(inv_freq.size());

  // fp8 weights quantised at load pass through a bf16 staging buffer on the device, the size of
  // the largest of them, freed when the upload is done.
  int64_t staging_elems = 0;
  for (const Upload& u : uploads) {
    if (u.fp8 != nullptr) staging_elems = std::max(staging_elems, u.numel());
  }
  std::unique_ptr<void, DeviceFree> staging;
  if (staging_elems > 0) {
    void* p = nullptr;
    RANKD_CUDA_RETURN_IF_ERROR(cudaMalloc(&p, staging_elems * sizeof(bf16)));
    staging.reset(p);
  }

  std::vector<uint16_t> host;   // one tensor's bf16 bits at a time
  std::vector<uint8_t> host_q;  // or its e4m3 codes, as an fp8 checkpoint stores them
  std::vector<float> host_scales;
  for (size_t i = 0; i < uploads.size(); ++i) {
    const Upload& u = uploads[i];
    const int64_t n = u.numel();
    const bool stored_fp8 = std::all_of(u.pieces.begin(), u.pieces.end(), [](const Piece& p) {
      return p.tensor->dtype == model::DType::kF8E4M3;
    });
    if (u.fp8 != nullptr && stored_fp8) {  // the checkpoint's own codes and scales
      host_q.clear();
      host_scales.clear();
      for (const Piece& p : u.pieces) {
        host_q.insert(host_q.end(), p.tensor->data + p.begin, p.tensor->data + p.begin + p.count);
        // The scales of the piece's rows (whole rows: a tensor, or gate_up's interleave chunks).
        const int64_t cols = p.tensor->numel() / static_cast<int64_t>(p.scales.size());
        host_scales.insert(host_scales.end(), p.scales.begin() + p.begin / cols,
                           p.scales.begin() + (p.begin + p.count) / cols);
      }
      RANKD_CUDA_RETURN_IF_ERROR(
          cudaMemcpy(dsts[i].data, host_q.data(), n, cudaMemcpyHostToDevice));
      RANKD_CUDA_RETURN_IF_ERROR(cudaMemcpy(dsts[i].scale, host_scales.data(),
                                            host_scales.size() * sizeof(float),
                                            cudaMemcpyHostToDevice));
    } else {
      host.resize(n);
      int64_t at = 0;
      for (const Piece& p : u.pieces) {
        RANKD_RETURN_IF_ERROR(ToBf16(p, host.data() + at));
        at += p.count;
      }
      if (u.fold != nullptr) {
        std::vector<uint16_t> norm(u.fold->numel());
        RANKD_RETURN_IF_ERROR(ToBf16(Whole(u.fold), norm.data()));
        const float offset = config.norm_unit_offset ? 1.0f : 0.0f;
        for (int64_t i = 0; i < n; ++i) {
          host[i] = model::F32ToBf16(model::Bf16ToF32(host[i]) *
                                     (offset + model::Bf16ToF32(norm[i % H])));
        }
      }
      void* to = u.fp8 != nullptr ? staging.get() : dsts[i].data;
      // Synchronous on the legacy default stream: it waits for the previous quantisation.
      RANKD_CUDA_RETURN_IF_ERROR(
          cudaMemcpy(to, host.data(), n * sizeof(uint16_t), cudaMemcpyHostToDevice));
      if (u.fp8 != nullptr) {
        RANKD_CUDA_RETURN_IF_ERROR(kernels::LaunchQuantizeRowsFp8(
            static_cast<const bf16*>(to), n / u.cols, static_cast<int>(u.cols),
            static_cast<__nv_fp8_e4m3*>(dsts[i].data), dsts[i].scale, nullptr));
      }
    }
    if (u.fp8 != nullptr) {
      *u.fp8 = Fp8Matrix{static_cast<const __nv_fp8_e4m3*>(dsts[i].data), dsts[i].scale};
    } else {
      *u.dst = static_cast<const bf16*>(dsts[i].data);
    }
  }
  RANKD_CUDA_RETURN_IF_ERROR(cudaMemcpy(inv_freq_dev, inv_freq.data(),
                                        inv_freq.size() * sizeof(float), cudaMemcpyHostToDevice));
  RANKD_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());  // the last quantisation
  w.inv_freq = inv_freq_dev;
  return w;
}

}  // namespace rankd::cuda
