// Scoring invariants of the CPU backend on fresh random inputs: a score depends only on the prefix
// and the item, not on how the work is split or what else is in the batch.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "rankd/backend/backend.h"
#include "rankd/backend/registry.h"
#include "rankd/model/safetensors.h"
#include "tests/common/golden.h"

namespace rankd::engine {
namespace {

void ExpectClose(float a, float b, const std::string& what) {
  EXPECT_NEAR(a, b, 2e-5 * std::max(1.0f, std::abs(b))) << what;
}

struct Fixture {
  std::unique_ptr<backend::Backend> backend;
  std::mt19937 rng{1234};

  explicit Fixture(const std::string& model, const std::string& head) {
    auto config = model::ModelConfig::FromHfDir(rankd::testing::ModelDir(model));
    EXPECT_TRUE(config.ok());
    backend::HeadSpec h;
    if (head.rfind("yes_no", 0) == 0) {
      h.type = backend::HeadSpec::Type::kYesNo;
      h.yes_id = 4;
      h.no_id = 5;
    }
    backend::BackendOptions o;
    o.threads = 2;
    auto b = backend::CreateBackend(o, rankd::testing::ModelDir(model), h);
    EXPECT_TRUE(b.ok()) << b.status();
    backend = *std::move(b);
  }

  std::vector<int32_t> RandomIds(int n) {
    std::uniform_int_distribution<int32_t> d(0, backend->config().vocab_size - 1);
    std::vector<int32_t> ids(n);
    for (auto& id : ids) id = d(rng);
    return ids;
  }

  std::vector<float> Score(absl::Span<const int32_t> prefix,
                           const std::vector<std::vector<int32_t>>& items) {
    auto p = backend->EncodePrefix(prefix);
    EXPECT_TRUE(p.ok()) << p.status();
    backend::ItemBatch batch;
    for (const auto& it : items) batch.AddIds(it);
    std::vector<float> scores(items.size());
    auto s = backend->ScoreItems(**p, batch, absl::MakeSpan(scores));
    EXPECT_TRUE(s.ok()) << s;
    return scores;
  }
};

class InvariantsTest : public ::testing::TestWithParam<std::pair<std::string, std::string>> {};

TEST_P(InvariantsTest, PrefixCachedEqualsFromScratch) {
  Fixture f(GetParam().first, GetParam().second);
  for (int trial = 0; trial < 3; ++trial) {
    const auto prefix = f.RandomIds(1 + trial * 7);
    const auto item = f.RandomIds(5 + trial * 3);
    const float cached = f.Score(prefix, {item})[0];
    std::vector<int32_t> whole = prefix;
    whole.insert(whole.end(), item.begin(), item.end());
    const float scratch = f.Score({}, {whole})[0];
    ExpectClose(cached, scratch, "cached vs from scratch");
    // Any split point gives the same score.
    const size_t cut = prefix.size() + item.size() / 2;
    std::vector<int32_t> head(whole.begin(), whole.begin() + cut),
        tail(whole.begin() + cut, whole.end());
    ExpectClose(f.Score(head, {tail})[0], scratch, "split at " + std::to_string(cut));
  }
}

TEST_P(InvariantsTest, ScoresIndependentOfBatchCompositionAndOrder) {
  Fixture f(GetParam().first, GetParam().second);
  const auto prefix = f.RandomIds(9);
  std::vector<std::vector<int32_t>> items;
  for (int len : {1, 13, 4, 27, 2, 8}) items.push_back(f.RandomIds(len));
  const auto together = f.Score(prefix, items);
  for (size_t i = 0; i < items.size(); ++i) {
    ExpectClose(f.Score(prefix, {items[i]})[0], together[i], "alone, item " + std::to_string(i));
  }
  std::vector<size_t> order(items.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), f.rng);
  std::vector<std::vector<int32_t>> shuffled;
  for (size_t i : order) shuffled.push_back(items[i]);
  shuffled.push_back(f.RandomIds(40));  // and a stranger in the batch
  const auto s = f.Score(prefix, shuffled);
  for (size_t j = 0; j < order.size(); ++j) {
    ExpectClose(s[j], together[order[j]], "shuffled, item " + std::to_string(order[j]));
  }
}

TEST_P(InvariantsTest, EmbeddingRowsEqualTheirTokenEmbeddings) {
  // An embedding item whose rows are the model's own token embeddings scores like the ids.
  Fixture f(GetParam().first, GetParam().second);
  const std::string dir = rankd::testing::ModelDir(GetParam().first);
  auto st = model::SafetensorsModel::OpenDir(dir);
  ASSERT_TRUE(st.ok());
  auto embed = (*st)->Find("model.embed_tokens.weight");
  ASSERT_TRUE(embed.ok());
  const int H = f.backend->config().hidden_size;
  std::vector<float> table((*embed)->numel());
  ASSERT_TRUE(model::ConvertToF32(**embed, absl::MakeSpan(table)).ok());
  const auto prefix = f.RandomIds(6);
  const auto ids = f.RandomIds(5);
  std::vector<float> rows;
  for (int32_t id : ids)
    rows.insert(rows.end(), table.begin() + id * H, table.begin() + (id + 1) * H);
  auto p = f.backend->EncodePrefix(prefix);
  ASSERT_TRUE(p.ok());
  backend::ItemBatch batch;
  batch.AddIds(ids);
  batch.AddEmbeddings(rows, H);
  batch.AddIds(ids);
  std::vector<float> s(3);
  ASSERT_TRUE(f.backend->ScoreItems(**p, batch, absl::MakeSpan(s)).ok());
  ExpectClose(s[1], s[0], "embedding rows vs ids");
  ExpectClose(s[2], s[0], "ids after an embedding item");
}

TEST_P(InvariantsTest, RejectsBadBatches) {
  Fixture f(GetParam().first, GetParam().second);
  auto p = f.backend->EncodePrefix(f.RandomIds(3));
  ASSERT_TRUE(p.ok());
  backend::ItemBatch batch;
  batch.AddIds({static_cast<int32_t>(f.backend->config().vocab_size)});
  std::vector<float> s(1);
  EXPECT_EQ(f.backend->ScoreItems(**p, batch, absl::MakeSpan(s)).code(),
            absl::StatusCode::kInvalidArgument);
  backend::ItemBatch empty_item;
  empty_item.AddIds({});
  EXPECT_EQ(f.backend->ScoreItems(**p, empty_item, absl::MakeSpan(s)).code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<float> wrong_size(2);
  backend::ItemBatch ok;
  ok.AddIds({1, 2});
  EXPECT_EQ(f.backend->ScoreItems(**p, ok, absl::MakeSpan(wrong_size)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(f.backend->EncodePrefix(std::vector<int32_t>{-1}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(
    Models, InvariantsTest,
    ::testing::Values(std::make_pair(std::string("llama-cls"), std::string("classifier")),
                      std::make_pair(std::string("llama-gqa-yesno"), std::string("yes_no")),
                      std::make_pair(std::string("qwen2-mqa-cls"), std::string("classifier")),
                      std::make_pair(std::string("qwen3-cls-wide"), std::string("classifier"))),
    [](const auto& info) {
      std::string n = info.param.first;
      for (char& ch : n) ch = isalnum(ch) ? ch : '_';
      return n;
    });

}  // namespace
}  // namespace rankd::engine
