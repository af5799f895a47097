// kernels/hopper_gemm (rankd's own sm_90a GEMM) against a float32 CPU reference on the same bf16
// inputs, every epilogue, odd shapes; against cuBLASLt (rankd::cuda::Gemm, and Gemm + SwiGLU for
// the fused epilogue) on the 379M model's shapes; its preconditions; the gate_up interleave.
// Fresh random inputs each run (the seed is in every failure message). Tolerances are on the
// largest |error| relative to the largest |reference|: 1e-2 for bf16 outputs (one rounding of
// 2^-9 relative, plus the bf16 rounding of gate and up for the gated epilogues), 1e-4 for fp32.
// Debug switch: RANKD_HOPPER_SHAPE="M,N,K" runs only that shape in the CPU-reference test.
// GPU tests skip without a device and on a device other than sm_90.
#include "kernels/hopper_gemm.cuh"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "kernels/qkv_rope.cuh"
#include "kernels/rms_norm.cuh"
#include "kernels/swiglu.cuh"
#include "rankd/backend/cuda/gemm.h"
#include "rankd/model/safetensors.h"
#include "tests/backend/cuda/cuda_test_util.h"

namespace rankd::cuda {
namespace {

using bf16 = __nv_bfloat16;
using kernels::HopperEpilogue;
using test_util::DeviceArray;
using test_util::FromBf16;
using test_util::Rng;
using test_util::ToBf16;

constexpr double kBf16Tolerance = 1e-2;
constexpr double kFp32Tolerance = 1e-4;

bool IsSm90() {
  int device = 0, major = 0, minor = 0;
  return cudaGetDevice(&device) == cudaSuccess &&
         cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
         cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) == cudaSuccess &&
         major == 9 && minor == 0;
}

float RoundBf16(float v) { return FromBf16(ToBf16(v)); }
float Silu(float g) { return g / (1.0f + std::exp(-g)); }
float GeluTanh(float g) {
  return 0.5f * g * (1.0f + std::tanh(0.7978845608028654f * (g + 0.044715f * g * g * g)));
}

// Compares got [rows, cols] with ref on the rows `rows_checked`; reports the largest error and
// where it is.
void ExpectClose(const std::vector<float>& got, const std::vector<float>& ref, int cols,
                 const std::vector<int>& rows_checked, double tolerance, const std::string& what) {
  double max_ref = 0, max_err = -1;
  int64_t at = 0;
  for (const int r : rows_checked) {
    for (int c = 0; c < cols; ++c) {
      const int64_t i = static_cast<int64_t>(r) * cols + c;
      max_ref = std::max(max_ref, std::abs(static_cast<double>(ref[i])));
      const double err =
          std::isfinite(got[i]) ? std::abs(static_cast<double>(got[i]) - ref[i]) : INFINITY;
      if (err > max_err) max_err = err, at = i;
    }
  }
  EXPECT_LE(max_err, tolerance * std::max(max_ref, 1e-6))
      << what << ": max |error| " << max_err << " at row " << at / cols << " column " << at % cols
      << " (got " << got[at] << ", want " << ref[at] << "), max |ref| " << max_ref;
}

class HopperGemmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    RANKD_SKIP_WITHOUT_GPU();
    if (!IsSm90()) GTEST_SKIP() << "not an sm_90 device";
    trace_ = std::make_unique<::testing::ScopedTrace>(__FILE__, __LINE__,
                                                      "seed " + std::to_string(rng_.seed()));
  }
  void Sync() { RANKD_EXPECT_CUDA_OK(cudaDeviceSynchronize()); }

  Rng rng_;
  std::unique_ptr<::testing::ScopedTrace> trace_;
};

// acc [M, N] on `rows` only: acc[r, n] = sum_k x[r, k] w[n, k], in float32, on every core.
std::vector<float> ReferenceAcc(const std::vector<float>& x, const std::vector<float>& w, int M,
                                int N, int K, const std::vector<int>& rows) {
  std::vector<float> acc(static_cast<size_t>(M) * N, 0.0f);
  const int threads = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      for (size_t i = t; i < rows.size(); i += threads) {
        const int r = rows[i];
        const float* xr = &x[static_cast<size_t>(r) * K];
        for (int n = 0; n < N; ++n) {
          const float* wn = &w[static_cast<size_t>(n) * K];
          float part[8] = {};
          int k = 0;
          for (; k + 8 <= K; k += 8) {
            for (int j = 0; j < 8; ++j) part[j] += xr[k + j] * wn[k + j];
          }
          for (; k < K; ++k) part[0] += xr[k] * wn[k];
          float s = 0;
          for (float p : part) s += p;
          acc[static_cast<size_t>(r) * N + n] = s;
        }
      }
    });
  }
  for (std::thread& th : pool) th.join();
  return acc;
}

// Every row of small problems; of large ones the first and last two tiles and every 7th (M up to
// 1000) or 31st row in between, so that every row position inside a tile is checked.
std::vector<int> RowsToCheck(int M) {
  std::vector<int> rows;
  const int stride = M <= 1000 ? 7 : 31;
  for (int r = 0; r < M; ++r) {
    if (M <= 300 || r < 256 || r >= M - 256 || r % stride == 0) rows.push_back(r);
  }
  return rows;
}

// Random bf16 operands X [M, K] and W [N, K] (bf16 values), the rows the checks look at, the CPU
// reference's accumulators of those rows, and X and W on the device.
struct Operands {
  Operands(Rng& rng, int M, int N, int K)
      : x(rng.Bf16Values(static_cast<size_t>(M) * K, 1.0f)),
        w(rng.Bf16Values(static_cast<size_t>(N) * K, 1.0f)),
        rows(RowsToCheck(M)),
        acc(ReferenceAcc(x, w, M, N, K, rows)),
        d_x(ToBf16(x)),
        d_w(ToBf16(w)) {}
  const std::vector<float> x, w;
  const std::vector<int> rows;
  const std::vector<float> acc;
  const DeviceArray<bf16> d_x, d_w;
};

// The gated epilogues' reference on `rows` of acc [M, N] (gate_up's product, gate columns then
// up columns): act(bf16(gate)) * bf16(up), [M, N / 2].
std::vector<float> GatedReference(const std::vector<float>& acc, int M, int N,
                                  const std::vector<int>& rows, bool swiglu) {
  const int I = N / 2;
  std::vector<float> ref(static_cast<size_t>(M) * I);
  for (const int r : rows) {
    for (int i = 0; i < I; ++i) {
      const float g = RoundBf16(acc[static_cast<size_t>(r) * N + i]);
      const float u = RoundBf16(acc[static_cast<size_t>(r) * N + I + i]);
      ref[static_cast<size_t>(r) * I + i] = (swiglu ? Silu(g) : GeluTanh(g)) * u;
    }
  }
  return ref;
}

// A plan of one epilogue into y, as the caller makes it (its operands, schedule and checks).
using MakePlanFn =
    std::function<void(HopperEpilogue epilogue, void* y, kernels::HopperGemmPlan* plan)>;

// kStoreBf16 into a poisoned Y [M, N] (a tile left unwritten fails) and kAccumulateF32 onto a
// random Y (a tile added twice or never fails), each plan from `make`; both against `acc`, the
// reference's accumulators of `rows`, the fp32 output within fp32_tolerance. `what` prefixes the
// messages.
void ExpectStoreAndAccumulateWith(Rng& rng, int M, int N, const MakePlanFn& make,
                                  const std::vector<float>& acc, const std::vector<int>& rows,
                                  double fp32_tolerance, const std::string& what) {
  kernels::HopperGemmPlan plan;
  {
    DeviceArray<bf16> y(static_cast<size_t>(M) * N);
    y.Poison();
    make(HopperEpilogue::kStoreBf16, y.get(), &plan);
    RANKD_EXPECT_CUDA_OK(kernels::LaunchHopperGemm(plan, nullptr));
    RANKD_EXPECT_CUDA_OK(cudaDeviceSynchronize());
    ExpectClose(FromBf16(y.Download()), acc, N, rows, kBf16Tolerance, what + "kStoreBf16");
  }
  const std::vector<float> y0 = rng.Floats(static_cast<size_t>(M) * N, 8.0f);
  DeviceArray<float> y(y0);
  make(HopperEpilogue::kAccumulateF32, y.get(), &plan);
  RANKD_EXPECT_CUDA_OK(kernels::LaunchHopperGemm(plan, nullptr));
  RANKD_EXPECT_CUDA_OK(cudaDeviceSynchronize());
  std::vector<float> ref = y0;
  for (size_t i = 0; i < ref.size(); ++i) ref[i] += acc[i];
  ExpectClose(y.Download(), ref, N, rows, fp32_tolerance, what + "kAccumulateF32");
}

// The same for bf16 X [M, K] . W [N, K]^T (x, w on the device) on one schedule, `adjust` checking
// or changing each plan before its launch.
void ExpectStoreAndAccumulate(Rng& rng, const bf16* x, const bf16* w, int M, int N, int K,
                              int tile_n, kernels::HopperSchedule schedule, int cluster,
                              const std::vector<float>& acc, const std::vector<int>& rows,
                              const std::function<void(kernels::HopperGemmPlan&)>& adjust) {
  ExpectStoreAndAccumulateWith(
      rng, M, N,
      [&](HopperEpilogue e, void* y, kernels::HopperGemmPlan* plan) {
        RANKD_EXPECT_CUDA_OK(
            kernels::MakeHopperGemmPlan(x, w, y, M, N, K, e, plan, tile_n, schedule, cluster));
        adjust(*plan);
      },
      acc, rows, kFp32Tolerance, "");
}

// Runs every epilogue of X [M, K] . W [N, K]^T and checks it against the reference, the
// non-gated ones with either tile_n, every schedule alone and in clusters of 2 CTAs. For the gated
// epilogues W is taken as gate_up [N = 2I, K] (gate rows, then up rows) and interleaved on the
// device first.
void CheckAllEpilogues(Rng& rng, int M, int N, int K) {
  SCOPED_TRACE(::testing::Message() << "M=" << M << " N=" << N << " K=" << K);
  const Operands operands(rng, M, N, K);
  const auto& [x, w, rows, acc, d_x, d_w] = operands;
  for (const auto& [tile_n, schedule, cluster] :
       {std::tuple{128, kernels::HopperSchedule::kPingPong, 1},
        {128, kernels::HopperSchedule::kPingPong, 2},
        {128, kernels::HopperSchedule::kCooperative, 1},
        {128, kernels::HopperSchedule::kCooperative, 2},
        {256, kernels::HopperSchedule::kCooperative, 1},
        {256, kernels::HopperSchedule::kCooperative, 2},
        {128, kernels::HopperSchedule::kCooperativeTall, 1},
        {128, kernels::HopperSchedule::kCooperativeTall, 2},
        {128, kernels::HopperSchedule::kPingPongShort, 1}}) {
    SCOPED_TRACE(::testing::Message() << "tile_n " << tile_n << " schedule "
                                      << static_cast<int>(schedule) << " cluster " << cluster);
    ExpectStoreAndAccumulate(
        rng, d_x.get(), d_w.get(), M, N, K, tile_n, schedule, cluster, acc, rows,
        [&](kernels::HopperGemmPlan& plan) { EXPECT_EQ(plan.cluster, cluster); });
  }
  const int I = N / 2;
  kernels::HopperGemmPlan gated;
  if (N % kernels::kHopperGluTileN != 0) {
    DeviceArray<bf16> y(static_cast<size_t>(M) * N);
    EXPECT_EQ(kernels::MakeHopperGemmPlan(d_x.get(), d_w.get(), y.get(), M, N, K,
                                          HopperEpilogue::kSwiGlu, &gated),
              cudaErrorInvalidValue)
        << "gated epilogue with N % " << kernels::kHopperGluTileN << " != 0";
    return;
  }
  DeviceArray<bf16> d_wi(static_cast<size_t>(N) * K);
  RANKD_EXPECT_CUDA_OK(
      kernels::InterleaveGateUp(d_w.get(), I, K * sizeof(bf16), d_wi.get(), nullptr));
  // Tiles of 256 hold two interleave blocks (and, where N % 256 == 128, the last tile one).
  for (const auto& [e, tile_n, schedule, cluster] :
       {std::tuple{HopperEpilogue::kSwiGlu, 128, kernels::HopperSchedule::kPingPong, 1},
        {HopperEpilogue::kSwiGlu, 128, kernels::HopperSchedule::kPingPong, 2},
        {HopperEpilogue::kSwiGlu, 128, kernels::HopperSchedule::kCooperative, 2},
        {HopperEpilogue::kSwiGlu, 256, kernels::HopperSchedule::kCooperative, 1},
        {HopperEpilogue::kSwiGlu, 256, kernels::HopperSchedule::kCooperative, 2},
        {HopperEpilogue::kSwiGlu, 128, kernels::HopperSchedule::kCooperativeTall, 1},
        {HopperEpilogue::kSwiGlu, 128, kernels::HopperSchedule::kPingPongShort, 1},
        {HopperEpilogue::kGeGlu, 128, kernels::HopperSchedule::kPingPongShort, 1},
        {HopperEpilogue::kGeGlu, 128, kernels::HopperSchedule::kPingPong, 2},
        {HopperEpilogue::kGeGlu, 128, kernels::HopperSchedule::kCooperative, 1},
        {HopperEpilogue::kGeGlu, 256, kernels::HopperSchedule::kCooperative, 1}}) {
    const bool swiglu = e == HopperEpilogue::kSwiGlu;
    SCOPED_TRACE(::testing::Message() << "tile_n " << tile_n << " schedule "
                                      << static_cast<int>(schedule) << " cluster " << cluster);
    DeviceArray<bf16> y(static_cast<size_t>(M) * I);
    y.Poison();
    RANKD_EXPECT_CUDA_OK(kernels::MakeHopperGemmPlan(d_x.get(), d_wi.get(), y.get(), M, N, K, e,
                                                     &gated, tile_n, schedule, cluster));
    EXPECT_EQ(gated.tile_n, tile_n);
    RANKD_EXPECT_CUDA_OK(kernels::LaunchHopperGemm(gated, nullptr));
    RANKD_EXPECT_CUDA_OK(cudaDeviceSynchronize());
    ExpectClose(FromBf16(y.Download()), GatedReference(acc, M, N, rows, swiglu), I, rows,
                kBf16Tolerance, swiglu ? "kSwiGlu" : "kGeGlu");
  }
}

