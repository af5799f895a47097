#include "rankd/server/call/validation.h"

#include <cmath>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rankd/common/field_error.h"

namespace rankd::server {
namespace {

using rankd::v1::ScoreRequest;
using ::testing::HasSubstr;

class ValidationTest : public ::testing::Test {
 protected:
  ValidationTest() {
    limits_.max_items = 4;
    limits_.max_query_tokens = 8;
    limits_.max_item_tokens = 6;
    limits_.max_request_tokens = 10;
    limits_.max_message_bytes = 4096;
    model_ = {"tiny", 100, 4};
    good_.set_query("q");
    good_.add_items()->set_text("a");
    good_.add_items()->mutable_token_ids()->add_ids(5);
    auto* e = good_.add_items()->mutable_embedding();
    e->set_rows(1);
    for (int i = 0; i < 4; ++i) e->add_values(0.25f);
  }

  // The status as "CODE: message". Every error is about a field of the request or of an item
  // and carries it as data too (its FieldError renders the very message), which the test checks.
  std::string Check(const ScoreRequest& r) {
    absl::Status s = ValidateScoreRequest(r, limits_, model_);
    if (s.ok()) return "ok";
    const std::optional<FieldError> error = GetFieldError(s);
    EXPECT_TRUE(error.has_value()) << s;
    if (error) {
      EXPECT_EQ(error->Message(), s.message());
    }
    return absl::StrCat(absl::StatusCodeToString(s.code()), ": ", s.message());
  }

