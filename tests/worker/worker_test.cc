// The worker's scoring path in-process: a work item checked and tokenized (PrepareWorkItem), then
// scored by the engine, as the worker's engine thread does.
#include "rankd/worker/worker.h"

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rankd/backend/registry.h"
#include "rankd/common/field_error.h"
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
                                                   const protocol::Limits& limits) {
    RANKD_ASSIGN_OR_RETURN(const engine::PreparedRequest prepared,
                           PrepareWorkItem(*engine_, work, limits));
    return engine_->Score(prepared);
  }

  // Item i of a prepared batch: its token ids (negative: embedding rows).
  static std::vector<int32_t> ItemTokens(const backend::ItemBatch& batch, int i) {
    return std::vector<int32_t>(batch.tokens.begin() + batch.offsets[i],
                                batch.tokens.begin() + batch.offsets[i + 1]);
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
  auto prepared = PrepareWorkItem(*engine_, work, protocol::Limits{});
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  // The prefix and the items as token ids, packed once.
  EXPECT_EQ(prepared->prefix_ids, c.prefix_ids);
  ASSERT_EQ(prepared->items.num_items(), 5);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(ItemTokens(prepared->items, i), c.items[4 + i].ids) << i;
  EXPECT_TRUE(prepared->items.embeddings.empty());
  auto r = Score(work, protocol::Limits{});
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
  protocol::Limits limits;
  limits.max_item_tokens = static_cast<int>(c.items[longest].ids.size()) - 1;
  auto r = PrepareWorkItem(*engine_, work, limits);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(
      std::string(r.status().message()),
      HasSubstr(absl::StrCat("items[", longest, "].text: at least ", c.items[longest].ids.size(),
                             " tokens exceeds max_item_tokens=")));
  // The item and the limit as data too, for the front end to rename and render.
  const std::optional<FieldError> error = GetFieldError(r.status());
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->item, static_cast<int>(longest));
  EXPECT_EQ(error->field, ".text");
  EXPECT_EQ(error->limit, "max_item_tokens");
  limits = protocol::Limits{};
  limits.max_query_tokens = static_cast<int>(c.prefix_ids.size()) - 1;
  r = PrepareWorkItem(*engine_, work, limits);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("query: "));
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("max_query_tokens="));
  limits = protocol::Limits{};
  limits.max_request_tokens = 10;
  r = PrepareWorkItem(*engine_, work, limits);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("exceeds max_request_tokens=10"));
  work.set_end(40);
  r = PrepareWorkItem(*engine_, work, protocol::Limits{});
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("outside the request's 17 items"));
}

// Every kind packed into one batch straight from the request: text as its ids, token ids as
// given, embedding rows as given (their values copied once, into the batch).
TEST_F(PrepareWorkItemTest, PacksEveryKindOnce) {
  const auto& c = golden_->cases[5];
  ASSERT_GE(c.items.size(), 2u);
  const int hidden = engine_->config().hidden_size;
  v1::WorkItem work;
  rankd::v1::ScoreRequest& r = *work.mutable_request();
  r.set_query(c.query);
  r.set_apply_sigmoid(true);
  r.add_items()->set_text("skipped: before the range");
  r.add_items()->set_text(c.items[0].text);
  r.add_items()->mutable_token_ids()->mutable_ids()->Add(c.items[1].ids.begin(),
                                                         c.items[1].ids.end());
  rankd::v1::Embedding* e = r.add_items()->mutable_embedding();
  e->set_rows(2);
  for (int i = 0; i < 2 * hidden; ++i) e->add_values(0.001f * static_cast<float>(i));
  work.set_begin(1);
  work.set_end(4);
  auto prepared = PrepareWorkItem(*engine_, work, protocol::Limits{});
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  EXPECT_EQ(prepared->prefix_ids, c.prefix_ids);
  EXPECT_TRUE(prepared->apply_sigmoid);
  ASSERT_EQ(prepared->items.num_items(), 3);
  EXPECT_EQ(ItemTokens(prepared->items, 0), c.items[0].ids);
  EXPECT_EQ(ItemTokens(prepared->items, 1), c.items[1].ids);
  EXPECT_EQ(ItemTokens(prepared->items, 2), (std::vector<int32_t>{-1, -2}));  // rows 0 and 1
  EXPECT_EQ(prepared->items.embeddings, std::vector<float>(e->values().begin(), e->values().end()));
}

