#!/usr/bin/env bash
# Session 36 call 1: fp8 Hopper GEMM tests, GEMM table (+ raster-group bisect), fp8 engine A/B,
# demo model fp8 fidelity.
B=build-gpu-a
tar -C $B -xJf $B/rankd-bundle.tar.xz
export LD_LIBRARY_PATH=$PWD/$B/lib:/usr/local/cuda/lib64
BIN=$B/bin
L=$OUT/main.log
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > $L
git log -1 --format=%h >> $L 2>/dev/null
t0=$(date +%s)
echo "== hopper_gemm_test" >> $L
timeout 240 $BIN/cuda_hopper_gemm_test --gtest_color=no > $OUT/t_hopper.log 2>&1; echo "rc=$?" >> $L
grep -E '^\[  (PASSED|FAILED|SKIPPED) +\]|^\[       OK|FAILED  \]' $OUT/t_hopper.log | tail -n 20 >> $L
echo "== backend fp8/own ($(( $(date +%s) - t0 )) s)" >> $L
timeout 300 $BIN/cuda_backend_test --gtest_color=no --gtest_filter='*OwnGemmFp8*:*Fp8Checkpoint*:*Fp8OnSome*:*Fp8Ranking*:CudaPdlTest.*' > $OUT/t_backend.log 2>&1; echo "rc=$?" >> $L
grep -E '^\[  (PASSED|FAILED|SKIPPED) +\]|FAILED  \]' $OUT/t_backend.log | tail -n 20 >> $L
grep -E '^\[stats\].*own gemm fp8' $OUT/t_backend.log >> $L
echo "== kernels gemm ($(( $(date +%s) - t0 )) s)" >> $L
timeout 90 $BIN/rankd-bench kernels --filter gemm --shape 379m > $OUT/k.log 2>&1
timeout 90 $BIN/rankd-bench kernels --filter gemm --shape 379m --gemm-group 0 > $OUT/k_g0.log 2>&1
echo "== make-model ($(( $(date +%s) - t0 )) s)" >> $L
M=/tmp/m379
timeout 200 $BIN/rankd-bench make-model --preset 379m --out $M --tokenizer-from tests/data/models/llama-cls > /dev/null 2>&1
E=$OUT/engine.log
for round in 1 2; do
  for v in "fp8 -" "fp8 RANKD_CUDA_OWN_GEMM=0" "fp8 RANKD_CUDA_FUSE_K_ROPE=1" "bf16 -"; do
    set -- $v; p=$1; envs=(); [[ $2 != - ]] && envs=($2)
    echo "== engine $p [$2] round $round" >> $E
    timeout 120 env "${envs[@]}" $BIN/rankd-bench engine --backend cuda --model $M --tq 50 --ti 150 --ni 50 --iters 30 --strategy multi-item --graphs --precision $p >> $E 2>&1
  done
done
awk '/^== engine/{h=$0} /^backend/{getline v; print h " | " v}' $E >> $L
echo "== demo fidelity ($(( $(date +%s) - t0 )) s)" >> $L
for v in "-" "RANKD_CUDA_OWN_GEMM=0"; do
  envs=(); [[ $v != - ]] && envs=($v)
  echo "-- fp8 [$v]" >> $L
  timeout 150 env "${envs[@]}" /usr/bin/env python3 scripts/eval_demo_model.py --rankd $BIN/rankd --rankd-args "--backend cuda --precision fp8" --no-hf > $OUT/demo.log 2>&1; echo "rc=$?" >> $L
  tail -n 8 $OUT/demo.log >> $L
done
echo "== done ($(( $(date +%s) - t0 )) s)" >> $L