  Limits limits_;
  ModelInfo model_;
  ScoreRequest good_;
};

TEST_F(ValidationTest, AcceptsEveryItemKind) { EXPECT_EQ(Check(good_), "ok"); }

TEST_F(ValidationTest, Query) {
  ScoreRequest r = good_;
  r.clear_query();
  EXPECT_EQ(Check(r), "INVALID_ARGUMENT: query: empty (give query or query_ids)");
  r.add_query_ids(1);
  EXPECT_EQ(Check(r), "ok");
  r.add_query_ids(100);
  EXPECT_EQ(Check(r), "INVALID_ARGUMENT: query_ids[1]: 100 is outside [0, vocab_size=100)");
  r.clear_query_ids();
  for (int i = 0; i < 9; ++i) r.add_query_ids(1);
  EXPECT_EQ(Check(r), "INVALID_ARGUMENT: query_ids: 9 tokens exceeds max_query_tokens=8");
}

// The prefix and each item must fit the model's context; the front end checks it where it knows
// both lengths (query_ids with id or embedding items), the worker (PrepareWorkItem) everywhere
// else.
TEST_F(ValidationTest, PrefixPlusItemFitTheModelsContext) {
  model_.max_position_embeddings = 6;
  ScoreRequest r = good_;
  r.clear_query();
  for (int i = 0; i < 3; ++i) r.add_query_ids(1);
  EXPECT_EQ(Check(r), "ok");  // 3 + 1 ids, 3 + 1 embedding row
  for (int i = 0; i < 3; ++i) r.mutable_items(1)->mutable_token_ids()->add_ids(1);
  EXPECT_EQ(Check(r),
            "INVALID_ARGUMENT: items[1]: prefix 3 + item 4 tokens = 7 exceeds the model's "
            "max_position_embeddings=6");
  r.mutable_items(1)->mutable_token_ids()->mutable_ids()->Truncate(1);
  r.mutable_items(2)->mutable_embedding()->set_rows(4);
  for (int i = 0; i < 12; ++i) r.mutable_items(2)->mutable_embedding()->add_values(0.5f);
  EXPECT_THAT(Check(r), HasSubstr("items[2]: prefix 3 + item 4 tokens = 7 exceeds"));
  model_.max_position_embeddings = 0;  // not given by config.json: no limit
  EXPECT_EQ(Check(r), "ok");
}

TEST_F(ValidationTest, ItemLimitsAndContents) {
  ScoreRequest r = good_;
  r.add_items()->set_text("b");
  r.add_items()->set_text("c");
  EXPECT_EQ(Check(r), "INVALID_ARGUMENT: items: 5 items exceeds max_items=4");
  r = good_;
  r.mutable_items(1)->mutable_token_ids()->add_ids(-3);
  EXPECT_EQ(Check(r),
            "INVALID_ARGUMENT: items[1].token_ids.ids[1]: -3 is outside [0, vocab_size=100)");
  r = good_;
  for (int i = 0; i < 6; ++i) r.mutable_items(1)->mutable_token_ids()->add_ids(1);
  EXPECT_EQ(Check(r), "INVALID_ARGUMENT: items[1].token_ids: 7 tokens exceeds max_item_tokens=6");
  r = good_;
  r.mutable_items(2)->mutable_embedding()->add_values(1);
  EXPECT_EQ(Check(r),
            "INVALID_ARGUMENT: items[2].embedding.values: 5 values for rows=1, expected rows x "
            "hidden_size = 1 x 4 = 4");
  r = good_;
  r.mutable_items(2)->mutable_embedding()->set_values(2, INFINITY);
  EXPECT_THAT(Check(r), HasSubstr("items[2].embedding.values[2]: is inf (row 0, column 2)"));
  r = good_;
  r.mutable_items(0)->clear_content();
  EXPECT_EQ(Check(r), "INVALID_ARGUMENT: items[0]: no content (set text, token_ids or embedding)");
}

// What the HTTP routes render from (rerank_json.h's CallerFieldMessage): the item's index, its
// field and the limit as data.
TEST_F(ValidationTest, ErrorsCarryTheItemTheFieldAndTheLimit) {
  ScoreRequest r = good_;
  r.mutable_items(0)->set_text(std::string(32 * 6 + 1, 'a'));
  std::optional<FieldError> e = GetFieldError(ValidateScoreRequest(r, limits_, model_));
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(*e, (FieldError{.item = 0,
                            .field = ".text",
                            .limit = "max_item_bytes",
                            .what = "193 bytes exceeds max_item_bytes=192"}));
  r = good_;
  r.mutable_items(1)->mutable_token_ids()->add_ids(100);
  e = GetFieldError(ValidateScoreRequest(r, limits_, model_));
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->item, 1);
  EXPECT_EQ(e->field, ".token_ids.ids[1]");
  r = good_;
  model_.max_position_embeddings = 2;
  r.clear_query();
  r.add_query_ids(1);
  r.mutable_items(1)->mutable_token_ids()->add_ids(1);
  e = GetFieldError(ValidateScoreRequest(r, limits_, model_));
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->item, 1);
  EXPECT_EQ(e->field, "");
  EXPECT_EQ(e->limit, "max_position_embeddings");
  model_.max_position_embeddings = 0;
  r = good_;
  for (int i = 0; i < 4; ++i) r.add_items()->set_text("x");
  e = GetFieldError(ValidateScoreRequest(r, limits_, model_));
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->item, -1);  // the list itself
  EXPECT_EQ(e->field, "items");
  EXPECT_EQ(e->limit, "max_items");
}

// A TokenizeRequest's errors name its texts, by index as data.
TEST_F(ValidationTest, TokenizeErrorsNameTheText) {
  rankd::v1::TokenizeRequest r;
  r.add_texts("a");
  r.add_texts("");
  const absl::Status s = ValidateTokenizeRequest(r, limits_, model_);
  EXPECT_EQ(s.message(), "texts[1]: empty");
  std::optional<FieldError> e = GetFieldError(s);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->item, 1);
  EXPECT_EQ(e->Message(kTokenizeTexts), s.message());
  r.set_texts(1, std::string(32 * 6 + 1, 'b'));
  e = GetFieldError(ValidateTokenizeRequest(r, limits_, model_));
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->item, 1);
  EXPECT_EQ(e->limit, "max_item_bytes");
  for (int i = 0; i < 3; ++i) r.add_texts("c");
  EXPECT_EQ(ValidateTokenizeRequest(r, limits_, model_).message(),
            "texts: 5 texts exceeds max_items=4");
}