TEST_F(HopperGemmTest, EveryEpilogueMatchesCpuReferenceOnOddShapes) {
  std::vector<std::tuple<int, int, int>> shapes;
  if (const char* one = std::getenv("RANKD_HOPPER_SHAPE")) {
    int M = 0, N = 0, K = 0;
    ASSERT_EQ(std::sscanf(one, "%d,%d,%d", &M, &N, &K), 3) << "RANKD_HOPPER_SHAPE=M,N,K";
    shapes.emplace_back(M, N, K);
  } else {
    for (const int M : {1, 7, 63, 129, 1000, 7500}) {
      for (const auto& [N, K] : {std::pair{64, 64},
                                 {1000, 1024},
                                 {3072, 1024},
                                 {1024, 3328},
                                 {6656, 1024},
                                 {1032, 72}}) {
        shapes.emplace_back(M, N, K);
      }
    }
  }
  for (const auto& [M, N, K] : shapes) {
    CheckAllEpilogues(rng_, M, N, K);
    if (HasFatalFailure()) return;
  }
}

// The raster groups (HopperGemmPlan::group) reorder the units and change nothing else: with
// groups of 1, 2 and 3 units' rows (the last group short) on every schedule, a store into a
// poisoned Y leaves no tile unwritten, and a residual add into random Y adds each tile exactly
// once.
TEST_F(HopperGemmTest, RasterGroupsComputeEveryTileOnce) {
  using kernels::HopperSchedule;
  constexpr int M = 1000, N = 1032, K = 136;  // 8 row tiles of 128, 9 or 5 column tiles
  const Operands operands(rng_, M, N, K);
  const auto& [x, w, rows, acc, d_x, d_w] = operands;
  for (const auto& [tile_n, schedule, cluster] : {std::tuple{128, HopperSchedule::kPingPong, 1},
                                                  {128, HopperSchedule::kPingPong, 2},
                                                  {256, HopperSchedule::kCooperative, 1},
                                                  {128, HopperSchedule::kCooperative, 2},
                                                  {128, HopperSchedule::kCooperativeTall, 1},
                                                  {128, HopperSchedule::kPingPongShort, 1}}) {
    for (const int group : {1, 2, 3}) {
      SCOPED_TRACE(::testing::Message()
                   << "tile_n " << tile_n << " schedule " << static_cast<int>(schedule)
                   << " cluster " << cluster << " group " << group);
      ExpectStoreAndAccumulate(rng_, d_x.get(), d_w.get(), M, N, K, tile_n, schedule, cluster, acc,
                               rows, [&](kernels::HopperGemmPlan& plan) {
                                 EXPECT_EQ(plan.group, 0)
                                     << "X and W of a few hundred KB fit in L2";
                                 plan.group = group;
                               });
      if (HasFatalFailure()) return;
    }
  }
}

// K in slices (SetHopperGemmKSlices) on the schedules that take them, ping-pong 64 and
// cooperative 128, over shapes of few rows whose K blocks divide in 2, 3, 4 or 8 (K 520's last
// block 8 columns wide): kStoreBf16 into a poisoned Y, kAccumulateF32 onto a random one (a slice
// added twice or lost fails) and kSwiGlu match the CPU reference; a second launch gives the
// same bits (the last slice sums in slice order, whichever it is) and leaves every counter zero.
// HopperKSlices' rule picks slices for the embedding pass's down_proj and none for 7,500 rows.
TEST_F(HopperGemmTest, KSlicesMatchCpuReferenceBitForBitAcrossLaunches) {
  using kernels::HopperSchedule;
  for (const auto& [M, N, K] : {std::tuple{250, 1024, 3328}, {63, 1024, 1024}, {129, 1032, 520}}) {
    SCOPED_TRACE(::testing::Message() << "M=" << M << " N=" << N << " K=" << K);
    const Operands operands(rng_, M, N, K);
    const auto& [x, w, rows, acc, d_x, d_w] = operands;
    const int blocks = (K + kernels::kHopperTileK - 1) / kernels::kHopperTileK;
    for (const auto& [tile_n, schedule] :
         {std::pair{128, HopperSchedule::kPingPongShort}, {128, HopperSchedule::kCooperative}}) {
      for (const int count : {2, 3, 4, 8}) {
        if (blocks % count != 0) continue;
        SCOPED_TRACE(::testing::Message()
                     << "schedule " << static_cast<int>(schedule) << ", " << count << " slices");
        kernels::HopperGemmPlan probe;
        DeviceArray<bf16> probe_y(static_cast<size_t>(M) * N);
        RANKD_EXPECT_CUDA_OK(kernels::MakeHopperGemmPlan(d_x.get(), d_w.get(), probe_y.get(), M, N,
                                                         K, HopperEpilogue::kStoreBf16, &probe,
                                                         tile_n, schedule, 1));
        DeviceArray<float> partials(kernels::HopperKSliceBytes(probe, count) / sizeof(float));
        partials.Poison();
        const std::vector<int> zeros(kernels::HopperKSliceCounters(probe), 0);
        DeviceArray<int> counters(zeros);
        auto slice = [&](kernels::HopperGemmPlan& plan) {
          RANKD_EXPECT_CUDA_OK(
              kernels::SetHopperGemmKSlices(&plan, count, partials.get(), counters.get()));
        };
        ExpectStoreAndAccumulate(rng_, d_x.get(), d_w.get(), M, N, K, tile_n, schedule, 1, acc,
                                 rows, slice);
        // A second launch: the same bits.
        kernels::HopperGemmPlan plan;
        DeviceArray<bf16> y(static_cast<size_t>(M) * N);
        RANKD_EXPECT_CUDA_OK(kernels::MakeHopperGemmPlan(d_x.get(), d_w.get(), y.get(), M, N, K,
                                                         HopperEpilogue::kStoreBf16, &plan, tile_n,
                                                         schedule, 1));
        slice(plan);
        RANKD_EXPECT_CUDA_OK(kernels::LaunchHopperGemm(plan, nullptr));
        RANKD_EXPECT_CUDA_OK(cudaDeviceSynchronize());
        const std::vector<bf16> first = y.Download();
        y.Poison();
        RANKD_EXPECT_CUDA_OK(kernels::LaunchHopperGemm(plan, nullptr));
        RANKD_EXPECT_CUDA_OK(cudaDeviceSynchronize());
        const std::vector<bf16> second = y.Download();
        ASSERT_EQ(std::memcmp(first.data(), second.data(), first.size() * sizeof(bf16)), 0)
            << "a second launch changed bits";
        EXPECT_EQ(counters.Download(), zeros) << "counters left non-zero";
        // The gated epilogue on the interleaved weight (N a multiple of 128).
        if (N % kernels::kHopperGluTileN == 0) {
          DeviceArray<bf16> d_wi(static_cast<size_t>(N) * K), g(static_cast<size_t>(M) * N / 2);
          RANKD_EXPECT_CUDA_OK(
              kernels::InterleaveGateUp(d_w.get(), N / 2, K * sizeof(bf16), d_wi.get(), nullptr));
          g.Poison();
          kernels::HopperGemmPlan gated;
          RANKD_EXPECT_CUDA_OK(kernels::MakeHopperGemmPlan(d_x.get(), d_wi.get(), g.get(), M, N, K,
                                                           HopperEpilogue::kSwiGlu, &gated, tile_n,
                                                           schedule, 1));
          slice(gated);
          RANKD_EXPECT_CUDA_OK(kernels::LaunchHopperGemm(gated, nullptr));
          RANKD_EXPECT_CUDA_OK(cudaDeviceSynchronize());
          ExpectClose(FromBf16(g.Download()), GatedReference(acc, M, N, rows, true), N / 2, rows,
                      kBf16Tolerance, "kSwiGlu");
        }
        if (HasFatalFailure()) return;
      }
    }
  }
  // The rule: the embedding pass's down_proj (250 rows: 32 tiles of 64 x 128, 52 K blocks) in 4
  // slices of 13 blocks, 128 units on 132 SMs (an H100's, an H200's); 7,500 rows in none.
  int sms = 0;
  RANKD_EXPECT_CUDA_OK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  DeviceArray<bf16> x(7500 * 3328), w(1024 * 3328), y(7500 * 1024);
  kernels::HopperGemmPlan down;
  RANKD_EXPECT_CUDA_OK(kernels::MakeHopperGemmPlan(x.get(), w.get(), y.get(), 250, 1024, 3328,
                                                   HopperEpilogue::kAccumulateF32, &down, 128,
                                                   HopperSchedule::kPingPongShort, 1));
  if (sms >= 128 && sms < 208) {
    EXPECT_EQ(kernels::HopperKSlices(down), 4) << sms << " SMs";
  }
  EXPECT_GE(kernels::HopperKSlices(down), 1);
  RANKD_EXPECT_CUDA_OK(kernels::MakeHopperGemmPlan(x.get(), w.get(), y.get(), 7500, 1024, 3328,
                                                   HopperEpilogue::kAccumulateF32, &down, 128,
                                                   HopperSchedule::kPingPongShort, 1));
  EXPECT_EQ(kernels::HopperKSlices(down), 1);
  kernels::HopperGemmPlan pp;
  RANKD_EXPECT_CUDA_OK(kernels::MakeHopperGemmPlan(x.get(), w.get(), y.get(), 250, 1024, 3328,
                                                   HopperEpilogue::kAccumulateF32, &pp, 128,
                                                   HopperSchedule::kPingPong, 1));
  EXPECT_EQ(kernels::HopperKSlices(pp), 0) << "ping-pong 128 takes no slices";
}

// The cooperative consumers' stagger (HopperGemmPlan::stagger) changes when consumer 1 starts,
// not what it computes: every stagger, from none to more than the ring's stages and more than the
// K blocks (K = 64: one), gives Y bit for bit as in step, which matches the CPU; the plan's default
// staggers the cooperative schedules only.
TEST_F(HopperGemmTest, StaggeredConsumersComputeTheSameBits) {
  using kernels::HopperSchedule;
  for (const int K : {64, 520}) {
    constexpr int M = 700, N = 1032;
    SCOPED_TRACE(::testing::Message() << "K=" << K);
    const Operands operands(rng_, M, N, K);
    const auto& [x, w, rows, acc, d_x, d_w] = operands;
    for (const auto& [tile_n, schedule, cluster] :
         {std::tuple{128, HopperSchedule::kCooperative, 1},
          {256, HopperSchedule::kCooperative, 1},
          {256, HopperSchedule::kCooperative, 2},
          {128, HopperSchedule::kCooperativeTall, 1},
          {128, HopperSchedule::kPingPong, 1}}) {
      SCOPED_TRACE(::testing::Message() << "tile_n " << tile_n << " schedule "
                                        << static_cast<int>(schedule) << " cluster " << cluster);
      kernels::HopperGemmPlan plan;
      std::vector<bf16> in_step;
      for (const int stagger : {0, 1, 2, 3, 9}) {
        DeviceArray<bf16> y(static_cast<size_t>(M) * N);
        y.Poison();
        RANKD_EXPECT_CUDA_OK(kernels::MakeHopperGemmPlan(d_x.get(), d_w.get(), y.get(), M, N, K,
                                                         HopperEpilogue::kStoreBf16, &plan, tile_n,
                                                         schedule, cluster));
        EXPECT_EQ(plan.stagger,
                  schedule == HopperSchedule::kPingPong ? 0 : kernels::kHopperCooperativeStagger);
        plan.stagger = stagger;
        RANKD_EXPECT_CUDA_OK(kernels::LaunchHopperGemm(plan, nullptr));
        RANKD_EXPECT_CUDA_OK(cudaDeviceSynchronize());
        const std::vector<bf16> got = y.Download();
        if (stagger == 0) {
          ExpectClose(FromBf16(got), acc, N, rows, kBf16Tolerance, "kStoreBf16");
          in_step = got;
        } else {
          EXPECT_EQ(std::memcmp(got.data(), in_step.data(), got.size() * sizeof(bf16)), 0)
              << "stagger " << stagger;
        }
      }
    }
  }
}

