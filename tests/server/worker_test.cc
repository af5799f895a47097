// The worker's scoring path in-process: a work item checked and tokenized (PrepareWorkItem), then
// scored by the engine, as the worker's engine thread does.
#include "rankd/worker/worker.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rankd/backend/registry.h"
#include "rankd/common/status.h"
#include "tests/common/golden.h"

namespace rankd::worker {
namespace {

using rankd::testing::LoadGolden;
using rankd::testing::WithinF32Tolerance;
using ::testing::HasSubstr;

class PrepareWorkItemTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    golden_ = new rankd::testing::Golden(LoadGolden("llama-cls"));
    engine::EngineOptions o;
    o.model_dir = golden_->model_dir;
    o.backend.threads = 1;
    auto e = engine::Engine::Create(o, backend::CreateBackend);
    ASSERT_TRUE(e.ok()) << e.status();
    engine_ = e->release();
  }
  static void TearDownTestSuite() {
    delete engine_;
    delete golden_;
  }

  static rankd::v1::ScoreRequest Request(const rankd::testing::GoldenCase& c) {
    rankd::v1::ScoreRequest r;
    r.set_query(c.query);
    for (const auto& it : c.items) r.add_items()->set_text(it.text);
    return r;
  }

  // PrepareWorkItem, then the engine.
  static absl::StatusOr<engine::ScoreResult> Score(const v1::WorkItem& work,
                                                   const server::Limits& limits) {
    RANKD_ASSIGN_OR_RETURN(engine::ScoreRequest scoring, PrepareWorkItem(*engine_, work, limits));
    return engine_->Score(scoring);
  }

  static rankd::testing::Golden* golden_;
  static engine::Engine* engine_;
};

rankd::testing::Golden* PrepareWorkItemTest::golden_ = nullptr;
engine::Engine* PrepareWorkItemTest::engine_ = nullptr;

TEST_F(PrepareWorkItemTest, ScoresARangeOfItems) {
  const auto& c = golden_->cases[5];  // 17 items
  v1::WorkItem work;
  *work.mutable_request() = Request(c);
  work.set_begin(4);
  work.set_end(9);
  auto prepared = PrepareWorkItem(*engine_, work, server::Limits{});
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  // The prefix and the items as token ids.
  ASSERT_TRUE(prepared->query_ids.has_value());
  EXPECT_EQ(*prepared->query_ids, c.prefix_ids);
  ASSERT_EQ(prepared->items.size(), 5u);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(prepared->items[i].kind, engine::Item::Kind::kIds) << i;
    EXPECT_EQ(prepared->items[i].ids, c.items[4 + i].ids) << i;
  }
  auto r = Score(work, server::Limits{});
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->scores.size(), 5u);
  for (int i = 0; i < 5; ++i) {
    EXPECT_TRUE(WithinF32Tolerance(r->scores[i], c.items[4 + i].score)) << i;
  }
  EXPECT_EQ(r->prefix_tokens, static_cast<int>(c.prefix_ids.size()));
  int64_t tokens = 0;
  for (int i = 4; i < 9; ++i) tokens += static_cast<int64_t>(c.items[i].ids.size());
  EXPECT_EQ(r->item_tokens, tokens);
}

TEST_F(PrepareWorkItemTest, TokenLimitsNameTheItemOfTheWholeRequest) {
  const auto& c = golden_->cases[5];
  v1::WorkItem work;
  *work.mutable_request() = Request(c);
  work.set_begin(3);
  work.set_end(8);
  size_t longest = 3;
  for (size_t i = 3; i < 8; ++i) {
    if (c.items[i].ids.size() > c.items[longest].ids.size()) longest = i;
  }
  server::Limits limits;
  limits.max_item_tokens = static_cast<int>(c.items[longest].ids.size()) - 1;
  auto r = PrepareWorkItem(*engine_, work, limits);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr(absl::StrCat("items[", longest, "].text: ", c.items[longest].ids.size(),
                                     " tokens exceeds max_item_tokens=")));
  limits = server::Limits{};
  limits.max_query_tokens = static_cast<int>(c.prefix_ids.size()) - 1;
  r = PrepareWorkItem(*engine_, work, limits);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("query: "));
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("max_query_tokens="));
  limits = server::Limits{};
  limits.max_request_tokens = 10;
  r = PrepareWorkItem(*engine_, work, limits);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("exceeds max_request_tokens=10"));
  work.set_end(40);
  r = PrepareWorkItem(*engine_, work, server::Limits{});
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("outside the request's 17 items"));
}

TEST_F(PrepareWorkItemTest, SigmoidOnRequest) {
  const auto& c = golden_->cases[0];
  v1::WorkItem work;
  *work.mutable_request() = Request(c);
  work.mutable_request()->set_apply_sigmoid(true);
  work.set_end(1);
  auto r = Score(work, server::Limits{});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(WithinF32Tolerance(r->scores[0], 1.0 / (1.0 + std::exp(-c.items[0].score))));
}

}  // namespace
}  // namespace rankd::worker
