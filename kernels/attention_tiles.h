// The attention kernel's work list, worked out on the host: runs of packed segments and the tiles
// of kAttentionTileRows query rows that LaunchPrefixAttention (prefix_attention.cuh) takes as work
// units. Plain C++ without CUDA headers, so the host-side pass planning and its tests build without
// CUDA.
#ifndef RANKD_KERNELS_ATTENTION_TILES_H_
#define RANKD_KERNELS_ATTENTION_TILES_H_

#include <algorithm>
#include <cstdint>

namespace rankd::kernels {

// Query rows per tile. A run's query rows are (token, query head of one kv group) pairs,
// row r = token r / G, head kv_head * G + r % G (G = Nq / Nkv), so all heads that share a kv head
// share one load of each K/V tile. A kernel of several warpgroups (PrefixAttentionParams::
// warpgroups) takes tiles of kAttentionTileRows rows a warpgroup, so that they share it too.
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

// The tile of `run` whose first query row is row0, of tile_rows query rows.
inline AttentionTile MakeAttentionTile(const AttentionRun& run, int row0, const int32_t* seg_start,
                                       int group, int tile_rows = kAttentionTileRows) {
  AttentionTile t;
  t.row0 = row0;
  t.begin = run.begin;
  t.rows = (run.end - run.begin) * group;
  t.ctx_len = run.ctx_len;
  t.ctx = run.ctx;
  const int first_tok = run.begin + row0 / group;
  const int last_tok = run.begin + (std::min(t.rows, row0 + tile_rows) - 1) / group;
  t.own_lo = seg_start[first_tok];
  t.num_keys = run.ctx_len + last_tok - t.own_lo + 1;
  return t;
}

// Upper bound on the tiles of `tokens` rows in `runs` runs (of kAttentionTileRows rows, and so of
// any multiple of it).
inline int MaxAttentionTiles(int tokens, int runs, int group) {
  return tokens * group / kAttentionTileRows + runs;
}

// The tiles of the runs, tile_rows query rows each (a multiple of kAttentionTileRows), the most
// expensive (most keys, num_keys) first, so that the work queue ends on short tiles. Returns the
// number of tiles.
inline int FillAttentionTiles(const AttentionRun* runs, int num_runs, const int32_t* seg_start,
                              int group, AttentionTile* tiles, int tile_rows = kAttentionTileRows) {
  int n = 0;
  for (int r = 0; r < num_runs; ++r) {
    const int rows = (runs[r].end - runs[r].begin) * group;
    for (int row0 = 0; row0 < rows; row0 += tile_rows) {
      tiles[n++] = MakeAttentionTile(runs[r], row0, seg_start, group, tile_rows);
    }
  }
  std::stable_sort(tiles, tiles + n, [](const AttentionTile& a, const AttentionTile& b) {
    return a.num_keys > b.num_keys;
  });
  return n;
}

}  // namespace rankd::kernels

#endif  // RANKD_KERNELS_ATTENTION_TILES_H_
