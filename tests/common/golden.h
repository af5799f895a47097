// Golden reference data (tests/data/models/*/golden.json, computed by HF transformers): loading and
// the tolerances of tests/data/README.md.
#ifndef RANKD_TESTS_COMMON_GOLDEN_H_
#define RANKD_TESTS_COMMON_GOLDEN_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace rankd::testing {

struct GoldenItem {
  std::string text;
  std::vector<int32_t> ids;
  std::vector<float> embedding;  // [rows, hidden] for embedding items
  double score = 0;
  std::optional<double> score_bf16_cuda;
};

struct GoldenCase {
  std::string query;
  std::vector<int32_t> prefix_ids;
  std::vector<GoldenItem> items;
};

struct Golden {
  std::string model_dir;
  std::string head;  // "classifier:0", "yes_no:4,5" or "logit:4"
  std::optional<std::string> query_template;
  std::optional<std::string> item_template;
  std::vector<GoldenCase> cases;
  std::vector<GoldenCase> embedding_cases;
};

std::string ModelDir(const std::string& name);  // tests/data/models/<name>
Golden LoadGolden(const std::string& model_name);
// Every model directory under tests/data/models that has a golden.json.
std::vector<std::string> GoldenModelNames();

// float32 backends: |got - ref| <= 1e-4 * max(1, |ref|).
bool WithinF32Tolerance(double got, double ref);
// bf16 backends: error no worse than 1.5x HF's own bf16 error, floor 2e-2 * max(1, |ref|).
bool WithinBf16Tolerance(double got, double ref, std::optional<double> hf_bf16);

}  // namespace rankd::testing

#endif  // RANKD_TESTS_COMMON_GOLDEN_H_
