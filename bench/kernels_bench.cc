#include "kernels_bench.h"

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "kernel_cases.h"
#include "kernels/embedding.cuh"
#include "kernels/gather_rows.cuh"
#include "kernels/hopper_gemm.cuh"
#include "kernels/prefix_attention.cuh"
#include "kernels/qkv_rope.cuh"
#include "kernels/rms_norm.cuh"
#include "kernels/score_head.cuh"
#include "kernels/swiglu.cuh"
#include "nlohmann/json.hpp"
#include "percentile.h"
#include "rankd/backend/cuda/cuda_status.h"
#include "rankd/backend/cuda/device_arena.h"
#include "rankd/backend/cuda/gemm.h"
#include "rankd/cli/flag_set.h"
#include "rankd/common/status.h"

namespace rankd::bench {
namespace {

using bf16 = __nv_bfloat16;
using kernels::HopperEpilogue;
using kernels::KvLayers;

constexpr float kEps = 1e-6f;
constexpr size_t kGemmWorkspaceBytes = 32 << 20;  // cuBLASLt's scratch, as the backend's

struct DeviceInfo {
  std::string name;
  double dram_bytes_per_s = 0;  // memory clock x 2 (double data rate) x bus width
  int l2_bytes = 0;
};

absl::StatusOr<DeviceInfo> QueryDevice(int device) {
  cudaDeviceProp prop;
  RANKD_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, device));
  int mem_khz = 0, bus_bits = 0;
  RANKD_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, device));
  RANKD_CUDA_RETURN_IF_ERROR(
      cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, device));
  return DeviceInfo{prop.name, 2.0 * mem_khz * 1e3 * bus_bits / 8, prop.l2CacheSize};
}

// The device buffers of one case (freed with it), filled from a seeded generator.
class CaseMemory {
 public:
  explicit CaseMemory(std::mt19937& rng) : rng_(rng) {}

  template <typename T>
  absl::StatusOr<T*> Alloc(size_t n) {
    RANKD_ASSIGN_OR_RETURN(std::unique_ptr<cuda::Arena> a,
                           cuda::Arena::Create(cuda::Arena::Kind::kDevice, n * sizeof(T)));
    T* p = static_cast<T*>(a->base());
    arenas_.push_back(std::move(a));
    return p;
  }
  template <typename T>
  absl::StatusOr<T*> Upload(const std::vector<T>& host) {
    RANKD_ASSIGN_OR_RETURN(T * p, Alloc<T>(host.size()));
    RANKD_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
    return p;
  }
  // n values uniform in [-scale, scale].
  absl::StatusOr<float*> Floats(size_t n, float scale) {
    std::uniform_real_distribution<float> d(-scale, scale);
    std::vector<float> v(n);
    for (float& x : v) x = d(rng_);
    return Upload(v);
  }
  absl::StatusOr<bf16*> Bf16(size_t n, float scale) {
    std::uniform_real_distribution<float> d(-scale, scale);
    std::vector<bf16> v(n);
    for (bf16& x : v) x = __float2bfloat16(d(rng_));
    return Upload(v);
  }
  // n e4m3 codes of values uniform in [-448, 448] (a row quantiser's range).
  absl::StatusOr<__nv_fp8_e4m3*> Fp8(size_t n) {
    std::uniform_real_distribution<float> d(-448.0f, 448.0f);
    std::vector<__nv_fp8_e4m3> v(n);
    for (__nv_fp8_e4m3& x : v) x = __nv_fp8_e4m3(d(rng_));
    return Upload(v);
  }
  // n (cos, sin) pairs of random angles, as LaunchRopeRotations writes them.
  absl::StatusOr<float2*> Rotations(size_t n) {
    std::uniform_real_distribution<float> d(-3.14159f, 3.14159f);
    std::vector<float2> v(n);
    for (float2& x : v) {
      const float a = d(rng_);
      x = float2{std::cos(a), std::sin(a)};
    }
    return Upload(v);
  }
  absl::StatusOr<int32_t*> Int(int32_t value) { return Upload(std::vector<int32_t>{value}); }

 private:
  std::mt19937& rng_;
  std::vector<std::unique_ptr<cuda::Arena>> arenas_;
};

// A case ready to launch: its buffers, the launch, what must happen before each launch (untimed),
// and the output to check for non-finite values afterwards.
struct PreparedCase {
  std::unique_ptr<CaseMemory> memory;
  std::function<cudaError_t(cudaStream_t)> launch;
  std::function<cudaError_t(cudaStream_t)> reset;  // empty: nothing to reset
  const void* out = nullptr;
  size_t out_count = 0;
  bool out_bf16 = false;
};

// cudaSuccess, or the status printed and a generic error (for a launch that returns absl::Status).
cudaError_t ToCudaError(const absl::Status& s) {
  if (s.ok()) return cudaSuccess;
  std::fprintf(stderr, "kernels: %s\n", std::string(s.message()).c_str());
  return cudaErrorUnknown;
}

