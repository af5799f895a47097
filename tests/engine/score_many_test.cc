// Engine::ScoreMany on fresh random inputs (CPU backend): several requests scored together, with
// mixed prefixes and item kinds, split across passes, give each request the scores it gets alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "rankd/backend/registry.h"
#include "rankd/engine/engine.h"
#include "tests/common/golden.h"

namespace rankd::engine {
namespace {

// Forwards to a real backend and records the item tokens of every ScoreGroups call.
class RecordingBackend : public backend::Backend {
 public:
  explicit RecordingBackend(std::unique_ptr<backend::Backend> inner) : inner_(std::move(inner)) {}
  absl::string_view name() const override { return inner_->name(); }
  const model::ModelConfig& config() const override { return inner_->config(); }
  const backend::HeadSpec& head() const override { return inner_->head(); }
  absl::StatusOr<std::shared_ptr<const backend::PrefixState>> EncodePrefix(
      absl::Span<const int32_t> ids) override {
    return inner_->EncodePrefix(ids);
  }
  absl::Status ScoreItems(const backend::PrefixState& prefix, const backend::ItemBatch& items,
                          absl::Span<float> scores) override {
    return inner_->ScoreItems(prefix, items, scores);
  }
  absl::Status ScoreGroups(absl::Span<const ScoreGroup> groups) override {
    int tokens = 0;
    for (const ScoreGroup& g : groups) tokens += g.items->num_tokens();
    pass_tokens.push_back(tokens);
    pass_groups.push_back(static_cast<int>(groups.size()));
    return inner_->ScoreGroups(groups);
  }
  std::vector<int> pass_tokens, pass_groups;

 private:
  std::unique_ptr<backend::Backend> inner_;
};

class ScoreManyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    EngineOptions o;
    o.model_dir = rankd::testing::ModelDir("llama-cls");
    o.backend.threads = 1;
    o.backend.max_batch_tokens = kBudget;
    auto e = Engine::Create(o, backend::CreateBackend);
    ASSERT_TRUE(e.ok()) << e.status();
    engine_ = *std::move(e);
    auto head = ParseHeadSpec("classifier:0", engine_->config(), nullptr);
    ASSERT_TRUE(head.ok());
    auto reference = backend::CreateBackend(o.backend, o.model_dir, *head);
    ASSERT_TRUE(reference.ok());
    reference_ = *std::move(reference);
    hidden_ = engine_->config().hidden_size;
    vocab_ = engine_->config().vocab_size;
  }

  std::vector<int32_t> RandomIds(int n) {
    std::uniform_int_distribution<int32_t> d(4, vocab_ - 1);
    std::vector<int32_t> ids(n);
    for (auto& id : ids) id = d(rng_);
    return ids;
  }

  std::string RandomText(int words) {
    static const char* kWords[] = {"rank", "query", "item", "model", "search", "fast", "cat",
                                   "the",  "of",    "red",  "blue",  "score",  "job",  "city"};
    std::string t;
    for (int w = 0; w < words; ++w) {
      t += (w ? " " : "");
      t += kWords[rng_() % (sizeof(kWords) / sizeof(kWords[0]))];
    }
    return t;
  }

  // A request of `n` items of random kinds and lengths.
  ScoreRequest RandomRequest(int n) {
    ScoreRequest r;
    std::normal_distribution<float> normal(0, 1);
    for (int i = 0; i < n; ++i) {
      switch (rng_() % 3) {
        case 0:
          r.items.push_back(Item::Text(RandomText(1 + rng_() % 12)));
          break;
        case 1:
          r.items.push_back(Item::Ids(RandomIds(1 + rng_() % 20)));
          break;
        default: {
          std::vector<float> rows((1 + rng_() % 3) * hidden_);
          for (float& v : rows) v = normal(rng_);
          r.items.push_back(Item::Embedding(std::move(rows)));
        }
      }
    }
    return r;
  }

  // The scores of `request` alone, straight from a second backend: its own prefix pass, all
  // items in one ScoreItems call.
  std::vector<float> Reference(const ScoreRequest& request) {
    std::vector<int32_t> prefix =
        request.query_ids ? *request.query_ids : *engine_->EncodeQuery(request.query);
    auto state = reference_->EncodePrefix(prefix);
    EXPECT_TRUE(state.ok()) << state.status();
    auto items = engine_->EncodeItems(request.items);
    EXPECT_TRUE(items.ok()) << items.status();
    std::vector<float> scores(items->num_items());
    EXPECT_TRUE(reference_->ScoreItems(**state, *items, absl::MakeSpan(scores)).ok());
    if (request.apply_sigmoid) {
      for (float& s : scores) s = Sigmoid(s);
    }
    return scores;
  }

  static void ExpectScores(const std::vector<float>& got, const std::vector<float>& want,
                           size_t request) {
    ASSERT_EQ(got.size(), want.size()) << "request " << request;
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_NEAR(got[i], want[i], 2e-5 * std::max(1.0f, std::abs(want[i])))
          << "request " << request << " item " << i;
    }
  }

  static constexpr int kBudget = 48;  // item tokens per pass: most requests span several
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<backend::Backend> reference_;
  std::mt19937 rng_{20261130};
  int hidden_ = 0, vocab_ = 0;
};

