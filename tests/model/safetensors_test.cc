#include "rankd/model/safetensors.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "rankd/common/status.h"
#include "rankd/model/config.h"
#include "rankd/model/weights.h"
#include "tests/common/golden.h"

namespace rankd::model {
namespace {

namespace fs = std::filesystem;

std::vector<uint8_t> Image(const std::string& header, size_t data_bytes) {
  std::vector<uint8_t> out(8 + header.size() + data_bytes, 0);
  const uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  std::memcpy(out.data() + 8, header.data(), header.size());
  return out;
}

void ExpectParseError(const std::vector<uint8_t>& bytes, const std::string& needle) {
  auto r = SafetensorsFile::ParseImage(bytes, "x.safetensors");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status();
  EXPECT_NE(r.status().message().find("x.safetensors"), std::string::npos) << r.status();
}

TEST(SafetensorsTest, ParsesValidImage) {
  auto bytes = Image(R"({"__metadata__": {"format": "pt"},
    "a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
    "b": {"dtype": "BF16", "shape": [4], "data_offsets": [24, 32]}})",
                     32);
  auto r = SafetensorsFile::ParseImage(bytes, "x.safetensors");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ(r->at("a").ShapeString(), "[2, 3]");
  EXPECT_EQ(r->at("b").dtype, DType::kBF16);
  EXPECT_EQ(r->at("b").nbytes, 8u);
}

TEST(SafetensorsTest, RejectsCorruptImagesWithTheTensorName) {
  ExpectParseError({1, 2, 3}, "truncated");
  auto huge_header = Image("{}", 0);
  const uint64_t huge = 1ull << 40;
  std::memcpy(huge_header.data(), &huge, 8);
  ExpectParseError(huge_header, "exceeds the file size");
  ExpectParseError(Image("[1,2]", 0), "not a JSON object");
  ExpectParseError(Image(R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})", 8),
                   "tensor 'w': data_offsets [0, 16) lie outside");
  ExpectParseError(Image(R"({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 16]}})", 16),
                   "tensor 'w': 16 bytes for F32 [3]");
  ExpectParseError(Image(R"({"w": {"dtype": "I8", "shape": [3], "data_offsets": [0, 3]}})", 3),
                   "tensor 'w': dtype I8 is not supported");
  ExpectParseError(Image(R"({"w": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", 4),
                   "tensor 'w': shape has a bad dimension");
  ExpectParseError(Image(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [4, 0]}})", 4),
                   "tensor 'w'");
  ExpectParseError(Image(R"({"w": {"dtype": "F32"}})", 4), "tensor 'w': needs dtype");
}

// Random corruptions of a real file never crash the parser; they parse or fail cleanly.
TEST(SafetensorsTest, SurvivesRandomCorruption) {
  std::ifstream in(rankd::testing::ModelDir("llama-cls") + "/model.safetensors", std::ios::binary);
  std::vector<uint8_t> good((std::istreambuf_iterator<char>(in)), {});
  ASSERT_GT(good.size(), 1000u);
  uint64_t header_len;
  std::memcpy(&header_len, good.data(), 8);
  std::mt19937 rng(7);
  int failures = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<uint8_t> bad = good;
    const int edits = 1 + trial % 4;
    for (int e = 0; e < edits; ++e) {
      const size_t pos = rng() % (8 + header_len);  // corrupt the length or the header
      bad[pos] = static_cast<uint8_t>(rng());
    }
    if (trial % 5 == 0) bad.resize(rng() % bad.size());  // and truncate
    auto r = SafetensorsFile::ParseImage(bad, "fuzz");
    if (!r.ok()) {
      ++failures;
      continue;
    }
    for (const auto& [name, t] : *r) {  // anything accepted lies inside the image
      ASSERT_GE(t.data, bad.data());
      ASSERT_LE(t.data + t.nbytes, bad.data() + bad.size());
    }
  }
  EXPECT_GT(failures, 0);
}

