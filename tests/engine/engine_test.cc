// Engine behaviour around the backend: head specs, model settings, item validation, sigmoid.
#include "rankd/engine/engine.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "rankd/backend/registry.h"
#include "tests/common/golden.h"

namespace rankd::engine {
namespace {

namespace fs = std::filesystem;
using rankd::testing::ModelDir;

std::unique_ptr<Engine> Make(const std::string& model, ModelSettings settings = {}) {
  EngineOptions o;
  o.model_dir = ModelDir(model);
  o.settings = std::move(settings);
  o.backend.threads = 1;
  auto e = Engine::Create(o, backend::CreateBackend);
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? *std::move(e) : nullptr;
}

// llama-cls's config.json gives max_position_embeddings 2048: a prefix plus item past it is refused
// with both numbers, whatever the kind of item.
TEST(EngineTest, PrefixPlusItemBeyondTheContextIsRefused) {
  auto e = Make("llama-cls");
  ASSERT_NE(e, nullptr);
  ASSERT_EQ(e->config().max_position_embeddings, 2048);
  ScoreRequest req;
  req.query_ids = std::vector<int32_t>(10, 5);
  req.items = {Item::Ids(std::vector<int32_t>(2038, 7)), Item::Ids(std::vector<int32_t>(2039, 7))};
  auto r = e->Score(req);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(),
            "items[1]: prefix 10 + item 2039 tokens = 2049 exceeds the model's "
            "max_position_embeddings=2048");
  req.items.pop_back();  // 10 + 2038 = 2048 fits exactly
  EXPECT_TRUE(e->Score(req).ok());
}

TEST(HeadSpecTest, DefaultsByArchitecture) {
  EXPECT_EQ(Make("llama-cls")->head().ToString(), "classifier:0");
  // yes/no pieces resolved through the tokenizer.
  EXPECT_EQ(Make("llama-gqa-yesno")->head().ToString(), "yes_no:4,5");
}

TEST(HeadSpecTest, ParsesAndValidates) {
  auto cls = model::ModelConfig::FromHfDir(ModelDir("llama-cls"));
  auto lm = model::ModelConfig::FromHfDir(ModelDir("llama-gqa-yesno"));
  ASSERT_TRUE(cls.ok() && lm.ok());
  EXPECT_EQ(ParseHeadSpec("classifier", *cls, nullptr)->ToString(), "classifier:0");
  EXPECT_EQ(ParseHeadSpec("yes_no:10,11", *lm, nullptr)->ToString(), "yes_no:10,11");
  const auto expect_error = [](absl::StatusOr<backend::HeadSpec> r, const std::string& needle) {
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status();
  };
  expect_error(ParseHeadSpec("classifier:1", *cls, nullptr), "num_labels=1");
  expect_error(ParseHeadSpec("classifier:x", *cls, nullptr), "INDEX");
  expect_error(ParseHeadSpec("yes_no:4,5", *cls, nullptr), "ForCausalLM");
  expect_error(ParseHeadSpec("classifier:0", *lm, nullptr), "ForSequenceClassification");
  expect_error(ParseHeadSpec("yes_no:4", *lm, nullptr), "YES,NO");
  expect_error(ParseHeadSpec("yes_no:4,99999", *lm, nullptr), "vocab_size");
  expect_error(ParseHeadSpec("yes_no:yes,no", *lm, nullptr), "not a token id");
  expect_error(ParseHeadSpec("softmax", *lm, nullptr), "unknown head type");
  EXPECT_EQ(ParseHeadSpec("logit:4", *lm, nullptr)->ToString(), "logit:4");
  expect_error(ParseHeadSpec("logit:4", *cls, nullptr), "head logit needs a *ForCausalLM");
  expect_error(ParseHeadSpec("logit:", *lm, nullptr), "needs TOKEN");
  expect_error(ParseHeadSpec("logit:99999", *lm, nullptr), "vocab_size");
  expect_error(ParseHeadSpec("logit:Yes", *lm, nullptr), "not a token id");
}

// logit:TOKEN takes a piece of the tokenizer like yes_no does; its score is the yes logit alone,
// so yes_no:YES,NO = logit:YES - logit:NO on the same items.
TEST(HeadSpecTest, LogitHeadIsOneTermOfYesNo) {
  ModelSettings yes, no;
  yes.head = "logit:yes";
  no.head = "logit:no";
  auto e_yes = Make("llama-gqa-yesno", yes);
  auto e_no = Make("llama-gqa-yesno", no);
  auto e_both = Make("llama-gqa-yesno");
  ASSERT_TRUE(e_yes && e_no && e_both);
  EXPECT_EQ(e_yes->head().ToString(), "logit:4");
  ScoreRequest req;
  req.query = "nurse";
  req.items = {Item::Text("registered nurse"), Item::Text("truck driver")};
  auto a = e_yes->Score(req), b = e_no->Score(req), both = e_both->Score(req);
  ASSERT_TRUE(a.ok() && b.ok() && both.ok());
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_NEAR(a->scores[i] - b->scores[i], both->scores[i], 1e-4) << i;
    EXPECT_NE(a->scores[i], both->scores[i]) << i;
  }
}