// A linear layer's GEMM with its epilogue, own kernel or cuBLASLt (tuned on the first call, made
// here, untimed). UnimplementedError when the own kernel does not run on this device.
absl::Status PrepareGemm(const KernelCase& c, CaseMemory& m, PreparedCase* p) {
  const int M = c.rows, N = c.gemm_n, K = c.gemm_k;
  const size_t out = static_cast<size_t>(M) * N;
  // bf16 operands, or (gemm_fp8) e4m3 codes with a scale per row that brings them to the bf16
  // operands' ranges.
  const bf16* x = nullptr;
  bf16* w = nullptr;
  const __nv_fp8_e4m3* x8 = nullptr;
  __nv_fp8_e4m3* w8 = nullptr;
  const float* x_scale = nullptr;
  float* w_scale = nullptr;
  if (c.gemm_fp8) {
    RANKD_ASSIGN_OR_RETURN(x8, m.Fp8(static_cast<size_t>(M) * K));
    RANKD_ASSIGN_OR_RETURN(w8, m.Fp8(static_cast<size_t>(N) * K));
    // Grouped: a scale per row and 64 columns.
    RANKD_ASSIGN_OR_RETURN(
        x_scale, m.Upload(std::vector<float>(
                     c.gemm_x_groups ? static_cast<size_t>(M) * (K / 64) : M, 1.0f / 448)));
    RANKD_ASSIGN_OR_RETURN(w_scale, m.Upload(std::vector<float>(N, 0.05f / 448)));
  } else {
    RANKD_ASSIGN_OR_RETURN(x, m.Bf16(static_cast<size_t>(M) * K, 1.0f));
    RANKD_ASSIGN_OR_RETURN(w, m.Bf16(static_cast<size_t>(N) * K, 0.05f));
  }
  void* y = nullptr;
  switch (c.gemm_layer) {
    case GemmLayer::kQkv:
    case GemmLayer::kQkvRope: {
      RANKD_ASSIGN_OR_RETURN(y, m.Alloc<bf16>(out));
      p->out_count = out;
      p->out_bf16 = true;
      break;
    }
    case GemmLayer::kOProj:
    case GemmLayer::kDown: {
      RANKD_ASSIGN_OR_RETURN(y, m.Floats(out, 1.0f));
      p->out_count = out;
      break;
    }
    case GemmLayer::kGateUp: {
      // (e4m3 out: half of the bf16 buffer, checked as bf16 all the same: only finiteness of
      // the product matters to the bench.)
      RANKD_ASSIGN_OR_RETURN(y, m.Alloc<bf16>(out / 2));
      p->out_count = c.gemm_fp8_out ? out / 4 : out / 2;
      p->out_bf16 = true;
      break;
    }
  }
  float* y_scale = nullptr;  // gemm_fp8_out: the activation's group scales
  if (c.gemm_fp8_out) {
    RANKD_ASSIGN_OR_RETURN(y_scale, m.Alloc<float>(static_cast<size_t>(M) * (N / 128)));
  }
  p->out = y;
  // kQkvRope: the rows' rotations and the unfused pass's QkvRope launch: k heads only (q is
  // rotated in attention), or for a shape with q/k norms q and k normed and rotated.
  const float2* rotations = nullptr;
  kernels::QkvRopeParams rope;
  if (c.gemm_layer == GemmLayer::kQkvRope) {
    const KernelModelShape& s = c.shape;
    RANKD_ASSIGN_OR_RETURN(rotations, m.Rotations(static_cast<size_t>(M) * (s.head_dim / 2)));
    RANKD_ASSIGN_OR_RETURN(const int32_t* live, m.Upload(std::vector<int32_t>{M}));
    rope.qkv = static_cast<bf16*>(y);
    rope.rotations = rotations;
    rope.num_rows = live;
    rope.skip_q = !s.qk_norm;
    if (s.qk_norm) {
      // Norm weights of 1 (their values do not change the work).
      const std::vector<bf16> ones(s.head_dim, __float2bfloat16(1.0f));
      RANKD_ASSIGN_OR_RETURN(rope.q_norm, m.Upload(ones));
      RANKD_ASSIGN_OR_RETURN(rope.k_norm, m.Upload(ones));
      rope.eps = 1e-6f;
    }
    rope.num_tokens = M;
    rope.num_q_heads = s.q_width() / s.head_dim;
    rope.num_kv_heads = s.kv_width() / s.head_dim;
    rope.head_dim = s.head_dim;
  }
  if (c.gemm_impl == GemmImpl::kOwn) {
    HopperEpilogue e = HopperEpilogue::kStoreBf16;
    if (c.gemm_layer == GemmLayer::kOProj || c.gemm_layer == GemmLayer::kDown) {
      e = c.gemm_norm_fold ? HopperEpilogue::kResidualNorm : HopperEpilogue::kAccumulateF32;
    } else if (c.gemm_layer == GemmLayer::kGateUp) {
      // The interleaved gate_up weight (and fp8 row scales), as the backend would keep it.
      if (c.gemm_fp8) {
        RANKD_ASSIGN_OR_RETURN(__nv_fp8_e4m3 * wi,
                               m.Alloc<__nv_fp8_e4m3>(static_cast<size_t>(N) * K));
        RANKD_ASSIGN_OR_RETURN(float* si, m.Alloc<float>(N));
        RANKD_CUDA_RETURN_IF_ERROR(kernels::InterleaveGateUp(w8, N / 2, K, wi, nullptr));
        RANKD_CUDA_RETURN_IF_ERROR(
            kernels::InterleaveGateUp(w_scale, N / 2, sizeof(float), si, nullptr));
        w8 = wi;
        w_scale = si;
      } else {
        RANKD_ASSIGN_OR_RETURN(bf16 * wi, m.Alloc<bf16>(static_cast<size_t>(N) * K));
        RANKD_CUDA_RETURN_IF_ERROR(
            kernels::InterleaveGateUp(w, N / 2, K * sizeof(bf16), wi, nullptr));
        w = wi;
      }
      e = c.gemm_fp8_out ? HopperEpilogue::kSwiGluFp8 : HopperEpilogue::kSwiGlu;
    } else if (c.gemm_layer == GemmLayer::kQkvRope) {
      e = HopperEpilogue::kStoreBf16Rope;
    }
    kernels::HopperGemmPlan plan;
    const kernels::HopperSchedule schedule =
        c.gemm_schedule == GemmSchedule::kPingPong        ? kernels::HopperSchedule::kPingPong
        : c.gemm_schedule == GemmSchedule::kPingPongShort ? kernels::HopperSchedule::kPingPongShort
        : c.gemm_schedule == GemmSchedule::kTall ? kernels::HopperSchedule::kCooperativeTall
                                                 : kernels::HopperSchedule::kCooperative;
    cudaError_t err = c.gemm_fp8
                          ? kernels::MakeHopperGemmPlanFp8(
                                x8, x_scale, w8, w_scale, y, M, N, K, e, &plan, c.gemm_tile_n,
                                schedule, c.gemm_cluster,
                                c.gemm_x_groups   ? kernels::HopperXScales::kGroup
                                : c.gemm_promoted ? kernels::HopperXScales::kRowPromoted
                                                  : kernels::HopperXScales::kRow)
                          : kernels::MakeHopperGemmPlan(x, w, y, M, N, K, e, &plan, c.gemm_tile_n,
                                                        schedule, c.gemm_cluster);
    if (c.gemm_group >= 0) plan.group = c.gemm_group;
    if (c.gemm_stagger >= 0) plan.stagger = c.gemm_stagger;
    if (err == cudaSuccess && e == HopperEpilogue::kStoreBf16Rope) {
      const int q = c.shape.q_width();
      err = kernels::SetHopperGemmRope(&plan, rotations, c.shape.qk_norm ? 0 : q,
                                       q + c.shape.kv_width(), c.shape.head_dim);
      if (err == cudaSuccess && c.shape.qk_norm) {
        err = kernels::SetHopperGemmRopeNorm(&plan, rope.q_norm, rope.k_norm, q, rope.eps);
      }
    }
    if (err == cudaSuccess && c.gemm_fp8_out) err = kernels::SetHopperGemmOutScales(&plan, y_scale);
    if (err == cudaSuccess && c.gemm_k_slices) {
      const int count = kernels::HopperKSlices(plan);
      if (count <= 1) {
        return absl::UnimplementedError(
            absl::StrCat("no K slices at ", M, " rows (their tiles fill the SMs)"));
      }
      RANKD_ASSIGN_OR_RETURN(
          float* partials, m.Alloc<float>(kernels::HopperKSliceBytes(plan, count) / sizeof(float)));
      RANKD_ASSIGN_OR_RETURN(
          int* counters, m.Upload(std::vector<int32_t>(kernels::HopperKSliceCounters(plan), 0)));
      err = kernels::SetHopperGemmKSlices(&plan, count, partials, counters);
    }
    if (err == cudaSuccess && c.gemm_norm_fold) {
      if (e == HopperEpilogue::kResidualNorm) {
        // The stream's copy and sums of squares, written each launch.
        RANKD_ASSIGN_OR_RETURN(bf16 * copy, m.Alloc<bf16>(out));
        RANKD_ASSIGN_OR_RETURN(float* sumsq, m.Alloc<float>(out / kernels::kHopperScaleGroup));
        err = kernels::SetHopperGemmNormOut(&plan, copy, sumsq);
      } else {
        // X's sums of squares: K per row, an rms of 1.
        RANKD_ASSIGN_OR_RETURN(
            const float* sumsq,
            m.Upload(std::vector<float>(static_cast<size_t>(M) * (K / kernels::kHopperScaleGroup),
                                        static_cast<float>(kernels::kHopperScaleGroup))));
        err = kernels::SetHopperGemmNormIn(&plan, sumsq, 1e-6f);
      }
    }
    p->launch = [=](cudaStream_t st) { return kernels::LaunchHopperGemm(plan, st); };
    if (err == cudaSuccess) err = p->launch(nullptr);
    if (err == cudaErrorNotSupported) {
      return absl::UnimplementedError("kernels/hopper_gemm does not run on this device");
    }
    RANKD_CUDA_RETURN_IF_ERROR(err);
  } else {
    RANKD_ASSIGN_OR_RETURN(void* workspace, m.Alloc<char>(kGemmWorkspaceBytes));
    RANKD_ASSIGN_OR_RETURN(std::unique_ptr<cuda::Gemm> made,
                           cuda::Gemm::Create(workspace, kGemmWorkspaceBytes, /*tune=*/true));
    std::shared_ptr<cuda::Gemm> gemm = std::move(made);
    bf16* wide = nullptr;  // gate_up's bf16 output before SwiGLU
    if (c.gemm_layer == GemmLayer::kGateUp) {
      RANKD_ASSIGN_OR_RETURN(wide, m.Alloc<bf16>(out));
    }
    const GemmLayer layer = c.gemm_layer;
    const bool fp8 = c.gemm_fp8;
    const cuda::Fp8Matrix xq{x8, x_scale}, wq{w8, w_scale};
    // y [M, N] bf16 (or the gated layer's wide product) = X . W^T, bf16 or fp8.
    auto store = [=](bf16* out, cudaStream_t st) {
      return ToCudaError(fp8 ? gemm->LinearFp8(xq, wq, M, K, N, out, st)
                             : gemm->Linear(x, w, M, K, N, out, st));
    };
    p->launch = [=](cudaStream_t st) -> cudaError_t {
      switch (layer) {
        case GemmLayer::kQkv:
          return store(static_cast<bf16*>(y), st);
        case GemmLayer::kQkvRope:
          if (const cudaError_t err = store(static_cast<bf16*>(y), st); err != cudaSuccess) {
            return err;
          }
          return kernels::LaunchQkvRope(rope, st);
        case GemmLayer::kOProj:
        case GemmLayer::kDown:
          return ToCudaError(
              fp8 ? gemm->LinearAccumulateFp8(xq, wq, M, K, N, static_cast<float*>(y), st)
                  : gemm->LinearAccumulate(x, w, M, K, N, static_cast<float*>(y), st));
        case GemmLayer::kGateUp:
          if (const cudaError_t err = store(wide, st); err != cudaSuccess) {
            return err;
          }
          return kernels::LaunchSwiGlu(wide, M, N / 2, static_cast<bf16*>(y), st);
      }
      return cudaErrorInvalidValue;
    };
    RANKD_CUDA_RETURN_IF_ERROR(p->launch(nullptr));  // cuBLASLt's tuning, untimed
  }
  RANKD_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  return absl::OkStatus();
}

