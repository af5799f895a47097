#!/usr/bin/env bash
# The whole Hopper GEMM test binary on the new bundle (call 2 ran out of its 200 s), the fp8/GLU
# kernel tests.
E=build-gpu-e; [[ -x $E/bin/rankd-bench ]] || { mkdir -p $E && tar -C $E -xJf $E/rankd-bundle.tar.xz; }
export LD_LIBRARY_PATH=$PWD/$E/lib:/usr/local/cuda/lib64 RANKD_TEST_DATA_DIR=$PWD/tests/data
L=$OUT/main.log; hostname >> $L
timeout 120 $E/bin/cuda_kernels_test --gtest_color=no --gtest_filter='*Fp8*:*Glu*:*Quant*' 2>&1 | grep -E '^\[  (PASSED|FAILED)|FAILED  \]' >> $L
timeout 420 $E/bin/cuda_hopper_gemm_test --gtest_color=no > $OUT/hopper.log 2>&1; echo "rc=$?" >> $L
grep -E '^\[ *(OK|FAILED|PASSED) *\]' $OUT/hopper.log >> $L
