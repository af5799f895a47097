// The kernel tests of the cuBLASLt GEMM wrapper, bf16 and fp8 (rankd/backend/cuda/gemm.h)
// (kernel_test.h says how they check).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <tuple>
#include <vector>

#include "kernels/hopper_gemm.cuh"
#include "kernels/quantize_fp8.cuh"
#include "rankd/backend/cpu/ops.h"
#include "rankd/backend/cuda/gemm.h"
#include "tests/backend/cuda/kernel_test.h"

namespace rankd::cuda::kernel_test {
namespace {

// Operands straight from cudaMalloc (256-byte aligned) and, as arena buffers can be, 128 bytes
// past such an address.
TEST_F(KernelTest, GemmBf16OutputAndFp32Accumulate) {
  DeviceArray<char> workspace(32 << 20);
  auto gemm = Gemm::Create(workspace.get(), workspace.size());
  ASSERT_TRUE(gemm.ok()) << gemm.status();
  for (const auto& [T, in, out] :
       {std::tuple{1, 72, 200}, {37, 72, 200}, {300, 1000, 333}, {7, 64, 1}}) {
    for (const int shift : {0, 128}) {
      SCOPED_TRACE(::testing::Message() << "T=" << T << " in=" << in << " out=" << out
                                        << " operands 256-aligned + " << shift << " bytes");
      const std::vector<float> x = rng_.Bf16Values(static_cast<size_t>(T) * in, 1.0f);
      const std::vector<float> w = rng_.Bf16Values(static_cast<size_t>(out) * in, 0.2f);
      const std::vector<float> y0 = rng_.Floats(static_cast<size_t>(T) * out, 1.0f);
      std::vector<float> ref(static_cast<size_t>(T) * out);
      cpu::Linear(x.data(), w.data(), nullptr, T, in, out, ref.data());

      // Each operand sits `shift` bytes into its allocation.
      auto shifted = [&](auto host) {
        using E = typename decltype(host)::value_type;
        host.insert(host.begin(), shift / sizeof(E), E{});
        return host;
      };
      DeviceArray<bf16> d_x(shifted(ToBf16(x))), d_w(shifted(ToBf16(w))),
          d_y(ref.size() + shift / sizeof(bf16));
      bf16* y = d_y.get() + shift / sizeof(bf16);
      d_y.Poison();
      const absl::Status s1 =
          (*gemm)->Linear(d_x.get() + shift / sizeof(bf16), d_w.get() + shift / sizeof(bf16), T, in,
                          out, y, nullptr);
      ASSERT_TRUE(s1.ok()) << s1;
      Sync();
      std::vector<bf16> got(ref.size());
      RANKD_EXPECT_CUDA_OK(
          cudaMemcpy(got.data(), y, got.size() * sizeof(bf16), cudaMemcpyDeviceToHost));
      EXPECT_LT(RelNormError(FromBf16(got), ref), kOneRounding) << "bf16 output";

      DeviceArray<float> d_acc(shifted(y0));
      float* acc = d_acc.get() + shift / sizeof(float);
      const absl::Status s2 =
          (*gemm)->LinearAccumulate(d_x.get() + shift / sizeof(bf16),
                                    d_w.get() + shift / sizeof(bf16), T, in, out, acc, nullptr);
      ASSERT_TRUE(s2.ok()) << s2;
      Sync();
      std::vector<float> got_acc(ref.size());
      RANKD_EXPECT_CUDA_OK(
          cudaMemcpy(got_acc.data(), acc, got_acc.size() * sizeof(float), cudaMemcpyDeviceToHost));
      std::vector<float> ref_acc = y0;
      cpu::AddInPlace(ref_acc.data(), ref.data(), static_cast<int64_t>(ref.size()));
      EXPECT_LT(RelNormError(got_acc, ref_acc), kFp32) << "fp32 accumulate";
    }
  }
  // A misaligned operand is refused, not handed to cuBLASLt.
  DeviceArray<bf16> a(64), b(64);
  EXPECT_EQ((*gemm)->Linear(a.get() + 1, b.get(), 1, 8, 8, b.get(), nullptr).code(),
            absl::StatusCode::kInvalidArgument);
}

// Random e4m3 codes (no NaN) and positive scales around `scale`: an fp8 matrix as the kernels
// write them.
Fp8Rows RandomFp8(Rng& rng, int rows, int cols, float scale) {
  Fp8Rows m{std::vector<uint8_t>(static_cast<size_t>(rows) * cols), std::vector<float>(rows)};
  for (uint8_t& q : m.q) {
    do q = static_cast<uint8_t>(rng.Int(0, 255));
    while ((q & 0x7f) == 0x7f);
  }
  for (float& s : m.scale) s = scale * (0.5f + rng.Int(0, 1000) / 1000.0f);
  return m;
}

struct DeviceFp8 {
  explicit DeviceFp8(const Fp8Rows& m) : q(m.q.size()), scale(m.scale) {
    EXPECT_EQ(cudaMemcpy(q.get(), m.q.data(), m.q.size(), cudaMemcpyHostToDevice), cudaSuccess);
  }
  Fp8Matrix get() const { return Fp8Matrix{q.get(), scale.get()}; }
  DeviceArray<fp8> q;
  DeviceArray<float> scale;
};

// The worst element of got vs ref, for failure messages.
std::string WorstElement(const std::vector<float>& got, const std::vector<float>& ref, int cols) {
  size_t worst = 0;
  double err = -1;
  for (size_t i = 0; i < got.size(); ++i) {
    const double e = std::isfinite(got[i]) ? std::abs(got[i] - ref[i]) : INFINITY;
    if (e > err) {
      err = e;
      worst = i;
    }
  }
  return (::testing::Message() << "worst at row " << worst / cols << " col " << worst % cols
                               << ": got " << got[worst] << ", ref " << ref[worst] << " (|err| "
                               << err << ")")
      .GetString();
}

// The fp8 GEMM against the CPU GEMM on the dequantised operands: the same numbers, only the
// summation differs (Hopper's fp8 MMA adds with fewer than fp32's bits between cuBLASLt's fp32
// promotions, hence 1e-3 rather than kFp32 for the fp32 output; bf16 output: one rounding).
// in and out multiples of 16, as cuBLASLt's fp8 kernels need (every model's widths are).
TEST_F(KernelTest, GemmFp8MatchesCpuOnDequantisedOperands) {
  constexpr double kFp8Accumulate = 1e-3;
  DeviceArray<char> workspace(32 << 20);
  auto gemm = Gemm::Create(workspace.get(), workspace.size());
  ASSERT_TRUE(gemm.ok()) << gemm.status();
  for (const auto& [T, in, out] : {std::tuple{1, 64, 16},
                                   {37, 1024, 1104},
                                   {13, 1008, 96},
                                   {300, 3328, 1024},
                                   {129, 1024, 3328},
                                   {7, 64, 176}}) {
    SCOPED_TRACE(::testing::Message() << "T=" << T << " in=" << in << " out=" << out);
    const Fp8Rows x = RandomFp8(rng_, T, in, 0.01f), w = RandomFp8(rng_, out, in, 0.002f);
    const std::vector<float> xd = test_util::Dequantize(x, in), wd = test_util::Dequantize(w, in);
    const std::vector<float> y0 = rng_.Floats(static_cast<size_t>(T) * out, 1.0f);
    std::vector<float> ref(static_cast<size_t>(T) * out);
    cpu::Linear(xd.data(), wd.data(), nullptr, T, in, out, ref.data());
    const DeviceFp8 d_x(x), d_w(w);

    DeviceArray<bf16> d_y(ref.size());
    d_y.Poison();
    const absl::Status s1 =
        (*gemm)->LinearFp8(d_x.get(), d_w.get(), T, in, out, d_y.get(), nullptr);
    ASSERT_TRUE(s1.ok()) << s1;
    Sync();
    const std::vector<float> got = FromBf16(d_y.Download());
    EXPECT_LT(RelNormError(got, ref), kOneRounding)
        << "bf16 output; " << WorstElement(got, ref, out);

    DeviceArray<float> d_acc(y0);
    const absl::Status s2 =
        (*gemm)->LinearAccumulateFp8(d_x.get(), d_w.get(), T, in, out, d_acc.get(), nullptr);
    ASSERT_TRUE(s2.ok()) << s2;
    Sync();
    std::vector<float> ref_acc = y0;
    cpu::AddInPlace(ref_acc.data(), ref.data(), static_cast<int64_t>(ref.size()));
    const std::vector<float> got_acc = d_acc.Download();
    EXPECT_LT(RelNormError(got_acc, ref_acc), kFp8Accumulate)
        << "fp32 accumulate; " << WorstElement(got_acc, ref_acc, out);
  }
  // An fp8 operand without scales is refused.
  DeviceArray<fp8> q(64 * 64);
  DeviceArray<bf16> y(64 * 64);
  EXPECT_EQ((*gemm)
                ->LinearFp8(Fp8Matrix{q.get(), nullptr}, Fp8Matrix{q.get(), nullptr}, 64, 64, 64,
                            y.get(), nullptr)
                .code(),
            absl::StatusCode::kInvalidArgument);
}

// The whole fp8 recipe on bf16 operands (x per token, w per output channel, both by the row
// quantiser) against the bf16 GEMM: e4m3's 3 mantissa bits round each operand by about 2.5% (RMS,
// relative), so the products differ by about 3.5%; bound 6%.
TEST_F(KernelTest, GemmFp8CloseToBf16Gemm) {
  constexpr double kFp8VsBf16 = 6e-2;
  DeviceArray<char> workspace(32 << 20);
  auto gemm = Gemm::Create(workspace.get(), workspace.size());
  ASSERT_TRUE(gemm.ok()) << gemm.status();
  for (const auto& [T, in, out] :
       {std::tuple{37, 1024, 1104}, {300, 3328, 1024}, {15, 1024, 6656}}) {
    SCOPED_TRACE(::testing::Message() << "T=" << T << " in=" << in << " out=" << out);
    const std::vector<float> x = rng_.Bf16Values(static_cast<size_t>(T) * in, 2.0f);
    const std::vector<float> w = rng_.Bf16Values(static_cast<size_t>(out) * in, 0.05f);
    DeviceArray<bf16> d_x(ToBf16(x)), d_w(ToBf16(w)), d_ref(static_cast<size_t>(T) * out),
        d_y(static_cast<size_t>(T) * out);
    DeviceArray<fp8> d_xq(x.size()), d_wq(w.size());
    DeviceArray<float> d_xs(T), d_ws(out);
    RANKD_EXPECT_CUDA_OK(
        kernels::LaunchQuantizeRowsFp8(d_x.get(), T, in, d_xq.get(), d_xs.get(), nullptr));
    RANKD_EXPECT_CUDA_OK(
        kernels::LaunchQuantizeRowsFp8(d_w.get(), out, in, d_wq.get(), d_ws.get(), nullptr));
    ASSERT_TRUE((*gemm)->Linear(d_x.get(), d_w.get(), T, in, out, d_ref.get(), nullptr).ok());
    d_y.Poison();
    const absl::Status s =
        (*gemm)->LinearFp8(Fp8Matrix{d_xq.get(), d_xs.get()}, Fp8Matrix{d_wq.get(), d_ws.get()}, T,
                           in, out, d_y.get(), nullptr);
    ASSERT_TRUE(s.ok()) << s;
    Sync();
    const std::vector<float> got = FromBf16(d_y.Download()), ref = FromBf16(d_ref.Download());
    const double err = RelNormError(got, ref);
    EXPECT_LT(err, kFp8VsBf16) << WorstElement(got, ref, out);
    std::printf("[stats] fp8 vs bf16 GEMM T=%d in=%d out=%d: rel_norm_err=%.4f\n", T, in, out, err);
  }
}

}  // namespace
}  // namespace rankd::cuda::kernel_test
