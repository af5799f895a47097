#include "tests/common/golden.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "nlohmann/json.hpp"

namespace rankd::testing {

// tests/data: $RANKD_TEST_DATA_DIR when set (binaries moved to another machine), else the source
// tree's path compiled in.
static std::string TestDataDir() {
  const char* env = std::getenv("RANKD_TEST_DATA_DIR");
  return env != nullptr && *env != '\0' ? std::string(env) : std::string(RANKD_TEST_DATA_DIR);
}

std::string ModelDir(const std::string& name) { return TestDataDir() + "/models/" + name; }

static std::vector<GoldenCase> ParseCases(const nlohmann::json& arr) {
  std::vector<GoldenCase> out;
  for (const auto& c : arr) {
    GoldenCase gc;
    gc.query = c.value("query", "");
    gc.prefix_ids = c.at("prefix_ids").get<std::vector<int32_t>>();
    for (const auto& it : c.at("items")) {
      GoldenItem gi;
      gi.text = it.value("text", "");
      if (it.contains("ids")) gi.ids = it["ids"].get<std::vector<int32_t>>();
      if (it.contains("embeddings")) {
        for (const auto& row : it["embeddings"]) {
          for (const auto& v : row) gi.embedding.push_back(v.get<float>());
        }
      }
      gi.score = it.at("score").get<double>();
      if (it.contains("score_bf16_cuda")) gi.score_bf16_cuda = it["score_bf16_cuda"].get<double>();
      gc.items.push_back(std::move(gi));
    }
    out.push_back(std::move(gc));
  }
  return out;
}

Golden LoadGolden(const std::string& model_name) {
  Golden g;
  g.model_dir = ModelDir(model_name);
  std::ifstream in(g.model_dir + "/golden.json");
  EXPECT_TRUE(in.good()) << g.model_dir << "/golden.json";
  nlohmann::json j = nlohmann::json::parse(in);
  const auto& s = j.at("score");
  if (s.at("type") == "classifier") {
    g.head = "classifier:" + std::to_string(s.value("index", 0));
  } else if (s.at("type") == "logit") {
    g.head = "logit:" + std::to_string(s.at("token_id").get<int>());
  } else {
    g.head = "yes_no:" + std::to_string(s.at("yes_id").get<int>()) + "," +
             std::to_string(s.at("no_id").get<int>());
  }
  if (j.contains("query_template")) g.query_template = j["query_template"].get<std::string>();
  if (j.contains("item_template")) g.item_template = j["item_template"].get<std::string>();
  g.cases = ParseCases(j.at("cases"));
  // A golden file with nothing to compare would let every test over it pass.
  EXPECT_FALSE(g.cases.empty()) << g.model_dir << "/golden.json: no cases";
  // Embedding cases are optional (EmbeddingItemScores skips, not passes, without them).
  if (j.contains("embedding_cases")) g.embedding_cases = ParseCases(j["embedding_cases"]);
  return g;
}

std::vector<std::string> GoldenModelNames() {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(TestDataDir() + "/models")) {
    if (std::filesystem::exists(e.path() / "golden.json")) names.push_back(e.path().filename());
  }
  std::sort(names.begin(), names.end());
  return names;
}

bool WithinF32Tolerance(double got, double ref) {
  return std::isfinite(got) && std::abs(got - ref) <= 1e-4 * std::max(1.0, std::abs(ref));
}

bool WithinBf16Tolerance(double got, double ref, std::optional<double> hf_bf16) {
  if (!std::isfinite(got)) return false;
  const double floor = 2e-2 * std::max(1.0, std::abs(ref));
  const double hf_err = hf_bf16 ? 1.5 * std::abs(*hf_bf16 - ref) : 0.0;
  return std::abs(got - ref) <= std::max(floor, hf_err);
}

}  // namespace rankd::testing
