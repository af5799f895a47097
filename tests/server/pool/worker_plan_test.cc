#include "rankd/server/pool/worker_plan.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rankd::server {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::Not;

std::vector<int> Gpus(const std::vector<WorkerSpec>& specs) {
  std::vector<int> g;
  for (const auto& s : specs) g.push_back(s.gpu);
  return g;
}

TEST(PlanWorkersTest, CpuBackendIgnoresGpus) {
  WorkersSection w;
  w.count = 3;
  w.all_gpus = true;
  auto specs = PlanWorkers(w, /*uses_gpus=*/false, /*visible_gpus=*/8, {0, 1});
  ASSERT_TRUE(specs.ok());
  EXPECT_EQ(Gpus(*specs), (std::vector<int>{-1, -1, -1}));
  EXPECT_EQ((*specs)[2].index, 2);
  EXPECT_TRUE((*specs)[0].cpus.empty());
}

TEST(PlanWorkersTest, AllGpusTimesWorkersPerGpuNeighboursShareAGpu) {
  WorkersSection w;
  w.count = 0;
  w.all_gpus = true;
  w.workers_per_gpu = 2;
  auto specs = PlanWorkers(w, true, 3, {});
  ASSERT_TRUE(specs.ok());
  EXPECT_EQ(Gpus(*specs), (std::vector<int>{0, 0, 1, 1, 2, 2}));
}

TEST(PlanWorkersTest, GpuListAndAnExplicitCountWrapAround) {
  WorkersSection w;
  w.all_gpus = false;
  w.gpus = {4, 6};
  w.count = 0;
  auto specs = PlanWorkers(w, true, 8, {});
  ASSERT_TRUE(specs.ok());
  EXPECT_EQ(Gpus(*specs), (std::vector<int>{4, 6}));
  w.count = 5;
  specs = PlanWorkers(w, true, 8, {});
  ASSERT_TRUE(specs.ok());
  EXPECT_EQ(Gpus(*specs), (std::vector<int>{4, 6, 4, 6, 4}));
}

TEST(PlanWorkersTest, CudaWithoutAVisibleGpuFails) {
  WorkersSection w;
  w.count = 0;
  auto specs = PlanWorkers(w, true, 0, {});
  EXPECT_FALSE(specs.ok());
  EXPECT_THAT(std::string(specs.status().message()), HasSubstr("workers.gpus"));
}

TEST(PlanWorkersTest, AutoAffinitySplitsTheCpusEvenly) {
  WorkersSection w;
  w.count = 3;
  w.cpu_affinity = "auto";
  auto specs = PlanWorkers(w, false, 0, {0, 1, 2, 3, 4, 5, 6, 7});
  ASSERT_TRUE(specs.ok());
  EXPECT_EQ((*specs)[0].cpus, (std::vector<int>{0, 1}));
  EXPECT_EQ((*specs)[1].cpus, (std::vector<int>{2, 3, 4}));
  EXPECT_EQ((*specs)[2].cpus, (std::vector<int>{5, 6, 7}));
  // More workers than CPUs: one CPU each, round robin.
  specs = PlanWorkers(w, false, 0, {2, 5});
  ASSERT_TRUE(specs.ok());
  EXPECT_EQ((*specs)[0].cpus, std::vector<int>{2});
  EXPECT_EQ((*specs)[1].cpus, std::vector<int>{5});
  EXPECT_EQ((*specs)[2].cpus, std::vector<int>{2});
}

TEST(PlanWorkersTest, ExplicitAffinityNeedsOneListPerWorker) {
  WorkersSection w;
  w.count = 2;
  w.cpu_affinity = "explicit";
  w.cpu_sets = {{0, 1}, {2, 3}};
  auto specs = PlanWorkers(w, false, 0, {});
  ASSERT_TRUE(specs.ok());
  EXPECT_EQ((*specs)[1].cpus, (std::vector<int>{2, 3}));
  w.cpu_sets = {{0}};
  specs = PlanWorkers(w, false, 0, {});
  EXPECT_FALSE(specs.ok());
  EXPECT_THAT(std::string(specs.status().message()), HasSubstr("1 CPU lists for 2 workers"));
}

// Everything but the socket and the index travels in the config file (ServeConfigToYaml; its
// round trip is config_test's): adding a setting adds no flag here.
TEST(WorkerCommandLineTest, CarriesOnlyTheSocketTheIndexAndTheConfigFile) {
  WorkerSpec spec;
  spec.index = 3;
  spec.gpu = 5;
  const auto argv = WorkerCommandLine("/tmp/rankd-x/config.yaml", spec, "/tmp/s.sock");
  EXPECT_THAT(argv, ::testing::ElementsAre("rankd", "worker", "--socket=/tmp/s.sock", "--index=3",
                                           "--config=/tmp/rankd-x/config.yaml"));
}

TEST(WorkerEnvironmentTest, SetsTheGpuAndTheCpuThreads) {
  ServeConfig c;
  c.model.engine.backend.kind = "cpu";
  c.model.engine.backend.threads = 2;
  WorkerSpec spec;
  const std::vector<std::string> parent = {"PATH=/bin", "CUDA_VISIBLE_DEVICES=0,1",
                                           "OPENBLAS_NUM_THREADS=16"};
  auto env = WorkerEnvironment(parent, c, spec);
  EXPECT_THAT(env, Contains("PATH=/bin"));
  EXPECT_THAT(env, Not(Contains(::testing::StartsWith("CUDA_VISIBLE_DEVICES"))));
  EXPECT_THAT(env, Contains("OPENBLAS_NUM_THREADS=2"));
  EXPECT_THAT(env, Not(Contains("OPENBLAS_NUM_THREADS=16")));
  c.model.engine.backend.kind = "cuda";
  spec.gpu = 1;
  env = WorkerEnvironment(parent, c, spec);
  EXPECT_THAT(env, Contains("CUDA_VISIBLE_DEVICES=1"));
  EXPECT_THAT(env, Contains("OPENBLAS_NUM_THREADS=16"));  // not the CPU backend's business
}

}  // namespace
}  // namespace rankd::server
