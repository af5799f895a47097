#!/usr/bin/env bash
# Next session, call A (bundle i of HEAD: BUNDLE_BINS="cuda_backend_test" scripts/make_bundle.sh
# --archive build build-gpu-i; carry ["build-gpu-i"]): the backend's GPU tests under session 43's
# new defaults (attention warpgroups auto; fp8 promoted, gate_up fast): the golden fp8 tests first
# (they never ran with gate_up fast and the others promoted by default), then the rest.
F=build-gpu-i; [[ -x $F/bin/cuda_backend_test ]] || tar -C $F -xJf $F/rankd-bundle.tar.xz
export LD_LIBRARY_PATH=$PWD/$F/lib:/usr/local/cuda/lib64 RANKD_TEST_DATA_DIR=$PWD/tests/data
B=$F/bin; L=$OUT/main.log; t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader >> $L; hostname >> $L
for filter in '*Fp8*' '-*Fp8*'; do
  echo "== cuda_backend_test $filter ($(el) s)" >> $L
  timeout ${TEST_S:-240} $B/cuda_backend_test --gtest_color=no --gtest_filter="$filter" > $OUT/test_${filter//[^a-zA-Z0-9]/}.log 2>&1; echo "rc $?" >> $L
  grep -E '^\[ *(FAILED|PASSED) *\]|tests ran|Failure' $OUT/test_${filter//[^a-zA-Z0-9]/}.log | head -20 >> $L
done
echo "== done ($(el) s)" >> $L
