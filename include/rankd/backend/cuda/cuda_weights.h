// The model's weights on the device: bf16 copies of the checkpoint's tensors (bf16, f16 or f32 on
// disk, or an fp8 checkpoint's e4m3 weights dequantised), or, with precision fp8, the linear
// layers' weights in e4m3 with one scale per output channel (quantised at load, or an fp8
// checkpoint's own); the RoPE inverse frequencies and cuBLASLt's workspace; all carved from one
// device arena.
#ifndef RANKD_BACKEND_CUDA_CUDA_WEIGHTS_H_
#define RANKD_BACKEND_CUDA_CUDA_WEIGHTS_H_

#include <cuda_bf16.h>

#include <cstddef>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "rankd/backend/backend.h"
#include "rankd/backend/cuda/device_arena.h"
#include "rankd/backend/cuda/gemm.h"
#include "rankd/model/config.h"
#include "rankd/model/safetensors.h"

namespace rankd::cuda {

// The linear layers' arithmetic (BackendOptions::precision).
enum class Precision {
  kBf16,  // bf16 weights and GEMM inputs
  kFp8,   // e4m3 weights (a scale per output channel) and GEMM inputs (a scale per token)
};

// The row order of gate_up's weight (bf16, or e4m3 with its row scales in the same order).
enum class GateUpLayout {
  kStacked,      // gate_proj's I rows, then up_proj's (cuBLASLt, then the gated activation kernel)
  kInterleaved,  // kernels/hopper_gemm.cuh's gated epilogues: per N tile of kHopperGluTileN rows,
                 // kHopperGluHalf gate rows then the same up rows (GateUpSourceRow)
};

// One layer's device weights, bf16 but for the fp8 linear weights. Shapes: H hidden, D head_dim, Q
// = Nq*D, KV = Nkv*D, I intermediate; linear weights [out, in] row-major as HF stores them.
struct LayerWeights {
  const __nv_bfloat16* input_norm = nullptr;  // [H]
  // (fold_norms: wqkv's column c times (offset + input_norm[c]), gate_up's times post_norm's;
  // UploadWeights.)
  const __nv_bfloat16* wqkv = nullptr;        // [Q + 2KV, H]  q_proj, k_proj, v_proj rows stacked
  const __nv_bfloat16* bqkv = nullptr;        // [Q + 2KV]     null without attention_bias
  const __nv_bfloat16* q_norm = nullptr;      // [D]           null without qk_norm
  const __nv_bfloat16* k_norm = nullptr;      // [D]
  const __nv_bfloat16* wo = nullptr;          // [H, Q]
  const __nv_bfloat16* post_norm = nullptr;   // [H]      the norm in front of the MLP
  const __nv_bfloat16* attn_out_norm = nullptr;  // [H]   sandwich_norms only
  const __nv_bfloat16* mlp_out_norm = nullptr;   // [H]   sandwich_norms only
  const __nv_bfloat16* w_gate_up = nullptr;      // [2I, H]  gate_proj, up_proj rows (GateUpLayout)
  const __nv_bfloat16* w_down = nullptr;         // [H, I]
  // Precision fp8: the linear weights in e4m3 (those Fp8Linears names), scale [out] per output
  // channel, same shapes; their bf16 pointers above are then null (no bf16 copy is kept).
  Fp8Matrix wqkv_fp8, wo_fp8, w_gate_up_fp8, w_down_fp8;
};

// Immutable once uploaded: any thread may read it; the pointers live as long as `arena`.
struct CudaWeights {
  std::unique_ptr<Arena> arena;          // everything below, cuBLASLt's workspace first
  void* gemm_workspace = nullptr;        // [gemm_workspace_bytes], 256-byte aligned (arena start)
  const __nv_bfloat16* embed = nullptr;  // [V, H]
  std::vector<LayerWeights> layers;      // [L]
  const __nv_bfloat16* final_norm = nullptr;  // [H]
  // [1 or 2, H] the classifier's row, lm_head[token], or lm_head[yes], lm_head[no]
  // (HeadSpec::HeadRows)
  const __nv_bfloat16* head_rows = nullptr;
  const float* inv_freq = nullptr;  // [D / 2] fp32
};

// Binds the checkpoint's tensors, converts them to bf16 (fp8: the linear weights to e4m3, on the
// device, through a bf16 staging buffer freed before returning) and copies them to the current
// device (synchronously), with `gemm_workspace_bytes` of workspace reserved in front. With
// precision fp8, `fp8_linears` names the linear layers stored in e4m3 (the others bf16, an fp8
// checkpoint's dequantised). `gate_up`: the gate_up weight's row order, bf16 or e4m3
// (kInterleaved needs I a multiple of kHopperGluHalf). `fold_norms` (bf16 layers only): the RMSNorm
// fold's weights (kernels/hopper_gemm.cuh, HopperNorm): wqkv's column c times (offset +
// input_norm[c]) and gate_up's times (offset + post_norm[c]), in fp32, rounded once to bf16
// (offset 1 for norm_unit_offset models); InvalidArgument with precision fp8 on qkv or gate_up.
using Fp8Linears = backend::BackendOptions::CudaSwitches::Fp8Linears;
absl::StatusOr<CudaWeights> UploadWeights(const model::ModelConfig& config,
                                          const backend::HeadSpec& head,
                                          const model::SafetensorsModel& st,
                                          size_t gemm_workspace_bytes, Precision precision,
                                          const Fp8Linears& fp8_linears = {},
                                          GateUpLayout gate_up = GateUpLayout::kStacked,
                                          bool fold_norms = false);

}  // namespace rankd::cuda

#endif  // RANKD_BACKEND_CUDA_CUDA_WEIGHTS_H_