// A text that encodes to no tokens (the front end refuses only empty text) is an error about its
// item of the whole request, as data too.
TEST_F(PrepareWorkItemTest, ATextThatEncodesToNoTokensNamesItsItem) {
  v1::WorkItem work;
  rankd::v1::ScoreRequest& r = *work.mutable_request();
  r.set_query("q");
  for (const char* text : {"a", "b", "c", ""}) r.add_items()->set_text(text);
  r.mutable_items(1)->mutable_token_ids()->add_ids(5);  // not a text: texts and items differ
  work.set_begin(1);
  work.set_end(4);
  const absl::Status s = PrepareWorkItem(*engine_, work, protocol::Limits{}).status();
  EXPECT_EQ(s.message(), "items[3].text: encodes to no tokens");
  const std::optional<FieldError> error = GetFieldError(s);
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->item, 3);
}

// The model's context (llama-cls: 2048) is checked here where the front end could not know both
// lengths: after a text query. Token ids after query_ids are the front end's (validation.cc).
TEST_F(PrepareWorkItemTest, TheContextIsCheckedWhereOnlyTheWorkerKnowsIt) {
  ASSERT_EQ(engine_->config().max_position_embeddings, 2048);
  protocol::Limits limits;
  limits.max_item_tokens = 4096;
  limits.max_request_tokens = 8192;
  v1::WorkItem work;
  rankd::v1::ScoreRequest& r = *work.mutable_request();
  r.set_query(golden_->cases[0].query);
  auto* ids = r.add_items()->mutable_token_ids()->mutable_ids();
  for (int i = 0; i < 2047; ++i) ids->Add(5);
  work.set_end(1);
  const absl::Status s = PrepareWorkItem(*engine_, work, limits).status();
  EXPECT_THAT(std::string(s.message()),
              HasSubstr(absl::StrCat("items[0]: prefix ", golden_->cases[0].prefix_ids.size(),
                                     " + item 2047 tokens")));
  ASSERT_TRUE(GetFieldError(s).has_value());
  EXPECT_EQ(GetFieldError(s)->limit, "max_position_embeddings");
}

TEST_F(PrepareWorkItemTest, SigmoidOnRequest) {
  const auto& c = golden_->cases[0];
  v1::WorkItem work;
  *work.mutable_request() = Request(c);
  work.mutable_request()->set_apply_sigmoid(true);
  work.set_end(1);
  auto r = Score(work, protocol::Limits{});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(WithinF32Tolerance(r->scores[0], 1.0 / (1.0 + std::exp(-c.items[0].score))));
}

// TRUNCATE_END: PrepareWorkItem cuts what is over a limit, and the score is exactly the score of
// a request cut by hand (llama-cls: templates "{query}" / "{item}", so nothing is appended; the
// template tails are engine_test's). TRUNCATE_NONE still refuses with the same message.
class TruncateTest : public PrepareWorkItemTest {
 protected:
  static absl::StatusOr<engine::ScoreResult> ScoreAll(const rankd::v1::ScoreRequest& request,
                                                      const protocol::Limits& limits) {
    v1::WorkItem work;
    *work.mutable_request() = request;
    work.set_end(request.items_size());
    return Score(work, limits);
  }
  static rankd::v1::ScoreRequest WithIds(const rankd::v1::ScoreRequest& base,
                                         const std::vector<int32_t>& ids) {
    rankd::v1::ScoreRequest r = base;
    r.clear_items();
    r.add_items()->mutable_token_ids()->mutable_ids()->Add(ids.begin(), ids.end());
    return r;
  }
  static rankd::v1::ScoreRequest Cut(rankd::v1::ScoreRequest r) {
    r.set_truncate(rankd::v1::TRUNCATE_END);
    return r;
  }
  // The text's item ids (as the worker tokenizes it).
  static std::vector<int32_t> ItemIds(const std::string& text) {
    auto batch = engine_->EncodeItems({engine::Item::Text(text)});
    EXPECT_TRUE(batch.ok()) << batch.status();
    return std::vector<int32_t>(batch->tokens.begin(), batch->tokens.end());
  }
  static std::vector<int32_t> First(const std::vector<int32_t>& v, size_t n) {
    return std::vector<int32_t>(v.begin(), v.begin() + n);
  }
  static std::string LongText() {
    std::string text;
    for (const auto& it : golden_->cases[5].items) absl::StrAppend(&text, it.text, " ");
    return text;
  }
};

