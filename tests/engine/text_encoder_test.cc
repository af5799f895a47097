// TextEncoder: its ids are the engine's (EncodeQuery / EncodeItems) and Hugging Face's (the golden
// models' prefix_ids and item ids), in every template mode, with special tokens on and off.
#include "rankd/engine/text_encoder.h"

#include <gtest/gtest.h>

#include "rankd/backend/registry.h"
#include "rankd/engine/engine.h"
#include "tests/common/golden.h"

namespace rankd::engine {
namespace {

using rankd::testing::Golden;
using rankd::testing::LoadGolden;

EngineOptions OptionsOf(const Golden& g) {
  EngineOptions o;
  o.model_dir = g.model_dir;
  o.settings.query_template = g.query_template;
  o.settings.item_template = g.item_template;
  o.backend.threads = 1;
  return o;
}

std::vector<int32_t> IdsOf(const backend::ItemBatch& batch, int i) {
  return std::vector<int32_t>(batch.tokens.begin() + batch.offsets[i],
                              batch.tokens.begin() + batch.offsets[i + 1]);
}

class TextEncoderGoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(TextEncoderGoldenTest, IdsAreTheEnginesAndHuggingFacesInEveryMode) {
  const Golden g = LoadGolden(GetParam());
  const EngineOptions o = OptionsOf(g);
  auto encoder = TextEncoder::Load(o);
  ASSERT_TRUE(encoder.ok()) << encoder.status();
  const TextEncoder& te = **encoder;
  auto engine = Engine::Create(o, backend::CreateBackend);
  ASSERT_TRUE(engine.ok()) << engine.status();
  const tokenizer::Tokenizer& tok = (*engine)->tokenizer();
  ASSERT_FALSE(g.cases.empty());
  for (const auto& c : g.cases) {
    // The query template with special tokens: a Score call's prefix.
    auto prefix = te.Encode(c.query, TextTemplate::kQuery, /*add_special_tokens=*/true);
    ASSERT_TRUE(prefix.ok()) << prefix.status();
    EXPECT_EQ(*prefix, c.prefix_ids) << c.query;
    EXPECT_EQ(*prefix, *(*engine)->EncodeQuery(c.query));
    EXPECT_EQ(*te.EncodeQuery(c.query), c.prefix_ids);
    // Without special tokens: the template's text alone.
    const std::string templated =
        tokenizer::ApplyTemplate((*engine)->query_template(), "query", c.query);
    EXPECT_EQ(*te.Encode(c.query, TextTemplate::kQuery, false), *tok.Encode(templated, false));
    // No template, both ways.
    for (const bool special : {false, true}) {
      EXPECT_EQ(*te.Encode(c.query, TextTemplate::kNone, special), *tok.Encode(c.query, special));
    }
    // Items: the item template, never special tokens.
    std::vector<Item> items;
    for (const auto& it : c.items) items.push_back(Item::Text(it.text));
    auto batch = (*engine)->EncodeItems(items);
    ASSERT_TRUE(batch.ok()) << batch.status();
    for (size_t i = 0; i < c.items.size(); ++i) {
      auto ids = te.Encode(c.items[i].text, TextTemplate::kItem, false);
      ASSERT_TRUE(ids.ok()) << ids.status();
      EXPECT_EQ(*ids, c.items[i].ids) << c.items[i].text;
      EXPECT_EQ(*ids, IdsOf(*batch, static_cast<int>(i)));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Models, TextEncoderGoldenTest,
                         ::testing::ValuesIn(rankd::testing::GoldenModelNames()),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& ch : name) {
                             if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           }
                           return name;
                         });

TEST(TextEncoderTest, SpecialTokensMatterWhereTheTokenizerAddsThem) {
  // llama-cls is sentencepiece with a BOS: the query prefix starts with it, no template does not.
  const Golden g = LoadGolden("llama-cls");
  auto te = TextEncoder::Load(OptionsOf(g));
  ASSERT_TRUE(te.ok()) << te.status();
  const auto bos = (*te)->tokenizer().bos_id();
  ASSERT_TRUE(bos.has_value());
  auto with = (*te)->Encode("a job", TextTemplate::kNone, true);
  auto without = (*te)->Encode("a job", TextTemplate::kNone, false);
  ASSERT_TRUE(with.ok() && without.ok());
  ASSERT_EQ(with->size(), without->size() + 1);
  EXPECT_EQ(with->front(), *bos);
  EXPECT_NE(without->front(), *bos);
}

TEST(TextEncoderTest, ItemsRefuseSpecialTokensAndTemplateNamesParse) {
  auto te = TextEncoder::Load(OptionsOf(LoadGolden("llama-cls")));
  ASSERT_TRUE(te.ok()) << te.status();
  auto r = (*te)->Encode("x", TextTemplate::kItem, /*add_special_tokens=*/true);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "add_special_tokens: items never get special tokens (template item)");
  EXPECT_EQ(*ParseTextTemplate("none"), TextTemplate::kNone);
  EXPECT_EQ(*ParseTextTemplate("query"), TextTemplate::kQuery);
  EXPECT_EQ(*ParseTextTemplate("item"), TextTemplate::kItem);
  EXPECT_EQ(ParseTextTemplate("Query").status().message(),
            "template 'Query' is not one of none, query, item");
}

TEST(TextEncoderTest, BoundedEncodingStopsPastTheLimit) {
  auto te = TextEncoder::Load(OptionsOf(LoadGolden("llama-cls")));
  ASSERT_TRUE(te.ok()) << te.status();
  std::string text;
  for (int i = 0; i < 2000; ++i) text += "word ";
  auto all = (*te)->Encode(text, TextTemplate::kNone, false);
  auto bounded = (*te)->Encode(text, TextTemplate::kNone, false, /*max_tokens=*/10);
  ASSERT_TRUE(all.ok() && bounded.ok());
  ASSERT_GT(bounded->size(), 10u);
  ASSERT_LT(bounded->size(), all->size());
  EXPECT_TRUE(std::equal(bounded->begin(), bounded->end(), all->begin()));
}

TEST(TextEncoderTest, LoadRefusesATemplateWithoutItsPlaceholder) {
  EngineOptions o = OptionsOf(LoadGolden("llama-cls"));
  o.settings.item_template = "Doc: {query}";
  auto te = TextEncoder::Load(o);
  ASSERT_FALSE(te.ok());
  EXPECT_EQ(te.status().message(), "item template 'Doc: {query}' has no {item}");
}

}  // namespace
}  // namespace rankd::engine
