// rankd/backend: the Backend interface, its own part (library rankd_backend_api), between the
// engine above it and the implementations beside it (backend/cpu: the float32 reference,
// backend/cuda: bf16 kernels and cuBLASLt); the registry (registry.h, rankd_backends) picks one by
// name where a program is assembled, so the engine knows only this header.
//
// Backend: the model-level compute interface. A backend owns the whole forward pass (which lets
// the CUDA backend fuse kernels and capture graphs); the engine above it handles text, templates
// and batching, and hands it prepared batches. Every backend computes the same scores
// (ARCHITECTURE.md, "Score semantics"); the CPU backend is the float32 reference.
#ifndef RANKD_BACKEND_BACKEND_H_
#define RANKD_BACKEND_BACKEND_H_

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "rankd/model/config.h"

namespace rankd::backend {

// What turns the last position's hidden state h (after the final norm) into a score. cap(z) is
// the model's final logit soft-capping, final_logit_softcapping * tanh(z / final_logit_softcapping)
// (Gemma 2), or z where the model has none.
struct HeadSpec {
  enum class Type {
    kClassifier,  // score = score.weight[index] . h                    (*ForSequenceClassification)
    kYesNo,       // score = cap(lm_head[yes] . h) - cap(lm_head[no] . h)   (*ForCausalLM)
    kLogit,       // score = cap(lm_head[token] . h): one token's logit     (*ForCausalLM)
  };
  Type type = Type::kClassifier;
  int index = 0;       // classifier row
  int32_t yes_id = 0;  // yes_no token ids
  int32_t no_id = 0;
  int32_t token_id = 0;  // logit's token id

  // The rows of the output projection the score reads: [index], [yes, no] or [token].
  std::vector<int32_t> HeadRows() const;
  std::string ToString() const;  // "classifier:0", "yes_no:4,5" or "logit:4"
};

// Candidate items packed without padding (cu_seqlens layout).
//   tokens  [T]        int32: a vocab id (>= 0), or -(r + 1) for row r of `embeddings`
//   offsets [N + 1]    int32: item i owns tokens[offsets[i], offsets[i+1]); offsets[0] = 0
//   embeddings [R, H]  float32 row-major: rows that stand in for token embeddings
// An item's first token sits at position prefix_len, whatever else is in the batch.
struct ItemBatch {
  std::vector<int32_t> tokens;
  std::vector<int32_t> offsets = {0};
  std::vector<float> embeddings;

  int num_items() const { return static_cast<int>(offsets.size()) - 1; }
  int num_tokens() const { return static_cast<int>(tokens.size()); }
  int item_length(int i) const { return offsets[i + 1] - offsets[i]; }

  void AddIds(absl::Span<const int32_t> ids);
  // `rows` holds k * hidden floats: k embedding rows.
  void AddEmbeddings(absl::Span<const float> rows, int hidden);
  void Clear();
  // Items [begin, end) as a batch of their own (embedding rows of `hidden` floats renumbered).
  ItemBatch Slice(int begin, int end, int hidden) const;
};

// The cached state of an encoded prefix (its per-layer K/V). Opaque to callers; immutable once
// made, so many batches (and threads) can read it.
class PrefixState {
 public:
  virtual ~PrefixState() = default;
  virtual int num_tokens() const = 0;
  virtual size_t bytes() const = 0;  // memory held, for cache accounting
};

// Threading contract, for every implementation: name(), config() and head() may be called from
// any thread at any time, and a PrefixState, once returned, is immutable and may be read by any
// number of threads and outlive later calls. EncodePrefix, ScoreItems and ScoreGroups are made by
// one thread at a time (in rankd, the worker's engine thread); an implementation may allow more
// (the CUDA backend serialises its stream's users itself) but callers must not rely on it.
class Backend {
 public:
  virtual ~Backend() = default;

  virtual absl::string_view name() const = 0;
  virtual const model::ModelConfig& config() const = 0;
  virtual const HeadSpec& head() const = 0;

  // Runs the prefix (may be empty) through the model and keeps its K/V.
  virtual absl::StatusOr<std::shared_ptr<const PrefixState>> EncodePrefix(
      absl::Span<const int32_t> ids) = 0;

  // Scores every item of `items` as the continuation of `prefix`: scores[i] is the head applied
  // to the last token of item i. The batch is taken as prepared (engine.h's PreparedRequest):
  // items non-empty, ids < vocab_size, embedding rows present; an implementation asserts that
  // much (ValidateItemBatch) and no more.
  virtual absl::Status ScoreItems(const PrefixState& prefix, const ItemBatch& items,
                                  absl::Span<float> scores) = 0;