TEST_F(TruncateTest, TextAndIdItemsAtTheLimitStayAndLongerOnesAreCutAtTheirEnd) {
  rankd::v1::ScoreRequest text;
  text.set_query(golden_->cases[5].query);
  text.add_items()->set_text(LongText());
  const std::vector<int32_t> ids = ItemIds(LongText());
  const int n = static_cast<int>(ids.size());
  ASSERT_GT(n, 40);
  protocol::Limits limits;
  limits.max_item_tokens = n;  // exactly at the limit: unchanged
  auto plain = ScoreAll(text, limits);
  auto cut = ScoreAll(Cut(text), limits);
  ASSERT_TRUE(plain.ok() && cut.ok()) << plain.status() << cut.status();
  EXPECT_EQ(cut->scores, plain->scores);
  EXPECT_EQ(cut->item_tokens, n);
  for (const int limit : {n - 1, n / 4, 1}) {
    limits.max_item_tokens = limit;
    auto refused = ScoreAll(text, limits);
    ASSERT_FALSE(refused.ok());
    // Tokenization stopped past the limit: the count is of the tokens seen until then.
    EXPECT_THAT(
        std::string(refused.status().message()),
        ::testing::MatchesRegex(absl::StrCat(
            "items\\[0\\]\\.text: at least [0-9]+ tokens exceeds max_item_tokens=", limit)));
    auto by_hand = ScoreAll(WithIds(text, First(ids, limit)), limits);
    ASSERT_TRUE(by_hand.ok()) << by_hand.status();
    for (const auto& request : {text, WithIds(text, ids)}) {  // text and token ids alike
      auto r = ScoreAll(Cut(request), limits);
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_EQ(r->scores, by_hand->scores) << limit;
      EXPECT_EQ(r->item_tokens, limit);  // Usage: what was scored
    }
    // Without TRUNCATE_END the front end refuses the ids over the limit (validation.cc: "items[0]
    // .token_ids: N tokens exceeds max_item_tokens=M"); the worker counts only what it tokenizes.
  }
}

TEST_F(TruncateTest, EmbeddingRowsAreCutToTheLimit) {
  const int hidden = engine_->config().hidden_size;
  const int rows = 9;
  rankd::v1::ScoreRequest r;
  r.set_query(golden_->cases[0].query);
  rankd::v1::Embedding* e = r.add_items()->mutable_embedding();
  e->set_rows(rows);
  for (int i = 0; i < rows * hidden; ++i) e->add_values(0.01f * static_cast<float>(i % 97 - 48));
  rankd::v1::ScoreRequest by_hand = r;
  by_hand.mutable_items(0)->mutable_embedding()->set_rows(5);
  by_hand.mutable_items(0)->mutable_embedding()->mutable_values()->Truncate(5 * hidden);
  protocol::Limits limits;
  limits.max_item_tokens = 5;  // without TRUNCATE_END the front end refuses the 9 rows
  auto want = ScoreAll(by_hand, limits);
  auto got = ScoreAll(Cut(r), limits);
  ASSERT_TRUE(want.ok() && got.ok()) << want.status() << got.status();
  EXPECT_EQ(got->scores, want->scores);
  EXPECT_EQ(got->item_tokens, 5);
}