TEST(PresetTest, BgeRerankerV2Gemma) {
  ModelSettings s;
  s.preset = "bge-reranker-v2-gemma";
  auto p = ApplyPreset(s);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(*p->query_template, "A: {query}\n");
  EXPECT_EQ(*p->item_template,
            "B: {item}\nGiven a query A and a passage B, determine whether the passage contains an "
            "answer to the query by providing a prediction of either 'Yes' or 'No'.");
  EXPECT_EQ(*p->head, "logit:Yes");
  s.head = "logit:7";  // explicit fields win over the preset's
  EXPECT_EQ(*ApplyPreset(s)->head, "logit:7");
  s.instruction = "rank";
  auto bad = ApplyPreset(s);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("takes none"), std::string::npos) << bad.status();
}

TEST(ModelSettingsTest, RankdYamlBesideTheWeightsAndOverrides) {
  const fs::path dir = fs::temp_directory_path() / "rankd_settings_test";
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const auto& e : fs::directory_iterator(ModelDir("llama-cls"))) {
    fs::create_symlink(e.path(), dir / e.path().filename());
  }
  std::ofstream(dir / "rankd.yaml") << "query_template: \"Query: {query}\"\n"
                                       "item_template: \"Doc: {item}\"\n";
  EngineOptions o;
  o.model_dir = dir.string();
  auto e = Engine::Create(o, backend::CreateBackend);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ((*e)->query_template(), "Query: {query}");
  EXPECT_EQ((*e)->item_template(), "Doc: {item}");
  // The templates are applied: same ids as the template text encoded by hand.
  auto direct = (*e)->tokenizer().Encode("Query: a job", true);
  EXPECT_EQ(*(*e)->EncodeQuery("a job"), *direct);

  o.settings.item_template = "{item}";  // a flag overrides the file
  auto e2 = Engine::Create(o, backend::CreateBackend);
  ASSERT_TRUE(e2.ok());
  EXPECT_EQ((*e2)->item_template(), "{item}");

  std::ofstream(dir / "rankd.yaml") << "query_templat: x\n";
  auto bad = Engine::Create(EngineOptions{.model_dir = dir.string()}, backend::CreateBackend);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("unknown key 'query_templat'"), std::string::npos);
  fs::remove_all(dir);
}

TEST(EngineTest, TemplatesMustHavePlaceholders) {
  EngineOptions o;
  o.model_dir = ModelDir("llama-cls");
  o.settings.query_template = "no placeholder";
  auto e = Engine::Create(o, backend::CreateBackend);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("{query}"), std::string::npos);
}