absl::StatusOr<PreparedCase> Prepare(const KernelCase& c, const KernelWorkload& w,
                                     std::mt19937& rng) {
  PreparedCase p;
  p.memory = std::make_unique<CaseMemory>(rng);
  CaseMemory& m = *p.memory;
  const KernelModelShape& s = c.shape;
  const int H = s.hidden, Q = s.q_width(), KV = s.kv_width(), W = s.qkv_width(), D = s.head_dim,
            I = s.intermediate, rows = c.rows;
  const size_t R = rows;
  auto set_out = [&p](const void* out, size_t count, bool is_bf16) {
    p.out = out;
    p.out_count = count;
    p.out_bf16 = is_bf16;
  };
  switch (c.kernel) {
    case Kernel::kEmbeddingGather: {
      std::uniform_int_distribution<int32_t> tok(0, s.vocab - 1);
      std::vector<int32_t> ids(R);
      for (int32_t& t : ids) t = tok(rng);
      RANKD_ASSIGN_OR_RETURN(const int32_t* tokens, m.Upload(ids));
      RANKD_ASSIGN_OR_RETURN(const bf16* table, m.Bf16(static_cast<size_t>(s.vocab) * H, 1.0f));
      RANKD_ASSIGN_OR_RETURN(float* out, m.Alloc<float>(R * H));
      p.launch = [=](cudaStream_t st) {
        return kernels::LaunchEmbeddingGather(tokens, rows, table, nullptr, H, 1.0f, out, st);
      };
      set_out(out, R * H, false);
      break;
    }
    case Kernel::kRopeRotations: {
      std::vector<int32_t> pos(R);
      for (int r = 0; r < rows; ++r) pos[r] = w.tq + r % w.ti;  // the items' positions
      std::vector<float> freq(D / 2);
      for (int i = 0; i < D / 2; ++i) freq[i] = std::pow(10000.0f, -2.0f * i / D);
      RANKD_ASSIGN_OR_RETURN(const int32_t* positions, m.Upload(pos));
      RANKD_ASSIGN_OR_RETURN(const float* inv_freq, m.Upload(freq));
      RANKD_ASSIGN_OR_RETURN(float2 * out, m.Alloc<float2>(R * D / 2));
      p.launch = [=](cudaStream_t st) {
        return kernels::LaunchRopeRotations(positions, inv_freq, rows, D / 2, out, st);
      };
      set_out(out, R * D, false);
      break;
    }
    case Kernel::kRmsNorm: {
      RANKD_ASSIGN_OR_RETURN(const float* x, m.Floats(R * H, 1.0f));
      RANKD_ASSIGN_OR_RETURN(const bf16* weight, m.Bf16(H, 1.0f));
      RANKD_ASSIGN_OR_RETURN(bf16 * out, m.Alloc<bf16>(R * H));
      p.launch = [=](cudaStream_t st) {
        return kernels::LaunchRmsNorm(x, weight, 0.0f, kEps, rows, H, out, st);
      };
      set_out(out, R * H, true);
      break;
    }
    case Kernel::kQkvRope: {
      kernels::QkvRopeParams r;
      RANKD_ASSIGN_OR_RETURN(r.qkv, m.Bf16(R * W, 1.0f));
      if (s.qk_norm) {
        RANKD_ASSIGN_OR_RETURN(r.q_norm, m.Bf16(D, 1.0f));
        RANKD_ASSIGN_OR_RETURN(r.k_norm, m.Bf16(D, 1.0f));
      }
      RANKD_ASSIGN_OR_RETURN(r.rotations, m.Rotations(R * D / 2));
      RANKD_ASSIGN_OR_RETURN(r.num_rows, m.Int(rows));
      if (c.pass == AttentionPass::kIbpcEncode) {  // K/V also to one layer of a prefix cache
        RANKD_ASSIGN_OR_RETURN(bf16 * cache, m.Alloc<bf16>(2 * R * KV));
        RANKD_ASSIGN_OR_RETURN(
            r.kv_out, m.Upload(std::vector<KvLayers>{{cache, cache + R * KV, 2 * rows * KV, KV}}));
      }
      r.skip_q = !s.qk_norm;
      r.num_tokens = rows;
      r.num_q_heads = s.q_heads;
      r.num_kv_heads = s.kv_heads;
      r.head_dim = D;
      r.eps = kEps;
      p.launch = [=](cudaStream_t st) { return kernels::LaunchQkvRope(r, st); };
      set_out(r.qkv, R * W, true);
      break;
    }
    case Kernel::kPrefixAttention: {
      const AttentionLayout layout = MakeAttentionLayout(c.pass, w);
      const int group = s.q_heads / s.kv_heads;
      kernels::PrefixAttentionParams a;
      RANKD_ASSIGN_OR_RETURN(bf16 * qkv, m.Bf16(R * W, 1.0f));
      a.q = qkv;
      a.q_row_stride = W;
      if (!s.qk_norm) {  // the backend ropes q in attention
        RANKD_ASSIGN_OR_RETURN(a.q_rotations, m.Rotations(R * D / 2));
      }
      a.own = KvLayers{qkv + Q, qkv + Q + KV, 0, W};
      KvLayers ctx = a.own;  // multi-item: the prefix's rows of the pass, rows 0..tq
      if (layout.ctx_in_cache) {
        RANKD_ASSIGN_OR_RETURN(bf16 * cache, m.Bf16(2 * static_cast<size_t>(w.tq) * KV, 1.0f));
        ctx = KvLayers{cache, cache + static_cast<int64_t>(w.tq) * KV, 2LL * w.tq * KV, KV};
      }
      RANKD_ASSIGN_OR_RETURN(a.contexts, m.Upload(std::vector<KvLayers>{ctx}));
      RANKD_ASSIGN_OR_RETURN(a.seg_start, m.Upload(layout.seg_start));
      std::vector<kernels::AttentionRun> runs;
      for (const AttentionLayout::Run& run : layout.runs) {
        runs.push_back({run.begin, run.end, run.ctx_len, 0});
      }
      const int num_runs = static_cast<int>(runs.size());
      std::vector<kernels::AttentionTile> tiles(kernels::MaxAttentionTiles(rows, num_runs, group));
      tiles.resize(kernels::FillAttentionTiles(
          runs.data(), num_runs, layout.seg_start.data(), group, tiles.data(),
          kernels::kAttentionTileRows * c.attention_warpgroups));
      RANKD_ASSIGN_OR_RETURN(a.tiles, m.Upload(tiles));
      RANKD_ASSIGN_OR_RETURN(a.num_units, m.Int(static_cast<int>(tiles.size()) * s.kv_heads));
      RANKD_ASSIGN_OR_RETURN(int32_t * counter, m.Int(0));
      a.unit_counter = counter;
      a.num_q_heads = s.q_heads;
      a.num_kv_heads = s.kv_heads;
      a.head_dim = D;
      a.scale = 1.0f / std::sqrt(static_cast<float>(D));
      a.pipelined = c.attention_pipelined;
      a.wgmma = c.attention_wgmma;
      a.overlap = c.attention_overlap;
      a.warpgroups = c.attention_warpgroups;
      a.four_blocks = c.attention_four_blocks;
      a.three_blocks = c.attention_three_blocks;
      a.prefetch = c.attention_prefetch;
      if (a.wgmma && !kernels::PrefixAttentionSupportsWarpgroups(D, a.warpgroups)) {
        return absl::UnimplementedError("attention on wgmma does not run on this device");
      }
      a.blocks = kernels::PrefixAttentionBlocks(D, c.attention_pipelined, c.attention_wgmma,
                                                c.attention_overlap, c.attention_warpgroups,
                                                c.attention_four_blocks, c.attention_three_blocks);
      if (a.blocks <= 0) return absl::InternalError("cannot size the attention kernel's grid");
      RANKD_ASSIGN_OR_RETURN(a.out, m.Alloc<bf16>(R * Q));
      p.launch = [=](cudaStream_t st) { return kernels::LaunchPrefixAttention(a, st); };
      p.reset = [=](cudaStream_t st) { return cudaMemsetAsync(counter, 0, sizeof(int32_t), st); };
      set_out(a.out, R * Q, true);
      break;
    }
    case Kernel::kGatherRows: {
      // From a pass's rows, each item's last row.
      const size_t pass_rows = PassRows(w);
      const int64_t row_bytes = static_cast<int64_t>(c.row_elems) * c.elem_bytes;
      const bool is_bf16 = c.elem_bytes == 2;
      const void* in = nullptr;
      if (is_bf16) {
        RANKD_ASSIGN_OR_RETURN(in, m.Bf16(pass_rows * c.row_elems, 1.0f));
      } else {
        RANKD_ASSIGN_OR_RETURN(in, m.Floats(pass_rows * c.row_elems, 1.0f));
      }
      std::vector<int32_t> last(R);
      for (int i = 0; i < rows; ++i) last[i] = (i + 1) * w.ti - 1;
      RANKD_ASSIGN_OR_RETURN(const int32_t* last_rows, m.Upload(last));
      RANKD_ASSIGN_OR_RETURN(const int32_t* count, m.Int(rows));
      RANKD_ASSIGN_OR_RETURN(char* out, m.Alloc<char>(R * row_bytes));
      p.launch = [=](cudaStream_t st) {
        return kernels::LaunchGatherRows(in, last_rows, count, rows, row_bytes, out, st);
      };
      set_out(out, R * c.row_elems, is_bf16);
      break;
    }
    case Kernel::kSwiGlu: {
      RANKD_ASSIGN_OR_RETURN(const bf16* gate_up, m.Bf16(R * 2 * I, 1.0f));
      RANKD_ASSIGN_OR_RETURN(bf16 * out, m.Alloc<bf16>(R * I));
      p.launch = [=](cudaStream_t st) { return kernels::LaunchSwiGlu(gate_up, rows, I, out, st); };
      set_out(out, R * I, true);
      break;
    }
    case Kernel::kScoreHead: {
      RANKD_ASSIGN_OR_RETURN(const float* x, m.Floats(R * H, 1.0f));
      RANKD_ASSIGN_OR_RETURN(const int32_t* num_items, m.Int(rows));
      RANKD_ASSIGN_OR_RETURN(const bf16* final_norm, m.Bf16(H, 1.0f));
      RANKD_ASSIGN_OR_RETURN(const bf16* head_rows,
                             m.Bf16(static_cast<size_t>(s.head_rows) * H, 1.0f));
      RANKD_ASSIGN_OR_RETURN(float* scores, m.Alloc<float>(R));
      const int head = s.head_rows;
      p.launch = [=](cudaStream_t st) {
        return kernels::LaunchScoreHead(x, nullptr, num_items, rows, final_norm, 0.0f, head_rows,
                                        head, 0.0f, kEps, H, scores, st);
      };
      set_out(scores, R, false);
      break;
    }
    case Kernel::kGemm:
      RANKD_RETURN_IF_ERROR(PrepareGemm(c, m, &p));
      break;
  }
  return p;
}