TEST_F(TruncateTest, QueryTextAndQueryIdsAreCutToMaxQueryTokens) {
  rankd::v1::ScoreRequest r;
  r.set_query(LongText());
  r.add_items()->set_text(golden_->cases[0].items[0].text);
  auto prefix = engine_->EncodeQuery(LongText());
  ASSERT_TRUE(prefix.ok());
  const int m = static_cast<int>(prefix->size());
  protocol::Limits limits;
  limits.max_query_tokens = m;
  auto plain = ScoreAll(r, limits);
  auto at_limit = ScoreAll(Cut(r), limits);
  ASSERT_TRUE(plain.ok() && at_limit.ok());
  EXPECT_EQ(at_limit->scores, plain->scores);
  for (const int limit : {m - 1, m / 3}) {
    limits.max_query_tokens = limit;
    EXPECT_EQ(ScoreAll(r, limits).status().message(),
              absl::StrCat("query: ", m,
                           " tokens (template and BOS included) exceeds max_query_tokens=", limit));
    rankd::v1::ScoreRequest by_hand = r;
    by_hand.clear_query();
    for (int i = 0; i < limit; ++i) by_hand.add_query_ids((*prefix)[i]);  // BOS first: kept
    auto want = ScoreAll(by_hand, limits);
    ASSERT_TRUE(want.ok()) << want.status();
    rankd::v1::ScoreRequest ids = by_hand;
    ids.mutable_query_ids()->Clear();
    ids.mutable_query_ids()->Add(prefix->begin(), prefix->end());
    for (const auto& request : {r, ids}) {
      auto got = ScoreAll(Cut(request), limits);
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_EQ(got->scores, want->scores) << limit;
      EXPECT_EQ(got->prefix_tokens, limit);
    }
  }
}

TEST_F(TruncateTest, TheConfigsDefaultEndCutsRequestsThatLeaveTruncateUnset) {
  rankd::v1::ScoreRequest r;
  r.set_query(golden_->cases[5].query);
  r.add_items()->set_text(LongText());
  protocol::Limits limits;
  limits.max_item_tokens = 12;
  auto asked = ScoreAll(Cut(r), limits);
  limits.truncate = protocol::Limits::Truncate::kEnd;
  auto by_default = ScoreAll(r, limits);  // TRUNCATE_NONE
  ASSERT_TRUE(asked.ok() && by_default.ok()) << asked.status() << by_default.status();
  EXPECT_EQ(by_default->scores, asked->scores);
  EXPECT_EQ(by_default->item_tokens, 12);
}

// llama-cls's context is 2048: with TRUNCATE_END an item is cut to what the prefix leaves; a
// prefix that fills the context alone is still refused.
TEST_F(TruncateTest, ItemsAreCutToFitTheContextAfterThePrefix) {
  ASSERT_EQ(engine_->config().max_position_embeddings, 2048);
  const std::vector<int32_t> item = ItemIds(LongText());
  ASSERT_GT(item.size(), 48u);
  protocol::Limits limits;
  limits.max_query_tokens = 4096;
  limits.max_item_tokens = 1024;
  rankd::v1::ScoreRequest r;
  for (int i = 0; i < 2000; ++i) r.add_query_ids(golden_->cases[0].prefix_ids[i % 3]);
  r.add_items()->set_text(LongText());
  r.add_items()->mutable_token_ids()->mutable_ids()->Add(item.begin(), item.end());
  EXPECT_THAT(std::string(ScoreAll(r, limits).status().message()),
              HasSubstr(absl::StrCat("items[0]: prefix 2000 + item ", item.size(), " tokens")));
  rankd::v1::ScoreRequest by_hand = WithIds(r, First(item, 48));
  *by_hand.add_items() = by_hand.items(0);
  auto want = ScoreAll(by_hand, limits);
  auto got = ScoreAll(Cut(r), limits);
  ASSERT_TRUE(want.ok() && got.ok()) << want.status() << got.status();
  EXPECT_EQ(got->scores, want->scores);
  EXPECT_EQ(got->item_tokens, 2 * 48);
  r.mutable_query_ids()->Clear();
  for (int i = 0; i < 2048; ++i) r.add_query_ids(golden_->cases[0].prefix_ids[i % 3]);
  EXPECT_THAT(std::string(ScoreAll(Cut(r), limits).status().message()),
              HasSubstr("items[0]: prefix 2048 + item"));
}

