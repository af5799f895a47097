// Tests of the CUDA backend's host-side pass planning (pass_plan.h), without a GPU: the planned
// arrays and attention tiles are checked against a layout the test builds on its own, request by
// request, and against the attention mask that layout implies.
#include "rankd/backend/cuda/pass_plan.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace rankd::cuda {
namespace {

using kernels::AttentionTile;
using kernels::kAttentionTileRows;

constexpr int32_t kUnwritten = -7777;

// One request as the test describes it.
struct Request {
  std::vector<int32_t> prefix;
  std::vector<std::vector<int32_t>> items;  // ids, or -(r + 1) for the request's embedding row r
  int embedding_rows = 0;
};

// The requests as the planner sees them, and the storage its spans point into.
struct Planned {
  std::vector<std::vector<int32_t>> tokens, offsets;
  std::vector<PlanGroup> groups;
};

Planned Groups(const std::vector<Request>& requests) {
  Planned p;
  for (const Request& r : requests) {
    std::vector<int32_t>& tokens = p.tokens.emplace_back();
    std::vector<int32_t>& offsets = p.offsets.emplace_back(1, 0);
    for (const auto& item : r.items) {
      tokens.insert(tokens.end(), item.begin(), item.end());
      offsets.push_back(static_cast<int32_t>(tokens.size()));
    }
  }
  for (size_t i = 0; i < requests.size(); ++i) {
    p.groups.push_back(
        PlanGroup{requests[i].prefix, p.tokens[i], p.offsets[i], requests[i].embedding_rows});
  }
  return p;
}

// Where a pass row belongs, and what the mask lets it attend to, worked out row by row.
struct RefRow {
  int32_t token = 0;
  int32_t position = 0;
  int segment_begin = 0;  // first row of its segment (the prefix, or its item)
  int request = 0;
  int ctx_len = 0;  // context rows it sees before its own segment
};

struct RefPass {
  std::vector<RefRow> rows;
  std::vector<int> last_rows;
  std::vector<int> request_first_row;  // per request with items
  std::vector<int> request_embedding_row;
  std::vector<int> placed;  // indices of the requests with items
  int64_t embedding_rows = 0;
};

RefPass Reference(const std::vector<Request>& requests, Strategy strategy) {
  RefPass ref;
  int emb = 0;
  for (int q = 0; q < static_cast<int>(requests.size()); ++q) {
    const Request& r = requests[q];
    if (r.items.empty()) continue;
    const int P = static_cast<int>(r.prefix.size());
    ref.placed.push_back(q);
    ref.request_first_row.push_back(static_cast<int>(ref.rows.size()));
    ref.request_embedding_row.push_back(emb);
    if (strategy == Strategy::kMultiItem) {
      const int begin = static_cast<int>(ref.rows.size());
      for (int t = 0; t < P; ++t) ref.rows.push_back(RefRow{r.prefix[t], t, begin, q, 0});
    }
    for (const auto& item : r.items) {
      const int begin = static_cast<int>(ref.rows.size());
      for (size_t j = 0; j < item.size(); ++j) {
        const int32_t tok = item[j] >= 0 ? item[j] : -(emb + (-item[j] - 1) + 1);
        ref.rows.push_back(RefRow{tok, P + static_cast<int32_t>(j), begin, q, P});
      }
      ref.last_rows.push_back(static_cast<int>(ref.rows.size()) - 1);
    }
    emb += r.embedding_rows;
  }
  ref.embedding_rows = emb;
  return ref;
}

// Buffers for a pass of shape (Tb, Nb), every entry marked unwritten.
struct Buffers {
  std::vector<int32_t> tokens, positions, seg_start, last_rows;
  std::vector<AttentionTile> tiles;
  Buffers(int Tb, int Nb, int G)
      : tokens(Tb, kUnwritten),
        positions(Tb, kUnwritten),
        seg_start(Tb, kUnwritten),
        last_rows(Nb, kUnwritten),
        tiles(MaxPassTiles(Tb, Nb, G)) {}
  PassArrays Arrays() {
    return PassArrays{absl::MakeSpan(tokens), absl::MakeSpan(positions), absl::MakeSpan(seg_start),
                      absl::MakeSpan(last_rows), absl::MakeSpan(tiles)};
  }
};

// Every query row (token x query head of a kv group) of the live rows lies in exactly one tile, and
// the keys that tile gives it (as the kernel reads a tile: the context, then the own rows from
// own_lo, masked by the row's segment start and causality) are the keys the mask allows it.
// `ctx_ok(row, tile)` checks that the tile's context is the row's. Tiles of tile_rows query rows.
template <typename CtxOk>
void CheckTiles(const std::vector<RefRow>& rows, const std::vector<int32_t>& seg_start,
                const std::vector<AttentionTile>& tiles, int num_tiles, int G, CtxOk ctx_ok,
                int tile_rows = kAttentionTileRows) {
  const int T = static_cast<int>(rows.size());
  std::vector<int> covered(static_cast<size_t>(T) * G, 0);
  for (int i = 0; i < num_tiles; ++i) {
    const AttentionTile& t = tiles[i];
    SCOPED_TRACE(::testing::Message() << "tile " << i << " row0 " << t.row0 << " begin " << t.begin
                                      << " rows " << t.rows);
    if (i > 0) {
      EXPECT_GE(tiles[i - 1].num_keys, t.num_keys) << "not in decreasing cost order";
    }
    ASSERT_EQ(t.row0 % tile_rows, 0);
    ASSERT_GE(t.row0, 0);
    ASSERT_LT(t.row0, t.rows);
    ASSERT_EQ(t.rows % G, 0);
    ASSERT_LE(t.begin + t.rows / G, T);
    const int own_keys = t.num_keys - t.ctx_len;
    for (int r = t.row0; r < std::min(t.rows, t.row0 + tile_rows); ++r) {
      const int tok = t.begin + r / G;
      ++covered[static_cast<size_t>(tok) * G + r % G];
      const RefRow& row = rows[tok];
      ASSERT_EQ(t.ctx_len, row.ctx_len) << "row " << tok;
      if (t.ctx_len > 0) ctx_ok(row, t);
      // The kernel's own keys for this row: [max(own_lo, seg_start), tok] within the tile's walk.
      ASSERT_EQ(seg_start[tok], row.segment_begin) << "row " << tok;
      ASSERT_LE(t.own_lo, row.segment_begin) << "row " << tok << ": keys of its segment missed";
      ASSERT_GE(t.own_lo + own_keys - 1, tok) << "row " << tok << ": its own key missed";
    }
  }
  for (int tok = 0; tok < T; ++tok) {
    for (int h = 0; h < G; ++h) {
      ASSERT_EQ(covered[static_cast<size_t>(tok) * G + h], 1) << "row " << tok << " head " << h;
    }
  }
}

class PassPlanTest : public ::testing::TestWithParam<std::tuple<Strategy, int>> {
 protected:
  Strategy strategy() const { return std::get<0>(GetParam()); }
  int G() const { return std::get<1>(GetParam()); }

