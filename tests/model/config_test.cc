#include "rankd/model/config.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tests/common/golden.h"

namespace rankd::model {
namespace {

absl::StatusOr<ModelConfig> Parse(const std::string& json) {
  return ModelConfig::FromJson(json, "cfg.json");
}

constexpr char kBase[] = R"({"architectures": ["%s"], "hidden_size": 64, "num_hidden_layers": 2,
  "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 100 %s})";

std::string Cfg(const std::string& arch, const std::string& extra = "") {
  char buf[1024];
  std::snprintf(buf, sizeof(buf), kBase, arch.c_str(), extra.c_str());
  return buf;
}

void ExpectError(const std::string& json, const std::string& needle) {
  auto c = Parse(json);
  ASSERT_FALSE(c.ok()) << json;
  EXPECT_NE(c.status().message().find(needle), std::string::npos) << c.status();
  EXPECT_NE(c.status().message().find("cfg.json"), std::string::npos) << c.status();
}

TEST(ConfigTest, TransformersFiveStyle) {
  auto c = ModelConfig::FromHfDir(rankd::testing::ModelDir("llama-gqa-yesno"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->family, Family::kLlama);
  EXPECT_EQ(c->head_kind, HeadKind::kCausalLm);
  EXPECT_EQ(c->num_kv_heads, 2);
  EXPECT_EQ(c->head_dim, 16);
  EXPECT_DOUBLE_EQ(c->rope.theta, 500000.0);
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_EQ(c->bos_token_id, 1);
}

TEST(ConfigTest, TransformersFourStyleWithLlama3Rope) {
  auto c = ModelConfig::FromHfDir(rankd::testing::ModelDir("llama3-rope-yesno"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rope.type, RopeType::kLlama3);
  EXPECT_DOUBLE_EQ(c->rope.theta, 500000.0);
  EXPECT_DOUBLE_EQ(c->rope.factor, 8.0);
  EXPECT_EQ(c->rope.original_max_position_embeddings, 64);
  EXPECT_FALSE(c->tie_word_embeddings);
}

TEST(ConfigTest, Qwen2BiasesDerivedHeadDimAndLabels) {
  auto c = ModelConfig::FromHfDir(rankd::testing::ModelDir("qwen2-mqa-cls"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->family, Family::kQwen2);
  EXPECT_TRUE(c->attention_bias);
  EXPECT_EQ(c->head_dim, 16);  // no head_dim key: hidden / heads
  EXPECT_EQ(c->num_kv_heads, 1);
  EXPECT_EQ(c->num_labels, 3);  // from id2label
}

TEST(ConfigTest, Qwen3QkNormAndWideHeads) {
  auto c = ModelConfig::FromHfDir(rankd::testing::ModelDir("qwen3-cls-wide"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->qk_norm);
  EXPECT_EQ(c->q_width(), 144);
  EXPECT_EQ(c->hidden_size, 96);
}

TEST(ConfigTest, DefaultsAndRopeVariants) {
  auto c = Parse(Cfg("LlamaForCausalLM"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->num_kv_heads, 4);
  EXPECT_EQ(c->head_dim, 16);
  EXPECT_EQ(c->rope.type, RopeType::kDefault);
  auto lin =
      Parse(Cfg("LlamaForCausalLM", R"(, "rope_scaling": {"type": "linear", "factor": 2.0})"));
  ASSERT_TRUE(lin.ok()) << lin.status();
  EXPECT_EQ(lin->rope.type, RopeType::kLinear);
  auto five = Parse(Cfg("LlamaForCausalLM",
                        R"(, "rope_parameters": {"rope_type": "default", "rope_theta": 5.0})"));
  ASSERT_TRUE(five.ok());
  EXPECT_DOUBLE_EQ(five->rope.theta, 5.0);
  auto mqa = Parse(Cfg("Qwen2ForCausalLM", R"(, "num_key_value_heads": 1)"));
  ASSERT_TRUE(mqa.ok());
  EXPECT_EQ(mqa->num_kv_heads, 1);
  EXPECT_TRUE(mqa->attention_bias);
  auto cls = Parse(Cfg("LlamaForSequenceClassification"));
  ASSERT_TRUE(cls.ok());
  EXPECT_EQ(cls->num_labels, 2);  // transformers' default
}

TEST(ConfigTest, GemmaScalesOffsetsNormsAndTies) {
  auto c = Parse(Cfg("GemmaForCausalLM", R"(, "head_dim": 32, "hidden_act": "gelu_pytorch_tanh")"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->family, Family::kGemma);
  EXPECT_EQ(c->activation, Activation::kGeluTanh);
  EXPECT_TRUE(c->norm_unit_offset && c->scale_embeddings && c->tie_word_embeddings);
  EXPECT_FALSE(c->sandwich_norms);
  EXPECT_EQ(c->head_dim, 32);
  EXPECT_FLOAT_EQ(c->embedding_scale(), 8.0f);  // sqrt(64)
  EXPECT_FLOAT_EQ(c->attn_scale, 1.0f / std::sqrt(32.0f));
  EXPECT_EQ(c->sliding_window, 0);
  EXPECT_EQ(c->window(0), 0);
  // hidden_activation, when set, is what Gemma's MLP uses; without either, gelu_pytorch_tanh.
  c = Parse(Cfg("GemmaForCausalLM",
                R"(, "hidden_act": "gelu", "hidden_activation": "gelu_pytorch_tanh")"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->activation, Activation::kGeluTanh);
  EXPECT_EQ(Parse(Cfg("GemmaForCausalLM"))->activation, Activation::kGeluTanh);
  EXPECT_FALSE(
      Parse(Cfg("GemmaForCausalLM", R"(, "tie_word_embeddings": false)"))->tie_word_embeddings);
}

TEST(ConfigTest, Gemma2SoftcapsScalarAndSlidingLayers) {
  auto c = Parse(Cfg("Gemma2ForCausalLM", R"(, "num_hidden_layers": 4, "head_dim": 32,
      "query_pre_attn_scalar": 24, "attn_logit_softcapping": 4.0, "final_logit_softcapping": 8.0,
      "sliding_window": 24)"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->family, Family::kGemma2);
  EXPECT_TRUE(c->sandwich_norms && c->norm_unit_offset && c->scale_embeddings);
  EXPECT_FLOAT_EQ(c->attn_scale, 1.0f / std::sqrt(24.0f));
  EXPECT_FLOAT_EQ(c->attn_logit_softcapping, 4.0f);
  EXPECT_FLOAT_EQ(c->final_logit_softcapping, 8.0f);
  EXPECT_EQ(c->sliding_window, 24);
  // transformers' default layer_types: even layers slide.
  EXPECT_EQ(c->sliding_layers, (std::vector<bool>{true, false, true, false}));
  EXPECT_EQ(c->window(0), 24);
  EXPECT_EQ(c->window(1), 0);
  c = Parse(Cfg("Gemma2ForCausalLM", R"(, "sliding_window": 8,
      "layer_types": ["full_attention", "sliding_attention"], "final_logit_softcapping": null)"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->sliding_layers, (std::vector<bool>{false, true}));
  EXPECT_EQ(c->final_logit_softcapping, 0.0f);
  EXPECT_FLOAT_EQ(c->attn_logit_softcapping, 50.0f);  // missing: Gemma2Config's default
  EXPECT_FLOAT_EQ(c->attn_scale, 1.0f / 16.0f);       // query_pre_attn_scalar's default 256
}

TEST(ConfigTest, MistralWindowOnEveryLayerOrNone) {
  auto c = Parse(Cfg("MistralForCausalLM", R"(, "sliding_window": 20)"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->family, Family::kMistral);
  EXPECT_EQ(c->activation, Activation::kSilu);
  EXPECT_FALSE(c->norm_unit_offset || c->scale_embeddings || c->tie_word_embeddings);
  EXPECT_EQ(c->sliding_layers, (std::vector<bool>{true, true}));
  EXPECT_EQ(c->window(1), 20);
  c = Parse(
      Cfg("MistralForSequenceClassification", R"(, "sliding_window": null, "num_labels": 1)"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->head_kind, HeadKind::kSequenceClassification);
  EXPECT_EQ(c->sliding_window, 0);
  EXPECT_EQ(c->sliding_layers, (std::vector<bool>{false, false}));
  // Llama reads no sliding_window.
  EXPECT_EQ(Parse(Cfg("LlamaForCausalLM", R"(, "sliding_window": 20)"))->sliding_window, 0);
}

TEST(ConfigTest, ErrorsNameTheField) {
  ExpectError(Cfg("GemmaForCausalLM", R"(, "hidden_activation": "relu")"),
              "'hidden_activation' 'relu' is not supported");
  ExpectError(
      Cfg("Gemma2ForCausalLM", R"(, "layer_types": ["full_attention", "chunked_attention"])"),
      "layer_types' [1] 'chunked_attention' is not supported");
  ExpectError(Cfg("Gemma2ForCausalLM", R"(, "layer_types": ["full_attention"])"), "layer_types");
  ExpectError(Cfg("Gemma2ForCausalLM", R"(, "sliding_window": null)"),
              "sliding_attention but sliding_window is not set");
  ExpectError(Cfg("MistralForCausalLM", R"(, "sliding_window": 0)"), "sliding_window");
  ExpectError(Cfg("Gemma2ForCausalLM", R"(, "attn_logit_softcapping": -1)"),
              "attn_logit_softcapping");
  ExpectError(Cfg("GemmaForSequenceClassification"), "is not supported");
  ExpectError("not json", "not a JSON object");
  ExpectError(Cfg("GPT2LMHeadModel"), "'GPT2LMHeadModel' is not supported");
  ExpectError(R"({"hidden_size": 4})", "architectures");
  ExpectError(Cfg("LlamaForCausalLM", R"(, "num_key_value_heads": 3)"), "num_key_value_heads");
  ExpectError(Cfg("LlamaForCausalLM", R"(, "head_dim": 7)"), "head_dim");
  ExpectError(Cfg("LlamaForCausalLM", R"(, "rope_scaling": {"rope_type": "yarn", "factor": 2})"),
              "'yarn' is not supported");
  ExpectError(Cfg("LlamaForCausalLM", R"(, "rope_scaling": {"rope_type": "llama3"})"), "factor");
  ExpectError(Cfg("LlamaForCausalLM", R"(, "hidden_act": "gelu")"), "hidden_act");
  ExpectError(Cfg("LlamaForCausalLM", R"(, "vocab_size": "big")"), "vocab_size");
  ExpectError(R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64})", "num_hidden_layers");
  auto missing = ModelConfig::FromHfDir("/nonexistent/model");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("/nonexistent/model/config.json"), std::string::npos);
}

}  // namespace
}  // namespace rankd::model
