// Attention of packed, ragged token segments over [context K/V ++ their own causal K/V].
//
// A batch is a list of segments (cu_seqlens style). Segment s owns rows [seg_offsets[s],
// seg_offsets[s + 1]) of q/k/v/out and first attends to the first seg_ctx_len[s] rows of ctx_k /
// ctx_v (the prefix), then causally to its own rows: its token t sees context 0..C-1 and own
// tokens 0..t, so items never see each other. The strategies map onto it as:
//   IBPC prefix encode:  one segment (the prefix), no context.
//   IBPC items:          one segment per item, context = the cached prefix K/V.
//   multi-item:          segment 0 = the prefix (no context), then one per item whose context is
//                        rows 0..P-1 of the same packed k/v buffers.
// Softmax and accumulation are fp32; q, k, v, probabilities and the output are bf16.
#ifndef RANKD_KERNELS_PREFIX_ATTENTION_CUH_
#define RANKD_KERNELS_PREFIX_ATTENTION_CUH_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace rankd::kernels {

// Query rows per thread block. A segment's query rows are (token, query head of one kv group)
// pairs, row r = token r / G, head kv_head * G + r % G (G = Nq / Nkv), so all heads that share a
// kv head share one load of each K/V tile.
inline constexpr int kAttentionTileRows = 64;

struct PrefixAttentionParams {
  const __nv_bfloat16* q = nullptr;      // [T, Nq, D] bf16 (after RoPE)
  const __nv_bfloat16* k = nullptr;      // [T, Nkv, D] bf16, the segments' own keys (after RoPE)
  const __nv_bfloat16* v = nullptr;      // [T, Nkv, D] bf16
  const __nv_bfloat16* ctx_k = nullptr;  // [C, Nkv, D] bf16 context keys; C >= max seg_ctx_len
  const __nv_bfloat16* ctx_v = nullptr;  // [C, Nkv, D] bf16 (both null when no segment has any)
  const int32_t* seg_offsets = nullptr;  // [S + 1] int32, seg_offsets[0] = 0, non-decreasing
  const int32_t* seg_ctx_len = nullptr;  // [S] int32
  const int2* tiles = nullptr;           // [num_tiles] (segment, first query row), see FillTiles
  int num_tiles = 0;
  int num_q_heads = 0;           // Nq, a multiple of Nkv
  int num_kv_heads = 0;          // Nkv
  int head_dim = 0;              // D, see PrefixAttentionSupportsHeadDim
  __nv_bfloat16* out = nullptr;  // [T, Nq, D] bf16
};

// head_dim must be a multiple of 16 in 16..128.
bool PrefixAttentionSupportsHeadDim(int head_dim);

// Tiles of the segments: kAttentionTileRows query rows each. Count first (to size the buffer),
// then fill; both return the number of tiles.
inline int CountAttentionTiles(const int32_t* seg_offsets, int num_segments, int group) {
  int n = 0;
  for (int s = 0; s < num_segments; ++s) {
    const int rows = (seg_offsets[s + 1] - seg_offsets[s]) * group;
    n += (rows + kAttentionTileRows - 1) / kAttentionTileRows;
  }
  return n;
}
inline int FillAttentionTiles(const int32_t* seg_offsets, int num_segments, int group,
                              int2* tiles) {
  int n = 0;
  for (int s = 0; s < num_segments; ++s) {
    const int rows = (seg_offsets[s + 1] - seg_offsets[s]) * group;
    for (int r = 0; r < rows; r += kAttentionTileRows) tiles[n++] = make_int2(s, r);
  }
  return n;
}

// Grid (num_tiles, Nkv), 128 threads. cudaErrorInvalidValue for an unsupported head_dim.
cudaError_t LaunchPrefixAttention(const PrefixAttentionParams& p, cudaStream_t stream);

}  // namespace rankd::kernels

#endif  // RANKD_KERNELS_PREFIX_ATTENTION_CUH_
