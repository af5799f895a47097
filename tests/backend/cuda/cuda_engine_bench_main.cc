// cuda_engine_bench make-model|engine [flags]: rankd-bench's two engine-level commands (same code,
// bench/make_model.cc and bench/engine_bench.cc), in a binary that does not link gRPC/protobuf.
#include <cstdio>
#include <cstring>

#include "engine_bench.h"
#include "make_model.h"

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "make-model") == 0) {
    return rankd::bench::RunMakeModel(argc, argv, 2);
  }
  if (argc >= 2 && std::strcmp(argv[1], "engine") == 0) {
    return rankd::bench::RunEngineBench(argc, argv, 2);
  }
  std::fprintf(stderr, "usage: cuda_engine_bench make-model|engine [flags] (see rankd-bench)\n");
  return 2;
}
