#!/usr/bin/env bash
# For the next session's first device call (bundle of HEAD as build-gpu-c): what session 39 built
# and could not run: ec95602 (Silu's fast division: the gated epilogue), cf1609c (the fold's row
# sums before the K blocks). Tests, the gated GEMM rows, the engine's bf16/fp8 A/B with the fold,
# the demo model with the fold (bf16), fp8's default, fast accumulation, and fast accumulation on
# gate_up alone (qkv bf16: does the bar hold with only gate_up's fused e4m3 epilogue?). At most 8
# files come back.
mkdir -p build-gpu-c && tar -C build-gpu-c -xJf build-gpu-c/rankd-bundle.tar.xz
export LD_LIBRARY_PATH=$PWD/build-gpu-c/lib:/usr/local/cuda/lib64 RANKD_TEST_DATA_DIR=$PWD/tests/data
B=build-gpu-c/bin
L=$OUT/main.log
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader >> $L
timeout 150 $B/cuda_hopper_gemm_test --gtest_color=no --gtest_filter='*EveryEpilogue*:*Cublas*:*NormFold*:*GatedFp8*' 2>&1 | grep -E '^\[  (PASSED|FAILED)|FAILED  \]' >> $L
timeout 60 $B/cuda_kernels_test --gtest_color=no --gtest_filter='*Glu*' 2>&1 | grep -E '^\[  (PASSED|FAILED)|FAILED  \]' >> $L
echo "== gemm ($(el) s)" >> $L
timeout 90 $B/rankd-bench kernels --filter gemm --shape 379m --variant T=7500 > $OUT/gemm.log 2>&1
grep -E "gate_up|fold" $OUT/gemm.log | awk '{print $3, $4, $5, $9}' >> $L
echo "== demo ($(el) s)" >> $L
for v in "bf16 RANKD_CUDA_FOLD_NORMS=1" "fp8 -" "fp8 RANKD_CUDA_FP8_FAST_ACCUM=1" "fp8 RANKD_CUDA_FP8_FAST_ACCUM=1 RANKD_CUDA_FP8_LINEARS=gate_up"; do
  set -- $v; prec=$1; shift; envs=(); [[ $1 != - ]] && envs=("$@")
  env "${envs[@]}" OUT=/tmp/gc_${prec}_$# BUNDLE=build-gpu-c DEMO_PRECISIONS=$prec timeout 90 scripts/gpu_check.sh demo 2>&1 | grep 'demo model' | sed "s/^/[$v] /" >> $L
done
echo "== engine ($(el) s)" >> $L
timeout 60 $B/rankd-bench make-model --preset 379m --out /tmp/m379 --tokenizer-from tests/data/models/llama-cls > /dev/null 2>&1
for v in "bf16 -" "bf16 RANKD_CUDA_FOLD_NORMS=1" "fp8 -" "fp8 RANKD_CUDA_FP8_FAST_ACCUM=1" "fp8 RANKD_CUDA_FP8_FAST_ACCUM=1 RANKD_CUDA_FP8_LINEARS=gate_up" "bf16 -" "bf16 RANKD_CUDA_FOLD_NORMS=1"; do
  set -- $v; prec=$1; shift; envs=(); [[ $1 != - ]] && envs=("$@")
  echo "== [$v]" >> $OUT/engine.log
  timeout 30 env "${envs[@]}" $B/rankd-bench engine --backend cuda --model /tmp/m379 --iters 30 --strategy multi-item --graphs --precision $prec --tq 50 --ti 150 --ni 50 --log-level info >> $OUT/engine.log 2>&1
  echo "[$v] $(grep -A1 '^backend' $OUT/engine.log | tail -1)" >> $L
done
echo "== done ($(el) s)" >> $L