TEST_F(ValidationTest, KnownTokensOfTheScoredItemsCountAgainstTheRequestLimit) {
  ScoreRequest r = good_;
  for (int i = 0; i < 5; ++i) r.mutable_items(1)->mutable_token_ids()->add_ids(1);
  r.mutable_items(2)->mutable_embedding()->set_rows(2);
  for (int i = 0; i < 4; ++i) r.mutable_items(2)->mutable_embedding()->add_values(0);
  r.add_items()->mutable_token_ids()->add_ids(2);
  r.mutable_items(3)->mutable_token_ids()->add_ids(2);
  r.mutable_items(3)->mutable_token_ids()->add_ids(2);
  EXPECT_EQ(Check(r), "INVALID_ARGUMENT: items: 11 tokens exceeds max_request_tokens=10");
  r.set_depth(3);  // the fourth item is not scored
  EXPECT_EQ(Check(r), "ok");
  EXPECT_EQ(ItemsToScore(r), 3);
  r.set_depth(9);
  EXPECT_EQ(ItemsToScore(r), 4);
}

TEST_F(ValidationTest, ModelPriorityDepthAndSize) {
  ScoreRequest r = good_;
  r.set_model("tiny");
  EXPECT_EQ(Check(r), "ok");
  r.set_model("big");
  EXPECT_EQ(Check(r), "ok");  // server.strict_model_name off: any name
  model_.strict_name = true;
  EXPECT_EQ(Check(r),
            "NOT_FOUND: model: 'big' is not served here (this server serves 'tiny'; "
            "server.strict_model_name is on)");
  model_.names = {"tiny", "rerank-v3.5"};
  r.set_model("rerank-v3.5");
  EXPECT_EQ(Check(r), "ok");
  r.set_model(std::string(1000, '\xff'));  // a caller's bytes: quoted only in part
  EXPECT_EQ(Check(r), absl::StrCat("NOT_FOUND: model: '", std::string(128, '\xff'),
                                   "'... (1000 bytes) is not served here (this server serves "
                                   "'tiny', 'rerank-v3.5'; server.strict_model_name is on)"));
  model_.strict_name = false;
  model_.names.clear();
  r = good_;
  r.set_priority(static_cast<rankd::v1::Priority>(9));
  EXPECT_EQ(Check(r), "INVALID_ARGUMENT: priority: unknown value 9");
  r = good_;
  r.set_depth(-2);
  EXPECT_EQ(Check(r), "INVALID_ARGUMENT: depth: must not be negative (got -2)");
  r = good_;
  r.mutable_items(0)->set_text(std::string(5000, 'x'));
  EXPECT_THAT(Check(r), HasSubstr("request: 50"));
  EXPECT_THAT(Check(r), HasSubstr("bytes exceeds max_message_bytes=4096"));
}

// TRUNCATE_END (asked for, or limits.truncate: end): lengths over max_query_tokens,
// max_item_tokens and the context pass (the worker cuts them); the rest is checked as without it.
// Text bytes are limited before anything is queued: by default 32 bytes per token of the token
// limits (6 and 8 here), or as configured; TRUNCATE_END lets them through for the worker to cut.
TEST_F(ValidationTest, TextOverItsByteLimitIsRefusedNamingTheFieldAndTheLimit) {
  ScoreRequest r = good_;
  r.mutable_items(0)->set_text(std::string(32 * 6, 'a'));
  r.set_query(std::string(32 * 8, 'q'));
  EXPECT_EQ(Check(r), "ok");  // at the limits
  r.mutable_items(0)->set_text(std::string(32 * 6 + 1, 'a'));
  EXPECT_EQ(Check(r), "INVALID_ARGUMENT: items[0].text: 193 bytes exceeds max_item_bytes=192");
  limits_.max_item_bytes = 1000;
  EXPECT_EQ(Check(r), "ok");
  r.set_query(std::string(32 * 8 + 1, 'q'));
  EXPECT_EQ(Check(r), "INVALID_ARGUMENT: query: 257 bytes exceeds max_query_bytes=256");
  limits_.max_query_bytes = 300;
  EXPECT_EQ(Check(r), "ok");
  r.mutable_items(0)->set_text(std::string(1001, 'a'));
  r.set_truncate(rankd::v1::TRUNCATE_END);
  EXPECT_EQ(Check(r), "ok");
}

