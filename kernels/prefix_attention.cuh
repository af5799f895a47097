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
// share tiles instead of each padding a tile of its own; the host describes each tile completely
// (AttentionTile). Everything a launch reads besides its fixed arguments (tiles, segment starts,
// the number of work units, the context table) is in device memory,
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

// One tile of the work list: kAttentionTileRows query rows of a run, with what the kernel needs of
// its run and its keys worked out on the host, so that a work unit starts with one 32-byte load
// instead of a chain of dependent ones (tile -> run -> segment starts).
struct alignas(16) AttentionTile {  // (the kernel reads the first three fields again as an int4)
  int32_t row0 = 0;                 // first query row of the tile within its run
  int32_t begin = 0;                // the run's first row of the pass
  int32_t rows = 0;                 // the run's query rows: (end - begin) * G
  int32_t ctx_len = 0;              // the run's context rows
  int32_t ctx = 0;                  // the run's entry of the context table (read when ctx_len > 0)
  int32_t own_lo = 0;    // first own row the tile's keys start at: its first token's segment start
  int32_t num_keys = 0;  // keys the tile walks: ctx_len + own rows own_lo .. its last token
  int32_t pad = 0;
};

struct PrefixAttentionParams {
  const __nv_bfloat16* q = nullptr;      // [T, q_row_stride] bf16: head h at h * D
  int64_t q_row_stride = 0;              // elements
  const float2* q_rotations = nullptr;   // [T, D / 2] (cos, sin) (LaunchRopeRotations), or null:
                                         // q is rotated (RoPE) as it is loaded; null: q is roped
  KvLayers own;                          // the rows' own K/V (after RoPE)
  const KvLayers* contexts = nullptr;    // device [C]: context K/V (prefix caches, or own rows)
  const int32_t* seg_start = nullptr;    // device [T] int32: first row of each row's segment
  const AttentionTile* tiles = nullptr;  // device [tiles], see FillAttentionTiles
  const int32_t* num_units = nullptr;    // device, 1: work units = tiles * Nkv
  int32_t* unit_counter = nullptr;       // device, 1, zero at launch: the launch's work queue
  int layer = 0;                         // which layer of `own` and `contexts`
  int num_q_heads = 0;                   // Nq, a multiple of Nkv
  int num_kv_heads = 0;                  // Nkv
  int head_dim = 0;                      // D, see PrefixAttentionSupportsHeadDim
  int blocks = 0;                        // persistent blocks, see PrefixAttentionBlocks
  __nv_bfloat16* out = nullptr;          // [T, Nq, D] bf16
};

// head_dim must be a multiple of 16 in 16..128.
bool PrefixAttentionSupportsHeadDim(int head_dim);

// The number of blocks that are resident on the current device at once for `head_dim`: the grid a
// launch needs to keep the device busy, whatever the number of work units. 0 on error.
int PrefixAttentionBlocks(int head_dim);

// The tile of `run` whose first query row is row0.
inline AttentionTile MakeAttentionTile(const AttentionRun& run, int row0, const int32_t* seg_start,
                                       int group) {
  AttentionTile t;
  t.row0 = row0;
  t.begin = run.begin;
  t.rows = (run.end - run.begin) * group;
  t.ctx_len = run.ctx_len;
  t.ctx = run.ctx;
  const int first_tok = run.begin + row0 / group;
  const int last_tok = run.begin + (std::min(t.rows, row0 + kAttentionTileRows) - 1) / group;
  t.own_lo = seg_start[first_tok];
  t.num_keys = run.ctx_len + last_tok - t.own_lo + 1;
  return t;
}

// Upper bound on the tiles of `tokens` rows in `runs` runs.
inline int MaxAttentionTiles(int tokens, int runs, int group) {
  return tokens * group / kAttentionTileRows + runs;
}

// The tiles of the runs, kAttentionTileRows query rows each, the most expensive (most keys,
// num_keys) first, so that the work queue ends on short tiles. Returns the number of tiles.
inline int FillAttentionTiles(const AttentionRun* runs, int num_runs, const int32_t* seg_start,
                              int group, AttentionTile* tiles) {
  int n = 0;
  for (int r = 0; r < num_runs; ++r) {
    const int rows = (runs[r].end - runs[r].begin) * group;
    for (int row0 = 0; row0 < rows; row0 += kAttentionTileRows) {
      tiles[n++] = MakeAttentionTile(runs[r], row0, seg_start, group);
    }
  }
  std::stable_sort(tiles, tiles + n, [](const AttentionTile& a, const AttentionTile& b) {
    return a.num_keys > b.num_keys;
  });
  return n;
}

// Grid (p.blocks), 128 threads; each block takes work units (tile, kv head) from the queue until
// it is empty. cudaErrorInvalidValue for an unsupported head_dim or grouping.
cudaError_t LaunchPrefixAttention(const PrefixAttentionParams& p, cudaStream_t stream);

}  // namespace rankd::kernels

#endif  // RANKD_KERNELS_PREFIX_ATTENTION_CUH_
