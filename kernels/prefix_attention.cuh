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
//
// Positions: a token of a segment sits at position ctx_len + (its row - its segment start), its
// run's context rows at 0..ctx_len-1 (the strategies place items that way). With a sliding window
// W, a query at position i sees only key positions j > i - W (HF's sliding mask), context rows
// included; soft-capping (Gemma 2) turns each score s into cap * tanh(s / cap) before the mask.
#ifndef RANKD_KERNELS_PREFIX_ATTENTION_CUH_
#define RANKD_KERNELS_PREFIX_ATTENTION_CUH_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/attention_tiles.h"
#include "kernels/kv_layers.cuh"
#include "kernels/launch.cuh"

namespace rankd::kernels {

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
  float scale = 0;                       // softmax scale (> 0): D^-0.5, or Gemma 2's scalar^-0.5
  float softcap = 0;                     // attention logit soft-capping; 0: off
  int window = 0;                        // sliding window W (this layer's); 0: off
  int blocks = 0;                        // persistent blocks, see PrefixAttentionBlocks
  bool pipelined = false;                // the pipelined kernel: the next work unit's loads under
                                         // the current one's (same units and math, same bits)
  bool wgmma = false;                    // the MMAs on wgmma (either kernel; sm_90a, D 64 or 128,
                                         // see PrefixAttentionSupportsWgmma): the same units,
                                         // masks and softmax, fp32 sums in another order
  bool overlap = false;                  // with wgmma, the queue kernel: the next key tile's
                                         // S issued with this one's P V, softmax under the MMAs
                                         // (FlashAttention-3's overlap; same bits; dynamic
                                         // shared memory, 64 KB at D 128); ignored by the
                                         // pipelined kernel
  int warpgroups = 1;                    // the wgmma queue kernel's warpgroups a block (1, 2, 3
                                         // at D 64; 1, 2 at D 128): units of 64 x warpgroups
                                         // query rows, each K/V tile copied once for all; the
                                         // tiles filled with as many rows (FillAttentionTiles'
                                         // tile_rows); 1 for every other kernel
  bool four_blocks = false;              // the one-warpgroup wgmma queue kernel without overlap
                                         // at D 64: four blocks a multiprocessor at 124
                                         // registers, not three at 162 (the same bits)
  bool three_blocks = false;             // the one-warpgroup wgmma queue kernel at D 128,
                                         // overlapped or not: three blocks a multiprocessor
                                         // at ~165 registers, not two (the same bits)
  bool prefetch = false;                 // the queue kernel: thread 0 copies the next work
                                         // unit's tile into shared memory a unit ahead, and the
                                         // block asks its q rows (rotations, context entry)
                                         // into L1 under the current unit's last key tile (the
                                         // same bits); ignored by the pipelined kernel
  __nv_bfloat16* out = nullptr;          // [T, Nq, D] bf16
};

// head_dim must be a multiple of 16 in 16..128.
bool PrefixAttentionSupportsHeadDim(int head_dim);

// The wgmma kernels run here: head_dim 64 or 128, the current device is sm_90 and this build has
// sm_90a code.
bool PrefixAttentionSupportsWgmma(int head_dim);

// The number of blocks that are resident on the current device at once for `head_dim` (of the
// pipelined kernel when `pipelined`, on wgmma when `wgmma`, overlapped as `overlap`): the grid a
// launch needs to keep the device busy, whatever the number of work units. 0 on error or where the
// kernel cannot run.
int PrefixAttentionBlocks(int head_dim, bool pipelined = false, bool wgmma = false,
                          bool overlap = false, int warpgroups = 1, bool four_blocks = false,
                          bool three_blocks = false);

// The most warpgroups a block of the wgmma queue kernel has (PrefixAttentionParams::warpgroups).
inline constexpr int kMaxAttentionWarpgroups = 3;

// A kernel of `warpgroups` warpgroups a block runs here at head_dim (1: any supported head_dim;
// 2 or 3: the wgmma queue kernel, PrefixAttentionSupportsWgmma, 3 at D 64 only).
bool PrefixAttentionSupportsWarpgroups(int head_dim, int warpgroups);

// Grid (p.blocks), 128 x p.warpgroups threads; each block takes work unit (tile, kv head)
// blockIdx.x, then units gridDim.x + (the queue's next number) until they run out.
// cudaErrorInvalidValue for an unsupported head_dim or grouping, a scale that is not positive, a
// negative softcap or window, or (pipelined: it copies them by cp.async) tiles or contexts that are
// not 16-byte aligned (prefetch: tiles), or wgmma at a head_dim other than 64 or 128, or warpgroups
// other than 1 outside the wgmma queue kernel or above its head_dim's, or four_blocks outside the
// one-warpgroup wgmma queue kernel without overlap at D 64, or three_blocks outside the
// one-warpgroup wgmma queue kernel at D 128 (or with four_blocks); cudaErrorNotSupported for wgmma
// where PrefixAttentionSupportsWgmma is false otherwise.
cudaError_t LaunchPrefixAttention(const PrefixAttentionParams& p, LaunchStream stream);

}  // namespace rankd::kernels

#endif  // RANKD_KERNELS_PREFIX_ATTENTION_CUH_