TEST_F(ValidationTest, TruncateEndLetsLengthsThroughForTheWorkerToCut) {
  model_.max_position_embeddings = 12;
  ScoreRequest r = good_;
  r.clear_query();
  for (int i = 0; i < 9; ++i) r.add_query_ids(1);                                   // 9 > 8
  for (int i = 0; i < 6; ++i) r.mutable_items(1)->mutable_token_ids()->add_ids(1);  // 7 > 6
  EXPECT_EQ(Check(r), "INVALID_ARGUMENT: query_ids: 9 tokens exceeds max_query_tokens=8");
  r.set_truncate(rankd::v1::TRUNCATE_END);
  EXPECT_EQ(Check(r), "ok");  // 9 + 7 > 12: cut to fit too
  r.set_truncate(rankd::v1::TRUNCATE_NONE);
  limits_.truncate = Limits::Truncate::kEnd;  // the config's default
  EXPECT_EQ(Check(r), "ok");
  limits_.truncate = Limits::Truncate::kNone;
  r.mutable_query_ids()->Truncate(3);
  EXPECT_EQ(Check(r), "INVALID_ARGUMENT: items[1].token_ids: 7 tokens exceeds max_item_tokens=6");
  r.mutable_items(1)->mutable_token_ids()->mutable_ids()->Truncate(1);
  r.mutable_items(2)->mutable_embedding()->set_rows(7);
  for (int i = 0; i < 24; ++i) r.mutable_items(2)->mutable_embedding()->add_values(0.5f);
  EXPECT_EQ(Check(r),
            "INVALID_ARGUMENT: items[2].embedding.rows: 7 rows exceeds max_item_tokens=6");
  r.set_truncate(rankd::v1::TRUNCATE_END);
  EXPECT_EQ(Check(r), "ok");
  // Still checked: contents, the request's size, and max_request_tokens over what the cut keeps.
  r.mutable_items(2)->mutable_embedding()->add_values(0.5f);
  EXPECT_THAT(Check(r), HasSubstr("items[2].embedding.values: 29 values for rows=7"));
  r.mutable_items(2)->mutable_embedding()->mutable_values()->RemoveLast();
  r.mutable_items(1)->mutable_token_ids()->add_ids(100);
  EXPECT_THAT(Check(r), HasSubstr("items[1].token_ids.ids[1]: 100 is outside"));
  r.mutable_items(1)->mutable_token_ids()->set_ids(1, 1);
  for (int i = 0; i < 20; ++i) r.mutable_items(1)->mutable_token_ids()->add_ids(1);
  // 22 ids and 7 rows, of which 6 + 6 are kept.
  EXPECT_EQ(Check(r), "INVALID_ARGUMENT: items: 12 tokens exceeds max_request_tokens=10");
  limits_.max_request_tokens = 12;
  EXPECT_EQ(Check(r), "ok");
  r.mutable_items(0)->set_text(std::string(5000, 'x'));  // a huge item is no exception
  EXPECT_THAT(Check(r), HasSubstr("bytes exceeds max_message_bytes=4096"));
  r = good_;
  r.set_truncate(static_cast<rankd::v1::Truncate>(2));
  EXPECT_EQ(Check(r), "INVALID_ARGUMENT: truncate: unknown value 2");
}

}  // namespace
}  // namespace rankd::server
