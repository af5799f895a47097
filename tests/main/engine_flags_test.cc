// The engine flags of `rankd score` and `rankd serve` (AddEngineFlags): the backend's flags reach
// EngineOptions::backend, and a flag not given keeps the value it started from (serve: the
// config file's).
#include "engine_flags.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace rankd::cli {
namespace {

engine::EngineOptions ParseEngineFlags(engine::EngineOptions start, std::vector<std::string> args) {
  FlagSet flags("test");
  EngineFlags values(std::move(start));
  AddEngineFlags(flags, &values);
  args.insert(args.begin(), "rankd");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  EXPECT_TRUE(flags.Parse(static_cast<int>(argv.size()), argv.data(), 1, nullptr).ok());
  return ToEngineOptions(values, flags);
}

TEST(EngineFlagsTest, BackendFlagsReachBackendOptions) {
  const engine::EngineOptions o = ParseEngineFlags(
      {}, {"--backend", "cuda", "--precision", "fp8", "--strategy", "multi-item", "--no-graphs"});
  EXPECT_EQ(o.backend.kind, "cuda");
  EXPECT_EQ(o.backend.precision, "fp8");
  EXPECT_EQ(o.backend.strategy, "multi-item");
  EXPECT_FALSE(o.backend.cuda_graphs);
}

TEST(EngineFlagsTest, PrecisionNotGivenKeepsTheStartingValue) {
  EXPECT_EQ(ParseEngineFlags({}, {}).backend.precision, "bf16");
  engine::EngineOptions from_config;
  from_config.backend.precision = "fp8";
  EXPECT_EQ(ParseEngineFlags(from_config, {"--backend", "cuda"}).backend.precision, "fp8");
  EXPECT_EQ(ParseEngineFlags(from_config, {"--precision", "bf16"}).backend.precision, "bf16");
}

}  // namespace
}  // namespace rankd::cli
