#!/usr/bin/env bash
# Session 42 (prepared; no machine came), call 1: the Hopper GEMM's tests and rows. Bundle of HEAD:
#   BUNDLE_BINS="rankd-bench cuda_hopper_gemm_test" scripts/make_bundle.sh --archive build \
#     build-gpu-h      (carry ["build-gpu-h"]; with rankd too it no longer fits beside the tree)
# cuda_hopper_gemm_test: the K slices, the RoPE epilogue's head norm, every epilogue with the 16 KB
# ping-pong buffers (six stages), and the tests of session 40's f8acce8 / e5a75d0 / 0ae6a48 (on a
# GPU for the first time: the gate to RANKD_CUDA_FP8_PROMOTED=1). Then the GEMM rows: ping-pong
# 128 against cuBLASLt in the same call (the six stages' A/B: the ratio against session 41's), the
# K-sliced rows at the embedding pass's 300 rows, the 0.6B's qkv+qknorm.
F=build-gpu-h; [[ -x $F/bin/rankd-bench ]] || tar -C $F -xJf $F/rankd-bundle.tar.xz
export LD_LIBRARY_PATH=$PWD/$F/lib:/usr/local/cuda/lib64 RANKD_TEST_DATA_DIR=$PWD/tests/data
B=$F/bin; L=$OUT/main.log; t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader >> $L; hostname >> $L
echo "== hopper test ($(el) s)" >> $L
timeout ${HOPPER_S:-330} $B/cuda_hopper_gemm_test --gtest_color=no --gtest_filter="${HOPPER_FILTER:-*KSlices*:*RopeHeadNorm*:*RopeEpilogue*:*Precondition*:*EveryEpilogue*:*Fp8Operands*:*GatedFp8*:*Stagger*}" > $OUT/hopper.log 2>&1; echo "rc $?" >> $L
grep -E '^\[ *(OK|FAILED|PASSED) *\]|Failure' $OUT/hopper.log >> $L
echo "== gemm ($(el) s)" >> $L
for v in "pp128 T=7500" "cublaslt T=7500" "T=300" "fold256 T=7500" "foldpp128 T=7500"; do
  timeout 90 $B/rankd-bench kernels --filter gemm --shape 379m --variant "$v" >> $OUT/gemm.log 2>&1
done
timeout 60 $B/rankd-bench kernels --filter gemm --shape qwen3-0.6b --variant "qkv+qknorm" >> $OUT/gemm.log 2>&1
grep -E "^(379m|qwen3)" $OUT/gemm.log | grep -E "pp128 |cublaslt|pp64|pp64ks|qknorm|fold" | awk '{print $1, $3, $4, $5, $9}' >> $L
echo "== attention ceiling ($(el) s)" >> $L
timeout 60 python3 bench/attention_ceiling.py >> $L 2>&1; timeout 40 python3 bench/attention_ceiling.py --tq 50 >> $L 2>&1
echo "== done ($(el) s)" >> $L