  // Plans a score pass of `requests` into `plan` and checks it against Reference().
  void CheckScore(const std::vector<Request>& requests, PassPlan& plan) {
    const Planned planned = Groups(requests);
    const std::vector<PlanGroup>& groups = planned.groups;
    const RefPass ref = Reference(requests, strategy());
    const int T = static_cast<int>(ref.rows.size()), N = static_cast<int>(ref.last_rows.size());
    const ScoreSize size = MeasureScorePass(groups, strategy());
    ASSERT_EQ(size.rows, T);
    ASSERT_EQ(size.items, N);
    ASSERT_EQ(size.embedding_rows, ref.embedding_rows);
    const int Tb = Bucket(T), Nb = Bucket(N);
    Buffers b(Tb, Nb, G());
    PlanScorePass(groups, strategy(), G(), b.Arrays(), &plan);

    EXPECT_EQ(plan.rows, T);
    EXPECT_EQ(plan.items, N);
    for (int row = 0; row < T; ++row) {
      ASSERT_EQ(b.tokens[row], ref.rows[row].token) << "row " << row;
      ASSERT_EQ(b.positions[row], ref.rows[row].position) << "row " << row;
    }
    for (int row = T; row < Tb; ++row) {
      ASSERT_EQ(b.tokens[row], 0) << "padding row " << row;
      ASSERT_EQ(b.positions[row], 0) << "padding row " << row;
      ASSERT_EQ(b.seg_start[row], T) << "padding row " << row;
    }
    for (int i = 0; i < N; ++i) ASSERT_EQ(b.last_rows[i], ref.last_rows[i]) << "item " << i;

    // The placed requests: the context table and the embedding rows.
    ASSERT_EQ(plan.groups.size(), ref.placed.size());
    for (size_t c = 0; c < ref.placed.size(); ++c) {
      EXPECT_EQ(plan.groups[c].group, ref.placed[c]);
      EXPECT_EQ(plan.groups[c].first_row, ref.request_first_row[c]);
      EXPECT_EQ(plan.groups[c].embedding_row, ref.request_embedding_row[c]);
    }
    const auto ctx_ok = [&](const RefRow& row, const AttentionTile& t) {
      ASSERT_GE(t.ctx, 0);
      ASSERT_LT(t.ctx, static_cast<int>(plan.groups.size()));
      ASSERT_EQ(plan.groups[t.ctx].group, row.request) << "another request's context";
    };
    CheckTiles(ref.rows, b.seg_start, b.tiles, plan.tiles, G(), ctx_ok);
    ASSERT_LE(plan.tiles, static_cast<int>(b.tiles.size()));
    // Tiles for attention blocks of 2 and 3 warpgroups (PrefixAttentionParams::warpgroups): the
    // same rows and keys in tiles of 128 and 192 rows, no more of them.
    for (const int wgs : {2, 3}) {
      SCOPED_TRACE(::testing::Message() << wgs << " warpgroups");
      PassPlan wide;
      Buffers wb(Tb, Nb, G());
      PlanScorePass(groups, strategy(), G(), wb.Arrays(), &wide, wgs * kAttentionTileRows);
      EXPECT_LE(wide.tiles, plan.tiles);
      CheckTiles(ref.rows, wb.seg_start, wb.tiles, wide.tiles, G(), ctx_ok,
                 wgs * kAttentionTileRows);
    }

    // The last layer's tiles, from LastLayerTilesAt: each item's last row alone (its G query
    // rows), over its request's context and its whole item, one tile an item, dearest first.
    const int at = LastLayerTilesAt(Tb, Nb, G());
    ASSERT_EQ(plan.last_tiles, N);
    ASSERT_LE(at + plan.last_tiles, static_cast<int>(b.tiles.size()));
    ASSERT_GE(at, plan.tiles) << "the last layer's tiles overlap the other layers'";
    std::vector<int> last_seen(N, 0);
    double last_attended = 0;
    for (int i = 0; i < plan.last_tiles; ++i) {
      const AttentionTile& t = b.tiles[at + i];
      SCOPED_TRACE(::testing::Message() << "last-layer tile " << i << " begin " << t.begin);
      if (i > 0) EXPECT_GE(b.tiles[at + i - 1].num_keys, t.num_keys) << "not in cost order";
      const auto item = std::find(ref.last_rows.begin(), ref.last_rows.end(), t.begin);
      ASSERT_NE(item, ref.last_rows.end()) << "not an item's last row";
      ++last_seen[item - ref.last_rows.begin()];
      const RefRow& row = ref.rows[t.begin];
      EXPECT_EQ(t.row0, 0);
      EXPECT_EQ(t.rows, G());
      EXPECT_EQ(t.ctx_len, row.ctx_len);
      if (t.ctx_len > 0) ctx_ok(row, t);
      EXPECT_EQ(t.own_lo, row.segment_begin);
      EXPECT_EQ(t.num_keys, row.ctx_len + t.begin - row.segment_begin + 1);
      last_attended += t.num_keys;
    }
    for (int i = 0; i < N; ++i) EXPECT_EQ(last_seen[i], 1) << "item " << i;
    EXPECT_EQ(plan.work.last_attended, last_attended * G());

    // The profile's work: rows, items, every allowed (query row, key) pair, cached rows read.
    double attended = 0, ctx_rows = 0;
    for (int row = 0; row < T; ++row) {
      attended += ref.rows[row].ctx_len + row - ref.rows[row].segment_begin + 1;
    }
    if (strategy() == Strategy::kIbpc) {
      for (int q : ref.placed) ctx_rows += requests[q].prefix.size();
    }
    EXPECT_EQ(plan.work.rows, T);
    EXPECT_EQ(plan.work.items, N);
    EXPECT_EQ(plan.work.attended, attended * G());
    EXPECT_EQ(size.keys, attended);  // one query head's, before the pass is planned
    EXPECT_EQ(plan.work.ctx_rows, ctx_rows);
  }
  void CheckScore(const std::vector<Request>& requests) {
    PassPlan plan;
    CheckScore(requests, plan);
  }
};

std::vector<int32_t> Ids(int n, int32_t first) {
  std::vector<int32_t> ids(n);
  for (int i = 0; i < n; ++i) ids[i] = first + i;
  return ids;
}

TEST_P(PassPlanTest, OneItem) { CheckScore({Request{Ids(5, 100), {Ids(3, 10)}}}); }

TEST_P(PassPlanTest, OneItemOfOneToken) { CheckScore({Request{Ids(7, 100), {{42}}}}); }

TEST_P(PassPlanTest, ManyItems) {
  Request r{Ids(10, 100), {}};
  for (int i = 0; i < 50; ++i) r.items.push_back(Ids(1 + i % 5, 200 + i));
  CheckScore({r});
}

TEST_P(PassPlanTest, ItemsOfVeryDifferentLengths) {
  CheckScore(
      {Request{Ids(33, 100), {{1}, Ids(200, 5), {2, 3}, Ids(63, 7), Ids(64, 8), Ids(65, 9)}}});
}

TEST_P(PassPlanTest, LongItemSplitAcrossTiles) {
  CheckScore({Request{Ids(20, 100), {Ids(150, 1), {4}}}});
}

TEST_P(PassPlanTest, RunEndsExactlyOnATileBoundary) {
  // The items' run: 64 query rows, then 128: the last tile is full and no empty tile follows.
  for (const int rows : {kAttentionTileRows, 2 * kAttentionTileRows}) {
    SCOPED_TRACE(rows);
    const int tokens = rows / G();
    PassPlan plan;
    CheckScore({Request{Ids(tokens, 100), {Ids(tokens - 1, 1), {9}}}}, plan);
    EXPECT_EQ(plan.tiles, (strategy() == Strategy::kMultiItem ? 2 : 1) * rows / kAttentionTileRows);
  }
}

TEST_P(PassPlanTest, EmptyPrefix) { CheckScore({Request{{}, {Ids(4, 1), {5}}}}); }

TEST_P(PassPlanTest, GroupsOfRequests) {
  // Requests with their own prefixes and embedding rows; one without items takes no rows, no
  // context and no embedding rows.
  PassPlan plan;
  PlanEncodePass(Ids(90, 1), G(), Buffers(Bucket(90), Bucket(1), G()).Arrays(), &plan);
  CheckScore({Request{Ids(12, 100), {Ids(3, 1), {-1, 7, -2}, {-2}}, 2}, Request{Ids(4, 300), {}, 0},
              Request{{}, {{5, 6}}, 0}, Request{Ids(70, 500), {{-1}, Ids(80, 9), {-3, 1}}, 3},
              Request{Ids(1, 900), {{8}}, 1}},
             plan);
}

INSTANTIATE_TEST_SUITE_P(
    StrategiesAndGroups, PassPlanTest,
    ::testing::Combine(::testing::Values(Strategy::kIbpc, Strategy::kMultiItem),
                       ::testing::Values(1, 4)),
    [](const ::testing::TestParamInfo<PassPlanTest::ParamType>& info) {
      return std::string(std::get<0>(info.param) == Strategy::kIbpc ? "Ibpc" : "MultiItem") + "G" +
             std::to_string(std::get<1>(info.param));
    });

// An IBPC prefix encode: one segment, no context, for query heads per kv head G = 1 and 4.
TEST(PassPlanEncodeTest, OneSegmentWithoutContext) {
  for (const auto& [G, P] : std::vector<std::pair<int, int>>{
           {1, 1}, {1, 5}, {1, 64}, {1, 65}, {1, 300}, {4, 1}, {4, 16}, {4, 17}, {4, 300}}) {
    SCOPED_TRACE(::testing::Message() << "G " << G << " P " << P);
    const std::vector<int32_t> ids = Ids(P, 1000);
    const int Tb = Bucket(P);
    Buffers b(Tb, Bucket(1), G);
    PassPlan plan;
    PlanEncodePass(ids, G, b.Arrays(), &plan);
    EXPECT_EQ(plan.rows, P);
    EXPECT_EQ(plan.items, 0);
    EXPECT_TRUE(plan.groups.empty());
    std::vector<RefRow> rows;
    for (int t = 0; t < P; ++t) rows.push_back(RefRow{ids[t], t, 0, 0, 0});
    for (int t = 0; t < Tb; ++t) {
      ASSERT_EQ(b.tokens[t], t < P ? ids[t] : 0) << "row " << t;
      ASSERT_EQ(b.positions[t], t < P ? t : 0) << "row " << t;
      ASSERT_EQ(b.seg_start[t], 0) << "row " << t;
    }
    CheckTiles(rows, b.seg_start, b.tiles, plan.tiles, G, [](const RefRow&, const AttentionTile&) {
      ADD_FAILURE() << "an encode pass has no context";
    });
    EXPECT_EQ(plan.tiles, (P * G + kAttentionTileRows - 1) / kAttentionTileRows);
    EXPECT_EQ(plan.last_tiles, 0) << "an encode pass's last layer runs no attention";
    EXPECT_EQ(plan.work.rows, P);
    EXPECT_EQ(plan.work.attended, static_cast<double>(P) * (P + 1) / 2 * G);
  }
}

// RANKD_CUDA_ATTENTION_WARPGROUPS=auto: 2 only where the kernel takes it and the rows attend to
// kWideAttentionKeys keys or more on average; never for an empty pass.
TEST(AutoAttentionWarpgroupsTest, TwoOverLongContextsOnly) {
  // 379M, Tq=1024, Ni=50, Ti=150 multi-item: ~1,030 keys a row.
  std::vector<int32_t> prefix = Ids(1024, 1), tokens = Ids(50 * 150, 1), offsets;
  for (int i = 0; i <= 50; ++i) offsets.push_back(150 * i);
  const PlanGroup long_prefix{prefix, tokens, offsets, 0};
  const ScoreSize size = MeasureScorePass({long_prefix}, Strategy::kMultiItem);
  EXPECT_GT(size.keys, 1000.0 * static_cast<double>(size.rows));
  EXPECT_EQ(AutoAttentionWarpgroups(size.keys, size.rows, true), 2);
  EXPECT_EQ(AutoAttentionWarpgroups(size.keys, size.rows, false), 1);
  // Tq=50: ~125 keys a row.
  const PlanGroup short_prefix{absl::MakeConstSpan(prefix).first(50), tokens, offsets, 0};
  const ScoreSize small = MeasureScorePass({short_prefix}, Strategy::kMultiItem);
  EXPECT_LT(small.keys, 200.0 * static_cast<double>(small.rows));
  EXPECT_EQ(AutoAttentionWarpgroups(small.keys, small.rows, true), 1);
  // The threshold itself, and no rows.
  EXPECT_EQ(AutoAttentionWarpgroups(kWideAttentionKeys * 10, 10, true), 2);
  EXPECT_EQ(AutoAttentionWarpgroups(kWideAttentionKeys * 10 - 1, 10, true), 1);
  EXPECT_EQ(AutoAttentionWarpgroups(0, 0, true), 1);
}

TEST(BucketTest, PadsToAFewRepeatingShapes) {
  EXPECT_EQ(Bucket(1), 64);
  EXPECT_EQ(Bucket(64), 64);
  EXPECT_EQ(Bucket(65), 128);
  EXPECT_EQ(Bucket(1024), 1024);
  EXPECT_EQ(Bucket(1025), 1088);
  EXPECT_EQ(Bucket(5000), 5120);
  int previous = 0;
  for (int n = 1; n <= 100000; ++n) {
    const int b = Bucket(n);
    ASSERT_GE(b, n);
    ASSERT_EQ(b % 64, 0) << n;
    ASSERT_LT(b - n, std::max(64, n / 16)) << n << ": padding beyond 1/16";
    ASSERT_GE(b, previous) << n;
    previous = b;
  }
}

}  // namespace
}  // namespace rankd::cuda
