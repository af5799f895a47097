// Attention of packed, ragged token segments over [context K/V ++ their own causal K/V].
//
// A batch is a list of segments (cu_seqlens style) grouped into runs: a run is consecutive
// segments that share one context (the first ctx_len rows of contexts[ctx]). Token t of a segment
// sees its run's context and its own segment's tokens up to t (seg_start[t] holds the first row of
// t's segment), so segments never see each other. The strategies map onto it as:
//   IBPC prefix encode:  one run, one segment (the prefix), no context.
//   IBPC items:          per request, a run of its items over the request's cached prefix K/V.
//   multi-item:          per request, a run for the prefix (no context), then a run of its items
//                        whose context is the prefix's rows of the same packed own K/V.
// Several requests (each with its own prefix) mix in one batch, one run (or two) each. Tiles are 64
// consecutive query rows of a run, across segment boundaries, so short segments (one-token items)
// share tiles instead of each padding a tile of its own. Everything a launch reads besides its
// fixed arguments (runs, tiles, the number of work units, the context table) is in device memory,
// so a captured graph replays any batch that fits its buffers without re-capture. Softmax and
// accumulation are fp32; q, k, v, probabilities and the output are bf16.
#ifndef RANKD_KERNELS_PREFIX_ATTENTION_CUH_
#define RANKD_KERNELS_PREFIX_ATTENTION_CUH_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/kv_layers.cuh"

namespace rankd::kernels {

// Query rows per tile. A run's query rows are (token, query head of one kv group) pairs,
// row r = token r / G, head kv_head * G + r % G (G = Nq / Nkv), so all heads that share a kv head
// share one load of each K/V tile.
inline constexpr int kAttentionTileRows = 64;

// A run of segments: rows [begin, end) of the pass, attending first to rows [0, ctx_len) of
// contexts[ctx] (ctx is read only when ctx_len > 0).
struct AttentionRun {
  int32_t begin = 0;
  int32_t end = 0;
  int32_t ctx_len = 0;
  int32_t ctx = 0;
};

struct PrefixAttentionParams {
  const __nv_bfloat16* q = nullptr;    // [T, q_row_stride] bf16: head h at h * D
  int64_t q_row_stride = 0;            // elements
  const float2* q_rotations = nullptr;  // [T, D / 2] (cos, sin) (LaunchRopeRotations), or null:
                                        // q is rotated (RoPE) as it is loaded; null: q is roped
  KvLayers own;                        // the rows' own K/V (after RoPE)
  const KvLayers* contexts = nullptr;  // device [C]: context K/V (prefix caches, or own rows)
  const AttentionRun* runs = nullptr;  // device [R]
  const int32_t* seg_start = nullptr;  // device [T] int32: first row of each row's segment
  const int2* tiles = nullptr;         // device [tiles] (run, first query row of the run)
  const int32_t* num_units = nullptr;  // device, 1: work units = tiles * Nkv
  int32_t* unit_counter = nullptr;     // device, 1, zero at launch: the launch's work queue
  int layer = 0;                       // which layer of `own` and `contexts`
  int num_q_heads = 0;                 // Nq, a multiple of Nkv
  int num_kv_heads = 0;                // Nkv
  int head_dim = 0;                    // D, see PrefixAttentionSupportsHeadDim
  int blocks = 0;                      // persistent blocks, see PrefixAttentionBlocks
  __nv_bfloat16* out = nullptr;        // [T, Nq, D] bf16
};

// head_dim must be a multiple of 16 in 16..128.
bool PrefixAttentionSupportsHeadDim(int head_dim);

// The number of blocks that are resident on the current device at once for `head_dim`: the grid a
// launch needs to keep the device busy, whatever the number of work units. 0 on error.
int PrefixAttentionBlocks(int head_dim);

// The number of keys (context plus own rows) tile (run r, first row row0) walks: its cost.
inline int AttentionTileKeys(const AttentionRun* runs, const int32_t* seg_start, int group,
                             int2 tile) {
  const AttentionRun& run = runs[tile.x];
  const int rows = (run.end - run.begin) * group;
  const int first_tok = run.begin + tile.y / group;
  const int last_tok = run.begin + (std::min(rows, tile.y + kAttentionTileRows) - 1) / group;
  return run.ctx_len + last_tok - seg_start[first_tok] + 1;
}

// Upper bound on the tiles of `tokens` rows in `runs` runs.
inline int MaxAttentionTiles(int tokens, int runs, int group) {
  return tokens * group / kAttentionTileRows + runs;
}

// The tiles of the runs, kAttentionTileRows query rows each, the most expensive (most keys)
// first, so that the work queue ends on short tiles. Returns the number of tiles.
inline int FillAttentionTiles(const AttentionRun* runs, int num_runs, const int32_t* seg_start,
                              int group, int2* tiles) {
  int n = 0;
  for (int r = 0; r < num_runs; ++r) {
    const int rows = (runs[r].end - runs[r].begin) * group;
    for (int row0 = 0; row0 < rows; row0 += kAttentionTileRows) tiles[n++] = make_int2(r, row0);
  }
  std::stable_sort(tiles, tiles + n, [&](int2 a, int2 b) {
    return AttentionTileKeys(runs, seg_start, group, a) >
           AttentionTileKeys(runs, seg_start, group, b);
  });
  return n;
}

// Grid (p.blocks), 128 threads; each block takes work units (tile, kv head) from the queue until
// it is empty. cudaErrorInvalidValue for an unsupported head_dim or grouping.
cudaError_t LaunchPrefixAttention(const PrefixAttentionParams& p, cudaStream_t stream);

}  // namespace rankd::kernels

#endif  // RANKD_KERNELS_PREFIX_ATTENTION_CUH_