// Identity operands make layout mistakes readable (both tiles): with X = I, Y[i, n] = W[n, i] = n +
// (i % 4)/4; with W = I, Y[i, n] = X[i, n] = i + (n % 4)/4 (all exact in bf16). Mismatches print
// the value got, which names the element it came from.
TEST_F(HopperGemmTest, IdentityOperandsShowTheLayout) {
  constexpr int kN = 64;
  std::vector<float> eye(kN * kN, 0.0f), ramp(kN * kN);
  for (int i = 0; i < kN; ++i) {
    eye[i * kN + i] = 1.0f;
    for (int j = 0; j < kN; ++j) ramp[i * kN + j] = i + (j % 4) / 4.0f;
  }
  using kernels::HopperSchedule;
  for (const auto& [x_is_eye, tile_n, schedule, cluster] :
       {std::tuple{true, 128, HopperSchedule::kPingPong, 1},
        {false, 128, HopperSchedule::kPingPong, 1},
        {true, 128, HopperSchedule::kPingPong, 2},
        {false, 128, HopperSchedule::kPingPong, 2},
        {true, 128, HopperSchedule::kCooperative, 1},
        {false, 128, HopperSchedule::kCooperative, 1},
        {true, 256, HopperSchedule::kCooperative, 1},
        {true, 256, HopperSchedule::kCooperative, 2},
        {true, 128, HopperSchedule::kCooperativeTall, 1},
        {false, 128, HopperSchedule::kCooperativeTall, 1},
        {true, 128, HopperSchedule::kPingPongShort, 1},
        {false, 128, HopperSchedule::kPingPongShort, 1}}) {
    SCOPED_TRACE(::testing::Message()
                 << (x_is_eye ? "X = I, W = ramp" : "X = ramp, W = I") << ", tile_n " << tile_n
                 << ", schedule " << static_cast<int>(schedule) << ", cluster " << cluster);
    DeviceArray<bf16> d_x(ToBf16(x_is_eye ? eye : ramp)), d_w(ToBf16(x_is_eye ? ramp : eye));
    DeviceArray<bf16> y(kN * kN);
    y.Poison();
    kernels::HopperGemmPlan plan;
    RANKD_EXPECT_CUDA_OK(kernels::MakeHopperGemmPlan(d_x.get(), d_w.get(), y.get(), kN, kN, kN,
                                                     HopperEpilogue::kStoreBf16, &plan, tile_n,
                                                     schedule, cluster));
    RANKD_EXPECT_CUDA_OK(kernels::LaunchHopperGemm(plan, nullptr));
    Sync();
    const std::vector<float> got = FromBf16(y.Download());
    int shown = 0;
    for (int i = 0; i < kN; ++i) {
      for (int n = 0; n < kN; ++n) {
        const float want = x_is_eye ? n + (i % 4) / 4.0f : i + (n % 4) / 4.0f;
        if (got[i * kN + n] != want && shown++ < 24) {
          ADD_FAILURE() << "Y[" << i << ", " << n << "] = " << got[i * kN + n] << ", want " << want;
        }
      }
    }
    EXPECT_EQ(shown, 0) << "elements wrong";
  }
}

// The 379M model's linear layers (hidden 1024, qkv 3072, intermediate 3328), own kernel vs
// cuBLASLt: qkv and gate_up bf16, o_proj and down accumulated into fp32, gate_up + SwiGLU fused vs
// cuBLASLt's gate_up then kernels/swiglu.cu.
TEST_F(HopperGemmTest, MatchesCublasLtOn379mShapes) {
  DeviceArray<char> workspace(32 << 20);
  auto gemm = Gemm::Create(workspace.get(), workspace.size());
  ASSERT_TRUE(gemm.ok()) << gemm.status();
  constexpr int kHidden = 1024, kQkv = 3072, kInter = 3328;
  for (const int M : {512, 7500}) {
    for (const auto& [N, K, what] : {std::tuple{kQkv, kHidden, "qkv"},
                                     {kHidden, kHidden, "o_proj"},
                                     {2 * kInter, kHidden, "gate_up"},
                                     {kHidden, kInter, "down"}}) {
      SCOPED_TRACE(::testing::Message() << what << " M=" << M << " N=" << N << " K=" << K);
      DeviceArray<bf16> d_x(ToBf16(rng_.Bf16Values(static_cast<size_t>(M) * K, 1.0f)));
      DeviceArray<bf16> d_w(ToBf16(rng_.Bf16Values(static_cast<size_t>(N) * K, 0.1f)));
      std::vector<int> all_rows(M);
      for (int r = 0; r < M; ++r) all_rows[r] = r;
      const size_t out = static_cast<size_t>(M) * N;

      DeviceArray<bf16> mine(out), theirs(out);
      RANKD_EXPECT_CUDA_OK(kernels::LaunchHopperGemm(
          d_x.get(), d_w.get(), M, N, K, HopperEpilogue::kStoreBf16, mine.get(), nullptr));
      ASSERT_TRUE((*gemm)->Linear(d_x.get(), d_w.get(), M, K, N, theirs.get(), nullptr).ok());
      Sync();
      const std::vector<float> theirs_f = FromBf16(theirs.Download());
      ExpectClose(FromBf16(mine.Download()), theirs_f, N, all_rows, kBf16Tolerance, "bf16");

      const std::vector<float> y0 = rng_.Floats(out, 4.0f);
      DeviceArray<float> mine_acc(y0), theirs_acc(y0);
      RANKD_EXPECT_CUDA_OK(kernels::LaunchHopperGemm(
          d_x.get(), d_w.get(), M, N, K, HopperEpilogue::kAccumulateF32, mine_acc.get(), nullptr));
      ASSERT_TRUE(
          (*gemm)->LinearAccumulate(d_x.get(), d_w.get(), M, K, N, theirs_acc.get(), nullptr).ok());
      Sync();
      ExpectClose(mine_acc.Download(), theirs_acc.Download(), N, all_rows, kFp32Tolerance,
                  "fp32 accumulate");

      if (std::string(what) != "gate_up") continue;
      const int I = N / 2;
      DeviceArray<bf16> d_wi(static_cast<size_t>(N) * K), fused(out / 2), unfused(out / 2);
      RANKD_EXPECT_CUDA_OK(
          kernels::InterleaveGateUp(d_w.get(), I, K * sizeof(bf16), d_wi.get(), nullptr));
      RANKD_EXPECT_CUDA_OK(kernels::LaunchHopperGemm(
          d_x.get(), d_wi.get(), M, N, K, HopperEpilogue::kSwiGlu, fused.get(), nullptr));
      RANKD_EXPECT_CUDA_OK(kernels::LaunchSwiGlu(theirs.get(), M, I, unfused.get(), nullptr));
      Sync();
      ExpectClose(FromBf16(fused.Download()), FromBf16(unfused.Download()), I, all_rows,
                  kBf16Tolerance, "SwiGLU fused vs cuBLASLt + swiglu.cu");
    }
  }
}

// Inside stream capture: the plan is made and the launch recorded into a graph (no sync, no
// allocation; a cluster launch's first occupancy query among them), and the replay computes the
// product.
TEST_F(HopperGemmTest, LaunchesInsideStreamCapture) {
  constexpr int M = 300, N = 256, K = 128;
  const std::vector<float> x = rng_.Bf16Values(M * K, 1.0f), w = rng_.Bf16Values(N * K, 1.0f);
  std::vector<int> rows(M);
  for (int r = 0; r < M; ++r) rows[r] = r;
  const std::vector<float> ref = ReferenceAcc(x, w, M, N, K, rows);
  DeviceArray<bf16> d_x(ToBf16(x)), d_w(ToBf16(w));
  for (const int cluster : {1, 2}) {
    SCOPED_TRACE(::testing::Message() << "cluster " << cluster);
    DeviceArray<bf16> y(M * N);
    y.Poison();
    cudaStream_t stream = nullptr;
    RANKD_EXPECT_CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    RANKD_EXPECT_CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    kernels::HopperGemmPlan plan;
    cudaError_t launched = kernels::MakeHopperGemmPlan(d_x.get(), d_w.get(), y.get(), M, N, K,
                                                       HopperEpilogue::kStoreBf16, &plan, 0,
                                                       kernels::HopperSchedule::kPingPong, cluster);
    if (launched == cudaSuccess) launched = kernels::LaunchHopperGemm(plan, stream);
    RANKD_EXPECT_CUDA_OK(cudaStreamEndCapture(stream, &graph));
    RANKD_EXPECT_CUDA_OK(launched);
    RANKD_EXPECT_CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
    RANKD_EXPECT_CUDA_OK(cudaGraphLaunch(exec, stream));
    RANKD_EXPECT_CUDA_OK(cudaStreamSynchronize(stream));
    ExpectClose(FromBf16(y.Download()), ref, N, rows, kBf16Tolerance, "captured kStoreBf16");
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(stream);
  }
}

// The device interleave puts gate_up's row GateUpSourceRow(r, I) at row r.
TEST_F(HopperGemmTest, InterleaveGateUpOnTheDevice) {
  constexpr int I = 192, K = 8;
  std::vector<float> gate_up(2 * I * K);
  // Row r's signature: its low 7 bits (even columns) and the rest (odd columns), each plus the
  // column, every value a small integer that bf16 holds exactly (r + k / 8 did not: bf16 keeps 8
  // significant bits, so 32.125 was 32).
  auto value = [](int r, int k) {
    return static_cast<float>((k % 2 == 0 ? r % 128 : r / 128) + k);
  };
  for (int r = 0; r < 2 * I; ++r) {
    for (int k = 0; k < K; ++k) gate_up[r * K + k] = value(r, k);
  }
  DeviceArray<bf16> src(ToBf16(gate_up)), dst(2 * I * K);
  dst.Poison();
  RANKD_EXPECT_CUDA_OK(
      kernels::InterleaveGateUp(src.get(), I, K * sizeof(bf16), dst.get(), nullptr));
  Sync();
  const std::vector<float> got = FromBf16(dst.Download());
  for (int r = 0; r < 2 * I; ++r) {
    const int from = kernels::GateUpSourceRow(r, I);
    for (int k = 0; k < K; ++k) ASSERT_EQ(got[r * K + k], value(from, k)) << "row " << r;
  }
}

