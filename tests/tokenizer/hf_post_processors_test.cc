// The tokenizer.json post-processors alone (src/tokenizer/hf_post_processors.h): the ids each
// supported type puts around a single sequence, and the load-time errors.
#include "hf_post_processors.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace rankd::tokenizer {
namespace {

using Ids = std::vector<int32_t>;

const JsonFile kFile("tokenizer.json");

Json SpecialToken(const std::string& name) {
  return {{"SpecialToken", {{"id", name}, {"type_id", 0}}}};
}
const Json kSequenceA = {{"Sequence", {{"id", "A"}, {"type_id", 0}}}};

// TemplateProcessing with `single` and the special tokens <s> = [1], </s> = [2, 3].
Json Template(const Json& single) {
  return {{"type", "TemplateProcessing"},
          {"single", single},
          {"special_tokens",
           {{"<s>", {{"id", "<s>"}, {"ids", Json::array({1})}}},
            {"</s>", {{"id", "</s>"}, {"ids", Json::array({2, 3})}}}}}};
}

Decorations Decorate(const Json& j) {
  auto d = PostProcessorFromJson(kFile, j, "post_processor");
  EXPECT_TRUE(d.ok()) << d.status();
  return d.ok() ? *d : Decorations{{-1}, {-1}};
}

std::string Error(const Json& j) {
  auto d = PostProcessorFromJson(kFile, j, "post_processor");
  EXPECT_FALSE(d.ok());
  return d.ok() ? "(ok)" : std::string(d.status().message());
}

TEST(HfPostProcessorsTest, TemplateProcessing) {
  const Decorations both =
      Decorate(Template(Json::array({SpecialToken("<s>"), kSequenceA, SpecialToken("</s>")})));
  EXPECT_EQ(both.prefix, (Ids{1}));
  EXPECT_EQ(both.suffix, (Ids{2, 3}));
  const Decorations eos_only = Decorate(Template(Json::array({kSequenceA, SpecialToken("</s>")})));
  EXPECT_EQ(eos_only.prefix, (Ids{}));
  EXPECT_EQ(eos_only.suffix, (Ids{2, 3}));
}

TEST(HfPostProcessorsTest, NullByteLevelAndSequence) {
  const Decorations none = Decorate(Json(nullptr));
  EXPECT_EQ(none.prefix, (Ids{}));
  EXPECT_EQ(none.suffix, (Ids{}));
  const Decorations byte_level = Decorate(Json{{"type", "ByteLevel"}, {"trim_offsets", false}});
  EXPECT_EQ(byte_level.prefix, (Ids{}));
  EXPECT_EQ(byte_level.suffix, (Ids{}));
  // Each part adds its tokens around what the previous parts added.
  const Json seq = {
      {"type", "Sequence"},
      {"processors",
       Json::array(
           {Json{{"type", "ByteLevel"}}, Template(Json::array({SpecialToken("<s>"), kSequenceA})),
            Template(Json::array({SpecialToken("</s>"), kSequenceA, SpecialToken("<s>")}))})}};
  const Decorations d = Decorate(seq);
  EXPECT_EQ(d.prefix, (Ids{2, 3, 1}));
  EXPECT_EQ(d.suffix, (Ids{1}));
}

TEST(HfPostProcessorsTest, Errors) {
  EXPECT_EQ(Error(Json{{"type", "BertProcessing"}}),
            "tokenizer.json: post_processor.type: post-processor 'BertProcessing' is not "
            "supported (TemplateProcessing, ByteLevel, Sequence)");
  EXPECT_EQ(Error(Json{{"type", "Sequence"},
                       {"processors", Json::array({Json{{"type", "RobertaProcessing"}}})}}),
            "tokenizer.json: post_processor.processors[0].type: post-processor "
            "'RobertaProcessing' is not supported (TemplateProcessing, ByteLevel, Sequence)");
  EXPECT_EQ(Error(Template(Json::array({SpecialToken("<s>")}))),
            "tokenizer.json: post_processor.single: has no sequence A");
  EXPECT_EQ(Error(Template(Json::array({kSequenceA, kSequenceA}))),
            "tokenizer.json: post_processor.single[1]: a single-sequence template holds sequence "
            "A once");
  EXPECT_EQ(Error(Template(Json::array({SpecialToken("<pad>"), kSequenceA}))),
            "tokenizer.json: post_processor.special_tokens: '<pad>' is missing");
}

}  // namespace
}  // namespace rankd::tokenizer
