// Where a pass's keys and values live, layer by layer. Kernels read tables of these from device
// memory, so a captured CUDA graph serves any prefix: only the uploaded table changes.
#ifndef RANKD_KERNELS_KV_LAYERS_CUH_
#define RANKD_KERNELS_KV_LAYERS_CUH_

#include <cuda_bf16.h>

#include <cstdint>

namespace rankd::kernels {

// Layer l's key of row j, kv head h, starts at k + l * layer_stride + j * row_stride + h * D, its
// value likewise from v. Examples:
//   an encoded prefix's cache [L, 2, P, Nkv, D] bf16: k = cache, v = cache + P * Nkv * D,
//     layer_stride = 2 * P * Nkv * D, row_stride = Nkv * D;
//   the pass's fused q/k/v buffer [T, (Nq + 2 Nkv) * D] bf16 (one buffer for every layer):
//     k = qkv + Nq * D, v = k + Nkv * D, layer_stride = 0, row_stride = (Nq + 2 Nkv) * D.
struct KvLayers {
  __nv_bfloat16* k = nullptr;
  __nv_bfloat16* v = nullptr;
  int64_t layer_stride = 0;  // elements
  int64_t row_stride = 0;    // elements
};

}  // namespace rankd::kernels

#endif  // RANKD_KERNELS_KV_LAYERS_CUH_
