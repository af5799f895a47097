// rankd-bench: benchmarks for rankd. `rankd-bench <command> [flags]`.
#include <cstdio>
#include <cstring>
#include <string>

#include "engine_bench.h"
#ifdef RANKD_BENCH_KERNELS
#include "kernels_bench.h"
#endif
#include "load_bench.h"
#include "load_timeline.h"
#include "make_model.h"
#include "soak_bench.h"
#include "sweep.h"

namespace {

constexpr char kUsage[] =
    "rankd-bench: benchmarks for rankd.\n"
    "\n"
    "usage: rankd-bench <command> [flags]   (rankd-bench <command> --help for its flags)\n"
    "\n"
    "commands:\n"
    "  make-model   write a random-weight model in HF layout (--preset 379m|tiny --out DIR)\n"
    "  engine       items/s and latency of one backend on a synthetic workload (C requests\n"
    "               scored together per step with --concurrency C)\n"
    "  load         gRPC load (open or closed loop, in steps with --schedule; repeated (query,\n"
    "               item) pairs with --repeat) against a running rankd serve\n"
    "  soak         overload and soak against a running rankd serve on this host: 1x, 2x and\n"
    "               back to 1x of its sustainable throughput; RSS, fds, threads, restarts\n"
    "  plot-timeline  SVG plots of a `load --timeline` file: p99 vs a target, depth, over time\n"
    "  sweep        engine over Ni values (and load over offered loads): CSV and SVG plots\n"
#ifdef RANKD_BENCH_KERNELS
    "  kernels      each CUDA kernel alone on the workload's shapes: time per launch, bytes,\n"
    "               FLOPs and their fractions of DRAM bandwidth and bf16 peak\n"
#endif
    ;

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string command = argv[1];
  if (command == "make-model") return rankd::bench::RunMakeModel(argc, argv, 2);
  if (command == "engine") return rankd::bench::RunEngineBench(argc, argv, 2);
  if (command == "load") return rankd::bench::RunLoadBench(argc, argv, 2);
  if (command == "soak") return rankd::bench::RunSoakBench(argc, argv, 2);
  if (command == "plot-timeline") return rankd::bench::RunPlotTimeline(argc, argv, 2);
  if (command == "sweep") return rankd::bench::RunSweep(argc, argv, 2);
#ifdef RANKD_BENCH_KERNELS
  if (command == "kernels") return rankd::bench::RunKernelsBench(argc, argv, 2);
#else
  if (command == "kernels") {
    std::fputs("rankd-bench: kernels is not built in (a build with -DRANKD_CUDA=ON has it)\n",
               stderr);
    return 2;
  }
#endif
  std::fprintf(stderr, "rankd-bench: unknown command '%s'\n\n%s", command.c_str(), kUsage);
  return 2;
}
