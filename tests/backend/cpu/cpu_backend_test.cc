// The CPU backend through the Backend interface, without the engine: golden scores (HF float32)
// from EncodePrefix + ScoreItems for every model in tests/data/models, ScoreGroups against
// ScoreItems, an empty prefix, embedding items against the embedding-table rows of the same ids,
// the batches ScoreItems / EncodePrefix refuse, and an fp8 checkpoint against its dequantised twin.
#include "rankd/backend/cpu/cpu_backend.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <vector>

#include "rankd/common/field_error.h"
#include "rankd/engine/engine.h"
#include "rankd/model/config.h"
#include "rankd/model/safetensors.h"
#include "rankd/model/weights.h"
#include "tests/common/golden.h"

namespace rankd::cpu {
namespace {

using backend::Backend;
using backend::ItemBatch;
using backend::PrefixState;
using rankd::testing::Golden;
using rankd::testing::GoldenCase;
using rankd::testing::LoadGolden;
using rankd::testing::WithinF32Tolerance;

std::unique_ptr<Backend> MakeBackend(const Golden& g, int threads = 2) {
  auto config = model::ModelConfig::FromHfDir(g.model_dir);
  EXPECT_TRUE(config.ok()) << config.status();
  if (!config.ok()) return nullptr;
  auto head = engine::ParseHeadSpec(g.head, *config, /*tok=*/nullptr);
  EXPECT_TRUE(head.ok()) << head.status();
  if (!head.ok()) return nullptr;
  backend::BackendOptions options;
  options.threads = threads;
  auto backend = CreateCpuBackend(options, g.model_dir, *head);
  EXPECT_TRUE(backend.ok()) << backend.status();
  return backend.ok() ? *std::move(backend) : nullptr;
}

ItemBatch IdItems(const GoldenCase& c) {
  ItemBatch b;
  for (const auto& it : c.items) b.AddIds(it.ids);
  return b;
}

std::shared_ptr<const PrefixState> Encode(Backend& backend, const std::vector<int32_t>& ids) {
  auto prefix = backend.EncodePrefix(ids);
  EXPECT_TRUE(prefix.ok()) << prefix.status();
  return prefix.ok() ? *prefix : nullptr;
}

std::vector<float> Score(Backend& backend, const PrefixState& prefix, const ItemBatch& items) {
  std::vector<float> scores(items.num_items(), NAN);
  const absl::Status s = backend.ScoreItems(prefix, items, absl::MakeSpan(scores));
  EXPECT_TRUE(s.ok()) << s;
  return scores;
}

// The float32 embedding table [V, H] of the model, as the backend loads it.
std::vector<float> EmbeddingTable(const std::string& model_dir) {
  auto config = model::ModelConfig::FromHfDir(model_dir);
  auto st = model::SafetensorsModel::OpenDir(model_dir);
  EXPECT_TRUE(config.ok() && st.ok());
  auto tensors = model::BindTensors(*config, **st);
  EXPECT_TRUE(tensors.ok()) << tensors.status();
  std::vector<float> table(tensors->embed->numel());
  EXPECT_TRUE(model::ConvertToF32(*tensors->embed, absl::MakeSpan(table)).ok());
  return table;
}

class CpuBackendGoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(CpuBackendGoldenTest, ScoresMatchHf) {
  const Golden g = LoadGolden(GetParam());
  auto backend = MakeBackend(g);
  ASSERT_NE(backend, nullptr);
  EXPECT_EQ(backend->name(), "cpu");
  int checked = 0;
  for (const GoldenCase& c : g.cases) {
    auto prefix = Encode(*backend, c.prefix_ids);
    ASSERT_NE(prefix, nullptr);
    EXPECT_EQ(prefix->num_tokens(), static_cast<int>(c.prefix_ids.size()));
    const std::vector<float> scores = Score(*backend, *prefix, IdItems(c));
    for (size_t i = 0; i < c.items.size(); ++i, ++checked) {
      EXPECT_PRED2(WithinF32Tolerance, scores[i], c.items[i].score)
          << "query '" << c.query << "' item " << i;
    }
  }
  const int hidden = backend->config().hidden_size;
  for (const GoldenCase& c : g.embedding_cases) {
    auto prefix = Encode(*backend, c.prefix_ids);
    ASSERT_NE(prefix, nullptr);
    ItemBatch items;
    for (const auto& it : c.items) items.AddEmbeddings(it.embedding, hidden);
    const std::vector<float> scores = Score(*backend, *prefix, items);
    for (size_t i = 0; i < c.items.size(); ++i, ++checked) {
      EXPECT_PRED2(WithinF32Tolerance, scores[i], c.items[i].score) << "embedding item " << i;
    }
  }
  EXPECT_GT(checked, 0);
}

// Every case's items as one group of a single ScoreGroups call: the same scores, bit for bit, as
// ScoreItems on each case alone.
TEST_P(CpuBackendGoldenTest, ScoreGroupsEqualsScoreItemsPerGroup) {
  const Golden g = LoadGolden(GetParam());
  auto backend = MakeBackend(g);
  ASSERT_NE(backend, nullptr);
  std::vector<std::shared_ptr<const PrefixState>> prefixes;
  std::vector<ItemBatch> batches;
  for (const GoldenCase& c : g.cases) {
    prefixes.push_back(Encode(*backend, c.prefix_ids));
    ASSERT_NE(prefixes.back(), nullptr);
    batches.push_back(IdItems(c));
  }
  std::vector<std::vector<float>> grouped(g.cases.size());
  std::vector<Backend::ScoreGroup> groups;
  for (size_t k = 0; k < g.cases.size(); ++k) {
    grouped[k].assign(batches[k].num_items(), NAN);
    groups.push_back({prefixes[k].get(), &batches[k], absl::MakeSpan(grouped[k])});
  }
  ASSERT_TRUE(backend->ScoreGroups(groups).ok());
  for (size_t k = 0; k < g.cases.size(); ++k) {
    EXPECT_EQ(grouped[k], Score(*backend, *prefixes[k], batches[k])) << "group " << k;
  }
}

// With an empty prefix, an item holding the whole sequence (prefix ids ++ item ids) scores what
// HF gives that sequence.
TEST_P(CpuBackendGoldenTest, EmptyPrefix) {
  const Golden g = LoadGolden(GetParam());
  auto backend = MakeBackend(g);
  ASSERT_NE(backend, nullptr);
  auto empty = Encode(*backend, {});
  ASSERT_NE(empty, nullptr);
  EXPECT_EQ(empty->num_tokens(), 0);
  for (const GoldenCase& c : g.cases) {
    ItemBatch items;
    for (const auto& it : c.items) {
      std::vector<int32_t> whole = c.prefix_ids;
      whole.insert(whole.end(), it.ids.begin(), it.ids.end());
      items.AddIds(whole);
    }
    const std::vector<float> scores = Score(*backend, *empty, items);
    for (size_t i = 0; i < c.items.size(); ++i) {
      EXPECT_PRED2(WithinF32Tolerance, scores[i], c.items[i].score)
          << "query '" << c.query << "' item " << i;
    }
  }
}

// Items given as the input embeddings of their ids (the embedding-table rows times the model's
// embedding scale, sqrt(hidden) for Gemma) score exactly as the ids do: both give the same
// float32 rows.
TEST_P(CpuBackendGoldenTest, EmbeddingRowsOfIdsScoreAsTheIds) {
  const Golden g = LoadGolden(GetParam());
  auto backend = MakeBackend(g);
  ASSERT_NE(backend, nullptr);
  const int hidden = backend->config().hidden_size;
  const std::vector<float> table = EmbeddingTable(g.model_dir);
  for (const GoldenCase& c : g.cases) {
    auto prefix = Encode(*backend, c.prefix_ids);
    ASSERT_NE(prefix, nullptr);
    ItemBatch as_rows;
    for (const auto& it : c.items) {
      std::vector<float> rows;
      for (int32_t id : it.ids) {
        rows.insert(rows.end(), table.begin() + static_cast<int64_t>(id) * hidden,
                    table.begin() + static_cast<int64_t>(id + 1) * hidden);
      }
      for (float& v : rows) v *= backend->config().embedding_scale();
      as_rows.AddEmbeddings(rows, hidden);
    }
    EXPECT_EQ(Score(*backend, *prefix, as_rows), Score(*backend, *prefix, IdItems(c)))
        << "query '" << c.query << "'";
  }
}

INSTANTIATE_TEST_SUITE_P(AllModels, CpuBackendGoldenTest,
                         ::testing::ValuesIn(rankd::testing::GoldenModelNames()),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n) ch = isalnum(ch) ? ch : '_';
                           return n;
                         });