  // One request's share of a batch that mixes requests: its prefix, its items, its scores.
  struct ScoreGroup {
    const PrefixState* prefix = nullptr;
    const ItemBatch* items = nullptr;
    absl::Span<float> scores;  // items->num_items() slots
  };
  // Scores several groups, each against its own prefix, as if by ScoreItems per group (same
  // scores). Backends that can pack all groups' items into one forward pass override it; the
  // default runs the groups one after another.
  virtual absl::Status ScoreGroups(absl::Span<const ScoreGroup> groups);
};

// The names BackendOptions' string fields take, their one home: the serve config's key table
// (its choices and their error messages), the registry, the backends and the front end all spell
// them from here.
inline constexpr absl::string_view kCpuBackend = "cpu";
inline constexpr absl::string_view kCudaBackend = "cuda";
inline constexpr std::array<absl::string_view, 2> kBackendKinds = {kCpuBackend, kCudaBackend};
inline constexpr absl::string_view kStrategyIbpc = "ibpc";
inline constexpr absl::string_view kStrategyMultiItem = "multi-item";
inline constexpr std::array<absl::string_view, 2> kStrategies = {kStrategyIbpc,
                                                                 kStrategyMultiItem};
inline constexpr absl::string_view kPrecisionBf16 = "bf16";
inline constexpr absl::string_view kPrecisionFp8 = "fp8";
inline constexpr std::array<absl::string_view, 2> kPrecisions = {kPrecisionBf16, kPrecisionFp8};

struct BackendOptions {
  std::string kind = std::string(kCpuBackend);  // kBackendKinds: "cpu" or "cuda"
  int threads = 0;           // CPU threads (0: all cores)
  int device = 0;            // CUDA device index
  // CUDA strategy: "ibpc" (prefix KV computed once, items in batches) or "multi-item"
  // (prefix and items in one packed pass).
  std::string strategy = std::string(kStrategyIbpc);
  bool cuda_graphs = true;
  // CUDA linear layers: "bf16" (bf16 weights and activations) or "fp8" (e4m3 weights with
  // per-output-channel scales, activations quantised per token; fp32 accumulation either way).
  std::string precision = std::string(kPrecisionBf16);
  // The CUDA backend's diagnostics and tuning switches. Programs take them from the RANKD_CUDA_*
  // environment variables once, at start (ApplyBackendEnvironment, rankd/backend/registry.h;
  // docs/config.md lists them); the backend reads nothing from the environment itself.
  struct CudaSwitches {
    bool stats = false;       // RANKD_CUDA_STATS=1: graph statistics to stderr at close
    bool profile = false;     // RANKD_CUDA_PROFILE=1: per-stage GPU time table (eager passes)
    int profile_skip = 3;     // RANKD_CUDA_PROFILE_SKIP: warm-up passes left out of the profile
    bool gemm_tune = true;    // RANKD_CUDA_GEMM_TUNE=0: cuBLASLt's first heuristic pick
    int gemm_candidates = 0;  // RANKD_CUDA_GEMM_CANDIDATES: candidates timed (0: the default, 8)
    bool fuse_q_rope = true;  // RANKD_CUDA_FUSE_Q_ROPE=0: RoPE of q in its own kernel
    // RANKD_CUDA_FUSE_K_ROPE (default on; 0: off): RoPE of k in the qkv GEMM's epilogue (the
    // Hopper GEMM's kStoreBf16Rope, timed against cuBLASLt + the RoPE kernel per shape) instead of
    // its own kernel. bench/RESULTS.md, 2026-12-07 (session 37): +1.2-1.4% in fp8 on 379M, bf16
    // and the 0.6B shape (q/k norm: no fusion) unchanged.
    bool fuse_k_rope = true;
    // RANKD_CUDA_FUSE_QK_NORM=1: for models with q/k norms (Qwen3) and heads of 64 or 128, the
    // norms and RoPE of q and k in the qkv GEMM's epilogue (the Hopper GEMM's kStoreBf16Rope with
    // its head norm, timed against cuBLASLt + the QkvRope kernel per shape) instead of the
    // QkvRope kernel: score passes then run no kernel between qkv and attention. Scores move by
    // fp32 rounding (each head's sum of squares added in another order). Off: the 0.6B shape's
    // pass level with it on an H100 (bench/RESULTS.md, 2026-12-07, session 43).
    bool fuse_qk_norm = false;
    // RANKD_CUDA_ATTENTION_PIPELINE=1: attention's pipelined kernel (each block issues its next
    // work unit's loads under the current one's work; the same scores bit for bit). Off until an
    // H200 A/B has measured it.
    bool attention_pipeline = false;
    // RANKD_CUDA_ATTENTION_WGMMA (default on; 0: off): attention's MMAs on wgmma (sm_90a, heads of
    // 64 or 128; the same work units, masks and softmax, fp32 sums in another order). Elsewhere
    // the mma.sync kernel runs. bench/RESULTS.md, 2026-12-06: attention 7-16% faster, 379M
    // Tq=1024 +4%, the standard workload +1%.
    bool attention_wgmma = true;
    // RANKD_CUDA_ATTENTION_OVERLAP (0, 1 or auto; default 0): on wgmma, the queue kernel's key
    // tiles overlapped (FlashAttention-3's intra-warpgroup pipelining: the next tile's S issued
    // with this one's P V, the softmax under the MMAs; the same scores bit for bit); auto
    // (kAttentionOverlapAuto): at heads of 128 only. Off: on an H100 (bench/RESULTS.md,
    // 2026-12-07, session 41) slower at heads of 64 (the 379M's attention 11% at Tq=1024, its
    // pass 3%), 9% faster per kernel at heads of 128 and Tq=50, the 0.6B pass level with
    // auto (session 43); ignored where attention is not on wgmma or runs the pipelined kernel.
    static constexpr int kAttentionOverlapAuto = 2;
    int attention_overlap = 0;
    // RANKD_CUDA_ATTENTION_WARPGROUPS (auto, 1, 2 or 3; default auto): on wgmma, the queue kernel's
    // warpgroups a block, each its 64 query rows of a unit of 64 x that many, all of them
    // multiplying one copy of each K/V tile (a unit's K/V reads from L2, most of attention's
    // traffic over a long prefix, divided by it). 3 at heads of 64 only; where attention is not
    // on wgmma, runs the pipelined kernel or the heads do not take it, 1. On an H100
    // (bench/RESULTS.md, 2026-12-07, session 41) 2 at heads of 64 takes 8% off attention over a
    // 1,024-token prefix (379M Tq=1024 +2.4%) but adds 7% at Tq=50; 3, and 2 at heads of 128,
    // are slower everywhere. auto (kAttentionWarpgroupsAuto): per pass, 2 at heads of 64 where
    // its rows attend to kWideAttentionKeys keys or more on average, else 1 (the pass's graph
    // is keyed on the choice). auto is the default since session 43 (H100, two rounds each):
    // 379M Tq=1024 3,580 against 1's 3,468 items/s (+3.2%), Tq=50 level (no wide pass there).
    static constexpr int kAttentionWarpgroupsAuto = 0;
    int attention_warpgroups = kAttentionWarpgroupsAuto;
    // RANKD_CUDA_ATTENTION_FOUR_BLOCKS (default on; 0: off): where attention runs the
    // one-warpgroup wgmma queue kernel without overlap at heads of 64, four blocks a multiprocessor
    // at 124 registers a thread (no spills) instead of three at 162: 16 warps to hide a unit's
    // latencies instead of 12. The same scores bit for bit. On an H100 (bench/RESULTS.md,
    // 2026-12-08, session 44) the kernel 4.5% faster at Tq=50 (49.0 against 51.3 us), the 379M pass
    // +0.4% in bf16 (5,011 against 4,990 items/s), +0.8% in fp8 and at Ni=250, level elsewhere.
    bool attention_four_blocks = true;
    // RANKD_CUDA_ATTENTION_THREE_BLOCKS=1: where attention runs the one-warpgroup wgmma queue
    // kernel at heads of 128 (the 0.6B shape; overlapped by default there), three blocks a
    // multiprocessor at about 165 registers a thread instead of two at about 200: 12 warps to
    // hide a unit's latencies instead of 8 (what four blocks did at heads of 64). The same scores
    // bit for bit. Off until a GPU A/B has measured it (session 45 had no device).
    bool attention_three_blocks = false;
    // RANKD_CUDA_ATTENTION_PREFETCH=1: where attention runs the queue kernel (the default; not the
    // pipelined one), each block copies its next work unit's tile into shared memory one unit
    // ahead (thread 0, by cp.async) and asks that unit's q rows, their rotations and its context
    // entry into L1 under the current unit's last key tile, so that a unit starts on L1 hits
    // instead of a chain of loads from L2 (Nsight Compute on an H100, bench/RESULTS.md
    // 2026-12-08, session 44: the first use of q the Tq=50 kernel's largest stall). The same
    // scores bit for bit. Off until a GPU A/B has measured it (session 45 had no device).
    bool attention_prefetch = false;
    // RANKD_CUDA_PDL=1: rankd's kernels launch with programmatic dependent launch (sm_90:
    // kernels/launch.cuh): each may be scheduled under the previous kernel's tail and waits for it
    // on the device, and the Hopper GEMM prefetches its first tile's weights into L2 before that
    // wait. The same scores bit for bit. Off: on an H100 (bench/RESULTS.md, 2026-12-06, session 35)
    // 1.5% slower on the standard workload, 1-5% faster on embedding items.
    bool pdl = false;
    // RANKD_CUDA_OWN_GEMM_VARIANTS: the Hopper GEMM variants that RANKD_CUDA_OWN_GEMM=auto times
    // against cuBLASLt per layer shape: "pingpong" (the default: ping-pong on 128- and on 64-row
    // tiles), "pingpong128" (128-row tiles alone, the default before 2026-12-06) or "all" (those,
    // cooperative and tall, each but the 64-row one alone and in clusters of 2 CTAs, and 64-row
    // tiles with K in slices where the shape's tiles leave half of the SMs idle).
    enum class OwnVariants { kPingPong128, kPingPong, kAll };
    OwnVariants own_gemm_variants = OwnVariants::kPingPong;
    // RANKD_CUDA_OWN_GEMM: which GEMM runs the bf16 linear layers on sm_90a. rankd's Hopper GEMM
    // (kernels/hopper_gemm: SwiGLU/GeGLU fused into gate_up, the residual adds into o_proj and
    // down) or cuBLASLt (the epilogues in kernels of their own). "auto" (unset): per layer shape
    // (epilogue, rows, widths), whichever ran faster when the shape was first met (both timed
    // once, outside graph capture); "1": always the Hopper GEMM; "0": always cuBLASLt.
    enum class OwnGemm { kAuto, kOff, kOn };
    OwnGemm own_gemm = OwnGemm::kAuto;
    // Precision fp8: which linear layers take e4m3 (RANKD_CUDA_FP8_LINEARS, a comma list of qkv,
    // o_proj, gate_up, down); the others stay bf16, their inputs too. Default gate_up alone since
    // session 44 (H100, bench/RESULTS.md 2026-12-08): over the golden models and the retrained
    // demo model (bench/fidelity.py) a mean Spearman of 0.9936 against float32 and the same top
    // item in 96.0% of requests, the demo model's held-out MRR@10 0.0013 under float32's; with
    // qkv too (the default from issue 17 to session 43) 0.9823 and 93.8%, MRR@10 -0.0036: under
    // issue 25's 95% top-1 bar, for 5% more speed (379M 6,063 against 5,755 items/s). o_proj gains
    // nothing in e4m3 (its fp32 residual makes it memory-bound) and down in e4m3 is slower with
    // gate_up alone (5,638 items/s) and moves the ranking more (issue 17: 93.5% top-1).
    struct Fp8Linears {
      bool qkv = false, o_proj = false, gate_up = false, down = false;
      bool operator==(const Fp8Linears&) const = default;
    };
    Fp8Linears fp8_linears{false, false, true, false};
    // RANKD_CUDA_FP8_GROUP_SCALES=1: with precision fp8, where the Hopper GEMM may run and the
    // hidden size is a multiple of 128, the e4m3 layers' inputs are quantised per row and group of
    // 64 columns (the norms, the attention output's quantiser; kernels/hopper_gemm's
    // HopperXScales::kGroup, each group's product promoted into fp32) instead of per row, and
    // those layers run on the Hopper GEMM alone. Off: on an H100 (bench/RESULTS.md, 2026-12-07,
    // session 37) it held the demo model's fp8 bar (-0.0038) but was 15-18% slower. (down's input
    // has group scales wherever down is e4m3 on the Hopper GEMM, this switch or not.)
    bool fp8_group_scales = false;
    // RANKD_CUDA_FP8_FAST_ACCUM: the e4m3 layers (of fp8_linears) with a scale per row that may
    // run on the Hopper GEMM (timed against cuBLASLt as the bf16 ones), on its row-scaled kernels
    // (every schedule), whose e4m3 accumulation is not promoted (what cuBLASLt calls fast
    // accumulation): 1 every layer, 0 none, or a comma list as RANKD_CUDA_FP8_LINEARS' (gate_up
    // alone: the layer where the unpromoted kernel gains most). The others run on cuBLASLt,
    // which promotes, unless fp8_promoted; the group-scaled kernels promote either way. Default
    // gate_up (session 43, H100, bench/RESULTS.md 2026-12-07): with fp8_promoted, 379M 5,943
    // items/s against 5,299 promoted everywhere and 5,012 on cuBLASLt (+12% and +19%), the demo
    // model's held-out MRR@10 0.0036 under float32's (promoted everywhere: 0.0041; issue 25's bar
    // 0.005). Every layer fast (1) is faster still but misses that bar (-0.0059, session 39).
    Fp8Linears fp8_fast_accum{false, false, true, false};
    // RANKD_CUDA_FP8_PROMOTED (default 1): the e4m3 layers with a scale per row are timed on the
    // Hopper GEMM's promoted kernels (HopperXScales::kRowPromoted: each 128-column K block's
    // product added into fp32; cooperative 128 and ping-pong 64) against cuBLASLt, which promotes
    // too, and gate_up's e4m3 gated epilogue (down in e4m3) may take a row-scaled input there. On
    // by default since session 43, once the Hopper GEMM tests passed on those kernels (H100): the
    // 379M pass 5.7% faster than on cuBLASLt alone (5,299 vs 5,012 items/s, two rounds), the demo
    // bar held (-0.0041); RANKD_CUDA_FP8_FAST_ACCUM wins for the layers it names (gate_up by
    // default). RANKD_CUDA_FP8_PROMOTED=0 keeps the other row-scaled e4m3 layers on cuBLASLt.
    bool fp8_promoted = true;
    // RANKD_CUDA_FOLD_NORMS=1: with precision bf16 where the Hopper GEMM may run, the norms in
    // front of qkv and gate_up are folded into those GEMMs (kernels/hopper_gemm.cuh, HopperNorm):
    // their weights times the norm's at load, each row of the product divided by its rms in the
    // epilogue, and the residual adds before them (o_proj, down; the embeddings' for layer 0)
    // writing the stream's bf16 copy and sums of squares: no norm kernel in the layers. Off: on an
    // H100 (bench/RESULTS.md, 2026-12-07, session 39) 8.5-9.9% slower, its epilogues waiting on
    // global loads; 8.2% slower again in session 43, after the loads were moved.
    bool fold_norms = false;

