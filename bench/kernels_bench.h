// rankd-bench kernels: each CUDA kernel of kernels/ launched alone on the standard workload's
// shapes (kernel_cases.h lists the launches), timed with CUDA events: the median time per launch,
// its bytes and FLOPs, and their fractions of the device's DRAM bandwidth and bf16 peak. Built
// only with RANKD_CUDA.
#ifndef RANKD_BENCH_KERNELS_BENCH_H_
#define RANKD_BENCH_KERNELS_BENCH_H_

namespace rankd::bench {

int RunKernelsBench(int argc, char** argv, int first);

}  // namespace rankd::bench

#endif  // RANKD_BENCH_KERNELS_BENCH_H_