// A PrefixState that no CPU backend made.
class ForeignPrefix final : public PrefixState {
 public:
  int num_tokens() const override { return 0; }
  size_t bytes() const override { return 0; }
};

class CpuBackendErrorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    backend_ = MakeBackend(LoadGolden("llama-cls"), /*threads=*/1);
    ASSERT_NE(backend_, nullptr);
    prefix_ = Encode(*backend_, {1, 763, 593});
    ASSERT_NE(prefix_, nullptr);
  }
  // ScoreItems' status on `items`, with one score slot per item unless `slots` says otherwise.
  absl::Status ScoreStatus(const ItemBatch& items, int slots = -1) {
    std::vector<float> scores(slots < 0 ? items.num_items() : slots);
    return backend_->ScoreItems(*prefix_, items, absl::MakeSpan(scores));
  }
  int vocab() const { return backend_->config().vocab_size; }
  int hidden() const { return backend_->config().hidden_size; }

  std::unique_ptr<Backend> backend_;
  std::shared_ptr<const PrefixState> prefix_;
};

TEST_F(CpuBackendErrorsTest, ValidBatchScores) {
  ItemBatch items;
  items.AddIds({5, 6});
  items.AddEmbeddings(std::vector<float>(2 * hidden(), 0.5f), hidden());
  EXPECT_TRUE(ScoreStatus(items).ok());
}