TEST(EngineTest, ItemErrorsNameTheField) {
  auto e = Make("llama-cls");
  ASSERT_NE(e, nullptr);
  const auto expect_error = [&](Item item, const std::string& needle) {
    ScoreRequest req;
    req.query = "q";
    req.items = {Item::Text("fine"), std::move(item)};
    auto r = e->Score(req);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status();
  };
  expect_error(Item::Ids({1, 1024}), "items[1].ids[1]: 1024 is outside [0, vocab_size=1024)");
  expect_error(Item::Ids({}), "items[1].ids: empty");
  expect_error(Item::Embedding(std::vector<float>(65, 0.5f)), "hidden_size=64");
  std::vector<float> nan_row(128, 0.1f);
  nan_row[64 + 3] = NAN;
  expect_error(Item::Embedding(nan_row),
               "items[1].embedding[67]: is nan (row 1, column 3); values must be finite");
  expect_error(Item::Text(""), "items[1].text: encodes to no tokens");

  ScoreRequest bad_query;
  bad_query.query_ids = std::vector<int32_t>{1, -2};
  bad_query.items = {Item::Text("x")};
  EXPECT_EQ(e->Score(bad_query).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(EngineTest, SigmoidAndUsage) {
  auto e = Make("llama-cls");
  ScoreRequest req;
  req.query = "software engineer";
  req.items = {Item::Text("python developer"), Item::Ids({10, 11, 12})};
  auto raw = e->Score(req);
  req.apply_sigmoid = true;
  auto sig = e->Score(req);
  ASSERT_TRUE(raw.ok() && sig.ok());
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_FLOAT_EQ(sig->scores[i], 1.0f / (1.0f + std::exp(-raw->scores[i])));
  }
  EXPECT_EQ(raw->item_tokens,
            static_cast<int64_t>(e->tokenizer().Encode("python developer", false)->size() + 3));
}

TEST(EngineTest, RepeatedQueryHitsThePrefixCache) {
  auto e = Make("llama-gqa-yesno");
  ScoreRequest req;
  req.query = "nurse";
  req.items = {Item::Text("registered nurse, night shifts"), Item::Text("truck driver")};
  auto first = e->Score(req);
  auto second = e->Score(req);
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ(first->scores, second->scores);  // the cached K/V is the same K/V
  const auto st = e->prefix_cache_stats();
  EXPECT_EQ(st.misses, 1);
  EXPECT_EQ(st.hits, 1);
  EXPECT_EQ(st.entries, 1u);
}

// TRUNCATE_END's cut of text (the worker decides when): the content loses its end, the template's
// head and tail stay. Qwen3-Reranker's item suffix (<|im_end|>, the assistant/think turn) and its
// query's "\n" survive, so does a sentencepiece template's " END"; "{query}" on a sentencepiece
// model keeps the BOS and appends nothing.
TEST(TruncateTest, CutKeepsTheTemplatesHeadAndTail) {
  ModelSettings qwen;
  qwen.preset = "qwen3-reranker";
  auto e = Make("qwen3-reranker-tiny", qwen);
  ASSERT_NE(e, nullptr);
  const tokenizer::Tokenizer& tok = e->tokenizer();
  std::string content;
  for (int i = 0; i < 40; ++i) content += "senior rust engineer in berlin, ";
  auto encode = [&](const std::string& text) { return *tok.Encode(text, false); };
  auto starts_with = [](const std::vector<int32_t>& v, const std::vector<int32_t>& head) {
    return v.size() >= head.size() && std::equal(head.begin(), head.end(), v.begin());
  };
  auto batch = e->EncodeItems({Item::Text(content)});
  ASSERT_TRUE(batch.ok()) << batch.status();
  const std::vector<int32_t> item(batch->tokens.begin(), batch->tokens.end());
  const std::vector<int32_t> tail =
      encode("<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
  const std::vector<int32_t> empty =
      encode(tokenizer::ApplyTemplate(e->item_template(), "item", ""));
  ASSERT_GT(item.size(), 100u);
  for (const int64_t limit : {int64_t{99}, static_cast<int64_t>(empty.size()) + 1}) {
    auto cut = e->CutTextItem(item, limit);
    ASSERT_TRUE(cut.has_value()) << limit;
    std::vector<int32_t> by_hand(item.begin(), item.begin() + (limit - tail.size()));
    by_hand.insert(by_hand.end(), tail.begin(), tail.end());
    EXPECT_EQ(*cut, by_hand) << limit;
    EXPECT_TRUE(starts_with(*cut, encode("<Document>:"))) << limit;
  }
  EXPECT_FALSE(e->CutTextItem(item, static_cast<int64_t>(empty.size())).has_value());

  auto prefix = e->EncodeQuery(content);
  ASSERT_TRUE(prefix.ok());
  const std::vector<int32_t> head = *e->EncodeQuery("");
  auto cut = e->CutQuery(*prefix, static_cast<int64_t>(head.size()) + 5);
  ASSERT_TRUE(cut.has_value());
  ASSERT_EQ(cut->size(), head.size() + 5);
  EXPECT_EQ(cut->back(), encode("\n").back());
  EXPECT_TRUE(std::equal(prefix->begin(), prefix->begin() + cut->size() - 1, cut->begin()));
  EXPECT_FALSE(e->CutQuery(*prefix, static_cast<int64_t>(head.size())).has_value());

  // sentencepiece: the tail as it is within a whole encoding (no dummy-prefix space of its own).
  ModelSettings doc;
  doc.item_template = "Document: {item} END";
  auto sp = Make("llama-cls", doc);
  ASSERT_NE(sp, nullptr);
  auto sp_batch = sp->EncodeItems({Item::Text(content)});
  ASSERT_TRUE(sp_batch.ok());
  const std::vector<int32_t> sp_item(sp_batch->tokens.begin(), sp_batch->tokens.end());
  const size_t t = sp->tokenizer().Encode("Document: a END", false)->size() -
                   sp->tokenizer().Encode("Document: a", false)->size();
  ASSERT_GE(t, 1u);
  auto sp_cut = sp->CutTextItem(sp_item, 20);
  ASSERT_TRUE(sp_cut.has_value());
  std::vector<int32_t> sp_by_hand(sp_item.begin(), sp_item.begin() + (20 - t));
  sp_by_hand.insert(sp_by_hand.end(), sp_item.end() - t, sp_item.end());
  EXPECT_EQ(*sp_cut, sp_by_hand);

  auto llama = Make("llama-cls");
  ASSERT_NE(llama, nullptr);
  auto p = llama->EncodeQuery(content);
  ASSERT_TRUE(p.ok());
  ASSERT_EQ(p->front(), *llama->tokenizer().bos_id());
  auto kept = llama->CutQuery(*p, 7);
  ASSERT_TRUE(kept.has_value());
  EXPECT_EQ(*kept, std::vector<int32_t>(p->begin(), p->begin() + 7));
}

TEST(TemplateTest, ApplyTemplate) {
  EXPECT_EQ(tokenizer::ApplyTemplate("Q: {query}!", "query", "x"), "Q: x!");
  EXPECT_EQ(tokenizer::ApplyTemplate("{query}{query}", "query", "ab"), "abab");
  EXPECT_EQ(tokenizer::ApplyTemplate("{{query}} {query}", "query", "z"), "{query} z");
  EXPECT_EQ(tokenizer::ApplyTemplate("{item}", "query", "z"), "{item}");
}

}  // namespace
}  // namespace rankd::engine
