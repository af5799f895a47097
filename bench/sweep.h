// rankd-bench sweep: rankd-bench engine over a list of Ni values (and concurrencies), and
// optionally rankd-bench load against a running server over a list of offered loads; writes
// sweep.csv and SVG plots (items/s and p99 vs Ni; p99 and items/s vs offered load).
#ifndef RANKD_BENCH_SWEEP_H_
#define RANKD_BENCH_SWEEP_H_

namespace rankd::bench {

int RunSweep(int argc, char** argv, int first);

}  // namespace rankd::bench

#endif  // RANKD_BENCH_SWEEP_H_
