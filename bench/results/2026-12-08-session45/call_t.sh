#!/usr/bin/env bash
# Session 45 (carry ["build-gpu-t"]: cuda_kernels_test and cuda_backend_test of 2abec6e, session
# 45's last kernel commit): the GPU tests of its kernel changes (attention's copy loop and deferred queue
# store, every kernel; RANKD_CUDA_ATTENTION_PREFETCH and RANKD_CUDA_ATTENTION_THREE_BLOCKS: the
# same bits as the default kernels; QkvRope's register diet: qkv_rope_test against the CPU
# reference, and the GEMM tests' unfused RoPE path bit for bit; the last layer's attention on the
# items' last rows: cuda_backend_test's golden scores, ibpc = multi-item, graphs on = off),
# racecheck on the attention cases
# (thread 0's tile copy into shared memory a unit ahead), and the SASS of the default D 64 kernel
# (four blocks) for its instruction counts.
F=build-gpu-t; [[ -x $F/bin/cuda_backend_test ]] || tar -C $F -xJf $F/rankd-bundle.tar.xz
export LD_LIBRARY_PATH=$PWD/$F/lib:/usr/local/cuda/lib64 RANKD_TEST_DATA_DIR=$PWD/tests/data
B=$F/bin; L=$OUT/main.log; t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader >> $L; hostname >> $L
for t in cuda_kernels_test cuda_backend_test; do
  echo "== $t ($(el) s)" >> $L
  timeout 200 $B/$t --gtest_color=no > $OUT/$t.log 2>&1; echo "rc $?" >> $L
  grep -E '^\[ *(FAILED|PASSED) *\]|tests ran|Failure' $OUT/$t.log | head -20 >> $L
done
echo "== racecheck attention ($(el) s)" >> $L
timeout 180 compute-sanitizer --tool racecheck $B/cuda_kernels_test --gtest_color=no \
  --gtest_filter='*PrefixAttention*' > $OUT/racecheck.log 2>&1; echo "rc $?" >> $L
grep -E 'RACECHECK SUMMARY|hazard|PASSED|FAILED' $OUT/racecheck.log | head -10 >> $L
echo "== sass ($(el) s)" >> $L
cuobjdump -sass $B/cuda_kernels_test 2>/dev/null | awk '/Function : .*PrefixAttentionKernelILi64ELb1ELb0ELi1ELb1E/{p=1} p&&/Function : /&&!/ILi64ELb1ELb0ELi1ELb1E/{p=0} p' > $OUT/sass_b4.txt
wc -l $OUT/sass_b4.txt >> $L; gzip -9 $OUT/sass_b4.txt
echo "== done ($(el) s)" >> $L