TEST(SafetensorsTest, ScalarConversions) {
  EXPECT_EQ(Bf16ToF32(0x3f80), 1.0f);
  EXPECT_EQ(Bf16ToF32(0xc000), -2.0f);
  EXPECT_EQ(F16ToF32(0x3c00), 1.0f);
  EXPECT_EQ(F16ToF32(0xc000), -2.0f);
  EXPECT_EQ(F16ToF32(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(F16ToF32(0x7bff), 65504.0f);
  EXPECT_TRUE(std::isinf(F16ToF32(0x7c00)));
  EXPECT_TRUE(std::isnan(F16ToF32(0x7e00)));
  EXPECT_EQ(F32ToBf16(1.0f), 0x3f80);
  EXPECT_EQ(F32ToBf16(1.00390625f), 0x3f80);  // halfway: rounds to even
  EXPECT_EQ(F32ToBf16(1.01171875f), 0x3f82);  // halfway: rounds to even (up)
  std::mt19937 rng(3);
  for (int i = 0; i < 10000; ++i) {  // bf16 round trip of a bf16 value is exact
    const uint16_t v = static_cast<uint16_t>(rng()) & 0x7f7f;
    EXPECT_EQ(F32ToBf16(Bf16ToF32(v)), v);
  }
}

// OCP e4m3 (e4m3fn): bias 7, 3 mantissa bits, no infinities, S.1111.111 NaN.
TEST(SafetensorsTest, F8E4M3Conversions) {
  EXPECT_EQ(F8E4M3ToF32(0x00), 0.0f);
  EXPECT_EQ(F8E4M3ToF32(0x38), 1.0f);
  EXPECT_EQ(F8E4M3ToF32(0xb8), -1.0f);
  EXPECT_EQ(F8E4M3ToF32(0x39), 1.125f);
  EXPECT_EQ(F8E4M3ToF32(0x7e), 448.0f);  // the largest finite value
  EXPECT_EQ(F8E4M3ToF32(0xfe), -448.0f);
  EXPECT_EQ(F8E4M3ToF32(0x08), std::ldexp(1.0f, -6));  // the smallest normal
  EXPECT_EQ(F8E4M3ToF32(0x01), std::ldexp(1.0f, -9));  // the smallest subnormal
  EXPECT_EQ(F8E4M3ToF32(0x07), 7 * std::ldexp(1.0f, -9));
  EXPECT_TRUE(std::isnan(F8E4M3ToF32(0x7f)));
  EXPECT_TRUE(std::isnan(F8E4M3ToF32(0xff)));
  EXPECT_EQ(F8E4M3ToF32(0x78), 256.0f);  // 0x78..0x7e: 256 + 32k, finite (no infinity code)
}

TEST(SafetensorsTest, F8E4M3TensorsParseAndConvert) {
  const uint8_t values[] = {0x38, 0xc0, 0x7e, 0x01, 0x00};  // 1, -2, 448, 2^-9, 0
  std::vector<uint8_t> image =
      Image(R"({"w": {"dtype": "F8_E4M3", "shape": [5], "data_offsets": [0, 5]}})", 5);
  std::copy(std::begin(values), std::end(values), image.end() - 5);
  auto r = SafetensorsFile::ParseImage(image, "mem");
  ASSERT_TRUE(r.ok()) << r.status();
  const TensorView& w = r->at("w");
  EXPECT_EQ(w.dtype, DType::kF8E4M3);
  EXPECT_EQ(DTypeSize(w.dtype), 1u);
  EXPECT_EQ(DTypeName(w.dtype), "F8_E4M3");
  std::vector<float> got(5);
  ASSERT_TRUE(ConvertToF32(w, absl::MakeSpan(got)).ok());
  EXPECT_EQ(got, (std::vector<float>{1.0f, -2.0f, 448.0f, std::ldexp(1.0f, -9), 0.0f}));
  // One byte an element: a 5-element tensor of 10 bytes is corrupt.
  ExpectParseError(
      Image(R"({"w": {"dtype": "F8_E4M3", "shape": [5], "data_offsets": [0, 10]}})", 10),
      "tensor 'w'");
}

TEST(SafetensorsTest, WriteThenReadRoundTrips) {
  const std::string path = fs::temp_directory_path() / ("rankd_rt_" + std::to_string(::getpid()));
  const std::vector<float> a = {1, 2, 3, 4, 5, 6};
  const std::vector<uint16_t> b = {F32ToBf16(0.5f), F32ToBf16(-3.0f), F32ToBf16(7.25f)};
  const TensorToWrite tensors[] = {{"a", DType::kF32, {2, 3}, a.data(), 24},
                                   {"b", DType::kBF16, {3}, b.data(), 6}};
  ASSERT_TRUE(WriteSafetensors(path, tensors, {{"format", "pt"}}).ok());
  auto f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  std::vector<float> got(3);
  ASSERT_TRUE(ConvertToF32((*f)->tensors().at("b"), absl::MakeSpan(got)).ok());
  EXPECT_EQ(got, (std::vector<float>{0.5f, -3.0f, 7.25f}));
  std::vector<float> got_a(6);
  ASSERT_TRUE(ConvertToF32((*f)->tensors().at("a"), absl::MakeSpan(got_a)).ok());
  EXPECT_EQ(got_a, a);
  const TensorToWrite bad[] = {{"c", DType::kF32, {4}, a.data(), 12}};
  EXPECT_FALSE(WriteSafetensors(path, bad).ok());
  fs::remove(path);
}

TEST(SafetensorsTest, ShardedBf16ModelLoads) {
  auto st = SafetensorsModel::OpenDir(rankd::testing::ModelDir("qwen2-mqa-cls"));
  ASSERT_TRUE(st.ok()) << st.status();
  auto t = (*st)->Find("model.layers.1.self_attn.q_proj.bias");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ((*t)->dtype, DType::kBF16);
  EXPECT_EQ((*st)->Find("nope").status().code(), absl::StatusCode::kNotFound);
}

class BadModelDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("rankd_bad_model_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  void CopyFrom(const std::string& model) {
    for (const auto& e : fs::directory_iterator(rankd::testing::ModelDir(model))) {
      fs::copy_file(e.path(), dir_ / e.path().filename());
    }
  }
  fs::path dir_;
};

TEST_F(BadModelDirTest, TruncatedFileNamesFileAndTensor) {
  CopyFrom("llama-cls");
  fs::resize_file(dir_ / "model.safetensors", fs::file_size(dir_ / "model.safetensors") - 100);
  auto st = SafetensorsModel::OpenDir(dir_.string());
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.status().message().find("model.safetensors: tensor '"), std::string::npos)
      << st.status();
}

