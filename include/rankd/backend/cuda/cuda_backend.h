// CudaBackend: the Backend interface on one NVIDIA GPU. bf16 weights and activations with fp32
// accumulation, softmax and residual stream; GEMMs through cuBLASLt over all tokens of a batch;
// kernels in kernels/. Two strategies (BackendOptions::strategy), with the same scores:
//   "ibpc"        EncodePrefix runs the prefix and keeps its K/V on the device; ScoreItems runs
//                 the batch's items over it.
//   "multi-item"  EncodePrefix keeps the prefix ids; ScoreItems runs prefix and items in one
//                 packed pass in which the attention mask keeps the items apart.
// ScoreGroups packs several requests' items (each request with its own prefix) into one pass.
// Passes are padded to a row-count bucket and, unless BackendOptions::cuda_graphs is false,
// captured as one CUDA graph per bucket the first time and replayed after (all per-batch data, the
// attention metadata and the prefixes' K/V pointers included, lives in uploaded device buffers).
// A failed capture leaves that bucket eager and is counted. BackendOptions::cuda (the RANKD_CUDA_*
// switches, read by the program at start): profile times every stage of eager passes and prints
// the table at destruction; gemm_tune=false keeps cuBLASLt's first heuristic pick.
//
// The folder's parts, by name: cuda_backend.cc (the Backend methods and the forward pass),
// pass_plan.h (host-side planning of a pass: packing, positions, attention tiles; plain C++,
// CPU-tested), cuda_weights.h (bf16 upload of the weights), graph_cache.h (captured passes per
// shape), gemm.h (cuBLASLt), device_arena.h, stage_profiler.h, cuda_status.h; kernels/ holds the
// kernels, each with its CPU reference in backend/cpu/ops.h and `rankd-bench kernels`.
#ifndef RANKD_BACKEND_CUDA_CUDA_BACKEND_H_
#define RANKD_BACKEND_CUDA_CUDA_BACKEND_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "rankd/backend/backend.h"

namespace rankd::cuda {

// Unavailable when no CUDA device (or driver) is present; InvalidArgument for an unknown strategy
// or a bad device index; Unimplemented for a head_dim the attention kernel lacks.
absl::StatusOr<std::unique_ptr<backend::Backend>> CreateCudaBackend(
    const backend::BackendOptions& options, const std::string& model_dir,
    const backend::HeadSpec& head);

// What a CUDA backend did so far.
struct CudaBackendStats {
  bool graphs_enabled = false;
  int64_t eager_passes = 0;     // passes launched kernel by kernel
  int64_t graph_replays = 0;    // passes replayed from a captured graph
  int64_t graph_captures = 0;   // graphs captured and instantiated
  int64_t graph_fallbacks = 0;  // captures or instantiations that failed (that shape stays eager)
  int64_t graphs_cached = 0;    // graphs held now
  // The prefixes' K/V pool (its own), now: bytes its live allocations asked for, and device
  // memory it holds (whole chunks). Freed K/V leaves "reserved" at the stream's next sync.
  uint64_t prefix_pool_used_bytes = 0;
  uint64_t prefix_pool_reserved_bytes = 0;
  // The bf16 linear layers may run on kernels/hopper_gemm (RANKD_CUDA_OWN_GEMM auto or 1, on a
  // device, build and model that take it): always with 1, per shape where faster with auto.
  bool own_gemm = false;
  // RoPE of k may run in the qkv GEMM's epilogue (RANKD_CUDA_FUSE_K_ROPE, default on; where
  // own_gemm is and the model takes it: q rotated in attention, heads of 64 or 128).
  bool k_rope_in_gemm = false;
  // The q/k norms and RoPE of q and k may run in the qkv GEMM's epilogue
  // (RANKD_CUDA_FUSE_QK_NORM=1, where own_gemm is and the model has q/k norms, no bias, heads of
  // 64 or 128).
  bool qk_norm_in_gemm = false;
  // Precision fp8's layer inputs are quantised per row and group of 64 columns
  // (RANKD_CUDA_FP8_GROUP_SCALES=1 where the Hopper GEMM may run and the model takes it).
  bool fp8_group_scales = false;
  // Attention runs its pipelined kernel (RANKD_CUDA_ATTENTION_PIPELINE).
  bool attention_pipelined = false;
  // Attention runs on wgmma (RANKD_CUDA_ATTENTION_WGMMA, where the device, build and heads take
  // it).
  bool attention_wgmma = false;
  // The pass's kernels launch with programmatic dependent launch (RANKD_CUDA_PDL, where the device
  // is sm_90 or later).
  bool pdl = false;
  // The norms in front of qkv and gate_up are folded into those GEMMs (RANKD_CUDA_FOLD_NORMS=1
  // where the model, precision and device take it).
  bool fold_norms = false;
  // Attention's key tiles are overlapped (RANKD_CUDA_ATTENTION_OVERLAP=1, or auto at heads of
  // 128), where attention runs the wgmma queue kernel.
  bool attention_overlap = false;
  // Passes whose attention ran in blocks of more than one warpgroup
  // (RANKD_CUDA_ATTENTION_WARPGROUPS: 2 or 3, or auto's choice of 2), eager or replayed.
  int64_t wide_attention_passes = 0;
};

// The stats of `backend` if it is a CUDA backend.
std::optional<CudaBackendStats> GetCudaBackendStats(backend::Backend& backend);

}  // namespace rankd::cuda

#endif  // RANKD_BACKEND_CUDA_CUDA_BACKEND_H_