// The RMSNorm fold (HopperNorm). kResidualNorm on every bf16 schedule, alone and in clusters of 2:
// the stream (random) plus the product against the CPU (fp32 tolerance), its bf16 copy bit for
// bit the rounding of the stream the GPU wrote, and the sums of squares per group of 64 columns
// against those of that stream (N = 192: a 128-wide tile whose second half is past N; N = 1024).
// Then the input side on that copy: kStoreBf16 and kSwiGlu with SetHopperGemmNormIn against the
// CPU's product of the copy, each row times rsqrt(mean + eps) from the GPU's sums of squares.
// And LaunchNormFoldInput: the copy and sums of a stream no epilogue wrote.
TEST_F(HopperGemmTest, NormFoldMatchesCpuReference) {
  constexpr float kEps = 1e-5f;
  constexpr int kGroup = kernels::kHopperScaleGroup;
  for (const auto& [M, N, K] : {std::tuple{77, 192, 320}, {300, 1024, 1024}, {1, 192, 64}}) {
    SCOPED_TRACE(::testing::Message() << "M=" << M << " N=" << N << " K=" << K);
    const Operands operands(rng_, M, N, K);
    const auto& [x, w, rows, acc, d_x, d_w] = operands;
    const std::vector<float> stream0 = rng_.Floats(static_cast<size_t>(M) * N, 4.0f);
    std::vector<float> want = stream0;
    for (size_t i = 0; i < want.size(); ++i) want[i] += acc[i];
    const int groups = N / kGroup;
    std::vector<float> stream;
    std::vector<bf16> copy;
    std::vector<float> sumsq;
    for (const auto& [tile_n, schedule, cluster] :
         {std::tuple{128, kernels::HopperSchedule::kPingPong, 1},
          {128, kernels::HopperSchedule::kPingPong, 2},
          {128, kernels::HopperSchedule::kCooperative, 1},
          {256, kernels::HopperSchedule::kCooperative, 2},
          {128, kernels::HopperSchedule::kCooperativeTall, 1},
          {128, kernels::HopperSchedule::kPingPongShort, 1}}) {
      SCOPED_TRACE(::testing::Message() << "tile_n " << tile_n << " schedule "
                                        << static_cast<int>(schedule) << " cluster " << cluster);
      DeviceArray<float> d_stream(stream0);
      DeviceArray<bf16> d_copy(static_cast<size_t>(M) * N);
      DeviceArray<float> d_sumsq(static_cast<size_t>(M) * groups);
      d_copy.Poison();
      d_sumsq.Poison();
      kernels::HopperGemmPlan plan;
      RANKD_EXPECT_CUDA_OK(kernels::MakeHopperGemmPlan(d_x.get(), d_w.get(), d_stream.get(), M, N,
                                                       K, HopperEpilogue::kResidualNorm, &plan,
                                                       tile_n, schedule, cluster));
      EXPECT_EQ(kernels::LaunchHopperGemm(plan, nullptr), cudaErrorInvalidValue)
          << "kResidualNorm without its outputs";
      RANKD_EXPECT_CUDA_OK(kernels::SetHopperGemmNormOut(&plan, d_copy.get(), d_sumsq.get()));
      RANKD_EXPECT_CUDA_OK(kernels::LaunchHopperGemm(plan, nullptr));
      Sync();
      stream = d_stream.Download();
      copy = d_copy.Download();
      sumsq = d_sumsq.Download();
      ExpectClose(stream, want, N, rows, kFp32Tolerance, "kResidualNorm stream");
      int copy_mismatches = 0;
      double worst_sumsq = 0;
      for (const int r : rows) {
        for (int g = 0; g < groups; ++g) {
          double ss = 0;
          for (int c = g * kGroup; c < (g + 1) * kGroup; ++c) {
            const size_t i = static_cast<size_t>(r) * N + c;
            ss += static_cast<double>(stream[i]) * stream[i];
            const bf16 rounded = ToBf16(stream[i]);
            copy_mismatches += std::memcmp(&copy[i], &rounded, sizeof(bf16)) != 0;
          }
          const double got = sumsq[static_cast<size_t>(r) * groups + g];
          worst_sumsq = std::max(worst_sumsq, std::isfinite(got) ? std::abs(got - ss) / ss : 1e9);
        }
      }
      EXPECT_EQ(copy_mismatches, 0) << "the bf16 copy is the stream rounded";
      EXPECT_LE(worst_sumsq, 1e-5) << "sums of squares per group";
    }

    // The input side on the last variant's copy and sums: Y = rows of (copy . W2^T) / rms.
    const int N2 = 256;
    const std::vector<float> w2 = rng_.Bf16Values(static_cast<size_t>(N2) * N, 1.0f);
    const std::vector<float> acc2 = ReferenceAcc(FromBf16(copy), w2, M, N2, N, rows);
    std::vector<float> scaled = acc2;
    for (const int r : rows) {
      double ss = 0;
      for (int g = 0; g < groups; ++g) ss += sumsq[static_cast<size_t>(r) * groups + g];
      const float inv = static_cast<float>(1.0 / std::sqrt(ss / N + kEps));
      for (int c = 0; c < N2; ++c) scaled[static_cast<size_t>(r) * N2 + c] *= inv;
    }
    DeviceArray<bf16> d_copy(copy), d_w2(ToBf16(w2));
    DeviceArray<float> d_sumsq(sumsq);
    for (const auto& [tile_n, schedule, cluster] :
         {std::tuple{128, kernels::HopperSchedule::kPingPong, 1},
          {256, kernels::HopperSchedule::kCooperative, 1},
          {128, kernels::HopperSchedule::kPingPongShort, 1}}) {
      SCOPED_TRACE(::testing::Message()
                   << "norm in: tile_n " << tile_n << " schedule " << static_cast<int>(schedule));
      kernels::HopperGemmPlan plan;
      DeviceArray<bf16> y(static_cast<size_t>(M) * N2);
      y.Poison();
      RANKD_EXPECT_CUDA_OK(kernels::MakeHopperGemmPlan(d_copy.get(), d_w2.get(), y.get(), M, N2, N,
                                                       HopperEpilogue::kStoreBf16, &plan, tile_n,
                                                       schedule, cluster));
      RANKD_EXPECT_CUDA_OK(kernels::SetHopperGemmNormIn(&plan, d_sumsq.get(), kEps));
      RANKD_EXPECT_CUDA_OK(kernels::LaunchHopperGemm(plan, nullptr));
      Sync();
      ExpectClose(FromBf16(y.Download()), scaled, N2, rows, kBf16Tolerance, "kStoreBf16, norm in");
      // Gated: W2 as gate_up (gate rows, then up rows), interleaved.
      DeviceArray<bf16> d_w2i(static_cast<size_t>(N2) * N);
      RANKD_EXPECT_CUDA_OK(
          kernels::InterleaveGateUp(d_w2.get(), N2 / 2, N * sizeof(bf16), d_w2i.get(), nullptr));
      DeviceArray<bf16> act(static_cast<size_t>(M) * N2 / 2);
      act.Poison();
      RANKD_EXPECT_CUDA_OK(kernels::MakeHopperGemmPlan(d_copy.get(), d_w2i.get(), act.get(), M, N2,
                                                       N, HopperEpilogue::kSwiGlu, &plan, tile_n,
                                                       schedule, cluster));
      RANKD_EXPECT_CUDA_OK(kernels::SetHopperGemmNormIn(&plan, d_sumsq.get(), kEps));
      RANKD_EXPECT_CUDA_OK(kernels::LaunchHopperGemm(plan, nullptr));
      Sync();
      ExpectClose(FromBf16(act.Download()), GatedReference(scaled, M, N2, rows, true), N2 / 2, rows,
                  kBf16Tolerance, "kSwiGlu, norm in");
    }

    // LaunchNormFoldInput of the GPU's stream: the same copy and sums.
    DeviceArray<float> d_stream(stream);
    DeviceArray<bf16> d_copy_in(static_cast<size_t>(M) * N);
    DeviceArray<float> d_sumsq_in(static_cast<size_t>(M) * groups);
    d_copy_in.Poison();
    RANKD_EXPECT_CUDA_OK(kernels::LaunchNormFoldInput(d_stream.get(), M, N, d_copy_in.get(),
                                                      d_sumsq_in.get(), nullptr));
    Sync();
    const std::vector<bf16> copy_in = d_copy_in.Download();
    EXPECT_EQ(std::memcmp(copy_in.data(), copy.data(), copy.size() * sizeof(bf16)), 0)
        << "LaunchNormFoldInput's copy";
    const std::vector<float> sumsq_in = d_sumsq_in.Download();
    for (size_t i = 0; i < sumsq.size(); ++i) {
      ASSERT_NEAR(sumsq_in[i], sumsq[i], 1e-5 * sumsq[i]) << "LaunchNormFoldInput's sums, " << i;
    }
  }
}

// Preconditions, refused before any device work (no GPU needed).
TEST(HopperGemmPreconditions, RefusesBadShapesAndAlignment) {
  alignas(16) static bf16 buf[64];
  kernels::HopperGemmPlan plan;
  // y: buf unless given.
  auto make = [&](const bf16* x, const bf16* w, int m, int n, int k, HopperEpilogue e, int tile_n,
                  void* y = nullptr,
                  kernels::HopperSchedule schedule = kernels::HopperSchedule::kAuto,
                  int cluster = 0) {
    return kernels::MakeHopperGemmPlan(x, w, y != nullptr ? y : buf, m, n, k, e, &plan, tile_n,
                                       schedule, cluster);
  };
  constexpr HopperEpilogue kBf16 = HopperEpilogue::kStoreBf16, kSwiGlu = HopperEpilogue::kSwiGlu;
  EXPECT_EQ(make(buf, buf, 8, 12, 64, kBf16, 0), cudaErrorInvalidValue) << "N";
  EXPECT_EQ(make(buf, buf, 8, 64, 60, kBf16, 0), cudaErrorInvalidValue) << "K";
  EXPECT_EQ(make(buf, buf, -1, 64, 64, kBf16, 0), cudaErrorInvalidValue) << "M";
  EXPECT_EQ(make(buf + 1, buf, 8, 64, 64, kBf16, 0), cudaErrorInvalidValue) << "x misaligned";
  EXPECT_EQ(make(buf, buf + 4, 8, 64, 64, kBf16, 0), cudaErrorInvalidValue) << "w misaligned";
  EXPECT_EQ(make(buf, buf, 8, 64, 64, kBf16, 64), cudaErrorInvalidValue) << "tile_n";
  EXPECT_EQ(make(buf, buf, 8, 64, 64, kBf16, 0, buf + 1), cudaErrorInvalidValue) << "y misaligned";
  EXPECT_EQ(make(buf, buf, 8, 64, 64, kBf16, 256, nullptr, kernels::HopperSchedule::kPingPong),
            cudaErrorInvalidValue)
      << "ping-pong with tile_n 256";
  EXPECT_EQ(
      make(buf, buf, 8, 64, 64, kBf16, 256, nullptr, kernels::HopperSchedule::kCooperativeTall),
      cudaErrorInvalidValue)
      << "tall with tile_n 256";
  EXPECT_EQ(make(buf, buf, 8, 64, 64, kBf16, 256, nullptr, kernels::HopperSchedule::kPingPongShort),
            cudaErrorInvalidValue)
      << "short ping-pong with tile_n 256";
  EXPECT_EQ(
      make(buf, buf, 8, 64, 64, kBf16, 0, nullptr, kernels::HopperSchedule::kPingPongShort, 2),
      cudaErrorInvalidValue)
      << "short ping-pong in clusters of 2";
  for (const int cluster : {-1, 3, 4}) {
    EXPECT_EQ(make(buf, buf, 8, 64, 64, kBf16, 0, nullptr, kernels::HopperSchedule::kAuto, cluster),
              cudaErrorInvalidValue)
        << "cluster " << cluster;
  }
  EXPECT_EQ(make(buf, buf, 8, 192, 64, kSwiGlu, 0), cudaErrorInvalidValue) << "gated N % 128";
  // The norm fold's setters (plan holds no valid plan here: k and n 0, epilogue kStoreBf16).
  alignas(16) static float sums[64];
  kernels::HopperGemmPlan norm_plan;
  norm_plan.k = 128;
  norm_plan.n = 128;
  EXPECT_EQ(kernels::SetHopperGemmNormIn(&norm_plan, nullptr, 1e-5f), cudaErrorInvalidValue)
      << "null sums";
  EXPECT_EQ(kernels::SetHopperGemmNormIn(&norm_plan, sums, -1.0f), cudaErrorInvalidValue) << "eps";
  EXPECT_EQ(kernels::SetHopperGemmNormOut(&norm_plan, buf, sums), cudaErrorInvalidValue)
      << "NormOut on kStoreBf16";
  norm_plan.k = 96;
  EXPECT_EQ(kernels::SetHopperGemmNormIn(&norm_plan, sums, 1e-5f), cudaErrorInvalidValue)
      << "k % 64";
  norm_plan.k = 128;
  norm_plan.fp8 = true;
  EXPECT_EQ(kernels::SetHopperGemmNormIn(&norm_plan, sums, 1e-5f), cudaErrorInvalidValue) << "fp8";
  norm_plan = {};
  norm_plan.epilogue = HopperEpilogue::kResidualNorm;
  norm_plan.n = 96;
  EXPECT_EQ(kernels::SetHopperGemmNormOut(&norm_plan, buf, sums), cudaErrorInvalidValue)
      << "n % 64";
  norm_plan.n = 128;
  EXPECT_EQ(kernels::SetHopperGemmNormOut(&norm_plan, buf + 1, sums), cudaErrorInvalidValue)
      << "copy misaligned";
  EXPECT_EQ(kernels::SetHopperGemmNormOut(&norm_plan, buf, nullptr), cudaErrorInvalidValue)
      << "null sums";
  EXPECT_EQ(kernels::MakeHopperGemmPlanFp8(reinterpret_cast<const __nv_fp8_e4m3*>(buf), sums,
                                           reinterpret_cast<const __nv_fp8_e4m3*>(buf), sums, buf,
                                           8, 64, 64, HopperEpilogue::kResidualNorm, &plan),
            cudaErrorInvalidValue)
      << "kResidualNorm on fp8 operands";
  EXPECT_EQ(kernels::LaunchNormFoldInput(sums, 1, 96, buf, sums, nullptr), cudaErrorInvalidValue)
      << "LaunchNormFoldInput dim % 64";
  EXPECT_EQ(kernels::InterleaveGateUp(buf, 100, 16, buf, nullptr), cudaErrorInvalidValue)
      << "I not a multiple of " << kernels::kHopperGluHalf;

  // The RoPE epilogue's head norm (host-side checks of a plan made by hand: heads of 128, q's
  // [0, 256), k's [256, 384)).
  {
    alignas(16) static float2 rot[4];
    alignas(16) static bf16 weights[256];
    kernels::HopperGemmPlan rp;
    rp.epilogue = HopperEpilogue::kStoreBf16Rope;
    rp.n = 512;
    EXPECT_EQ(kernels::SetHopperGemmRopeNorm(&rp, weights, weights + 128, 256, 1e-6f),
              cudaErrorInvalidValue)
        << "no rotation set";
    ASSERT_EQ(kernels::SetHopperGemmRope(&rp, rot, 0, 384, 128), cudaSuccess);
    EXPECT_EQ(kernels::SetHopperGemmRopeNorm(&rp, weights, weights + 128, 256, 1e-6f), cudaSuccess);
    EXPECT_EQ(rp.rope.k_lo, 256);
    for (const int k_lo : {-128, 200, 512}) {
      EXPECT_EQ(kernels::SetHopperGemmRopeNorm(&rp, weights, weights + 128, k_lo, 1e-6f),
                cudaErrorInvalidValue)
          << "k_lo " << k_lo;
    }
    EXPECT_EQ(kernels::SetHopperGemmRopeNorm(&rp, weights, nullptr, 256, 1e-6f),
              cudaErrorInvalidValue);
    EXPECT_EQ(kernels::SetHopperGemmRopeNorm(&rp, weights + 1, weights + 128, 256, 1e-6f),
              cudaErrorInvalidValue)
        << "q_norm misaligned";
    EXPECT_EQ(kernels::SetHopperGemmRopeNorm(&rp, weights, weights + 128, 256, std::nanf("")),
              cudaErrorInvalidValue)
        << "NaN eps";
    rp.epilogue = HopperEpilogue::kStoreBf16;
    EXPECT_EQ(kernels::SetHopperGemmRopeNorm(&rp, weights, weights + 128, 256, 1e-6f),
              cudaErrorInvalidValue)
        << "another epilogue";
  }

  // K slices (host-side checks of a plan made by hand: 250 rows, N 1024, K 3328: 52 K blocks).
  alignas(16) static float partials[4];
  static int counters[1];
  auto sliced = [](kernels::HopperSchedule schedule, int tile_n) {
    kernels::HopperGemmPlan p;
    p.m = 250;
    p.n = 1024;
    p.k = 3328;
    p.schedule = schedule;
    p.tile_n = tile_n;
    p.cluster = 1;
    return p;
  };
  using kernels::HopperSchedule;
  kernels::HopperGemmPlan sp = sliced(HopperSchedule::kPingPongShort, 128);
  EXPECT_EQ(kernels::SetHopperGemmKSlices(&sp, 4, partials, counters), cudaSuccess);
  EXPECT_EQ(sp.slices.count, 4);
  EXPECT_EQ(sp.slices.partials, partials);
  // 4 x 8 tiles of 64 x 128, 4 slices of each: 128 partial blocks of 32 KB; a counter a tile.
  EXPECT_EQ(kernels::HopperKSliceBytes(sp, 4), size_t{32} * 4 * 64 * 128 * 4);
  EXPECT_EQ(kernels::HopperKSliceCounters(sp), 32);
  EXPECT_EQ(kernels::SetHopperGemmKSlices(&sp, 1, nullptr, nullptr), cudaSuccess) << "none";
  EXPECT_EQ(sp.slices.count, 1);
  for (const int count : {0, -1, 3, 5, 52 * 2}) {
    EXPECT_EQ(kernels::SetHopperGemmKSlices(&sp, count, partials, counters), cudaErrorInvalidValue)
        << count << " slices of 52 K blocks";
  }
  EXPECT_EQ(kernels::SetHopperGemmKSlices(&sp, 2, nullptr, counters), cudaErrorInvalidValue)
      << "null partials";
  EXPECT_EQ(kernels::SetHopperGemmKSlices(&sp, 2, partials + 1, counters), cudaErrorInvalidValue)
      << "partials misaligned";
  EXPECT_EQ(kernels::SetHopperGemmKSlices(&sp, 2, partials, nullptr), cudaErrorInvalidValue)
      << "null counters";
  EXPECT_EQ(kernels::SetHopperGemmKSlices(nullptr, 2, partials, counters), cudaErrorInvalidValue);
  // e4m3 with row scales: K blocks of 128 columns (26 of them: 2 slices, not 4); promoted: none.
  kernels::HopperGemmPlan f8 = sliced(HopperSchedule::kPingPongShort, 128);
  f8.fp8 = true;
  EXPECT_EQ(kernels::SetHopperGemmKSlices(&f8, 2, partials, counters), cudaSuccess);
  EXPECT_EQ(kernels::SetHopperGemmKSlices(&f8, 4, partials, counters), cudaErrorInvalidValue);
  f8.x_scales = kernels::HopperXScales::kRowPromoted;
  EXPECT_EQ(kernels::SetHopperGemmKSlices(&f8, 2, partials, counters), cudaErrorInvalidValue);
  kernels::HopperGemmPlan coop = sliced(HopperSchedule::kCooperative, 128);
  EXPECT_EQ(kernels::SetHopperGemmKSlices(&coop, 2, partials, counters), cudaSuccess);
  EXPECT_EQ(kernels::HopperKSliceCounters(coop), 2 * 2 * 8) << "a counter per consumer block";
  for (const auto& [schedule, tile_n, cluster, fp8] :
       {std::tuple{HopperSchedule::kPingPong, 128, 1, false},
        {HopperSchedule::kCooperative, 256, 1, false},
        {HopperSchedule::kCooperativeTall, 128, 1, false},
        {HopperSchedule::kPingPongShort, 128, 2, false}}) {
    kernels::HopperGemmPlan p = sliced(schedule, tile_n);
    p.cluster = cluster;
    p.fp8 = fp8;
    EXPECT_EQ(kernels::SetHopperGemmKSlices(&p, 2, partials, counters), cudaErrorInvalidValue)
        << "schedule " << static_cast<int>(schedule) << " tile_n " << tile_n << " cluster "
        << cluster << " fp8 " << fp8;
    EXPECT_EQ(kernels::HopperKSliceCounters(p), 0);
    EXPECT_EQ(kernels::HopperKSliceBytes(p, 2), 0u);
  }
}

