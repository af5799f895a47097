// rankd-bench load: a gRPC load generator against a running `rankd serve`.
#ifndef RANKD_BENCH_LOAD_BENCH_H_
#define RANKD_BENCH_LOAD_BENCH_H_

namespace rankd::bench {

int RunLoadBench(int argc, char** argv, int first);

}  // namespace rankd::bench

#endif  // RANKD_BENCH_LOAD_BENCH_H_