// InternalError when any output element is NaN or infinite.
absl::Status CheckFinite(const PreparedCase& p) {
  const size_t bytes = p.out_count * (p.out_bf16 ? sizeof(bf16) : sizeof(float));
  std::vector<char> host(bytes);
  RANKD_CUDA_RETURN_IF_ERROR(cudaMemcpy(host.data(), p.out, bytes, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < p.out_count; ++i) {
    const float v = p.out_bf16 ? __bfloat162float(reinterpret_cast<const bf16*>(host.data())[i])
                               : reinterpret_cast<const float*>(host.data())[i];
    if (!std::isfinite(v)) {
      return absl::InternalError(absl::StrCat("non-finite output at element ", i));
    }
  }
  return absl::OkStatus();
}

// The median time of one launch in ms: warmup launches, then iters launches each between two
// events (after the reset and, with flush, after overwriting a buffer of twice the L2).
absl::StatusOr<double> MedianLaunchMs(const PreparedCase& p, const KernelsBenchOptions& o,
                                      void* flush, size_t flush_bytes, cudaStream_t st) {
  auto launch_once = [&]() -> absl::Status {
    if (p.reset) RANKD_CUDA_RETURN_IF_ERROR(p.reset(st));
    RANKD_CUDA_RETURN_IF_ERROR(p.launch(st));
    return absl::OkStatus();
  };
  for (int i = 0; i < o.warmup; ++i) RANKD_RETURN_IF_ERROR(launch_once());
  std::vector<cudaEvent_t> events(2 * o.iters);
  for (cudaEvent_t& e : events) RANKD_CUDA_RETURN_IF_ERROR(cudaEventCreate(&e));
  absl::Status status = [&]() -> absl::Status {
    for (int i = 0; i < o.iters; ++i) {
      if (p.reset) RANKD_CUDA_RETURN_IF_ERROR(p.reset(st));
      if (flush != nullptr) RANKD_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(flush, i, flush_bytes, st));
      RANKD_CUDA_RETURN_IF_ERROR(cudaEventRecord(events[2 * i], st));
      RANKD_CUDA_RETURN_IF_ERROR(p.launch(st));
      RANKD_CUDA_RETURN_IF_ERROR(cudaEventRecord(events[2 * i + 1], st));
    }
    return absl::OkStatus();
  }();
  std::vector<double> ms(o.iters);
  if (status.ok()) status = cuda::CudaStatus(cudaStreamSynchronize(st), "sync", __FILE__, __LINE__);
  for (int i = 0; i < o.iters && status.ok(); ++i) {
    float t = 0;
    status = cuda::CudaStatus(cudaEventElapsedTime(&t, events[2 * i], events[2 * i + 1]),
                              "cudaEventElapsedTime", __FILE__, __LINE__);
    ms[i] = t;
  }
  for (cudaEvent_t e : events) (void)cudaEventDestroy(e);
  RANKD_RETURN_IF_ERROR(status);
  return Percentile(ms, 0.5);
}