TEST_F(CpuBackendErrorsTest, ItemWithNoTokens) {
  ItemBatch items;
  items.AddIds({5, 6});
  items.AddIds({});
  const absl::Status s = ScoreStatus(items);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "item 1 has no tokens");
}

TEST_F(CpuBackendErrorsTest, IdOutsideVocabulary) {
  ItemBatch items;
  items.AddIds({5, vocab()});
  const absl::Status s = ScoreStatus(items);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "item 0 token 1: id " + std::to_string(vocab()) +
                             " is outside the vocabulary (vocab_size " + std::to_string(vocab()) +
                             ")");
}

TEST_F(CpuBackendErrorsTest, EmbeddingRowOutOfRange) {
  ItemBatch items;
  items.AddEmbeddings(std::vector<float>(hidden(), 0.5f), hidden());  // row 0: token -1
  items.AddIds({5});
  items.tokens.back() = -2;  // row 1, which does not exist
  const absl::Status s = ScoreStatus(items);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "item 1 token 0: embedding row 1 is outside the batch's 1 rows");
}

TEST_F(CpuBackendErrorsTest, ScoreSlotsMustMatchItems) {
  ItemBatch items;
  items.AddIds({5});
  items.AddIds({6});
  EXPECT_EQ(ScoreStatus(items, /*slots=*/1).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(CpuBackendErrorsTest, PrefixOfAnotherBackend) {
  ItemBatch items;
  items.AddIds({5});
  std::vector<float> scores(1);
  const absl::Status s = backend_->ScoreItems(ForeignPrefix(), items, absl::MakeSpan(scores));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(CpuBackendErrorsTest, PrefixIdOutsideVocabulary) {
  const absl::Status s = backend_->EncodePrefix({1, vocab()}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "prefix token 1: id " + std::to_string(vocab()) +
                             " is outside the vocabulary (vocab_size " + std::to_string(vocab()) +
                             ")");
  EXPECT_EQ(backend_->EncodePrefix({-1}).status().code(), absl::StatusCode::kInvalidArgument);
}

// The boundary's checks are assertions on a prepared batch, in the backend's words: no field of a
// caller's request to render (that is the front end's validation, or Engine::Prepare).
TEST_F(CpuBackendErrorsTest, AssertionsCarryNoFieldError) {
  ItemBatch items;
  items.AddIds({5, vocab()});
  EXPECT_FALSE(GetFieldError(ScoreStatus(items)).has_value());
  EXPECT_FALSE(GetFieldError(backend_->EncodePrefix({vocab()}).status()).has_value());
}

// Hostile batches: the most negative id (an embedding row far past the batch's), offsets that do
// not cover the tokens.
TEST_F(CpuBackendErrorsTest, HostileBatchesAreRefusedBeforeAnyRead) {
  ItemBatch items;
  items.AddIds({5, INT32_MIN});
  absl::Status s = ScoreStatus(items);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "item 0 token 1: embedding row 2147483647 is outside the batch's 0 rows");
  items.Clear();
  items.AddIds({5, 6});
  items.offsets.back() = 7;
  EXPECT_EQ(ScoreStatus(items).message(), "item offsets do not cover the tokens");
}

TEST(ItemBatchTest, SliceRenumbersEmbeddingRows) {
  constexpr int kHidden = 2;
  ItemBatch all;
  all.AddEmbeddings({1, 2, 3, 4}, kHidden);  // rows 0, 1
  all.AddIds({7, 8});
  all.AddEmbeddings({5, 6}, kHidden);  // row 2
  const ItemBatch tail = all.Slice(1, 3, kHidden);
  EXPECT_EQ(tail.num_items(), 2);
  EXPECT_EQ(tail.tokens, (std::vector<int32_t>{7, 8, -1}));
  EXPECT_EQ(tail.offsets, (std::vector<int32_t>{0, 2, 3}));
  EXPECT_EQ(tail.embeddings, (std::vector<float>{5, 6}));
  EXPECT_EQ(all.Slice(0, 1, kHidden).embeddings, (std::vector<float>{1, 2, 3, 4}));
}

// precision is the CUDA backend's setting: the float32 reference refuses fp8, naming it.
TEST(CpuBackendOptions, Fp8PrecisionIsRefused) {
  const Golden g = LoadGolden("llama-cls");
  auto config = model::ModelConfig::FromHfDir(g.model_dir);
  ASSERT_TRUE(config.ok()) << config.status();
  auto head = engine::ParseHeadSpec(g.head, *config, /*tok=*/nullptr);
  ASSERT_TRUE(head.ok()) << head.status();
  backend::BackendOptions options;
  options.precision = "fp8";
  auto backend = CreateCpuBackend(options, g.model_dir, *head);
  EXPECT_EQ(backend.status().code(), absl::StatusCode::kInvalidArgument) << backend.status();
  EXPECT_NE(backend.status().message().find("precision 'fp8'"), std::string::npos)
      << backend.status();
}

// An fp8 checkpoint (F8_E4M3 linear weights: per-row weight_scale, o_proj's per tensor) scores
// exactly like its twin that stores the dequantised values (q * scale, in F32): the backend
// dequantises by the same product. Codes here are the nearest e4m3 values, found by search.
TEST(CpuBackendFp8, Fp8CheckpointScoresAsItsDequantisedTwin) {
  const Golden g = LoadGolden("llama-cls");
  namespace fs = std::filesystem;
  const fs::path root = fs::temp_directory_path() / ("rankd_cpu_fp8_" + std::to_string(::getpid()));
  const fs::path fp8_dir = root / "fp8", twin_dir = root / "twin";
  fs::create_directories(fp8_dir);
  fs::create_directories(twin_dir);
  auto config = model::ModelConfig::FromHfDir(g.model_dir);
  auto st = model::SafetensorsModel::OpenDir(g.model_dir);
  ASSERT_TRUE(config.ok() && st.ok());
  auto bound = model::BindTensors(*config, **st);
  ASSERT_TRUE(bound.ok()) << bound.status();
  std::set<std::string> linear, per_tensor;
  for (const model::LayerTensors& l : bound->layers) {
    for (const model::TensorView* t :
         {l.q_proj, l.k_proj, l.v_proj, l.o_proj, l.gate_proj, l.up_proj, l.down_proj}) {
      linear.insert(t->name);
    }
    per_tensor.insert(l.o_proj->name);
  }
  auto file = model::SafetensorsFile::Open(g.model_dir + "/model.safetensors");
  ASSERT_TRUE(file.ok()) << file.status();
  std::deque<std::vector<uint8_t>> codes;
  std::deque<std::vector<float>> floats;
  std::vector<model::TensorToWrite> fp8_tensors, twin_tensors;
  for (const auto& [name, t] : (*file)->tensors()) {
    if (!linear.count(name)) {
      fp8_tensors.push_back({name, t.dtype, t.shape, t.data, t.nbytes});
      twin_tensors.push_back({name, t.dtype, t.shape, t.data, t.nbytes});
      continue;
    }
    std::vector<float> w(t.numel());
    ASSERT_TRUE(model::ConvertToF32(t, absl::MakeSpan(w)).ok());
    const int64_t rows = t.shape[0], cols = t.shape[1];
    const bool one_scale = per_tensor.count(name) > 0;
    std::vector<float> scales(rows);
    for (int64_t r = 0; r < rows; ++r) {
      float amax = 0;
      for (int64_t c = one_scale ? 0 : r * cols; c < (one_scale ? rows : r + 1) * cols; ++c) {
        amax = std::max(amax, std::abs(w[c]));
      }
      scales[r] = amax > 0 ? amax / 448 : 1;
    }
    std::vector<uint8_t> q(w.size());
    std::vector<float> deq(w.size());
    for (size_t i = 0; i < w.size(); ++i) {
      const float s = scales[i / cols], v = w[i] / s;
      uint8_t best = 0;
      for (int c = 0; c < 256; ++c) {
        if ((c & 0x7f) == 0x7f) continue;  // NaN
        if (std::abs(model::F8E4M3ToF32(c) - v) < std::abs(model::F8E4M3ToF32(best) - v)) {
          best = static_cast<uint8_t>(c);
        }
      }
      q[i] = best;
      deq[i] = model::F8E4M3ToF32(best) * s;
    }
    codes.push_back(std::move(q));
    fp8_tensors.push_back({name, model::DType::kF8E4M3, t.shape, codes.back().data(), w.size()});
    floats.push_back(one_scale ? std::vector<float>{scales[0]} : scales);
    fp8_tensors.push_back({name + "_scale", model::DType::kF32,
                           one_scale ? std::vector<int64_t>{} : std::vector<int64_t>{rows},
                           floats.back().data(), floats.back().size() * sizeof(float)});
    floats.push_back(std::move(deq));
    twin_tensors.push_back(
        {name, model::DType::kF32, t.shape, floats.back().data(), w.size() * sizeof(float)});
  }
  ASSERT_TRUE(model::WriteSafetensors((fp8_dir / "model.safetensors").string(), fp8_tensors).ok());
  ASSERT_TRUE(
      model::WriteSafetensors((twin_dir / "model.safetensors").string(), twin_tensors).ok());
  for (const fs::path& d : {fp8_dir, twin_dir}) {
    fs::copy_file(fs::path(g.model_dir) / "config.json", d / "config.json");
  }
  Golden fp8_g = g, twin_g = g;
  fp8_g.model_dir = fp8_dir.string();
  twin_g.model_dir = twin_dir.string();
  auto fp8 = MakeBackend(fp8_g), twin = MakeBackend(twin_g);
  ASSERT_TRUE(fp8 && twin);
  int n = 0;
  for (const auto& c : g.cases) {
    const std::vector<float> a = Score(*fp8, *Encode(*fp8, c.prefix_ids), IdItems(c));
    const std::vector<float> b = Score(*twin, *Encode(*twin, c.prefix_ids), IdItems(c));
    EXPECT_EQ(a, b) << "query '" << c.query << "'";
    n += static_cast<int>(a.size());
  }
  EXPECT_GT(n, 0);
  fs::remove_all(root);
}

}  // namespace
}  // namespace rankd::cpu