// The raster group's rule, host-side: none while X and W fit in half of L2 together, else the
// rows that make one wave of units span every column tile (and none where that is every row).
TEST(HopperRasterGroup, GroupsRowsOnlyWhereXAndWOutgrowL2) {
  constexpr size_t kL2 = 50u << 20;  // the H100's and H200's
  // The 379M qkv and gate_up at 7,550 rows: 21.8 MB and 29.1 MB of operands.
  EXPECT_EQ(kernels::HopperRasterGroup(7550, 3072, 1024, 128, 128, 132, kL2), 0);
  EXPECT_EQ(kernels::HopperRasterGroup(7550, 6656, 1024, 128, 128, 132, kL2),
            3);  // 52 column tiles
  // down_proj: X [7550, 3328] is 50 MB; 8 column tiles of 128 (ceil(132 / 8) = 17 rows a group),
  // 4 of 256; clusters of 2: 66 units a wave of 256 rows.
  EXPECT_EQ(kernels::HopperRasterGroup(7550, 1024, 3328, 128, 128, 132, kL2), 17);
  EXPECT_EQ(kernels::HopperRasterGroup(7550, 1024, 3328, 128, 256, 132, kL2), 33);
  EXPECT_EQ(kernels::HopperRasterGroup(7550, 1024, 3328, 256, 128, 66, kL2), 9);
  // A group as tall as the output is no group.
  EXPECT_EQ(kernels::HopperRasterGroup(7550, 128, 30000, 128, 128, 132, kL2), 0);
  EXPECT_EQ(kernels::HopperRasterGroup(0, 1024, 3328, 128, 128, 132, kL2), 0);
}

// (cos, sin) of random angles: the table LaunchRopeRotations makes, [M, D/2] fp32 pairs.
std::vector<float2> RandomRotations(Rng& rng, int M, int D) {
  const std::vector<float> angle = rng.Floats(static_cast<size_t>(M) * (D / 2), 100.0f);
  std::vector<float2> rot(angle.size());
  for (size_t i = 0; i < angle.size(); ++i) rot[i] = {std::cos(angle[i]), std::sin(angle[i])};
  return rot;
}

// The unfused path that kStoreBf16Rope replaces, after the GEMM's kStoreBf16 into qkv [M, (q_heads
// + 2 kv_heads) D]: LaunchQkvRope on the k heads alone (q is rotated in attention), or with the
// q/k norms (q_norm set) on q's and k's heads, each normed first.
void LaunchUnfusedRope(bf16* qkv, const float2* rotations, const int32_t* num_rows, int M,
                       int q_heads, int kv_heads, int D, const bf16* q_norm = nullptr,
                       const bf16* k_norm = nullptr, float eps = 0.0f) {
  kernels::QkvRopeParams r;
  r.qkv = qkv;
  r.rotations = rotations;
  r.num_rows = num_rows;
  r.skip_q = q_norm == nullptr;
  r.q_norm = q_norm;
  r.k_norm = k_norm;
  r.eps = eps;
  r.num_tokens = M;
  r.num_q_heads = q_heads;
  r.num_kv_heads = kv_heads;
  r.head_dim = D;
  RANKD_EXPECT_CUDA_OK(kernels::LaunchQkvRope(r, nullptr));
}

// The RoPE epilogue tests' operands: random bf16 X [M, K] and W [N, K], every row checked, the
// reference's accumulators and their bf16 rounding (what the epilogue rotates), random rotations
// [M, D / 2], and on the device X, W, the rotations and the live row count.
struct RopeOperands {
  RopeOperands(Rng& rng, int M, int N, int K, int D)
      : x(rng.Bf16Values(static_cast<size_t>(M) * K, 1.0f)),
        w(rng.Bf16Values(static_cast<size_t>(N) * K, 1.0f)),
        rows(AllRows(M)),
        acc(ReferenceAcc(x, w, M, N, K, rows)),
        rounded(RoundedBf16(acc)),
        rot(RandomRotations(rng, M, D)),
        d_x(ToBf16(x)),
        d_w(ToBf16(w)),
        d_rot(rot),
        d_rows(std::vector<int32_t>{M}) {}
  static std::vector<int> AllRows(int M) {
    std::vector<int> r(M);
    for (int i = 0; i < M; ++i) r[i] = i;
    return r;
  }
  static std::vector<float> RoundedBf16(const std::vector<float>& v) {
    std::vector<float> r(v.size());
    for (size_t i = 0; i < v.size(); ++i) r[i] = RoundBf16(v[i]);
    return r;
  }
  const std::vector<float> x, w;
  const std::vector<int> rows;
  const std::vector<float> acc, rounded;
  const std::vector<float2> rot;
  const DeviceArray<bf16> d_x, d_w;
  const DeviceArray<float2> d_rot;
  const DeviceArray<int32_t> d_rows;
};

// Every schedule and cluster the RoPE epilogue's tests run.
constexpr std::pair<kernels::HopperSchedule, int> kRopeSchedules[] = {
    {kernels::HopperSchedule::kPingPong, 1},        {kernels::HopperSchedule::kPingPong, 2},
    {kernels::HopperSchedule::kCooperative, 1},     {kernels::HopperSchedule::kCooperative, 2},
    {kernels::HopperSchedule::kCooperativeTall, 1}, {kernels::HopperSchedule::kCooperativeTall, 2},
    {kernels::HopperSchedule::kPingPongShort, 1}};

// got and want [rows, cols] bf16 equal bit for bit; the count that differ and the first of them.
void ExpectSameBits(const std::vector<bf16>& got, const std::vector<bf16>& want, int cols,
                    const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  int64_t differ = 0, first = -1;
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(bf16)) != 0 && differ++ == 0) first = i;
  }
  EXPECT_EQ(differ, 0) << "elements that differ from " << what << "; first at row " << first / cols
                       << " column " << first % cols << ": "
                       << FromBf16(got[std::max<int64_t>(first, 0)]) << " vs "
                       << FromBf16(want[std::max<int64_t>(first, 0)]);
}

// Every element of got within one bf16 rounding step of want's (2^-7 of its magnitude, or of
// `floor` for values near zero: the same values before a last rounding), and where they differ.
void ExpectWithinOneBf16Step(const std::vector<bf16>& got, const std::vector<bf16>& want, int cols,
                             float floor, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  int64_t differ = 0, worst = -1;
  double worst_steps = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const float g = FromBf16(got[i]), v = FromBf16(want[i]);
    if (g == v) continue;
    ++differ;
    const double steps =
        std::abs(static_cast<double>(g) - v) / (std::ldexp(1.0, -7) * std::max(std::abs(v), floor));
    if (!(steps <= worst_steps)) worst_steps = steps, worst = static_cast<int64_t>(i);
  }
  EXPECT_LE(worst_steps, 1.0) << what << ": " << differ << " elements differ; the worst at row "
                              << worst / cols << " column " << worst % cols << ": "
                              << FromBf16(got[std::max<int64_t>(worst, 0)]) << " vs "
                              << FromBf16(want[std::max<int64_t>(worst, 0)]);
}

