// Host-side planning of the CUDA backend's passes: the row buckets a pass is padded to, and the
// host arrays a pass uploads (packed tokens, RoPE positions, segment starts, the items' last rows,
// the attention work list), for both strategies and for several requests in one pass. Plain C++
// without CUDA: it needs no device, so its tests run anywhere.
#ifndef RANKD_BACKEND_CUDA_PASS_PLAN_H_
#define RANKD_BACKEND_CUDA_PASS_PLAN_H_

#include <cstdint>
#include <tuple>
#include <vector>

#include "absl/types/span.h"
#include "kernels/attention_tiles.h"

namespace rankd::cuda {

// How the backend runs a request (BackendOptions::strategy): "ibpc" encodes the prefix once and
// keeps its K/V; "multi-item" packs the prefix in front of its items in every score pass.
enum class Strategy { kIbpc, kMultiItem };

// Rows a pass is padded to: 64 at least, then multiples of max(64, 2^floor(log2 n) / 16), so that
// padding costs at most 1/16 of the work and a shape repeats often enough for its graph to pay.
int Bucket(int n);

// The shape of a pass: what a captured graph is keyed by. Every pass of one shape launches the
// same kernels with the same arguments; what differs lives in the uploaded metadata.
enum class PassKind { kEncode, kScore };
struct PassShape {
  PassKind kind = PassKind::kScore;
  int rows = 0;   // Tb: padded row count
  int items = 0;  // Nb: padded item slots
  // The attention kernel's warpgroups a block (PrefixAttentionParams::warpgroups): the kernel a
  // graph launches and the tile rows its work list was planned in.
  int attention_warpgroups = 1;
  bool operator<(const PassShape& o) const {
    return std::tie(kind, rows, items, attention_warpgroups) <
           std::tie(o.kind, o.rows, o.items, o.attention_warpgroups);
  }
};

// RANKD_CUDA_ATTENTION_WARPGROUPS=auto's rule, for a pass whose `rows` rows attend to `keys` keys
// in all (ScoreSize::keys; a prefix encode of P rows, P (P + 1) / 2): blocks of 2 warpgroups
// where the kernel takes them (`wide`: wgmma, the queue kernel, heads of 64) and the rows attend
// to kWideAttentionKeys keys or more on average, else 1. On an H100 (bench/RESULTS.md,
// 2026-12-07, session 41, 379M) the 2-warpgroup kernel was 8% faster at ~1,030 keys a row
// (Tq=1024) and 7% slower at ~125 (Tq=50); the threshold is where a line through the two
// crosses zero, rounded down. Windows (local attention layers) are not counted: the rule only
// picks a speed.
inline constexpr double kWideAttentionKeys = 512;
int AutoAttentionWarpgroups(double keys, int64_t rows, bool wide);

// A pass's useful work, for the profile's two numbers only.
struct PassWork {
  double rows = 0;      // live rows
  double items = 0;     // N
  // Sum over the attention tiles' rows (token x the G query heads of one kv head) of the keys each
  // attends to: the keys of all query heads over num_kv_heads.
  double attended = 0;
  double ctx_rows = 0;  // context rows read (prefix caches)
  // The same sum over the items' last rows alone: the last layer's attention (PassPlan::
  // last_tiles).
  double last_attended = 0;
};

// The attention tiles a pass of `rows` rows and `items` item slots may need: its layers' tiles,
// counting 2 items + 1 runs (multi-item: a prefix run and an item run per request), then, from
// LastLayerTilesAt on, the last layer's (PassPlan::last_tiles: a run of one row an item).
int MaxPassTiles(int rows, int items, int gqa_group);
int LastLayerTilesAt(int rows, int items, int gqa_group);

// The host arrays of a pass of shape (Tb rows, Nb items), as the backend carves them from its
// pinned staging block. The planner writes every row of tokens, positions and seg_start, and only
// the live entries of last_rows and tiles (the kernels read the live counts).
struct PassArrays {
  absl::Span<int32_t> tokens;     // [Tb] vocab id, or -(r + 1) for embedding row r; 0: padding
  absl::Span<int32_t> positions;  // [Tb] RoPE positions; 0: padding
  absl::Span<int32_t> seg_start;  // [Tb] first row of each row's segment
  absl::Span<int32_t> last_rows;  // [Nb] row of each item's last token (score passes)
  absl::Span<kernels::AttentionTile> tiles;  // [MaxPassTiles(Tb, Nb, G)] work lists
};

// One request of a score pass.
struct PlanGroup {
  absl::Span<const int32_t> prefix_ids;  // [P]; IBPC reads only P (the K/V is cached)
  // The items' tokens as backend::ItemBatch holds them: a vocab id, or -(r + 1) for row r of the
  // request's own embedding rows.
  absl::Span<const int32_t> tokens;
  absl::Span<const int32_t> offsets;  // [n + 1]: item i is tokens[offsets[i], offsets[i + 1])
  int embedding_rows = 0;             // rows of the request's embedding table
};

// A request with items, as placed in a score pass. Its index among them is its entry of the
// attention context table.
struct PlacedGroup {
  int group = 0;          // its index in the groups planned
  int first_row = 0;      // its first row (multi-item: its prefix's, which its items attend to)
  int embedding_row = 0;  // where its embedding rows start in the pass's table
};

// The sizes of a score pass, 64-bit so that an oversized batch is caught before narrowing.
struct ScoreSize {
  int64_t rows = 0;            // T: live rows
  int64_t items = 0;           // N
  int64_t embedding_rows = 0;  // R
  // Over the live rows, the keys each attends to (an item token its prefix's, and its item's up
  // to itself; multi-item: a prefix token the prefix up to itself), of one query head.
  double keys = 0;
};

// What a pass is made of besides its arrays. The backend keeps one and reuses it pass after pass.
struct PassPlan {
  int rows = 0;   // T: live rows
  int items = 0;  // N
  int tiles = 0;  // attention tiles written to PassArrays::tiles
  // Score passes: the last layer's attention tiles, from PassArrays::tiles[LastLayerTilesAt(Tb,
  // Nb, G)]: each item's last row alone, a run of one row over its request's context (after the
  // last layer's attention only those rows are read: the scores come from them). 0 in encode
  // passes, whose last layer runs no attention.
  int last_tiles = 0;
  PassWork work;
  std::vector<PlacedGroup> groups;          // score passes: the requests with items, in order
  std::vector<kernels::AttentionRun> runs;  // the runs the tiles are made of (host only)
  std::vector<kernels::AttentionRun> last_runs;  // the last layer's (host only)
};

// The rows, items and embedding rows of a score pass over `groups` (requests without items take
// no rows).
ScoreSize MeasureScorePass(absl::Span<const PlanGroup> groups, Strategy strategy);

// A prefix encode pass (IBPC): one run, one segment, the prefix's ids at positions 0..P-1, no
// context. gqa_group: G = Nq / Nkv. tile_rows: the attention kernel's query rows a work unit
// (kAttentionTileRows times its warpgroups, PrefixAttentionParams::warpgroups).
void PlanEncodePass(absl::Span<const int32_t> ids, int gqa_group, const PassArrays& out,
                    PassPlan* plan, int tile_rows = kernels::kAttentionTileRows);

// A score pass of every request's items (multi-item: each behind its prefix's rows). Rows of
// request g: [prefix_g (multi-item)] [item 0] [item 1] ...; an item's positions continue from P,
// its tokens' embedding rows are renumbered into the pass's table, and its run's context is its
// own request's prefix (the cached K/V, or the prefix rows). `out` must fit
// MeasureScorePass(groups). tile_rows as PlanEncodePass's.
void PlanScorePass(absl::Span<const PlanGroup> groups, Strategy strategy, int gqa_group,
                   const PassArrays& out, PassPlan* plan,
                   int tile_rows = kernels::kAttentionTileRows);

}  // namespace rankd::cuda

#endif  // RANKD_BACKEND_CUDA_PASS_PLAN_H_
