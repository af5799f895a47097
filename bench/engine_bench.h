// rankd-bench engine: throughput and latency of one backend on the standard workload shape.
#ifndef RANKD_BENCH_ENGINE_BENCH_H_
#define RANKD_BENCH_ENGINE_BENCH_H_

#include "rankd/model/config.h"

namespace rankd::bench {

// Model FLOPs of scoring one item of `ti` tokens after a cached prefix of `tq` tokens: the linear
// layers (2 x weights x tokens) plus attention (QK^T and PV over prefix + causal own tokens).
double ItemFlops(const model::ModelConfig& c, int tq, int ti);

int RunEngineBench(int argc, char** argv, int first);

}  // namespace rankd::bench

#endif  // RANKD_BENCH_ENGINE_BENCH_H_
