// rankd-bench make-model: the qwen3-tiny preset (the qwen3-0.6b code path at test size) writes a
// directory that rankd's loader takes as Qwen3-Reranker's shape (Qwen3ForCausalLM, q/k norm, tied
// embeddings, Qwen3's tokenizer.json and vocabulary) and that `rankd score` scores with no flag but
// the model: the yes/no head from the tokenizer's pieces and the qwen3-reranker prompt.
#include "make_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "rankd/backend/registry.h"
#include "rankd/engine/engine.h"
#include "rankd/model/config.h"

namespace rankd::bench {
namespace {

namespace fs = std::filesystem;

int RunMakeModelCommand(std::vector<std::string> args) {
  args.insert(args.begin(), {"rankd-bench", "make-model"});
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  return RunMakeModel(static_cast<int>(argv.size()), argv.data(), 2);
}

TEST(MakeModelTest, Qwen3TinyLoadsAndScoresWithTheModelDirAlone) {
  const std::string dir = ::testing::TempDir() + "/rankd_make_model_qwen3_tiny";
  fs::remove_all(dir);
  ASSERT_EQ(RunMakeModelCommand({"--preset", "qwen3-tiny", "--out", dir, "--dtype", "f32"}), 0);
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.json",
                        "tokenizer_config.json", "rankd.yaml"}) {
    EXPECT_TRUE(fs::exists(fs::path(dir) / f)) << f;
  }
  absl::StatusOr<model::ModelConfig> config = model::ModelConfig::FromHfDir(dir);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->family, model::Family::kQwen3);
  EXPECT_EQ(config->head_kind, model::HeadKind::kCausalLm);
  EXPECT_TRUE(config->qk_norm);
  EXPECT_TRUE(config->tie_word_embeddings);
  EXPECT_EQ(config->vocab_size, 151669);
  EXPECT_EQ(config->num_kv_heads * 2, config->num_heads);

  engine::EngineOptions o;
  o.model_dir = dir;
  o.backend.threads = 1;
  absl::StatusOr<std::unique_ptr<engine::Engine>> e =
      engine::Engine::Create(o, backend::CreateBackend);
  ASSERT_TRUE(e.ok()) << e.status();
  const backend::HeadSpec& head = (*e)->head();
  EXPECT_EQ(head.type, backend::HeadSpec::Type::kYesNo);
  EXPECT_EQ(head.yes_id, *(*e)->tokenizer().PieceToId("yes"));
  EXPECT_EQ(head.no_id, *(*e)->tokenizer().PieceToId("no"));
  EXPECT_NE(head.yes_id, head.no_id);

  engine::ScoreRequest req;
  req.query = "senior rust engineer in berlin";
  req.items = {engine::Item::Text("Rust developer, Berlin."),
               engine::Item::Text("Line cook wanted. Lyon.")};
  absl::StatusOr<engine::ScoreResult> r = (*e)->Score(req);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->scores.size(), 2u);
  for (float s : r->scores) EXPECT_TRUE(std::isfinite(s)) << s;
  EXPECT_NE(r->scores[0], r->scores[1]);
  EXPECT_GT(r->prefix_tokens, 40);  // the qwen3-reranker system prompt, from rankd.yaml
}

TEST(MakeModelTest, RefusesUnknownPresetAndCausalLmFlagOnQwen3) {
  const std::string dir = ::testing::TempDir() + "/rankd_make_model_refused";
  EXPECT_EQ(RunMakeModelCommand({"--preset", "qwen3-7b", "--out", dir}), 2);
  EXPECT_EQ(RunMakeModelCommand({"--preset", "qwen3-tiny", "--out", dir, "--causal-lm"}), 2);
  EXPECT_FALSE(fs::exists(fs::path(dir) / "model.safetensors"));
}

}  // namespace
}  // namespace rankd::bench