// kStoreBf16Rope with the head norm (SetHopperGemmRopeNorm: Qwen3's q/k norm) over q's and k's
// heads: against the CPU (the bf16-rounded product, each q and k head divided by its rms and
// multiplied by its weight in double, then rotated) and within one bf16 step of the unfused
// path it replaces (the same variant's kStoreBf16, then LaunchQkvRope with the q/k norms: the sum
// of squares in another order), on every schedule and cluster, heads of 64 and 128. The setter's
// refusals.
TEST_F(HopperGemmTest, RopeHeadNormMatchesCpuAndTheUnfusedPath) {
  using kernels::HopperSchedule;
  constexpr float kEps = 1e-6f;
  struct Case {
    int M, D, q_heads, kv_heads;
  };
  for (const Case& c : {Case{129, 128, 16, 8}, Case{300, 64, 4, 2}, Case{7, 128, 2, 1}}) {
    const int Q = c.q_heads * c.D, KV = c.kv_heads * c.D, N = Q + 2 * KV, K = 256;
    SCOPED_TRACE(::testing::Message() << "M=" << c.M << " D=" << c.D << " N=" << N);
    const RopeOperands operands(rng_, c.M, N, K, c.D);
    const auto& [x, w, rows, acc, rounded, rot, d_x, d_w, d_rot, d_rows] = operands;
    std::vector<float> q_norm = rng_.Bf16Values(c.D, 0.1f), k_norm = rng_.Bf16Values(c.D, 0.1f);
    for (float& v : q_norm) v = RoundBf16(1.0f + v);
    for (float& v : k_norm) v = RoundBf16(1.0f + v);
    std::vector<float> ref = rounded;
    for (int r = 0; r < c.M; ++r) {
      for (int head = 0; head < (Q + KV) / c.D; ++head) {
        float* h = &ref[static_cast<size_t>(r) * N + head * c.D];
        const std::vector<float>& nw = head * c.D >= Q ? k_norm : q_norm;
        double ss = 0;
        for (int i = 0; i < c.D; ++i) ss += static_cast<double>(h[i]) * h[i];
        const double inv = 1.0 / std::sqrt(ss / c.D + kEps);
        for (int i = 0; i < c.D; ++i) h[i] = static_cast<float>(h[i] * inv * nw[i]);
        for (int i = 0; i < c.D / 2; ++i) {
          const float2 cs = rot[static_cast<size_t>(r) * (c.D / 2) + i];
          const float a = h[i], b = h[i + c.D / 2];
          h[i] = std::fma(a, cs.x, -(b * cs.y));
          h[i + c.D / 2] = std::fma(b, cs.x, a * cs.y);
        }
      }
    }
    DeviceArray<bf16> d_qn(ToBf16(q_norm)), d_kn(ToBf16(k_norm));
    for (const auto& [schedule, cluster] : kRopeSchedules) {
      SCOPED_TRACE(::testing::Message()
                   << "schedule " << static_cast<int>(schedule) << " cluster " << cluster);
      DeviceArray<bf16> fused(static_cast<size_t>(c.M) * N), unfused(fused.size());
      fused.Poison();
      kernels::HopperGemmPlan plan;
      RANKD_EXPECT_CUDA_OK(kernels::MakeHopperGemmPlan(d_x.get(), d_w.get(), fused.get(), c.M, N, K,
                                                       HopperEpilogue::kStoreBf16Rope, &plan, 0,
                                                       schedule, cluster));
      EXPECT_EQ(kernels::SetHopperGemmRopeNorm(&plan, d_qn.get(), d_kn.get(), Q, kEps),
                cudaErrorInvalidValue)
          << "the norm before the rotation";
      RANKD_EXPECT_CUDA_OK(kernels::SetHopperGemmRope(&plan, d_rot.get(), 0, Q + KV, c.D));
      for (const int bad_k_lo : {Q + 1, Q + KV + c.D, -c.D}) {
        EXPECT_EQ(kernels::SetHopperGemmRopeNorm(&plan, d_qn.get(), d_kn.get(), bad_k_lo, kEps),
                  cudaErrorInvalidValue)
            << "k_lo " << bad_k_lo;
      }
      EXPECT_EQ(kernels::SetHopperGemmRopeNorm(&plan, nullptr, d_kn.get(), Q, kEps),
                cudaErrorInvalidValue);
      EXPECT_EQ(kernels::SetHopperGemmRopeNorm(&plan, d_qn.get(), d_kn.get() + 1, Q, kEps),
                cudaErrorInvalidValue)
          << "k_norm misaligned";
      EXPECT_EQ(kernels::SetHopperGemmRopeNorm(&plan, d_qn.get(), d_kn.get(), Q, -1.0f),
                cudaErrorInvalidValue)
          << "eps";
      RANKD_EXPECT_CUDA_OK(kernels::SetHopperGemmRopeNorm(&plan, d_qn.get(), d_kn.get(), Q, kEps));
      RANKD_EXPECT_CUDA_OK(kernels::LaunchHopperGemm(plan, nullptr));
      Sync();
      const std::vector<bf16> got = fused.Download();
      ExpectClose(FromBf16(got), ref, N, rows, kBf16Tolerance, "kStoreBf16Rope + head norm vs CPU");
      kernels::HopperGemmPlan store;
      RANKD_EXPECT_CUDA_OK(kernels::MakeHopperGemmPlan(d_x.get(), d_w.get(), unfused.get(), c.M, N,
                                                       K, HopperEpilogue::kStoreBf16, &store,
                                                       plan.tile_n, schedule, cluster));
      RANKD_EXPECT_CUDA_OK(kernels::LaunchHopperGemm(store, nullptr));
      LaunchUnfusedRope(unfused.get(), d_rot.get(), d_rows.get(), c.M, c.q_heads, c.kv_heads, c.D,
                        d_qn.get(), d_kn.get(), kEps);
      Sync();
      ExpectWithinOneBf16Step(got, unfused.Download(), N, 1e-2f,
                              "kStoreBf16 + LaunchQkvRope with the q/k norms");
      if (HasFatalFailure()) return;
    }
  }
}

// kStoreBf16Rope: against the CPU (the bf16-rounded product, its rope columns rotated in fp32 as
// RotatePair does, fmaf for the pairs' products) on every schedule and cluster, with head dims
// 64 and 128 and a rope range that starts and ends inside a tile; and bit for bit against the
// unfused path it replaces (the same variant's kStoreBf16, then LaunchQkvRope on the k heads).
TEST_F(HopperGemmTest, RopeEpilogueMatchesCpuAndTheUnfusedPath) {
  using kernels::HopperSchedule;
  struct Case {
    int M, D, q_heads, kv_heads;  // N = (q_heads + 2 kv_heads) D: q, k, v heads
    int lo, hi;                   // the rope columns (k's: q_heads D .. (q_heads + kv_heads) D)
  };
  const std::vector<Case> cases = {
      {1000, 64, 16, 16, 1024, 2048},  // the 379M model's qkv
      {129, 128, 16, 8, 2048, 3072},   // Qwen3-Reranker-0.6B's
      {7, 64, 3, 2, 192, 320},         // a range that starts and ends inside 128-wide tiles
      {300, 128, 1, 1, 128, 256},
  };
  for (const Case& c : cases) {
    const int N = (c.q_heads + 2 * c.kv_heads) * c.D, K = 256;
    SCOPED_TRACE(::testing::Message() << "M=" << c.M << " D=" << c.D << " N=" << N << " rope ["
                                      << c.lo << ", " << c.hi << ")");
    const RopeOperands operands(rng_, c.M, N, K, c.D);
    const auto& [x, w, rows, acc, rounded, rot, d_x, d_w, d_rot, d_rows] = operands;
    std::vector<float> ref = rounded;
    for (int r = 0; r < c.M; ++r) {
      for (int col = c.lo; col < c.hi; ++col) {
        const int dim = col % c.D;
        if (dim >= c.D / 2) continue;
        const float2 cs = rot[static_cast<size_t>(r) * (c.D / 2) + dim];
        float& a = ref[static_cast<size_t>(r) * N + col];
        float& b = ref[static_cast<size_t>(r) * N + col + c.D / 2];
        const float na = std::fma(a, cs.x, -(b * cs.y)), nb = std::fma(b, cs.x, a * cs.y);
        a = na;
        b = nb;
      }
    }
    const bool qkv_layout = c.lo == c.q_heads * c.D && c.hi == (c.q_heads + c.kv_heads) * c.D;
    for (const auto& [schedule, cluster] : kRopeSchedules) {
      SCOPED_TRACE(::testing::Message()
                   << "schedule " << static_cast<int>(schedule) << " cluster " << cluster);
      DeviceArray<bf16> fused(static_cast<size_t>(c.M) * N), unfused(fused.size());
      fused.Poison();
      unfused.Poison();
      kernels::HopperGemmPlan plan;
      RANKD_EXPECT_CUDA_OK(kernels::MakeHopperGemmPlan(d_x.get(), d_w.get(), fused.get(), c.M, N, K,
                                                       HopperEpilogue::kStoreBf16Rope, &plan, 0,
                                                       schedule, cluster));
      EXPECT_EQ(kernels::LaunchHopperGemm(plan, nullptr), cudaErrorInvalidValue)
          << "a rope plan without its rotation";
      RANKD_EXPECT_CUDA_OK(kernels::SetHopperGemmRope(&plan, d_rot.get(), c.lo, c.hi, c.D));
      RANKD_EXPECT_CUDA_OK(kernels::LaunchHopperGemm(plan, nullptr));
      Sync();
      const std::vector<float> got = FromBf16(fused.Download());
      ExpectClose(got, ref, N, rows, kBf16Tolerance, "kStoreBf16Rope vs CPU");
      if (!qkv_layout) continue;
      kernels::HopperGemmPlan store;
      RANKD_EXPECT_CUDA_OK(kernels::MakeHopperGemmPlan(d_x.get(), d_w.get(), unfused.get(), c.M, N,
                                                       K, HopperEpilogue::kStoreBf16, &store,
                                                       plan.tile_n, schedule, cluster));
      RANKD_EXPECT_CUDA_OK(kernels::LaunchHopperGemm(store, nullptr));
      LaunchUnfusedRope(unfused.get(), d_rot.get(), d_rows.get(), c.M, c.q_heads, c.kv_heads, c.D);
      Sync();
      ExpectSameBits(fused.Download(), unfused.Download(), N, "kStoreBf16 + LaunchQkvRope");
    }
  }
}

// fp8 (e4m3) operands quantised by rows on the host (QuantizeRows: kernels/fp8.cuh's rule),
// X [M, K] and W [N, K]. The reference is the codes' product in fp32 times x_scale[r] *
// w_scale[c], then each epilogue's own step. The e4m3 wgmma keeps fewer mantissa bits as it
// accumulates (cuBLASLt's "fast accumulation"; no promotion here): on an H100 (2026-12-07) the
// fp32 output was off by 1.0e-3 to 3.4e-3 of the largest |reference| at K 1024 to 3328, the same
// on every schedule, with |got| below |want| (truncation). So the fp32 output's tolerance is the
// bf16 outputs' 1e-2 rather than 1e-4; a tile misplaced or scaled by the wrong row is off by O(1).
constexpr double kFp8Fp32Tolerance = 1e-2;
// The gated epilogues round gate and up to bf16 before the activation: a product that the
// truncated accumulation puts on the other side of a bf16 rounding boundary than the reference
// moves by one bf16 ulp (up to 2^-7 relative), in gate and in up. Measured on an H100
// (2026-12-07): 1.04e-2 of the largest |reference| at worst (M = 1000, K = 3,328); so
// 2e-2, two ulps.
constexpr double kFp8GatedTolerance = 2e-2;
// The promoted kernels (HopperXScales::kGroup and kRowPromoted) add each 64-column group's product
// into fp32 accumulators, so that the truncation above stops at a group: their fp32 output is held
// to 2e-3 of the largest |reference| (a misplaced scale is off by O(1)).
constexpr double kFp8PromotedFp32Tolerance = 2e-3;

struct Fp8Operand {
  test_util::Fp8Rows rows;
  std::vector<float> codes;  // the e4m3 codes as fp32, unscaled
};

Fp8Operand RandomFp8(Rng& rng, int rows, int cols) {
  // A few rows far from the others in magnitude, so that a row scale taken from the wrong row
  // shows.
  std::vector<float> v = rng.Floats(static_cast<size_t>(rows) * cols, 1.0f);
  for (int r = 0; r < rows; r += 5) {
    for (int c = 0; c < cols; ++c) v[static_cast<size_t>(r) * cols + c] *= 16.0f;
  }
  Fp8Operand o{test_util::QuantizeRows(v, rows, cols), {}};
  o.codes.resize(o.rows.q.size());
  for (size_t i = 0; i < o.codes.size(); ++i) o.codes[i] = model::F8E4M3ToF32(o.rows.q[i]);
  return o;
}

const __nv_fp8_e4m3* AsFp8(const DeviceArray<uint8_t>& a) {
  return reinterpret_cast<const __nv_fp8_e4m3*>(a.get());
}

