#!/usr/bin/env bash
# Session 42, call 2. Bundle of HEAD: BUNDLE_BINS="cuda_backend_test" scripts/make_bundle.sh
# --archive build build-gpu-i (carry ["build-gpu-i"]); the demo with rankd's own bundle, build-gpu-j
# (call2b.sh: the two together do not fit beside the tree).
# RANKD_CUDA_ATTENTION_WARPGROUPS' GPU test (every block size and auto against the CPU), the
# backend tests through the Hopper GEMM's timed choice (the K-sliced variant among them), the
# q/k norms in the qkv GEMM (RANKD_CUDA_FUSE_QK_NORM=1) fused vs unfused vs the CPU.
F=build-gpu-i; [[ -x $F/bin/cuda_backend_test ]] || tar -C $F -xJf $F/rankd-bundle.tar.xz
export LD_LIBRARY_PATH=$PWD/$F/lib:/usr/local/cuda/lib64 RANKD_TEST_DATA_DIR=$PWD/tests/data
B=$F/bin; L=$OUT/main.log; t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader >> $L; hostname >> $L
echo "== test ($(el) s)" >> $L
timeout 200 $B/cuda_backend_test --gtest_color=no --gtest_filter='*WgmmaAttention*:*QkNormInGemm*:*KRopeInGemm*:*OwnGemm*:*EmbeddingItems*:*GraphsOnAndOff*' > $OUT/test.log 2>&1; echo "rc $?" >> $L
grep -E '^\[ *(FAILED|PASSED) *\]|Failure|tests ran' $OUT/test.log | head -30 >> $L
echo "== done ($(el) s)" >> $L
