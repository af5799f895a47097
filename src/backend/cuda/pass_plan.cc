#include "rankd/backend/cuda/pass_plan.h"

#include <algorithm>

namespace rankd::cuda {

using kernels::AttentionRun;

int Bucket(int n) {
  if (n <= 64) return 64;
  int pow2 = 1;
  while (pow2 * 2 <= n) pow2 *= 2;
  const int step = std::max(64, pow2 / 16);
  return (n + step - 1) / step * step;
}

int MaxPassTiles(int rows, int items, int gqa_group) {
  return LastLayerTilesAt(rows, items, gqa_group) +
         kernels::MaxAttentionTiles(items, items, gqa_group);
}

int LastLayerTilesAt(int rows, int items, int gqa_group) {
  return kernels::MaxAttentionTiles(rows, 2 * items + 1, gqa_group);
}

ScoreSize MeasureScorePass(absl::Span<const PlanGroup> groups, Strategy strategy) {
  const bool multi = strategy == Strategy::kMultiItem;
  ScoreSize size;
  for (const PlanGroup& g : groups) {
    const int64_t items = static_cast<int64_t>(g.offsets.size()) - 1;
    if (items <= 0) continue;  // no rows, no run, no context
    const double P = static_cast<double>(g.prefix_ids.size());
    size.rows += static_cast<int64_t>(multi ? g.prefix_ids.size() : 0) + g.tokens.size();
    size.items += items;
    size.embedding_rows += g.embedding_rows;
    if (multi) size.keys += P * (P + 1) / 2;
    for (int64_t i = 0; i < items; ++i) {
      const double L = static_cast<double>(g.offsets[i + 1]) - g.offsets[i];
      size.keys += L * P + L * (L + 1) / 2;
    }
  }
  return size;
}

int AutoAttentionWarpgroups(double keys, int64_t rows, bool wide) {
  return wide && rows > 0 && keys >= kWideAttentionKeys * static_cast<double>(rows) ? 2 : 1;
}

void PlanEncodePass(absl::Span<const int32_t> ids, int gqa_group, const PassArrays& out,
                    PassPlan* plan, int tile_rows) {
  const int P = static_cast<int>(ids.size());
  std::fill(out.tokens.begin(), out.tokens.end(), 0);
  std::copy(ids.begin(), ids.end(), out.tokens.begin());
  std::fill(out.positions.begin(), out.positions.end(), 0);
  for (int t = 0; t < P; ++t) out.positions[t] = t;
  std::fill(out.seg_start.begin(), out.seg_start.end(), 0);
  plan->groups.clear();
  plan->runs.assign(1, AttentionRun{0, P, 0, 0});
  plan->last_runs.clear();
  plan->tiles = kernels::FillAttentionTiles(plan->runs.data(), 1, out.seg_start.data(), gqa_group,
                                            out.tiles.data(), tile_rows);
  plan->last_tiles = 0;
  plan->rows = P;
  plan->items = 0;
  plan->work = PassWork{};
  plan->work.rows = P;
  plan->work.attended = static_cast<double>(P) * (P + 1) / 2 * gqa_group;
}

void PlanScorePass(absl::Span<const PlanGroup> groups, Strategy strategy, int gqa_group,
                   const PassArrays& out, PassPlan* plan, int tile_rows) {
  const bool multi = strategy == Strategy::kMultiItem;
  PassWork work;
  int row = 0, item = 0, emb = 0;
  plan->groups.clear();
  plan->runs.clear();
  plan->last_runs.clear();
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    const PlanGroup& g = groups[gi];
    const int num_items = static_cast<int>(g.offsets.size()) - 1;
    if (num_items <= 0) continue;
    const int P = static_cast<int>(g.prefix_ids.size());
    const int ctx = static_cast<int>(plan->groups.size());
    plan->groups.push_back(PlacedGroup{static_cast<int>(gi), row, emb});
    if (multi) {
      // The prefix's rows come first; its items' context is those rows of the pass.
      const int begin = row;
      for (int t = 0; t < P; ++t, ++row) {
        out.tokens[row] = g.prefix_ids[t];
        out.positions[row] = t;
        out.seg_start[row] = begin;
      }
      if (P > 0) plan->runs.push_back(AttentionRun{begin, row, 0, 0});
      work.attended += static_cast<double>(P) * (P + 1) / 2;
    } else {
      work.ctx_rows += P;
    }
    const int run_begin = row;
    for (int i = 0; i < num_items; ++i) {
      const int begin = row;
      for (int k = g.offsets[i]; k < g.offsets[i + 1]; ++k, ++row) {
        const int32_t tok = g.tokens[k];
        out.tokens[row] = tok >= 0 ? tok : tok - emb;  // -(r + 1) -> -(emb + r + 1)
        out.positions[row] = P + (row - begin);
        out.seg_start[row] = begin;
      }
      out.last_rows[item++] = row - 1;
      plan->last_runs.push_back(AttentionRun{row - 1, row, P, ctx});
      const double len = row - begin;
      work.attended += len * P + len * (len + 1) / 2;
      work.last_attended += P + len;
    }
    plan->runs.push_back(AttentionRun{run_begin, row, P, ctx});
    emb += g.embedding_rows;
  }
  std::fill(out.tokens.begin() + row, out.tokens.end(), 0);
  std::fill(out.positions.begin() + row, out.positions.end(), 0);
  std::fill(out.seg_start.begin() + row, out.seg_start.end(), row);
  plan->tiles =
      kernels::FillAttentionTiles(plan->runs.data(), static_cast<int>(plan->runs.size()),
                                  out.seg_start.data(), gqa_group, out.tiles.data(), tile_rows);
  const int Tb = static_cast<int>(out.tokens.size()), Nb = static_cast<int>(out.last_rows.size());
  plan->last_tiles = kernels::FillAttentionTiles(
      plan->last_runs.data(), static_cast<int>(plan->last_runs.size()), out.seg_start.data(),
      gqa_group, out.tiles.data() + LastLayerTilesAt(Tb, Nb, gqa_group));
  plan->rows = row;
  plan->items = item;
  work.rows = row;
  work.items = item;
  work.attended *= gqa_group;
  work.last_attended *= gqa_group;
  plan->work = work;
}

}  // namespace rankd::cuda