TEST_F(HopperGemmTest, Fp8OperandsMatchCpuReference) {
  using kernels::HopperSchedule;
  using kernels::HopperXScales;
  // Every schedule the row-scaled kernels are built for, then the promoted kernels' two
  // (HopperXScales::kRowPromoted: the same row scales, each group's product promoted; held to
  // kFp8PromotedFp32Tolerance).
  // Ping-pong 64 and cooperative 128 also with K in the slices HopperKSlices asks for (where it
  // asks for some: the shapes of few rows).
  const std::vector<std::tuple<HopperSchedule, int, HopperXScales, bool>> schedules = {
      {HopperSchedule::kPingPong, 128, HopperXScales::kRow, false},
      {HopperSchedule::kPingPongShort, 128, HopperXScales::kRow, false},
      {HopperSchedule::kPingPongShort, 128, HopperXScales::kRow, true},
      {HopperSchedule::kCooperative, 128, HopperXScales::kRow, false},
      {HopperSchedule::kCooperative, 128, HopperXScales::kRow, true},
      {HopperSchedule::kCooperative, 256, HopperXScales::kRow, false},
      {HopperSchedule::kCooperative, 128, HopperXScales::kRowPromoted, false},
      {HopperSchedule::kPingPongShort, 128, HopperXScales::kRowPromoted, false}};
  // The slices' partials and counters: at most a unit an SM (HopperKSlices), 128 x 128 fp32 each.
  int sms = 0;
  RANKD_EXPECT_CUDA_OK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  DeviceArray<float> partials(static_cast<size_t>(sms) * 128 * 128);
  DeviceArray<int> counters(std::vector<int>(2 * sms, 0));
  auto slice = [&](kernels::HopperGemmPlan* plan) {
    const int count = kernels::HopperKSlices(*plan);
    ASSERT_GE(count, 1);
    RANKD_EXPECT_CUDA_OK(
        kernels::SetHopperGemmKSlices(plan, count, partials.get(), counters.get()));
  };
  for (const int M : {1, 129, 1000, 7500}) {
    for (const auto& [N, K] : {std::pair{1152, 1040}, {6656, 1024}, {1024, 3328}}) {
      SCOPED_TRACE(::testing::Message() << "M=" << M << " N=" << N << " K=" << K);
      const Fp8Operand x = RandomFp8(rng_, M, K), w = RandomFp8(rng_, N, K);
      const std::vector<int> rows = RowsToCheck(M);
      std::vector<float> acc = ReferenceAcc(x.codes, w.codes, M, N, K, rows);
      for (const int r : rows) {
        for (int c = 0; c < N; ++c) {
          acc[static_cast<size_t>(r) * N + c] *= x.rows.scale[r] * w.rows.scale[c];
        }
      }
      DeviceArray<uint8_t> d_x(x.rows.q), d_w(w.rows.q);
      DeviceArray<float> d_xs(x.rows.scale), d_ws(w.rows.scale);
      // The gated epilogues' weight and its scales, interleaved (W as gate_up: N = 2I).
      const int I = N / 2;
      DeviceArray<uint8_t> d_wi(w.rows.q.size());
      DeviceArray<float> d_wsi(w.rows.scale.size());
      RANKD_EXPECT_CUDA_OK(kernels::InterleaveGateUp(d_w.get(), I, K, d_wi.get(), nullptr));
      RANKD_EXPECT_CUDA_OK(
          kernels::InterleaveGateUp(d_ws.get(), I, sizeof(float), d_wsi.get(), nullptr));
      for (const auto& [schedule, tile_n, x_scales, sliced] : schedules) {
        const bool promoted = x_scales == HopperXScales::kRowPromoted;
        SCOPED_TRACE(::testing::Message()
                     << "schedule " << static_cast<int>(schedule) << " tile_n " << tile_n
                     << (promoted ? " promoted" : "") << (sliced ? " K slices" : ""));
        ExpectStoreAndAccumulateWith(
            rng_, M, N,
            [&](HopperEpilogue e, void* y, kernels::HopperGemmPlan* plan) {
              RANKD_EXPECT_CUDA_OK(
                  kernels::MakeHopperGemmPlanFp8(AsFp8(d_x), d_xs.get(), AsFp8(d_w), d_ws.get(), y,
                                                 M, N, K, e, plan, tile_n, schedule, 1, x_scales));
              if (e == HopperEpilogue::kStoreBf16) {
                EXPECT_TRUE(plan->fp8);
              }
              if (sliced) slice(plan);
            },
            acc, rows, promoted ? kFp8PromotedFp32Tolerance : kFp8Fp32Tolerance, "fp8 ");
        kernels::HopperGemmPlan plan;
        for (const HopperEpilogue e : {HopperEpilogue::kSwiGlu, HopperEpilogue::kGeGlu}) {
          const bool swiglu = e == HopperEpilogue::kSwiGlu;
          DeviceArray<bf16> y(static_cast<size_t>(M) * I);
          y.Poison();
          RANKD_EXPECT_CUDA_OK(kernels::MakeHopperGemmPlanFp8(
              AsFp8(d_x), d_xs.get(), AsFp8(d_wi), d_wsi.get(), y.get(), M, N, K, e, &plan, tile_n,
              schedule, 1, x_scales));
          if (sliced) slice(&plan);
          RANKD_EXPECT_CUDA_OK(kernels::LaunchHopperGemm(plan, nullptr));
          Sync();
          ExpectClose(FromBf16(y.Download()), GatedReference(acc, M, N, rows, swiglu), I, rows,
                      kFp8GatedTolerance, swiglu ? "fp8 kSwiGlu" : "fp8 kGeGlu");
        }
      }
      if (HasFatalFailure()) return;
    }
  }
}

// fp8 kStoreBf16Rope (the 379M model's qkv layout: 16 q, 16 k, 16 v heads of 64) is bit for bit
// the same variant's fp8 kStoreBf16 followed by LaunchQkvRope on the k heads, on every fp8
// schedule.
TEST_F(HopperGemmTest, Fp8RopeEpilogueIsTheUnfusedPath) {
  using kernels::HopperSchedule;
  constexpr int M = 1000, D = 64, kHeads = 16, N = 3 * kHeads * D, K = 1024;
  const Fp8Operand x = RandomFp8(rng_, M, K), w = RandomFp8(rng_, N, K);
  DeviceArray<uint8_t> d_x(x.rows.q), d_w(w.rows.q);
  DeviceArray<float> d_xs(x.rows.scale), d_ws(w.rows.scale);
  DeviceArray<float2> d_rot(RandomRotations(rng_, M, D));
  DeviceArray<int32_t> d_rows(std::vector<int32_t>{M});
  for (const auto& [schedule, tile_n] :
       {std::pair{HopperSchedule::kPingPong, 128}, std::pair{HopperSchedule::kPingPongShort, 128},
        std::pair{HopperSchedule::kCooperative, 128},
        std::pair{HopperSchedule::kCooperative, 256}}) {
    SCOPED_TRACE(::testing::Message()
                 << "schedule " << static_cast<int>(schedule) << " tile_n " << tile_n);
    DeviceArray<bf16> fused(static_cast<size_t>(M) * N), unfused(fused.size());
    fused.Poison();
    unfused.Poison();
    kernels::HopperGemmPlan plan, store;
    RANKD_EXPECT_CUDA_OK(kernels::MakeHopperGemmPlanFp8(
        AsFp8(d_x), d_xs.get(), AsFp8(d_w), d_ws.get(), fused.get(), M, N, K,
        HopperEpilogue::kStoreBf16Rope, &plan, tile_n, schedule, 1));
    RANKD_EXPECT_CUDA_OK(
        kernels::SetHopperGemmRope(&plan, d_rot.get(), kHeads * D, 2 * kHeads * D, D));
    RANKD_EXPECT_CUDA_OK(kernels::LaunchHopperGemm(plan, nullptr));
    RANKD_EXPECT_CUDA_OK(kernels::MakeHopperGemmPlanFp8(
        AsFp8(d_x), d_xs.get(), AsFp8(d_w), d_ws.get(), unfused.get(), M, N, K,
        HopperEpilogue::kStoreBf16, &store, tile_n, schedule, 1));
    RANKD_EXPECT_CUDA_OK(kernels::LaunchHopperGemm(store, nullptr));
    LaunchUnfusedRope(unfused.get(), d_rot.get(), d_rows.get(), M, kHeads, kHeads, D);
    Sync();
    ExpectSameBits(fused.Download(), unfused.Download(), N, "fp8 kStoreBf16 + LaunchQkvRope");
  }
}

// The fp8 plan's own preconditions (the rest are MakeHopperGemmPlan's), and the schedules that
// have no fp8 kernel.
TEST_F(HopperGemmTest, Fp8PlansAreChecked) {
  using kernels::HopperSchedule;
  DeviceArray<uint8_t> x(64 * 64), w(128 * 64);
  DeviceArray<float> xs(64), ws(128 + 1), y(64 * 128);
  const auto* fx = AsFp8(x);
  const auto* fw = AsFp8(w);
  kernels::HopperGemmPlan plan;
  RANKD_EXPECT_CUDA_OK(kernels::MakeHopperGemmPlanFp8(fx, xs.get(), fw, ws.get(), y.get(), 64, 128,
                                                      64, HopperEpilogue::kAccumulateF32, &plan));
  EXPECT_EQ(kernels::MakeHopperGemmPlanFp8(fx, nullptr, fw, ws.get(), y.get(), 64, 128, 64,
                                           HopperEpilogue::kAccumulateF32, &plan),
            cudaErrorInvalidValue)
      << "no x_scale";
  EXPECT_EQ(kernels::MakeHopperGemmPlanFp8(fx, xs.get(), fw, nullptr, y.get(), 64, 128, 64,
                                           HopperEpilogue::kAccumulateF32, &plan),
            cudaErrorInvalidValue)
      << "no w_scale";
  EXPECT_EQ(kernels::MakeHopperGemmPlanFp8(fx, xs.get(), fw, ws.get() + 1, y.get(), 64, 128, 64,
                                           HopperEpilogue::kAccumulateF32, &plan),
            cudaErrorInvalidValue)
      << "w_scale not 8-byte aligned (read in pairs)";
  EXPECT_EQ(kernels::MakeHopperGemmPlanFp8(fx, xs.get(), fw, ws.get(), y.get(), 64, 128, 56,
                                           HopperEpilogue::kAccumulateF32, &plan),
            cudaErrorInvalidValue)
      << "K = 56: e4m3 rows of 56 bytes are not whole 16 bytes";
  for (const auto& [schedule, cluster] :
       {std::pair{HopperSchedule::kPingPong, 2}, std::pair{HopperSchedule::kCooperative, 2},
        std::pair{HopperSchedule::kCooperativeTall, 1}}) {
    RANKD_EXPECT_CUDA_OK(kernels::MakeHopperGemmPlanFp8(fx, xs.get(), fw, ws.get(), y.get(), 64,
                                                        128, 64, HopperEpilogue::kAccumulateF32,
                                                        &plan, 128, schedule, cluster));
    EXPECT_EQ(kernels::LaunchHopperGemm(plan, nullptr), cudaErrorNotSupported)
        << "schedule " << static_cast<int>(schedule) << " cluster " << cluster;
  }
}

// X quantised per row and group of kHopperScaleGroup columns (HopperXScales::kGroup): the host
// quantises each group as a row of its own (the same layout: [M, K] is [M K / 64, 64]), some
// groups 16x the others, so that a scale applied to the wrong group or row shows. The reference is
// the dequantised X times the codes of W, times W's row scales; promoted, so within
// kFp8PromotedFp32Tolerance. K = 1,088 leaves the last K block half past K.

TEST_F(HopperGemmTest, Fp8GroupScalesMatchCpuReference) {
  using kernels::HopperSchedule;
  constexpr int G = kernels::kHopperScaleGroup;
  for (const int M : {1, 129, 1000, 7500}) {
    for (const auto& [N, K] : {std::pair{1024, 3328}, {1152, 1088}}) {
      SCOPED_TRACE(::testing::Message() << "M=" << M << " N=" << N << " K=" << K);
      std::vector<float> xv = rng_.Floats(static_cast<size_t>(M) * K, 1.0f);
      for (size_t i = 0; i < xv.size(); ++i) {
        if ((i / G + i / K) % 3 == 0) xv[i] *= 16.0f;
      }
      const test_util::Fp8Rows xq = test_util::QuantizeRows(xv, M * (K / G), G);
      const std::vector<float> xd = test_util::Dequantize(xq, G);
      const Fp8Operand w = RandomFp8(rng_, N, K);
      const std::vector<int> rows = RowsToCheck(M);
      std::vector<float> acc = ReferenceAcc(xd, w.codes, M, N, K, rows);
      for (const int r : rows) {
        for (int c = 0; c < N; ++c) acc[static_cast<size_t>(r) * N + c] *= w.rows.scale[c];
      }
      DeviceArray<uint8_t> d_x(xq.q), d_w(w.rows.q);
      DeviceArray<float> d_xs(xq.scale), d_ws(w.rows.scale);
      for (const HopperSchedule schedule :
           {HopperSchedule::kCooperative, HopperSchedule::kPingPongShort}) {
        SCOPED_TRACE(::testing::Message() << "schedule " << static_cast<int>(schedule));
        ExpectStoreAndAccumulateWith(
            rng_, M, N,
            [&](HopperEpilogue e, void* y, kernels::HopperGemmPlan* plan) {
              RANKD_EXPECT_CUDA_OK(kernels::MakeHopperGemmPlanFp8(
                  AsFp8(d_x), d_xs.get(), AsFp8(d_w), d_ws.get(), y, M, N, K, e, plan, 0, schedule,
                  0, kernels::HopperXScales::kGroup));
              if (e == HopperEpilogue::kStoreBf16) {
                EXPECT_EQ(plan->tile_n, 128);
              }
            },
            acc, rows, kFp8PromotedFp32Tolerance, "grouped ");
      }
      if (HasFatalFailure()) return;
    }
  }
}