    bool operator==(const CudaSwitches&) const = default;
  };
  CudaSwitches cuda;
  // Item tokens per forward pass, at most: the one budget. The engine splits work into passes
  // of at most this many item tokens, and the CUDA backend sizes its buffers and graphs for it.
  int max_batch_tokens = 8192;

  bool operator==(const BackendOptions&) const = default;
};

// Makes a backend for the model in `model_dir` (rankd/backend/registry.h's CreateBackend is the
// one the programs use; the engine takes whichever factory it is given and knows no backend).
using BackendFactory = std::function<absl::StatusOr<std::unique_ptr<Backend>>(
    const BackendOptions& options, const std::string& model_dir, const HeadSpec& head)>;

// The backends' boundary: what memory safety needs of their input, asserted before they read it
// (an embedding gather of an id outside the vocabulary, or of a row the batch lacks, would read
// outside its table). The input is prepared already, and checked against the caller's request
// where it was taken (the front end's validation, Engine::Prepare): a failure here is a bug
// above, answered INVALID_ARGUMENT in the backend's words, not a caller's error to render.
// Every prefix id is in the vocabulary.
absl::Status ValidatePrefixIds(const model::ModelConfig& config, absl::Span<const int32_t> ids);
// Offsets cover the tokens, every item has tokens, ids are in the vocabulary, embedding rows
// exist, and `num_scores` slots match the items.
absl::Status ValidateItemBatch(const model::ModelConfig& config, const ItemBatch& items,
                               size_t num_scores);

// Checks that `head` fits the model (classifier needs *ForSequenceClassification with index <
// num_labels; yes_no and logit need *ForCausalLM with ids < vocab_size).
absl::Status ValidateHead(const model::ModelConfig& config, const HeadSpec& head);

}  // namespace rankd::backend

#endif  // RANKD_BACKEND_BACKEND_H_
