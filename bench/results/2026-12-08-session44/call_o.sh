#!/usr/bin/env bash
# Session 44 (carry ["build-gpu-o"]: cuda_backend_test and cuda_kernels_test of 069a7ca): every
# GPU test of the two binaries under the new defaults (attention at four blocks a multiprocessor,
# fp8's e4m3 layers gate_up alone).
F=build-gpu-o; [[ -x $F/bin/cuda_backend_test ]] || tar -C $F -xJf $F/rankd-bundle.tar.xz
export LD_LIBRARY_PATH=$PWD/$F/lib:/usr/local/cuda/lib64 RANKD_TEST_DATA_DIR=$PWD/tests/data
B=$F/bin; L=$OUT/main.log; t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader >> $L; hostname >> $L
for t in cuda_kernels_test cuda_backend_test; do
  echo "== $t ($(el) s)" >> $L
  timeout 150 $B/$t --gtest_color=no > $OUT/$t.log 2>&1; echo "rc $?" >> $L
  grep -E '^\[ *(FAILED|PASSED) *\]|tests ran|Failure' $OUT/$t.log | head -20 >> $L
done
echo "== done ($(el) s)" >> $L