struct CaseResult {
  double median_us = 0, bytes_per_s = 0, flops_per_s = 0;
};

nlohmann::json ResultJson(const KernelCase& c, const CaseResult& r, const DeviceInfo& dev,
                          const KernelsBenchOptions& o) {
  return {{"shape", c.shape.name},
          {"kernel", KernelName(c.kernel)},
          {"variant", c.variant},
          {"launch", DescribeCase(c)},
          {"median_us", r.median_us},
          {"bytes", c.bytes},
          {"flops", c.flops},
          {"gb_per_s", r.bytes_per_s / 1e9},
          {"dram_fraction", r.bytes_per_s / dev.dram_bytes_per_s},
          {"tflops", r.flops_per_s / 1e12},
          {"peak_fraction", r.flops_per_s / (o.peak_tflops * 1e12)}};
}

absl::Status Run(const KernelsBenchOptions& o, const std::vector<KernelCase>& cases) {
  RANKD_CUDA_RETURN_IF_ERROR(cudaSetDevice(o.device));
  RANKD_ASSIGN_OR_RETURN(const DeviceInfo dev, QueryDevice(o.device));
  cudaStream_t st = nullptr;
  RANKD_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  std::unique_ptr<cuda::Arena> flush;
  const size_t flush_bytes = 2 * static_cast<size_t>(dev.l2_bytes);
  if (o.flush_l2) {
    RANKD_ASSIGN_OR_RETURN(flush, cuda::Arena::Create(cuda::Arena::Kind::kDevice, flush_bytes));
  }
  std::printf(
      "device %s: DRAM %.0f GB/s (memory clock x 2 x bus width), L2 %.0f MB%s; bf16 "
      "peak %.0f TFLOP/s (--peak-tflops)\n",
      dev.name.c_str(), dev.dram_bytes_per_s / 1e9, dev.l2_bytes / 1e6,
      o.flush_l2 ? ", flushed before each launch" : "", o.peak_tflops);
  std::printf("workload: tq=%d ti=%d ni=%d (%d item rows a pass); median of %d launches\n",
              o.workload.tq, o.workload.ti, o.workload.ni, PassRows(o.workload), o.iters);
  std::printf("%-10s %-16s %-30s %-34s %9s %8s %8s %6s %8s %8s %6s\n", "shape", "kernel", "variant",
              "launch", "us", "MB", "GB/s", "%DRAM", "GFLOP", "TFLOP/s", "%peak");
  std::mt19937 rng(o.seed);
  nlohmann::json results = nlohmann::json::array();
  absl::Status status;
  for (const KernelCase& c : cases) {
    const std::string what = absl::StrCat(c.shape.name, " ", KernelName(c.kernel), " ", c.variant);
    absl::StatusOr<PreparedCase> p = Prepare(c, o.workload, rng);
    if (absl::IsUnimplemented(p.status())) {
      std::printf("%-10s %-16s %-30s skipped: %s\n", c.shape.name.c_str(), KernelName(c.kernel),
                  c.variant.c_str(), std::string(p.status().message()).c_str());
      continue;
    }
    if (!p.ok()) {
      status = Annotate(p.status(), what);
      break;
    }
    absl::StatusOr<double> ms =
        MedianLaunchMs(*p, o, flush ? flush->base() : nullptr, flush_bytes, st);
    if (!ms.ok()) {
      status = Annotate(ms.status(), what);
      break;
    }
    if (absl::Status s = CheckFinite(*p); !s.ok()) {
      status = Annotate(s, what);
      break;
    }
    CaseResult r;
    r.median_us = *ms * 1e3;
    r.bytes_per_s = c.bytes / (*ms * 1e-3);
    r.flops_per_s = c.flops / (*ms * 1e-3);
    std::printf("%-10s %-16s %-30s %-34s %9.1f %8.2f %8.0f %5.1f%%", c.shape.name.c_str(),
                KernelName(c.kernel), c.variant.c_str(), DescribeCase(c).c_str(), r.median_us,
                c.bytes / 1e6, r.bytes_per_s / 1e9, 100 * r.bytes_per_s / dev.dram_bytes_per_s);
    if (c.flops > 0) {
      std::printf(" %8.2f %8.1f %5.1f%%\n", c.flops / 1e9, r.flops_per_s / 1e12,
                  100 * r.flops_per_s / (o.peak_tflops * 1e12));
    } else {
      std::printf(" %8s %8s %6s\n", "-", "-", "-");
    }
    results.push_back(ResultJson(c, r, dev, o));
  }
  (void)cudaStreamDestroy(st);
  RANKD_RETURN_IF_ERROR(status);
  if (!o.json_path.empty()) {
    const nlohmann::json doc = {
        {"device",
         {{"name", dev.name},
          {"dram_gb_per_s", dev.dram_bytes_per_s / 1e9},
          {"l2_bytes", dev.l2_bytes},
          {"peak_tflops", o.peak_tflops}}},
        {"workload", {{"tq", o.workload.tq}, {"ti", o.workload.ti}, {"ni", o.workload.ni}}},
        {"warmup", o.warmup},
        {"iters", o.iters},
        {"flush_l2", o.flush_l2},
        {"results", results}};
    std::ofstream out(o.json_path);
    out << doc.dump(2) << "\n";
    if (!out) return absl::InternalError(absl::StrCat("cannot write ", o.json_path));
  }
  return absl::OkStatus();
}

}  // namespace