TEST_F(BadModelDirTest, MissingShardAndMissingWeights) {
  CopyFrom("qwen2-mqa-cls");
  fs::remove(dir_ / "model-00002-of-00002.safetensors");
  auto st = SafetensorsModel::OpenDir(dir_.string());
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.status().message().find("model-00002-of-00002.safetensors"), std::string::npos);
  fs::remove(dir_ / "model.safetensors.index.json");
  fs::remove(dir_ / "model-00001-of-00002.safetensors");
  EXPECT_EQ(SafetensorsModel::OpenDir(dir_.string()).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(BadModelDirTest, ShapeMismatchNamesTheTensor) {
  CopyFrom("llama-cls");
  // Claim a wider MLP than the weights have.
  std::ifstream in(dir_ / "config.json");
  std::string cfg((std::istreambuf_iterator<char>(in)), {});
  in.close();
  cfg.replace(cfg.find("\"intermediate_size\": 176"), 24, "\"intermediate_size\": 177");
  std::ofstream(dir_ / "config.json") << cfg;
  auto config = ModelConfig::FromHfDir(dir_.string());
  ASSERT_TRUE(config.ok());
  auto st = SafetensorsModel::OpenDir(dir_.string());
  ASSERT_TRUE(st.ok());
  auto bound = BindTensors(*config, **st);
  ASSERT_FALSE(bound.ok());
  EXPECT_NE(
      bound.status().message().find("model.layers.0.mlp.gate_proj.weight' has shape [176, 64]"),
      std::string::npos)
      << bound.status();
}

// fp8 checkpoints' weight scales: per tensor, per row ([rows] or [rows, 1]), in F32 or BF16; a
// weight that is not fp8 has none; missing, misshapen and block-wise scales are errors naming the
// tensor.
class Fp8ScalesTest : public BadModelDirTest {
 protected:
  // One F8_E4M3 weight "w.weight" [3, 2] with the given scale tensors.
  absl::StatusOr<std::vector<float>> Scales(std::vector<TensorToWrite> scales) {
    static const uint8_t kCodes[6] = {0x38, 0x38, 0x38, 0x38, 0x38, 0x38};
    static const float kF32[3] = {0.5f, 2.0f, 0.25f};
    scales.insert(scales.begin(), TensorToWrite{"w.weight", DType::kF8E4M3, {3, 2}, kCodes, 6});
    scales.push_back({"b.weight", DType::kF32, {3}, kF32, 12});
    const std::string path = (dir_ / "model.safetensors").string();
    RANKD_RETURN_IF_ERROR(WriteSafetensors(path, scales));
    RANKD_ASSIGN_OR_RETURN(st_, SafetensorsModel::OpenDir(dir_.string()));
    RANKD_ASSIGN_OR_RETURN(const TensorView* plain, st_->Find("b.weight"));
    RANKD_ASSIGN_OR_RETURN(std::vector<float> none, Fp8RowScales(*st_, *plain));
    EXPECT_TRUE(none.empty()) << "an F32 weight has no fp8 scales";
    RANKD_ASSIGN_OR_RETURN(const TensorView* w, st_->Find("w.weight"));
    return Fp8RowScales(*st_, *w);
  }
  std::unique_ptr<SafetensorsModel> st_;
};

TEST_F(Fp8ScalesTest, PerTensorAndPerRow) {
  const float one[1] = {0.125f};
  const float rows[3] = {0.5f, 2.0f, 0.25f};
  const uint16_t rows_bf16[3] = {F32ToBf16(0.5f), F32ToBf16(2.0f), F32ToBf16(0.25f)};
  auto per_tensor = Scales({{"w.weight_scale", DType::kF32, {}, one, 4}});
  ASSERT_TRUE(per_tensor.ok()) << per_tensor.status();
  EXPECT_EQ(*per_tensor, (std::vector<float>{0.125f, 0.125f, 0.125f}));
  auto per_row = Scales({{"w.weight_scale", DType::kF32, {3}, rows, 12}});
  ASSERT_TRUE(per_row.ok()) << per_row.status();
  EXPECT_EQ(*per_row, (std::vector<float>{0.5f, 2.0f, 0.25f}));
  auto per_row_column = Scales({{"w.weight_scale", DType::kBF16, {3, 1}, rows_bf16, 6},
                                {"w.input_scale", DType::kF32, {}, one, 4}});
  ASSERT_TRUE(per_row_column.ok()) << per_row_column.status();
  EXPECT_EQ(*per_row_column, (std::vector<float>{0.5f, 2.0f, 0.25f}));
}

TEST_F(Fp8ScalesTest, MissingMisshapenAndBlockwiseScalesAreRefused) {
  const float two[2] = {1, 1};
  auto missing = Scales({});
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(missing.status().message().find("no 'w.weight_scale'"), std::string::npos)
      << missing.status();
  auto misshapen = Scales({{"w.weight_scale", DType::kF32, {2}, two, 8}});
  EXPECT_EQ(misshapen.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(misshapen.status().message().find("tensor 'w.weight_scale' is F32 [2]"),
            std::string::npos)
      << misshapen.status();
  auto blockwise = Scales({{"w.weight_scale_inv", DType::kF32, {1, 1}, two, 4}});
  EXPECT_EQ(blockwise.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(blockwise.status().message().find("'w.weight_scale_inv': block-wise"),
            std::string::npos)
      << blockwise.status();
}

}  // namespace
}  // namespace rankd::model
