// The kernel tests of prefix attention, IBPC and multi-item, and the shapes the kernels refuse
// (kernels/prefix_attention.cu) (kernel_test.h says how they check).
#include "kernels/prefix_attention.cuh"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/qkv_rope.cuh"
#include "kernels/score_head.cuh"
#include "rankd/backend/cpu/ops.h"
#include "rankd/model/rope.h"
#include "tests/backend/cuda/kernel_test.h"

namespace rankd::cuda::kernel_test {
namespace {

// A batch for the attention kernel: runs of segments, each run attending to a context that is
// either a separate prefix cache (IBPC) or the own rows of an earlier run (multi-item). q/k/v live
// in one fused [T, Q + 2KV] buffer, as the backend keeps them; caches hold 2 layers and the
// kernel runs layer 1.
struct AttentionCase {
  int Nq, Nkv, D;
  std::vector<int> cache_rows;         // P of each separate cache
  std::vector<int> ctx;                // per run: -1 none, c >= 0 cache c, -2 - r own run r
  std::vector<std::vector<int>> lens;  // per run: segment lengths
  int blocks = 0;                      // 0: the resident grid
  bool rope = false;  // q and k get RoPE first; q also as attention loads it (q_rotations),
                      // which must give the same bits as QkvRope's rotation
  float scale = 0;    // softmax scale; 0: 1/sqrt(D)
  float softcap = 0;  // Gemma 2's attention logit soft-capping; 0: off
  int window = 0;     // sliding window; 0: off
};

void CheckAttention(const AttentionCase& c, Rng& rng) {
  constexpr int kLayers = 2, kLayer = 1;
  const int Q = c.Nq * c.D, KV = c.Nkv * c.D, W = Q + 2 * KV, G = c.Nq / c.Nkv;
  const cpu::AttentionScoring scoring{c.scale > 0 ? c.scale : 1.0f / std::sqrt(float(c.D)),
                                      c.softcap, c.window};
  std::vector<kernels::AttentionRun> runs;
  std::vector<int32_t> seg_start;
  int T = 0;
  for (size_t r = 0; r < c.lens.size(); ++r) {
    kernels::AttentionRun run;
    run.begin = T;
    for (int len : c.lens[r]) {
      for (int t = 0; t < len; ++t) seg_start.push_back(T);
      T += len;
    }
    run.end = T;
    runs.push_back(run);
  }
  std::vector<float> wide = rng.Bf16Values(static_cast<size_t>(T) * W, 2.0f);
  DeviceArray<bf16> d_wide(ToBf16(wide)), d_raw_q(ToBf16(wide));
  DeviceArray<float2> d_rot(static_cast<size_t>(T) * c.D / 2);
  if (c.rope) {
    // d_wide: q and k rotated by QkvRope; d_raw_q: only k (skip_q), q left for attention.
    std::vector<int32_t> positions(T);
    for (int32_t& pos : positions) pos = rng.Int(0, 5000);
    DeviceArray<int32_t> d_pos(positions), d_live(std::vector<int32_t>{T});
    DeviceArray<float> d_inv(model::RopeInverseFrequencies(model::RopeConfig{}, c.D));
    RANKD_EXPECT_CUDA_OK(
        kernels::LaunchRopeRotations(d_pos.get(), d_inv.get(), T, c.D / 2, d_rot.get(), nullptr));
    kernels::QkvRopeParams r;
    r.rotations = d_rot.get();
    r.num_rows = d_live.get();
    r.num_tokens = T;
    r.num_q_heads = c.Nq;
    r.num_kv_heads = c.Nkv;
    r.head_dim = c.D;
    r.qkv = d_wide.get();
    RANKD_EXPECT_CUDA_OK(kernels::LaunchQkvRope(r, nullptr));
    r.qkv = d_raw_q.get();
    r.skip_q = true;
    RANKD_EXPECT_CUDA_OK(kernels::LaunchQkvRope(r, nullptr));
    RANKD_EXPECT_CUDA_OK(cudaDeviceSynchronize());
    wide = FromBf16(d_wide.Download());  // the reference sees the rotated q and k
  }
  std::vector<std::vector<float>> caches;
  std::vector<std::unique_ptr<DeviceArray<bf16>>> d_caches;
  for (int P : c.cache_rows) {
    caches.push_back(rng.Bf16Values(static_cast<size_t>(kLayers) * 2 * P * KV, 1.5f));
    d_caches.push_back(std::make_unique<DeviceArray<bf16>>(ToBf16(caches.back())));
  }
  const kernels::KvLayers own{d_wide.get() + Q, d_wide.get() + Q + KV, 0, W};
  // Contexts: one table entry per run that has one.
  std::vector<kernels::KvLayers> contexts;
  std::vector<std::vector<float>> ctx_k(runs.size()), ctx_v(runs.size());
  for (size_t r = 0; r < runs.size(); ++r) {
    const int src = c.ctx[r];
    if (src == -1) continue;
    kernels::KvLayers kv;
    if (src >= 0) {
      const int P = c.cache_rows[src];
      const int64_t layer = static_cast<int64_t>(2) * P * KV;
      bf16* base = d_caches[src]->get();
      kv = {base, base + static_cast<int64_t>(P) * KV, layer, KV};
      runs[r].ctx_len = P;
      const auto& h = caches[src];
      ctx_k[r].assign(h.begin() + kLayer * layer, h.begin() + kLayer * layer + P * KV);
      ctx_v[r].assign(h.begin() + kLayer * layer + P * KV, h.begin() + (kLayer + 1) * layer);
    } else {
      const auto& o = runs[-2 - src];
      kv = {own.k + static_cast<int64_t>(o.begin) * W, own.v + static_cast<int64_t>(o.begin) * W, 0,
            W};
      runs[r].ctx_len = o.end - o.begin;
      for (int t = o.begin; t < o.end; ++t) {
        const float* row = wide.data() + static_cast<size_t>(t) * W;
        ctx_k[r].insert(ctx_k[r].end(), row + Q, row + Q + KV);
        ctx_v[r].insert(ctx_v[r].end(), row + Q + KV, row + W);
      }
    }
    runs[r].ctx = static_cast<int32_t>(contexts.size());
    contexts.push_back(kv);
  }
  // Reference, segment by segment.
  std::vector<float> ref(static_cast<size_t>(T) * Q);
  for (size_t r = 0; r < runs.size(); ++r) {
    int begin = runs[r].begin;
    for (int len : c.lens[r]) {
      std::vector<float> q, k, v, out(static_cast<size_t>(len) * Q);
      for (int t = begin; t < begin + len; ++t) {
        const float* row = wide.data() + static_cast<size_t>(t) * W;
        q.insert(q.end(), row, row + Q);
        k.insert(k.end(), row + Q, row + Q + KV);
        v.insert(v.end(), row + Q + KV, row + W);
      }
      cpu::PrefixAttention(q.data(), ctx_k[r].data(), ctx_v[r].data(), runs[r].ctx_len, k.data(),
                           v.data(), len, c.Nq, c.Nkv, c.D, scoring, out.data());
      std::copy(out.begin(), out.end(), ref.begin() + static_cast<size_t>(begin) * Q);
      begin += len;
    }
  }
  std::vector<kernels::AttentionTile> tiles(
      kernels::MaxAttentionTiles(T, static_cast<int>(runs.size()), G));
  const int num_tiles = kernels::FillAttentionTiles(runs.data(), static_cast<int>(runs.size()),
                                                    seg_start.data(), G, tiles.data());
  tiles.resize(num_tiles);
  int tile_rows = 0;
  for (int i = 0; i < num_tiles; ++i) {
    const kernels::AttentionTile& t = tiles[i];
    if (i > 0) {
      ASSERT_GE(tiles[i - 1].num_keys, t.num_keys) << "tiles are not in decreasing cost order";
    }
    // The precomputed keys: the context, then own rows from the first token's segment start to
    // the last token.
    const int first = t.begin + t.row0 / G;
    const int last = t.begin + (std::min(t.rows, t.row0 + kernels::kAttentionTileRows) - 1) / G;
    ASSERT_EQ(t.own_lo, seg_start[first]);
    ASSERT_EQ(t.num_keys, t.ctx_len + last - seg_start[first] + 1);
    tile_rows += std::min(kernels::kAttentionTileRows, t.rows - t.row0);
  }
  ASSERT_EQ(tile_rows, T * G) << "every query row in exactly one tile";
  DeviceArray<kernels::KvLayers> d_ctx(contexts.empty() ? std::vector<kernels::KvLayers>(1)
                                                        : contexts);
  DeviceArray<int32_t> d_seg(seg_start), d_units(std::vector<int32_t>{num_tiles * c.Nkv}),
      d_counter(std::vector<int32_t>{0});
  DeviceArray<kernels::AttentionTile> d_tiles(tiles);
  DeviceArray<bf16> d_out(ref.size());
  d_out.Poison();
  kernels::PrefixAttentionParams p;
  p.q = d_wide.get();
  p.q_row_stride = W;
  p.own = own;
  p.contexts = d_ctx.get();
  p.seg_start = d_seg.get();
  p.tiles = d_tiles.get();
  p.num_units = d_units.get();
  p.unit_counter = d_counter.get();
  p.layer = kLayer;
  p.num_q_heads = c.Nq;
  p.num_kv_heads = c.Nkv;
  p.head_dim = c.D;
  p.scale = scoring.scale;
  p.softcap = scoring.softcap;
  p.window = scoring.window;
  p.blocks = c.blocks > 0 ? c.blocks : kernels::PrefixAttentionBlocks(c.D);
  p.out = d_out.get();
  ASSERT_GT(p.blocks, 0);
  RANKD_EXPECT_CUDA_OK(kernels::LaunchPrefixAttention(p, nullptr));
  RANKD_EXPECT_CUDA_OK(cudaDeviceSynchronize());
  const std::vector<float> got = FromBf16(d_out.Download());
  EXPECT_LT(RelNormError(got, ref), kAttention);
  // The pipelined kernel, and the queue kernel with each next unit's loads prefetched
  // (`prefetch`): the same units and math, so the same bits, on their own resident grids (or the
  // case's small one, where each block runs many units).
  for (const bool pipelined : {true, false}) {
    kernels::PrefixAttentionParams pp = p;
    pp.pipelined = pipelined;
    pp.prefetch = !pipelined;
    pp.blocks = c.blocks > 0 ? c.blocks : kernels::PrefixAttentionBlocks(c.D, pipelined);
    ASSERT_GT(pp.blocks, 0);
    d_counter.Upload(std::vector<int32_t>{0});
    d_out.Poison();
    RANKD_EXPECT_CUDA_OK(kernels::LaunchPrefixAttention(pp, nullptr));
    RANKD_EXPECT_CUDA_OK(cudaDeviceSynchronize());
    EXPECT_EQ(FromBf16(d_out.Download()), got) << (pipelined ? "pipelined kernel" : "prefetch");
  }
  // The wgmma kernels (where the device and build have them, at D 64 and 128): the same units,
  // masks and softmax with fp32 sums in another order, so within kAttention of the reference and
  // within bf16 roundings of the mma.sync kernel; the pipelined one gives the queue one's bits, and
  // q rotated as it is loaded the same bits as QkvRope's q. The queue kernel with its key tiles
  // overlapped (`overlap`, D 64; ignored at other D) and at four blocks a multiprocessor
  // (`four_blocks`, D 64) or three (`three_blocks`, D 128; overlapped or not) gives the queue
  // one's bits too, each also with `prefetch`.
  std::vector<float> wgmma_got;
  if (kernels::PrefixAttentionSupportsWgmma(c.D)) {
    struct Variant {
      bool pipelined, overlap, four_blocks, three_blocks, prefetch;
      const char* name;
    };
    for (const Variant& v :
         {Variant{false, false, false, false, false, "wgmma kernel"},
          Variant{true, false, false, false, false, "wgmma pipelined kernel"},
          Variant{false, true, false, false, false, "wgmma overlapped"},
          Variant{false, false, true, false, false, "wgmma four blocks"},
          Variant{false, false, false, true, false, "wgmma three blocks"},
          Variant{false, true, false, true, false, "wgmma overlapped three blocks"},
          Variant{false, false, false, false, true, "wgmma prefetch"},
          Variant{false, true, false, false, true, "wgmma overlapped prefetch"},
          Variant{false, false, true, false, true, "wgmma four blocks prefetch"},
          Variant{false, true, false, true, true, "wgmma overlapped three blocks prefetch"}}) {
      if ((v.four_blocks && c.D != 64) || (v.three_blocks && c.D != 128)) continue;
      kernels::PrefixAttentionParams pw = p;
      pw.wgmma = true;
      pw.pipelined = v.pipelined;
      pw.overlap = v.overlap;
      pw.four_blocks = v.four_blocks;
      pw.three_blocks = v.three_blocks;
      pw.prefetch = v.prefetch;
      pw.blocks = c.blocks > 0 ? c.blocks
                               : kernels::PrefixAttentionBlocks(c.D, v.pipelined, true, v.overlap,
                                                                1, v.four_blocks, v.three_blocks);
      ASSERT_GT(pw.blocks, 0) << v.name;
      d_counter.Upload(std::vector<int32_t>{0});
      d_out.Poison();
      RANKD_EXPECT_CUDA_OK(kernels::LaunchPrefixAttention(pw, nullptr));
      RANKD_EXPECT_CUDA_OK(cudaDeviceSynchronize());
      const std::vector<float> w = FromBf16(d_out.Download());
      if (wgmma_got.empty()) {
        EXPECT_LT(RelNormError(w, ref), kAttention) << v.name;
        EXPECT_LT(RelNormError(w, got), kOneRounding) << "wgmma kernel vs mma.sync";
        wgmma_got = w;
      } else {
        EXPECT_EQ(w, wgmma_got) << v.name;
      }
    }
    // Blocks of 2 and 3 (D 64) warpgroups over tiles of as many 64-row units: each tile's keys
    // start at its first row's segment, so the key tiles (and fp32 sums) fall elsewhere than in
    // 64-row tiles: within kAttention of the reference and a bf16 rounding of the one-warpgroup
    // kernel; overlapped, the serial loop's bits.
    for (int wgs = 2; kernels::PrefixAttentionSupportsWarpgroups(c.D, wgs); ++wgs) {
      std::vector<kernels::AttentionTile> wide_tiles(
          kernels::MaxAttentionTiles(T, static_cast<int>(runs.size()), G));
      const int rows = wgs * kernels::kAttentionTileRows;
      const int n = kernels::FillAttentionTiles(runs.data(), static_cast<int>(runs.size()),
                                                seg_start.data(), G, wide_tiles.data(), rows);
      wide_tiles.resize(n);
      int covered = 0;
      for (const kernels::AttentionTile& t : wide_tiles) {
        const int last = t.begin + (std::min(t.rows, t.row0 + rows) - 1) / G;
        ASSERT_EQ(t.num_keys, t.ctx_len + last - t.own_lo + 1);
        covered += std::min(rows, t.rows - t.row0);
      }
      ASSERT_EQ(covered, T * G) << wgs << " warpgroups: every query row in exactly one tile";
      DeviceArray<kernels::AttentionTile> d_wide_tiles(wide_tiles);
      DeviceArray<int32_t> d_wide_units(std::vector<int32_t>{n * c.Nkv});
      std::vector<float> serial;
      for (const auto& [overlap, prefetch] : {std::pair{false, false}, std::pair{true, false},
                                              std::pair{false, true}, std::pair{true, true}}) {
        kernels::PrefixAttentionParams pw = p;
        pw.wgmma = true;
        pw.overlap = overlap;
        pw.prefetch = prefetch;
        pw.warpgroups = wgs;
        pw.tiles = d_wide_tiles.get();
        pw.num_units = d_wide_units.get();
        pw.blocks = c.blocks > 0 ? c.blocks
                                 : kernels::PrefixAttentionBlocks(c.D, false, true, overlap, wgs);
        ASSERT_GT(pw.blocks, 0) << wgs << " warpgroups";
        d_counter.Upload(std::vector<int32_t>{0});
        d_out.Poison();
        RANKD_EXPECT_CUDA_OK(kernels::LaunchPrefixAttention(pw, nullptr));
        RANKD_EXPECT_CUDA_OK(cudaDeviceSynchronize());
        const std::vector<float> w = FromBf16(d_out.Download());
        if (serial.empty()) {
          EXPECT_LT(RelNormError(w, ref), kAttention) << wgs << " warpgroups";
          EXPECT_LT(RelNormError(w, wgmma_got), kOneRounding) << wgs << " warpgroups vs one";
          serial = w;
        } else {
          EXPECT_EQ(w, serial) << wgs << " warpgroups" << (overlap ? ", overlapped" : "")
                               << (prefetch ? ", prefetch" : "");
        }
      }
    }
  } else {
    EXPECT_EQ(kernels::PrefixAttentionBlocks(c.D, false, true), 0) << "no wgmma kernel to size";
  }
  if (c.rope) {
    // Unrotated q, rotated as it is loaded: the same bits as attention over QkvRope's q. (k and v
    // of d_raw_q equal d_wide's bit for bit, so K/V keep coming from d_wide.)
    p.q = d_raw_q.get();
    p.q_rotations = d_rot.get();
    // (prefetch: the rotations' lines asked into L1 too.)
    for (const auto& [pipelined, prefetch] :
         {std::pair{false, false}, std::pair{true, false}, std::pair{false, true}}) {
      p.pipelined = pipelined;
      p.prefetch = prefetch;
      p.blocks = c.blocks > 0 ? c.blocks : kernels::PrefixAttentionBlocks(c.D, pipelined);
      d_counter.Upload(std::vector<int32_t>{0});
      d_out.Poison();
      RANKD_EXPECT_CUDA_OK(kernels::LaunchPrefixAttention(p, nullptr));
      RANKD_EXPECT_CUDA_OK(cudaDeviceSynchronize());
      EXPECT_EQ(FromBf16(d_out.Download()), got)
          << "q rotated in attention" << (pipelined ? ", pipelined kernel" : "")
          << (prefetch ? ", prefetch" : "");
    }
    if (!wgmma_got.empty()) {
      p.wgmma = true;
      p.pipelined = false;
      p.blocks = c.blocks > 0 ? c.blocks : kernels::PrefixAttentionBlocks(c.D, false, true);
      for (const bool prefetch : {false, true}) {
        p.prefetch = prefetch;
        d_counter.Upload(std::vector<int32_t>{0});
        d_out.Poison();
        RANKD_EXPECT_CUDA_OK(kernels::LaunchPrefixAttention(p, nullptr));
        RANKD_EXPECT_CUDA_OK(cudaDeviceSynchronize());
        EXPECT_EQ(FromBf16(d_out.Download()), wgmma_got)
            << "q rotated in attention, wgmma kernel" << (prefetch ? ", prefetch" : "");
      }
    }
  }
}

// IBPC: every run's context is a separate prefix cache (several requests, each its own prefix).
TEST_F(KernelTest, PrefixAttentionSeparateContexts) {
  const AttentionCase cases[] = {
      {4, 4, 16, {6}, {0}, {{27, 1, 39}}},
      {6, 2, 16, {}, {-1}, {{5, 70, 1}}},  // no context (prefix encoding)
      {4, 2, 32, {131}, {0}, {{47, 60}}},
      {3, 1, 48, {9}, {0}, {{1, 2, 3, 100}}},  // MQA, head_dim 48
      {16, 16, 64, {50, 17, 3}, {0, 1, 2}, {{150, 3}, {1, 1, 1, 90}, {64}}},
      {8, 1, 80, {13}, {0}, {{65}}},
      {12, 4, 96, {64, 1}, {1, 0}, {{64, 63}, {2}}},
      {8, 2, 128, {77}, {0}, {{130, 17, 1}}},
  };
  for (const AttentionCase& c : cases) {
    SCOPED_TRACE(::testing::Message()
                 << "Nq=" << c.Nq << " Nkv=" << c.Nkv << " D=" << c.D << " runs=" << c.lens.size());
    CheckAttention(c, rng_);
  }
}

// Multi-item: per request a run for its prefix (no context), then a run of its items over the
// prefix's own rows; no item sees another, nor another request.
TEST_F(KernelTest, PrefixAttentionPackedMultiItem) {
  const AttentionCase cases[] = {
      {6, 2, 16, {}, {-1, -2}, {{11}, {20, 1, 33}}},
      {4, 1, 64, {}, {-1, -2, -1, -4}, {{70}, {9, 80}, {5}, {1, 1, 2}}},
  };
  for (const AttentionCase& c : cases) {
    SCOPED_TRACE(::testing::Message() << "Nq=" << c.Nq << " Nkv=" << c.Nkv << " D=" << c.D);
    CheckAttention(c, rng_);
  }
}

// RoPE of q as attention loads it equals QkvRope's, bit for bit, for every head_dim and grouping.
TEST_F(KernelTest, PrefixAttentionRotatesQ) {
  const AttentionCase cases[] = {
      {4, 4, 16, {6}, {0}, {{27, 1, 39}}, 0, true},
      {4, 2, 32, {}, {-1, -2}, {{31}, {20, 1, 33}}, 0, true},
      {3, 1, 48, {9}, {0}, {{1, 2, 3, 100}}, 0, true},
      {16, 16, 64, {}, {-1, -2}, {{50}, {150, 150, 3}}, 0, true},
      {8, 1, 80, {13}, {0}, {{65}}, 0, true},
      {12, 4, 96, {64}, {0}, {{64, 63}}, 0, true},
      {6, 2, 112, {}, {-1}, {{40, 7}}, 0, true},
      {8, 2, 128, {77}, {0}, {{130, 17, 1}}, 0, true},
  };
  for (const AttentionCase& c : cases) {
    SCOPED_TRACE(::testing::Message() << "Nq=" << c.Nq << " Nkv=" << c.Nkv << " D=" << c.D);
    CheckAttention(c, rng_);
  }
}

// Hundreds of one-token items (embedding items) share tiles; a tiny grid drains the whole queue.
TEST_F(KernelTest, PrefixAttentionOneTokenItemsAndSmallGrids) {
  AttentionCase c{16, 16, 64, {50}, {0}, {std::vector<int>(250, 1)}};
  CheckAttention(c, rng_);
  for (const int blocks : {1, 3}) {
    SCOPED_TRACE(::testing::Message() << "blocks=" << blocks);
    AttentionCase small{8, 2, 64, {21}, {0}, {{1, 40, 1, 1, 77, 2}}, blocks};
    CheckAttention(small, rng_);
  }
}

// Gemma 2 / Mistral: soft-capped scores with query_pre_attn_scalar's scale, and sliding windows
// narrower than the context and the segments (keys of the prefix cache, of the multi-item
// prefix's rows and of the item itself fall out of the window), in both strategies' layouts.
TEST_F(KernelTest, PrefixAttentionSoftCapScaleAndSlidingWindow) {
  struct Variant {
    float scale, softcap;
    int window;
  };
  const AttentionCase layouts[] = {
      {4, 2, 32, {131}, {0}, {{47, 60, 1}}},                            // IBPC, one cache
      {4, 2, 32, {40, 3}, {0, 1}, {{70, 2}, {25}}},                     // IBPC, two requests
      {4, 1, 16, {}, {-1}, {{100, 1, 30}}},                             // prefix encoding
      {6, 2, 64, {}, {-1, -2}, {{70}, {9, 80, 1}}},                     // multi-item
      {4, 2, 32, {}, {-1, -2, -1, -4}, {{23}, {30, 2}, {5}, {64, 1}}},  // multi-item, two requests
      {8, 8, 128, {77}, {0}, {std::vector<int>(90, 1)}},                // one-token items
  };
  const Variant variants[] = {
      {1.0f / std::sqrt(24.0f), 4.0f, 24},  // gemma2-tiny's layer 0
      {1.0f / std::sqrt(24.0f), 4.0f, 0},   // its full-attention layer
      {0, 0, 20},                           // Mistral: window alone
      {0, 0, 1},                            // each token sees itself only
      {0, 50.0f, 5000},                     // a window wider than everything
  };
  for (const AttentionCase& layout : layouts) {
    for (const Variant& v : variants) {
      AttentionCase c = layout;
      c.scale = v.scale;
      c.softcap = v.softcap;
      c.window = v.window;
      SCOPED_TRACE(::testing::Message()
                   << "Nq=" << c.Nq << " Nkv=" << c.Nkv << " D=" << c.D << " runs=" << c.lens.size()
                   << " softcap=" << c.softcap << " window=" << c.window);
      CheckAttention(c, rng_);
    }
  }
  AttentionCase roped{4, 2, 32, {}, {-1, -2}, {{31}, {20, 1, 33}}, 0, true};
  roped.softcap = 4.0f;
  roped.window = 8;
  CheckAttention(roped, rng_);
}

TEST_F(KernelTest, UnsupportedShapesAreRejected) {
  kernels::PrefixAttentionParams p;
  p.scale = 0.125f;
  p.blocks = 1;
  p.num_q_heads = 4;
  p.num_kv_heads = 4;
  p.head_dim = 40;
  EXPECT_EQ(kernels::LaunchPrefixAttention(p, nullptr), cudaErrorInvalidValue);
  // wgmma kernels exist at D 64 and 128 only.
  p.wgmma = true;
  for (const int d : {16, 48, 96}) {
    p.head_dim = d;
    EXPECT_EQ(kernels::LaunchPrefixAttention(p, nullptr), cudaErrorInvalidValue) << "wgmma D " << d;
    EXPECT_FALSE(kernels::PrefixAttentionSupportsWgmma(d));
    EXPECT_EQ(kernels::PrefixAttentionBlocks(d, false, true), 0);
  }
  p.wgmma = false;
  p.head_dim = 64;
  // Blocks of several warpgroups: the wgmma queue kernel's only, of 2 or 3 at D 64 and 2 at D 128.
  p.warpgroups = 2;
  EXPECT_EQ(kernels::LaunchPrefixAttention(p, nullptr), cudaErrorInvalidValue) << "not on wgmma";
  EXPECT_EQ(kernels::PrefixAttentionBlocks(64, false, false, false, 2), 0);
  EXPECT_EQ(kernels::PrefixAttentionBlocks(64, true, true, false, 2), 0) << "pipelined";
  for (const auto& [d, wgs] : {std::pair{64, 0}, std::pair{64, 4}, std::pair{128, 3},
                               std::pair{48, 2}, std::pair{40, 1}}) {
    EXPECT_FALSE(kernels::PrefixAttentionSupportsWarpgroups(d, wgs)) << d << " " << wgs;
  }
  EXPECT_TRUE(kernels::PrefixAttentionSupportsWarpgroups(48, 1));
  if (kernels::PrefixAttentionSupportsWgmma(128)) {
    p.wgmma = true;
    p.head_dim = 128;
    p.warpgroups = 3;
    EXPECT_EQ(kernels::LaunchPrefixAttention(p, nullptr), cudaErrorInvalidValue) << "3 at D 128";
    p.warpgroups = 2;
    p.pipelined = true;
    EXPECT_EQ(kernels::LaunchPrefixAttention(p, nullptr), cudaErrorInvalidValue) << "pipelined";
    p.pipelined = false;
    p.wgmma = false;
    p.head_dim = 64;
  }
  p.warpgroups = 1;
  // More resident blocks: four_blocks is the one-warpgroup wgmma queue kernel's without overlap at
  // D 64, three_blocks the one-warpgroup wgmma queue kernel's at D 128 (overlapped or not); never
  // both. Everything else is refused, and sized as 0 blocks.
  struct Dense {
    int D;
    bool wgmma, pipelined, overlap;
    int wgs;
    bool four, three;
  };
  for (const Dense& v :
       {Dense{64, false, false, false, 1, true, false},
        Dense{64, true, true, false, 1, true, false}, Dense{64, true, false, true, 1, true, false},
        Dense{64, true, false, false, 2, true, false},
        Dense{128, true, false, false, 1, true, false},
        Dense{64, true, false, false, 1, false, true},
        Dense{128, false, false, false, 1, false, true},
        Dense{128, true, true, false, 1, false, true},
        Dense{128, true, false, false, 2, false, true},
        Dense{128, true, false, false, 1, true, true}}) {
    if (v.wgmma && !kernels::PrefixAttentionSupportsWgmma(v.D)) continue;  // (NotSupported)
    const std::string what = "D " + std::to_string(v.D) + (v.wgmma ? " wgmma" : "") +
                             (v.pipelined ? " pipelined" : "") + (v.overlap ? " overlap" : "") +
                             " wg" + std::to_string(v.wgs) + (v.four ? " four" : "") +
                             (v.three ? " three" : "");
    EXPECT_EQ(kernels::PrefixAttentionBlocks(v.D, v.pipelined, v.wgmma, v.overlap, v.wgs, v.four,
                                             v.three),
              0)
        << what;
    p.head_dim = v.D;
    p.wgmma = v.wgmma;
    p.pipelined = v.pipelined;
    p.overlap = v.overlap;
    p.warpgroups = v.wgs;
    p.four_blocks = v.four;
    p.three_blocks = v.three;
    EXPECT_EQ(kernels::LaunchPrefixAttention(p, nullptr), cudaErrorInvalidValue) << what;
  }
  p.head_dim = 64;
  p.three_blocks = false;
  p.wgmma = p.pipelined = p.overlap = p.four_blocks = false;
  p.warpgroups = 1;
  p.num_kv_heads = 3;  // 4 query heads do not group over 3
  EXPECT_EQ(kernels::LaunchPrefixAttention(p, nullptr), cudaErrorInvalidValue);
  p.num_kv_heads = 4;
  p.blocks = 0;
  EXPECT_EQ(kernels::LaunchPrefixAttention(p, nullptr), cudaErrorInvalidValue);
  p.blocks = 1;
  p.scale = 0;  // the scale is the caller's to give
  EXPECT_EQ(kernels::LaunchPrefixAttention(p, nullptr), cudaErrorInvalidValue);
  p.scale = 0.125f;
  p.window = -1;
  EXPECT_EQ(kernels::LaunchPrefixAttention(p, nullptr), cudaErrorInvalidValue);
  p.window = 0;
  // The pipelined kernel copies tiles and context entries by cp.async, the queue kernel with
  // prefetch its tiles: 16-byte aligned only.
  alignas(16) static char table[64];
  p.prefetch = true;
  p.tiles = reinterpret_cast<const kernels::AttentionTile*>(table + 8);
  EXPECT_EQ(kernels::LaunchPrefixAttention(p, nullptr), cudaErrorInvalidValue) << "prefetch tiles";
  p.prefetch = false;
  p.pipelined = true;
  EXPECT_EQ(kernels::LaunchPrefixAttention(p, nullptr), cudaErrorInvalidValue) << "tiles";
  p.tiles = nullptr;
  p.contexts = reinterpret_cast<const kernels::KvLayers*>(table + 8);
  EXPECT_EQ(kernels::LaunchPrefixAttention(p, nullptr), cudaErrorInvalidValue) << "contexts";
  kernels::QkvRopeParams r;
  r.num_tokens = 1;
  r.num_q_heads = r.num_kv_heads = 1;
  for (const int d : {258, 40, 2}) {
    r.head_dim = d;
    EXPECT_EQ(kernels::LaunchQkvRope(r, nullptr), cudaErrorInvalidValue) << "head_dim " << d;
  }
  EXPECT_EQ(kernels::LaunchScoreHead(nullptr, nullptr, nullptr, 1, nullptr, 0.0f, nullptr, 3, 0.0f,
                                     1e-6f, 8, nullptr, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

}  // namespace
}  // namespace rankd::cuda::kernel_test