TEST_F(TruncateTest, MaxRequestTokensCountsTheItemsAsCut) {
  rankd::v1::ScoreRequest r;
  r.set_query(golden_->cases[0].query);
  for (int i = 0; i < 3; ++i) r.add_items()->set_text(LongText());
  protocol::Limits limits;
  limits.max_item_tokens = 10;
  limits.max_request_tokens = 30;
  EXPECT_TRUE(PrepareWorkItem(
                  *engine_,
                  [&] {
                    v1::WorkItem w;
                    *w.mutable_request() = Cut(r);
                    w.set_end(3);
                    return w;
                  }(),
                  limits)
                  .ok());
  limits.max_request_tokens = 29;
  EXPECT_EQ(ScoreAll(Cut(r), limits).status().message(),
            "items: 30 tokens exceeds max_request_tokens=29");
}

// A huge item (2 MiB of text, within max_message_bytes) with TRUNCATE_END: tokenized once by the
// worker and cut; the kept ids are those of any text that starts the same way.
TEST_F(TruncateTest, AHugeItemIsCutToItsFirstTokens) {
  std::string huge;
  while (huge.size() < (size_t{2} << 20)) absl::StrAppend(&huge, LongText());
  rankd::v1::ScoreRequest r;
  r.set_query(golden_->cases[0].query);
  r.add_items()->set_text(huge);
  const std::vector<int32_t> head = ItemIds(huge.substr(0, 20000));
  ASSERT_GT(head.size(), 600u);
  v1::WorkItem work;
  *work.mutable_request() = Cut(r);
  work.set_end(1);
  auto prepared = PrepareWorkItem(*engine_, work, protocol::Limits{});
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  ASSERT_EQ(prepared->items.num_items(), 1);
  EXPECT_EQ(ItemTokens(prepared->items, 0), First(head, 512));
}

// A 15 MB item without TRUNCATE_END (as when max_item_bytes lets it through): refused naming the
// item and max_item_tokens, with the count of the tokens seen before tokenization stopped (a few
// hundred, not the text's millions).
TEST_F(TruncateTest, AHugeItemIsRefusedAfterABoundedPrefixNamingTheItem) {
  std::string huge;
  while (huge.size() < 15'000'000) absl::StrAppend(&huge, LongText());
  rankd::v1::ScoreRequest r;
  r.set_query(golden_->cases[0].query);
  r.add_items()->set_text("go developer");
  r.add_items()->set_text(huge);
  auto refused = ScoreAll(r, protocol::Limits{});
  ASSERT_FALSE(refused.ok());
  const std::string message(refused.status().message());
  EXPECT_THAT(message, HasSubstr("items[1].text: at least "));
  EXPECT_THAT(message, HasSubstr(" tokens exceeds max_item_tokens=512"));
  const int64_t seen = std::stoll(message.substr(std::string("items[1].text: at least ").size()));
  EXPECT_GT(seen, 512);
  EXPECT_LE(seen, 513 * 4 * protocol::Limits::kMaxBytesPerToken);
}

// TRUNCATE_END with text over max_item_bytes: the worker tokenizes its first max_item_bytes bytes
// only, cut back to a UTF-8 character boundary (each "é" is 2 bytes; 201 bytes keep 100 of them).
TEST_F(TruncateTest, TextOverItsByteLimitIsCutAtACharacterBoundary) {
  std::string accents;
  for (int i = 0; i < 2000; ++i) accents += "é";
  rankd::v1::ScoreRequest r;
  r.set_query(golden_->cases[0].query);
  r.add_items()->set_text(accents);
  protocol::Limits limits;
  limits.max_item_bytes = 201;
  limits.max_query_bytes = 21;
  r.set_query(std::string(40, 'q'));
  auto cut = ScoreAll(Cut(r), limits);
  ASSERT_TRUE(cut.ok()) << cut.status();
  rankd::v1::ScoreRequest by_hand = r;
  by_hand.mutable_items(0)->set_text(accents.substr(0, 200));
  by_hand.set_query(std::string(21, 'q'));
  auto expected = ScoreAll(by_hand, protocol::Limits{});
  ASSERT_TRUE(expected.ok()) << expected.status();
  EXPECT_EQ(cut->scores, expected->scores);
  EXPECT_EQ(cut->item_tokens, expected->item_tokens);
}

}  // namespace
}  // namespace rankd::worker
