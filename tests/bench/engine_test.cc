// rankd-bench engine and sweep on the CPU backend with the tiny model: a small run gives finite
// numbers, and shapes that cannot run are refused with InvalidArgument (exit code 2 from the
// commands) instead of crashing or printing NaN rows. No speed assertions.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine_bench.h"
#include "sweep.h"
#include "tests/common/golden.h"

namespace rankd::bench {
namespace {

EngineBenchOptions SmallOptions() {
  EngineBenchOptions o;
  o.model_dir = rankd::testing::ModelDir("llama-cls");
  o.threads = 1;
  o.tq = 4;
  o.ti = 3;
  o.ni = 2;
  o.concurrency = 2;
  o.iters = 2;
  o.warmup = 0;
  return o;
}

// Runs a rankd-bench command function on argv = {"rankd-bench", args...}.
int RunCommand(int (*command)(int, char**, int), std::vector<std::string> args) {
  args.insert(args.begin(), "rankd-bench");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  return command(static_cast<int>(argv.size()), argv.data(), 2);
}

class EngineBenchTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto backend = MakeBenchBackend(SmallOptions());
    ASSERT_TRUE(backend.ok()) << backend.status();
    backend_ = std::move(*backend).release();
  }
  static void TearDownTestSuite() { delete backend_; }

  static backend::Backend* backend_;
};

backend::Backend* EngineBenchTest::backend_ = nullptr;

TEST_F(EngineBenchTest, SmallRunGivesFiniteNumbers) {
  for (const char* items : {"ids", "embedding"}) {
    EngineBenchOptions o = SmallOptions();
    o.items = items;
    absl::StatusOr<EngineBenchResult> r = RunEngine(*backend_, o);
    ASSERT_TRUE(r.ok()) << items << ": " << r.status();
    EXPECT_TRUE(std::isfinite(r->items_per_s) && r->items_per_s > 0) << items;
    EXPECT_TRUE(std::isfinite(r->p99_ms)) << items;
  }
}

TEST_F(EngineBenchTest, BadShapesAreInvalidArgument) {
  // Each case breaks one option; the message must name its flag.
  const std::vector<std::pair<std::string, std::function<void(EngineBenchOptions&)>>> cases = {
      {"--tq", [](EngineBenchOptions& o) { o.tq = 0; }},
      {"--ti", [](EngineBenchOptions& o) { o.ti = 0; }},
      {"--ni", [](EngineBenchOptions& o) { o.ni = 0; }},
      {"--iters", [](EngineBenchOptions& o) { o.iters = 0; }},
      {"--concurrency", [](EngineBenchOptions& o) { o.concurrency = 0; }},
      {"--warmup", [](EngineBenchOptions& o) { o.warmup = -1; }},
      {"--items", [](EngineBenchOptions& o) { o.items = "foo"; }},
  };
  for (const auto& [flag, breakit] : cases) {
    EngineBenchOptions o = SmallOptions();
    breakit(o);
    absl::StatusOr<EngineBenchResult> r = RunEngine(*backend_, o);
    ASSERT_FALSE(r.ok()) << flag;
    EXPECT_TRUE(absl::IsInvalidArgument(r.status())) << flag << ": " << r.status();
    EXPECT_NE(r.status().message().find(flag), std::string::npos) << r.status();
  }
}

// engine's and sweep's shared flags reach the backend's options.
TEST(BenchFlagsTest, BackendFlagsReachBackendOptions) {
  cli::FlagSet flags("test");
  EngineBenchOptions o;
  AddEngineBenchFlags(flags, &o);
  EXPECT_EQ(BenchBackendOptions(o).precision, "bf16");  // the default
  std::vector<std::string> args = {"rankd-bench", "--backend",  "cuda",       "--precision",
                                   "fp8",         "--strategy", "multi-item", "--no-graphs"};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  ASSERT_TRUE(flags.Parse(static_cast<int>(argv.size()), argv.data(), 1, nullptr).ok());
  const backend::BackendOptions bo = BenchBackendOptions(o);
  EXPECT_EQ(bo.kind, "cuda");
  EXPECT_EQ(bo.precision, "fp8");
  EXPECT_EQ(bo.strategy, "multi-item");
  EXPECT_FALSE(bo.cuda_graphs);
  EXPECT_EQ(EngineBenchResult{}.ToJson(o)["precision"], "fp8");
}

TEST(BenchCommandsTest, BadShapesExitWithCode2) {
  const std::string model = rankd::testing::ModelDir("llama-cls");
  const std::string out = ::testing::TempDir() + "/rankd_sweep_bad_shape";
  for (const char* bad : {"--tq=0", "--iters=0", "--items=foo", "--log-level=loud"}) {
    EXPECT_EQ(
        RunCommand(RunSweep, {"sweep", "--model", model, "--out", out, "--ni-list", "2", bad}), 2)
        << bad;
    EXPECT_EQ(RunCommand(RunEngineBench, {"engine", "--model", model, "--ni", "2", bad}), 2) << bad;
  }
}

}  // namespace
}  // namespace rankd::bench