TEST_F(ScoreManyTest, EachRequestGetsTheScoresItGetsAlone) {
  for (int round = 0; round < 3; ++round) {
    std::vector<ScoreRequest> requests;
    const std::vector<int32_t> shared_prefix = RandomIds(6);
    for (int r = 0; r < 7; ++r) {
      ScoreRequest req = RandomRequest(1 + rng_() % 9);
      if (r % 3 == 0) {
        req.query = RandomText(1 + r);  // a text query
      } else if (r % 3 == 1) {
        req.query_ids = shared_prefix;  // the same prefix as other requests of the batch
      } else {
        std::vector<int32_t> ids = RandomIds(1 + rng_() % 10);
        ids[0] = 1;
        req.query_ids = ids;
      }
      req.apply_sigmoid = r == 4;
      requests.push_back(std::move(req));
    }
    std::vector<PreparedRequest> prepared;
    for (const ScoreRequest& request : requests) {
      absl::StatusOr<PreparedRequest> p = engine_->Prepare(request);
      ASSERT_TRUE(p.ok()) << p.status();
      prepared.push_back(*std::move(p));
    }
    std::vector<size_t> order;
    std::vector<std::vector<float>> got(requests.size());
    engine_->ScoreMany(prepared, [&](size_t i, absl::StatusOr<ScoreResult> result) {
      ASSERT_TRUE(result.ok()) << "request " << i << ": " << result.status();
      order.push_back(i);
      got[i] = result->scores;
    });
    std::vector<size_t> in_order(requests.size());
    for (size_t i = 0; i < in_order.size(); ++i) in_order[i] = i;
    EXPECT_EQ(order, in_order);
    for (size_t i = 0; i < requests.size(); ++i) ExpectScores(got[i], Reference(requests[i]), i);
  }
}

TEST_F(ScoreManyTest, PassesStayWithinTheTokenBudgetAndSplitGroups) {
  auto recording = std::make_unique<RecordingBackend>(
      backend::CreateBackend(backend::BackendOptions{}, rankd::testing::ModelDir("llama-cls"),
                             backend::HeadSpec{})
          .value());
  RecordingBackend* rec = recording.get();
  std::vector<std::shared_ptr<const backend::PrefixState>> prefixes;
  std::vector<backend::ItemBatch> batches(4);
  std::vector<std::vector<float>> scores(4);
  std::vector<backend::Backend::ScoreGroup> groups;
  for (int g = 0; g < 4; ++g) {
    prefixes.push_back(*rec->EncodePrefix(RandomIds(3 + g)));
    for (int i = 0; i < 5; ++i) batches[g].AddIds(RandomIds(3 + (g + i) % 5));
  }
  batches[2].AddIds(RandomIds(kBudget + 9));  // longer than a pass: goes alone
  for (int g = 0; g < 4; ++g) {
    scores[g].resize(batches[g].num_items());
    groups.push_back({prefixes[g].get(), &batches[g], absl::MakeSpan(scores[g])});
  }
  std::vector<size_t> done_after;
  std::vector<PassInfo> passes;
  ASSERT_TRUE(ScoreGroupsInPasses(*rec, groups, kBudget, [&](const PassInfo& pass) {
                done_after.push_back(pass.groups_done);
                passes.push_back(pass);
              }).ok());
  ASSERT_EQ(rec->pass_tokens.size(), done_after.size());
  bool shared_pass = false;
  int group_parts = 0;
  for (size_t p = 0; p < rec->pass_tokens.size(); ++p) {
    const bool alone = rec->pass_tokens[p] == kBudget + 9;
    EXPECT_TRUE(rec->pass_tokens[p] <= kBudget || alone) << "pass " << p;
    shared_pass |= rec->pass_groups[p] > 1;
    group_parts += rec->pass_groups[p];
    if (p > 0) {
      EXPECT_GE(done_after[p], done_after[p - 1]);
    }
    EXPECT_EQ(passes[p].tokens, rec->pass_tokens[p]);
    EXPECT_EQ(passes[p].groups, rec->pass_groups[p]);
  }
  EXPECT_TRUE(shared_pass) << "no pass held items of two groups";
  EXPECT_GT(group_parts, 4) << "no group was split across passes";
  EXPECT_EQ(done_after.back(), 4u);
  for (int g = 0; g < 4; ++g) {
    std::vector<float> want(batches[g].num_items());
    ASSERT_TRUE(reference_->ScoreItems(*prefixes[g], batches[g], absl::MakeSpan(want)).ok());
    ExpectScores(scores[g], want, g);
  }
}

TEST_F(ScoreManyTest, ABadRequestFailsAloneAndItsBatchMatesAreScored) {
  std::vector<ScoreRequest> requests(4);
  for (auto& r : requests) {
    r = RandomRequest(4);
    r.query = RandomText(3);
  }
  requests[1].items[2] = Item::Ids({5, vocab_ + 3});
  requests[3].query_ids = std::vector<int32_t>{1, -2};
  auto results = engine_->ScoreMany(requests);
  ASSERT_EQ(results.size(), 4u);
  ASSERT_FALSE(results[1].ok());
  EXPECT_NE(results[1].status().message().find("items[2].ids[1]"), std::string::npos)
      << results[1].status();
  ASSERT_FALSE(results[3].ok());
  EXPECT_NE(results[3].status().message().find("query_ids[1]"), std::string::npos);
  for (size_t i : {0u, 2u}) {
    ASSERT_TRUE(results[i].ok()) << results[i].status();
    ExpectScores(results[i]->scores, Reference(requests[i]), i);
  }
}

TEST_F(ScoreManyTest, ScoreEqualsScoreManyOfOne) {
  ScoreRequest r = RandomRequest(6);
  r.query = RandomText(4);
  auto one = engine_->Score(r);
  ASSERT_TRUE(one.ok()) << one.status();
  ExpectScores(one->scores, Reference(r), 0);
}

}  // namespace
}  // namespace rankd::engine