// The promoted plans' conditions: e4m3 operands, K a multiple of kHopperScaleGroup (kGroup) or of
// 16 (kRowPromoted), and kernels on cooperative 128 and ping-pong 64 only.
TEST_F(HopperGemmTest, Fp8GroupPlansAreChecked) {
  using kernels::HopperSchedule;
  using kernels::HopperXScales;
  DeviceArray<uint8_t> x(64 * 256), w(256 * 256);
  DeviceArray<float> xs(64 * 4), ws(256), y(64 * 256);
  const auto* fx = AsFp8(x);
  const auto* fw = AsFp8(w);
  kernels::HopperGemmPlan plan;
  EXPECT_EQ(kernels::MakeHopperGemmPlanFp8(fx, xs.get(), fw, ws.get(), y.get(), 64, 256, 96,
                                           HopperEpilogue::kAccumulateF32, &plan, 0,
                                           HopperSchedule::kAuto, 0, HopperXScales::kGroup),
            cudaErrorInvalidValue)
      << "K = 96: not whole groups";
  RANKD_EXPECT_CUDA_OK(kernels::MakeHopperGemmPlanFp8(
      fx, xs.get(), fw, ws.get(), y.get(), 64, 256, 256, HopperEpilogue::kAccumulateF32, &plan, 0,
      HopperSchedule::kAuto, 0, HopperXScales::kGroup));
  EXPECT_EQ(plan.schedule, HopperSchedule::kCooperative);
  EXPECT_EQ(plan.tile_n, 128);
  // kRowPromoted: the promoted kernels' defaults, any K of whole 16 bytes.
  RANKD_EXPECT_CUDA_OK(kernels::MakeHopperGemmPlanFp8(
      fx, xs.get(), fw, ws.get(), y.get(), 64, 256, 96, HopperEpilogue::kAccumulateF32, &plan, 0,
      HopperSchedule::kAuto, 0, HopperXScales::kRowPromoted));
  EXPECT_EQ(plan.schedule, HopperSchedule::kCooperative);
  EXPECT_EQ(plan.tile_n, 128);
  for (const HopperXScales x_scales : {HopperXScales::kGroup, HopperXScales::kRowPromoted}) {
    for (const auto& [schedule, tile_n, epilogue] :
         {std::tuple{HopperSchedule::kPingPong, 128, HopperEpilogue::kAccumulateF32},
          {HopperSchedule::kCooperative, 256, HopperEpilogue::kAccumulateF32},
          {HopperSchedule::kCooperative, 256, HopperEpilogue::kSwiGlu}}) {
      RANKD_EXPECT_CUDA_OK(kernels::MakeHopperGemmPlanFp8(fx, xs.get(), fw, ws.get(), y.get(), 64,
                                                          256, 256, epilogue, &plan, tile_n,
                                                          schedule, 1, x_scales));
      EXPECT_EQ(kernels::LaunchHopperGemm(plan, nullptr), cudaErrorNotSupported)
          << "schedule " << static_cast<int>(schedule) << " tile " << tile_n << " epilogue "
          << kernels::HopperEpilogueName(epilogue) << " x_scales " << static_cast<int>(x_scales);
    }
  }
}

// kSwiGluFp8 / kGeGluFp8: the gated activation in e4m3 with a scale per row and group of
// kHopperScaleGroup outputs, on bf16 and on e4m3 operands (X scaled by rows, every schedule they
// are built for; or by groups or by rows promoted, the promoted kernels' two schedules).
// Against the CPU's activation (GatedReference) of the group: each scale within 2% of the group's
// largest |reference| / 448, each dequantised element within e4m3's half ulp (1/16 of it) plus
// 1.5% of that largest (the GEMM's rounding, and gate and up a bf16 ulp apart). Gate and up rows
// of every third group are 8x the others, so that a scale from the wrong group or row shows.
TEST_F(HopperGemmTest, GatedFp8OutputMatchesCpuReference) {
  using kernels::HopperSchedule;
  constexpr int G = kernels::kHopperScaleGroup;
  constexpr int M = 1000, N = 2 * 768, K = 1088, I = N / 2;
  std::vector<float> xv = rng_.Bf16Values(static_cast<size_t>(M) * K, 1.0f);
  std::vector<float> wv = rng_.Bf16Values(static_cast<size_t>(N) * K, 1.0f);
  for (int r = 0; r < N; ++r) {
    if (r % I / G % 3 == 0) {
      for (int k = 0; k < K; ++k) wv[static_cast<size_t>(r) * K + k] *= 8.0f;
    }
  }
  const std::vector<int> rows = RowsToCheck(M);
  // bf16, e4m3 with row scales, e4m3 with group scales, e4m3 with row scales promoted
  for (const int mode : {0, 1, 2, 3}) {
    SCOPED_TRACE(mode == 0   ? "bf16 operands"
                 : mode == 1 ? "e4m3 operands"
                 : mode == 2 ? "e4m3, X by groups"
                             : "e4m3, promoted");
    const bool fp8_operands = mode > 0, groups = mode == 2, promoted = mode >= 2;
    const kernels::HopperXScales x_scales = groups     ? kernels::HopperXScales::kGroup
                                            : promoted ? kernels::HopperXScales::kRowPromoted
                                                       : kernels::HopperXScales::kRow;
    const test_util::Fp8Rows xq =
        groups ? test_util::QuantizeRows(xv, M * (K / G), G) : test_util::QuantizeRows(xv, M, K);
    const test_util::Fp8Rows wq = test_util::QuantizeRows(wv, N, K);
    const std::vector<float> acc = fp8_operands
                                       ? ReferenceAcc(test_util::Dequantize(xq, groups ? G : K),
                                                      test_util::Dequantize(wq, K), M, N, K, rows)
                                       : ReferenceAcc(xv, wv, M, N, K, rows);
    DeviceArray<bf16> d_x(ToBf16(xv)), d_w(ToBf16(wv)), d_wi(static_cast<size_t>(N) * K);
    RANKD_EXPECT_CUDA_OK(
        kernels::InterleaveGateUp(d_w.get(), I, K * sizeof(bf16), d_wi.get(), nullptr));
    DeviceArray<uint8_t> d_xq(xq.q), d_wq(wq.q), d_wqi(wq.q.size());
    DeviceArray<float> d_xs(xq.scale), d_ws(wq.scale), d_wsi(wq.scale.size());
    RANKD_EXPECT_CUDA_OK(kernels::InterleaveGateUp(d_wq.get(), I, K, d_wqi.get(), nullptr));
    RANKD_EXPECT_CUDA_OK(
        kernels::InterleaveGateUp(d_ws.get(), I, sizeof(float), d_wsi.get(), nullptr));
    for (const HopperEpilogue e : {HopperEpilogue::kSwiGluFp8, HopperEpilogue::kGeGluFp8}) {
      const std::vector<float> ref =
          GatedReference(acc, M, N, rows, e == HopperEpilogue::kSwiGluFp8);
      for (const auto& [schedule, tile_n] : {std::pair{HopperSchedule::kPingPong, 128},
                                             {HopperSchedule::kPingPongShort, 128},
                                             {HopperSchedule::kCooperative, 128},
                                             {HopperSchedule::kCooperative, 256}}) {
        if (promoted && (schedule == HopperSchedule::kPingPong || tile_n == 256)) continue;
        SCOPED_TRACE(::testing::Message() << kernels::HopperEpilogueName(e) << " schedule "
                                          << static_cast<int>(schedule) << " tile " << tile_n);
        DeviceArray<uint8_t> y(static_cast<size_t>(M) * I);
        DeviceArray<float> ys(static_cast<size_t>(M) * (I / G));
        y.Poison();
        ys.Poison();
        kernels::HopperGemmPlan plan;
        RANKD_EXPECT_CUDA_OK(fp8_operands
                                 ? kernels::MakeHopperGemmPlanFp8(
                                       AsFp8(d_xq), d_xs.get(), AsFp8(d_wqi), d_wsi.get(), y.get(),
                                       M, N, K, e, &plan, tile_n, schedule, 1, x_scales)
                                 : kernels::MakeHopperGemmPlan(d_x.get(), d_wi.get(), y.get(), M, N,
                                                               K, e, &plan, tile_n, schedule, 1));
        EXPECT_EQ(kernels::LaunchHopperGemm(plan, nullptr), cudaErrorInvalidValue)
            << "no output scales set";
        RANKD_EXPECT_CUDA_OK(kernels::SetHopperGemmOutScales(&plan, ys.get()));
        RANKD_EXPECT_CUDA_OK(kernels::LaunchHopperGemm(plan, nullptr));
        Sync();
        const std::vector<uint8_t> q = y.Download();
        const std::vector<float> scale = ys.Download();
        int bad = 0;
        std::string first;
        for (const int r : rows) {
          for (int g = 0; g < I / G; ++g) {
            const size_t base = static_cast<size_t>(r) * I + g * G;
            double amax = 0;
            for (int i = 0; i < G; ++i) amax = std::max(amax, std::abs(double{ref[base + i]}));
            const double s = scale[static_cast<size_t>(r) * (I / G) + g];
            bool ok = std::isfinite(s) && std::abs(s - amax / 448.0) <= 0.02 * amax / 448.0 + 1e-30;
            for (int i = 0; i < G && ok; ++i) {
              const double deq = model::F8E4M3ToF32(q[base + i]) * s;
              ok = std::abs(deq - ref[base + i]) <=
                   0.0625 * std::abs(ref[base + i]) + 0.015 * amax + 1e-30;
            }
            if (!ok && bad++ == 0) {
              first = "row " + std::to_string(r) + " group " + std::to_string(g) + ": scale " +
                      std::to_string(s) + ", want " + std::to_string(amax / 448.0);
            }
          }
        }
        EXPECT_EQ(bad, 0) << bad << " (row, group) pairs off; the first: " << first;
      }
    }
  }
}

TEST_F(HopperGemmTest, RopePlansAreCheckedAtTheirSetting) {
  DeviceArray<bf16> x(64 * 64), w(256 * 64), y(64 * 256);
  DeviceArray<float2> rot(64 * 32);
  kernels::HopperGemmPlan plan;
  RANKD_EXPECT_CUDA_OK(kernels::MakeHopperGemmPlan(x.get(), w.get(), y.get(), 64, 256, 64,
                                                   HopperEpilogue::kStoreBf16Rope, &plan));
  RANKD_EXPECT_CUDA_OK(kernels::SetHopperGemmRope(&plan, rot.get(), 64, 256, 64));
  EXPECT_EQ(kernels::SetHopperGemmRope(&plan, nullptr, 64, 256, 64), cudaErrorInvalidValue);
  EXPECT_EQ(kernels::SetHopperGemmRope(&plan, rot.get(), 64, 256, 32), cudaErrorInvalidValue)
      << "head_dim 32";
  EXPECT_EQ(kernels::SetHopperGemmRope(&plan, rot.get(), 32, 256, 64), cudaErrorInvalidValue)
      << "not whole heads";
  EXPECT_EQ(kernels::SetHopperGemmRope(&plan, rot.get(), 128, 320, 64), cudaErrorInvalidValue)
      << "past N";
  EXPECT_EQ(kernels::SetHopperGemmRope(&plan, rot.get(), 128, 64, 64), cudaErrorInvalidValue)
      << "lo > hi";
  EXPECT_EQ(
      kernels::SetHopperGemmRope(
          &plan, reinterpret_cast<const float2*>(reinterpret_cast<const char*>(rot.get()) + 8), 0,
          64, 64),
      cudaErrorInvalidValue)
      << "unaligned rotations";
  kernels::HopperGemmPlan store;
  RANKD_EXPECT_CUDA_OK(kernels::MakeHopperGemmPlan(x.get(), w.get(), y.get(), 64, 256, 64,
                                                   HopperEpilogue::kStoreBf16, &store));
  EXPECT_EQ(kernels::SetHopperGemmRope(&store, rot.get(), 0, 64, 64), cudaErrorInvalidValue)
      << "another epilogue";
}

// GateUpSourceRow is a permutation of [0, 2I) that puts gate row j and up row j of each tile's
// 64 outputs kHopperGluHalf rows apart in the same N tile.
TEST(HopperGemmInterleave, RowMapIsAPermutationPairingGateAndUp) {
  for (const int I : {64, 192, 3328}) {
    std::vector<int> inverse(2 * I, -1);
    for (int r = 0; r < 2 * I; ++r) {
      const int from = kernels::GateUpSourceRow(r, I);
      ASSERT_GE(from, 0);
      ASSERT_LT(from, 2 * I);
      ASSERT_EQ(inverse[from], -1)
          << "rows " << inverse[from] << " and " << r << " both take " << from;
      inverse[from] = r;
    }
    for (int j = 0; j < I; ++j) {
      const int g = inverse[j], u = inverse[I + j];
      EXPECT_EQ(u - g, kernels::kHopperGluHalf) << "I=" << I << " output " << j;
      EXPECT_EQ(g / kernels::kHopperGluTileN, u / kernels::kHopperGluTileN);
      EXPECT_EQ(
          g / kernels::kHopperGluTileN * kernels::kHopperGluHalf + g % kernels::kHopperGluTileN, j)
          << "outputs in order";
    }
  }
}

}  // namespace
}  // namespace rankd::cuda
