// Every golden case of every model in tests/data/models, through the Engine on the CPU backend:
// token ids equal HF's exactly, scores within 1e-4 * max(1, |ref|) (tests/data/README.md).
#include "tests/common/golden.h"

#include <gtest/gtest.h>

#include "rankd/backend/registry.h"
#include "rankd/engine/engine.h"

namespace rankd::engine {
namespace {

using rankd::testing::Golden;
using rankd::testing::LoadGolden;
using rankd::testing::WithinF32Tolerance;

std::unique_ptr<Engine> MakeEngine(const Golden& g, int max_batch_tokens = 8192) {
  EngineOptions o;
  o.model_dir = g.model_dir;
  o.settings.head = g.head;
  if (g.query_template) o.settings.query_template = *g.query_template;
  if (g.item_template) o.settings.item_template = *g.item_template;
  o.backend.threads = 2;
  o.backend.max_batch_tokens = max_batch_tokens;
  auto engine = Engine::Create(o, backend::CreateBackend);
  EXPECT_TRUE(engine.ok()) << engine.status();
  return engine.ok() ? *std::move(engine) : nullptr;
}

class GoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenTest, TokenIdsMatchHf) {
  const Golden g = LoadGolden(GetParam());
  auto engine = MakeEngine(g);
  ASSERT_NE(engine, nullptr);
  for (const auto& c : g.cases) {
    auto prefix = engine->EncodeQuery(c.query);
    ASSERT_TRUE(prefix.ok()) << prefix.status();
    EXPECT_EQ(*prefix, c.prefix_ids) << "query: " << c.query;
    std::vector<Item> items;
    for (const auto& it : c.items) items.push_back(Item::Text(it.text));
    auto batch = engine->EncodeItems(items);
    ASSERT_TRUE(batch.ok()) << batch.status();
    for (size_t i = 0; i < c.items.size(); ++i) {
      std::vector<int32_t> got(batch->tokens.begin() + batch->offsets[i],
                               batch->tokens.begin() + batch->offsets[i + 1]);
      EXPECT_EQ(got, c.items[i].ids) << "item: " << c.items[i].text;
    }
  }
}

// Text items, scored from the query text.
TEST_P(GoldenTest, TextItemScores) {
  const Golden g = LoadGolden(GetParam());
  auto engine = MakeEngine(g);
  ASSERT_NE(engine, nullptr);
  int checked = 0;
  for (const auto& c : g.cases) {
    ScoreRequest req;
    req.query = c.query;
    for (const auto& it : c.items) req.items.push_back(Item::Text(it.text));
    auto r = engine->Score(req);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->scores.size(), c.items.size());
    EXPECT_EQ(r->prefix_tokens, static_cast<int>(c.prefix_ids.size()));
    for (size_t i = 0; i < c.items.size(); ++i, ++checked) {
      EXPECT_PRED2(WithinF32Tolerance, r->scores[i], c.items[i].score)
          << "query '" << c.query << "' item " << i;
    }
  }
  EXPECT_GT(checked, 0);
}

// Id items with query_ids: the ids are used verbatim.
TEST_P(GoldenTest, IdItemScores) {
  const Golden g = LoadGolden(GetParam());
  auto engine = MakeEngine(g, /*max_batch_tokens=*/64);  // also exercises the batch split
  ASSERT_NE(engine, nullptr);
  int checked = 0;
  for (const auto& c : g.cases) {
    ScoreRequest req;
    req.query_ids = c.prefix_ids;
    for (const auto& it : c.items) req.items.push_back(Item::Ids(it.ids));
    auto r = engine->Score(req);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->scores.size(), c.items.size());
    for (size_t i = 0; i < c.items.size(); ++i, ++checked) {
      EXPECT_PRED2(WithinF32Tolerance, r->scores[i], c.items[i].score) << "item " << i;
    }
  }
  EXPECT_GT(checked, 0);
}

TEST_P(GoldenTest, EmbeddingItemScores) {
  const Golden g = LoadGolden(GetParam());
  if (g.embedding_cases.empty()) GTEST_SKIP() << "no embedding cases for " << GetParam();
  auto engine = MakeEngine(g);
  ASSERT_NE(engine, nullptr);
  int checked = 0;
  for (const auto& c : g.embedding_cases) {
    ScoreRequest req;
    req.query_ids = c.prefix_ids;
    for (const auto& it : c.items) req.items.push_back(Item::Embedding(it.embedding));
    auto r = engine->Score(req);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->scores.size(), c.items.size());
    for (size_t i = 0; i < c.items.size(); ++i, ++checked) {
      EXPECT_PRED2(WithinF32Tolerance, r->scores[i], c.items[i].score) << "item " << i;
    }
  }
  EXPECT_GT(checked, 0);
}

INSTANTIATE_TEST_SUITE_P(AllModels, GoldenTest,
                         ::testing::ValuesIn(rankd::testing::GoldenModelNames()),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n) ch = isalnum(ch) ? ch : '_';
                           return n;
                         });

}  // namespace
}  // namespace rankd::engine
