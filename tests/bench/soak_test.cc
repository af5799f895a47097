// rankd-bench soak against a real `rankd serve` (one CPU worker, the tiny model, a queue of 4 so
// that 2x overflows it at once): a short soak of every phase and the memory probe. Asserts only
// what does not depend on the host's speed: no code but OK and RESOURCE_EXHAUSTED, some
// RESOURCE_EXHAUSTED at 2x, fds, threads and processes back within slack, no worker restarts.
// The latency promises are rankd-bench's to report (RELIABILITY.md, "Overload and soak").
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <thread>

#include "absl/strings/str_cat.h"
#include "soak_bench.h"
#include "tests/common/golden.h"
#include "tests/server/test_server.h"

namespace rankd::bench {
namespace {

using rankd::testing::TestServer;

TEST(SoakTest, OverloadIsRefusedAndTheServerKeepsNoResidue) {
  std::unique_ptr<TestServer> server =
      TestServer::Start(absl::StrCat("model:\n  dir: ", rankd::testing::ModelDir("llama-cls"),
                                     "\n  threads: 1\n"
                                     "server:\n  queue_size: 4\n"
                                     "workers:\n  count: 1\n"));
  ASSERT_NE(server, nullptr);
  ASSERT_TRUE(server->WaitReady(1, std::chrono::seconds(60))) << server->Log();
  SoakOptions o;
  o.load.target = server->target();
  o.load.deadline_ms = 30000;
  o.load.ni = 8;
  o.load.tq = 6;
  o.load.ti = 5;
  o.metrics = absl::StrCat("127.0.0.1:", server->metrics_port());
  o.server_pid = server->pid();
  o.duration = 24;
  o.settle_s = 2;
  o.probe_items = 80;  // 80 x 16000 bytes: over the worker's 1 MiB malloc_trim threshold
  absl::StatusOr<SoakResult> r = RunSoak(o);
  ASSERT_TRUE(r.ok()) << r.status();
  const std::string summary = r->Summary();
  for (const SoakResult::Failure& f : r->failures) {
    for (const char* untimed :
         {kPromiseCodes, kPromiseRefusal, kPromiseRestarts, kPromiseResources, kPromiseProbe}) {
      EXPECT_NE(f.promise, untimed) << f.message << "\n" << summary;
    }
  }
  // The checks above are soak's; the same facts read from the result, so that a soak that
  // checked nothing fails here.
  std::vector<std::string> names;
  for (const SoakPhase& p : r->phases) {
    names.push_back(p.name);
    EXPECT_GT(p.load.ok, 0) << p.name << "\n" << summary;
    for (const auto& [code, n] : p.load.errors) {
      EXPECT_EQ(code, "RESOURCE_EXHAUSTED") << p.name << "\n" << summary;
    }
    if (p.name == "2x") {
      EXPECT_GT(p.load.errors.count("RESOURCE_EXHAUSTED"), 0u) << summary;
    }
  }
  EXPECT_EQ(names, (std::vector<std::string>{"measure", "1x", "2x", "recovery"}));
  EXPECT_EQ(r->worker_restarts, 0);
  ASSERT_GE(r->samples.size(), 10u);  // one a second through 24 s of load
  const SoakSample& first = r->samples.front();
  const SoakSample& last = r->samples.back();
  ASSERT_EQ(first.processes.size(), 2u) << "the server and its worker";
  ASSERT_EQ(last.processes.size(), 2u);
  EXPECT_EQ(first.processes[1].pid, last.processes[1].pid) << "the worker was replaced";
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_LE(last.processes[i].fds, first.processes[i].fds + o.fd_slack) << i;
    EXPECT_LE(last.processes[i].threads, first.processes[i].threads + o.thread_slack) << i;
    EXPECT_GT(last.processes[i].rss_kb, 0);
  }
  EXPECT_EQ(r->probe.status, "OK");
  ASSERT_EQ(r->probe.rss_settled_kb.size(), 1u);
  EXPECT_GT(r->probe.rss_settled_kb[0], 0);
  const nlohmann::json j = r->ToJson(o);
  EXPECT_EQ(j.at("phases").size(), 4u);
  EXPECT_EQ(j.at("ok"), r->failures.empty());
}

TEST(SoakTest, BadOptionsAreRefused) {
  SoakOptions o;
  o.duration = 0;
  EXPECT_TRUE(absl::IsInvalidArgument(RunSoak(o).status()));
  o.duration = 10;
  o.load.target = "no-port";
  EXPECT_TRUE(absl::IsInvalidArgument(RunSoak(o).status()));
}

// The /proc readers on this test's own process: a thread and an fd more are seen.
TEST(SoakTest, ProcessSamplesCountThreadsAndFds) {
  absl::StatusOr<ProcessSample> before = SampleProcess(getpid());
  ASSERT_TRUE(before.ok()) << before.status();
  const int fd = dup(0);
  std::thread t([&] {
    absl::StatusOr<ProcessSample> during = SampleProcess(getpid());
    ASSERT_TRUE(during.ok());
    EXPECT_GE(during->threads, before->threads + 1);
    EXPECT_GE(during->fds, before->fds + 1);
  });
  t.join();
  close(fd);
  EXPECT_TRUE(absl::IsNotFound(SampleProcess(-1).status()));
  EXPECT_TRUE(ChildProcesses(getpid()).empty());
}

}  // namespace
}  // namespace rankd::bench