int RunKernelsBench(int argc, char** argv, int first) {
  cli::FlagSet flags(
      "rankd-bench kernels [--shape 379m|qwen3-0.6b|both] [--filter NAME] [--tq 50] [--ti 150]\n"
      "                    [--ni 50] [--iters 50] [--warmup 5] [--no-flush-l2] [--json FILE]\n"
      "Launches each CUDA kernel of kernels/ alone, on the shapes of one pass of the workload\n"
      "(one request: a prefix of tq tokens, ni items of ti tokens; attention for IBPC's items\n"
      "pass, multi-item's pass and IBPC's prefix encode), on fresh random inputs (--seed).\n"
      "Reports the median time per launch (CUDA events), the bytes each launch must move (every\n"
      "input read once, every output written once) as a fraction of the device's DRAM bandwidth,\n"
      "and for attention and the GEMMs their FLOPs as a fraction of the bf16 peak. The GEMMs\n"
      "of the linear layers (--filter gemm) at the pass's rows and 512, each with its fused\n"
      "epilogue: kernels/hopper_gemm ('own' with tile N 128 or 256, skipped off sm_90a) vs\n"
      "cuBLASLt (tuned; gate_up then kernels/swiglu.cu). Each output is checked to be finite\n"
      "(kernels_test and hopper_gemm_test check correctness).");
  KernelsBenchOptions o;
  AddKernelsBenchFlags(flags, &o);
  if (std::optional<int> exit_code = ParseCommandFlags(flags, argc, argv, first, "kernels")) {
    return *exit_code;
  }
  absl::StatusOr<std::vector<KernelCase>> cases = SelectKernelCases(o);
  if (!cases.ok()) {
    std::fprintf(stderr, "kernels: %s\n", std::string(cases.status().message()).c_str());
    return 2;
  }
  if (absl::Status s = Run(o, *cases); !s.ok()) {
    std::fprintf(stderr, "kernels: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}

}  // namespace rankd::bench
