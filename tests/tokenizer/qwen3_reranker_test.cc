// The qwen3-reranker preset, and the Engine running it end to end on the CPU (tokenizer.json,
// Qwen3's q/k norm, yes/no head) against tests/data/models/qwen3-reranker-tiny/golden.json, which
// HF made with the instruction "Given a job search query, retrieve relevant job postings".
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include "rankd/backend/registry.h"
#include "rankd/engine/engine.h"
#include "tests/common/golden.h"

namespace rankd::engine {
namespace {

using testing::Golden;
using testing::LoadGolden;

constexpr char kModel[] = "qwen3-reranker-tiny";
constexpr char kJobInstruction[] = "Given a job search query, retrieve relevant job postings";

ModelSettings Preset(std::optional<std::string> instruction) {
  ModelSettings s;
  s.preset = "qwen3-reranker";
  s.instruction = std::move(instruction);
  return s;
}

TEST(PresetTest, Qwen3RerankerTemplatesAreTheGoldenOnes) {
  const Golden g = LoadGolden(kModel);
  ASSERT_TRUE(g.query_template && g.item_template);
  auto s = ApplyPreset(Preset(kJobInstruction));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->query_template, *g.query_template);
  EXPECT_EQ(s->item_template, *g.item_template);
  EXPECT_EQ(s->head, "yes_no:yes,no");
}

TEST(PresetTest, DefaultInstruction) {
  auto s = ApplyPreset(Preset(std::nullopt));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_NE(s->query_template->find(std::string("<Instruct>: ") + kQwen3RerankerInstruction + "\n"),
            std::string::npos)
      << *s->query_template;
}

TEST(PresetTest, BracesInTheInstructionStayText) {
  auto s = ApplyPreset(Preset("match {query} and {{x}}"));
  ASSERT_TRUE(s.ok()) << s.status();
  const std::string q = tokenizer::ApplyTemplate(*s->query_template, "query", "Q");
  EXPECT_NE(q.find("<Instruct>: match {query} and {{x}}\n<Query>: Q\n"), std::string::npos) << q;
}

TEST(PresetTest, ExplicitSettingsOverrideThePreset) {
  ModelSettings s = Preset(std::nullopt);
  s.head = "yes_no:7,8";
  s.item_template = "{item}";
  auto r = ApplyPreset(s);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->head, "yes_no:7,8");
  EXPECT_EQ(r->item_template, "{item}");
  EXPECT_NE(r->query_template->find("<Query>: {query}"), std::string::npos);
}

TEST(PresetTest, Errors) {
  ModelSettings unknown;
  unknown.preset = "qwen9-reranker";
  EXPECT_EQ(ApplyPreset(unknown).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(ApplyPreset(unknown).status().message().find("qwen3-reranker"), std::string::npos);
  ModelSettings stray;
  stray.instruction = "x";
  EXPECT_EQ(ApplyPreset(stray).status().code(), absl::StatusCode::kInvalidArgument);
  // No preset, no instruction: unchanged.
  ModelSettings plain;
  plain.head = "classifier:1";
  auto r = ApplyPreset(plain);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->head, "classifier:1");
  EXPECT_FALSE(r->query_template.has_value());
}

// Every golden case through an engine made from `settings`: prefix ids, item ids and scores.
void ExpectGolden(const std::string& model_dir, const ModelSettings& settings) {
  const Golden g = LoadGolden(kModel);
  EngineOptions o;
  o.model_dir = model_dir;
  o.settings = settings;
  o.backend.threads = 2;
  auto engine = Engine::Create(o, backend::CreateBackend);
  ASSERT_TRUE(engine.ok()) << engine.status();
  EXPECT_EQ((*engine)->head().ToString(), g.head);  // yes/no resolved through the tokenizer
  int scored = 0;
  for (const auto& c : g.cases) {
    auto prefix = (*engine)->EncodeQuery(c.query);
    ASSERT_TRUE(prefix.ok()) << prefix.status();
    EXPECT_EQ(*prefix, c.prefix_ids) << "query: " << c.query;
    ScoreRequest req;
    req.query = c.query;
    for (const auto& it : c.items) req.items.push_back(Item::Text(it.text));
    auto batch = (*engine)->EncodeItems(req.items);
    ASSERT_TRUE(batch.ok()) << batch.status();
    auto result = (*engine)->Score(req);
    ASSERT_TRUE(result.ok()) << result.status();
    ASSERT_EQ(result->scores.size(), c.items.size());
    for (size_t i = 0; i < c.items.size(); ++i) {
      const std::vector<int32_t> ids(batch->tokens.begin() + batch->offsets[i],
                                     batch->tokens.begin() + batch->offsets[i + 1]);
      EXPECT_EQ(ids, c.items[i].ids) << "item: " << c.items[i].text;
      EXPECT_TRUE(testing::WithinF32Tolerance(result->scores[i], c.items[i].score))
          << "item: " << c.items[i].text << " got " << result->scores[i] << " want "
          << c.items[i].score;
      ++scored;
    }
  }
  EXPECT_GT(scored, 0);
}

TEST(Qwen3RerankerEngineTest, PresetFromOptionsReproducesGolden) {
  ExpectGolden(testing::ModelDir(kModel), Preset(kJobInstruction));
}

// The same preset named in rankd.yaml beside the weights (a directory of links to the model's
// files).
TEST(Qwen3RerankerEngineTest, PresetFromRankdYamlReproducesGolden) {
  std::string dir = ::testing::TempDir() + "/qwen3_preset_XXXXXX";
  ASSERT_NE(mkdtemp(dir.data()), nullptr);
  for (const auto& e : std::filesystem::directory_iterator(testing::ModelDir(kModel))) {
    std::filesystem::create_symlink(std::filesystem::absolute(e.path()),
                                    std::filesystem::path(dir) / e.path().filename());
  }
  std::ofstream(dir + "/rankd.yaml")
      << "preset: qwen3-reranker\ninstruction: \"" << kJobInstruction << "\"\n";
  ExpectGolden(dir, ModelSettings{});
}

// Without the instruction the golden one used, the prefix differs: the preset's instruction is
// live.
TEST(Qwen3RerankerEngineTest, InstructionChangesThePrefix) {
  const Golden g = LoadGolden(kModel);
  EngineOptions o;
  o.model_dir = g.model_dir;
  o.settings = Preset(std::nullopt);
  auto engine = Engine::Create(o, backend::CreateBackend);
  ASSERT_TRUE(engine.ok()) << engine.status();
  auto prefix = (*engine)->EncodeQuery(g.cases[0].query);
  ASSERT_TRUE(prefix.ok()) << prefix.status();
  EXPECT_NE(*prefix, g.cases[0].prefix_ids);
}

}  // namespace
}  // namespace rankd::engine
