#!/usr/bin/env bash
# Session 37 call 1: the fp8 Hopper GEMM tests at their final tolerances, the demo model's held-out
# MRR@10 in fp8 with the own GEMM (issue 25's bar), and the K-RoPE epilogue's A/B in bf16 and fp8.
B=build-gpu-a
tar -C $B -xJf $B/rankd-bundle.tar.xz
export LD_LIBRARY_PATH=$PWD/$B/lib:/usr/local/cuda/lib64
BIN=$B/bin
L=$OUT/main.log
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > $L
t0=$(date +%s)
timeout 120 $BIN/cuda_hopper_gemm_test --gtest_color=no --gtest_filter='*Fp8*' > $OUT/t_hopper.log 2>&1; echo "hopper fp8 rc=$?" >> $L
grep -E '^\[  (PASSED|FAILED|SKIPPED) +\]|FAILED  \]' $OUT/t_hopper.log | tail -n 8 >> $L
echo "== demo ($(( $(date +%s) - t0 )) s)" >> $L
OUT=/tmp/gc BUNDLE=$B DEMO_PRECISIONS=fp8 timeout 200 scripts/gpu_check.sh demo >> $L 2>&1
cp /tmp/gc/demo.log $OUT/demo.log 2>/dev/null
grep -o "the [^G]*GEMM of [0-9]* rows, [0-9]* -> [0-9]*\|: [^:]* for this shape" /tmp/gc/demo.log | paste - - | sort | uniq -c | head -16 >> $L
echo "== models ($(( $(date +%s) - t0 )) s)" >> $L
timeout 100 $BIN/rankd-bench make-model --preset 379m --out /tmp/m379 --tokenizer-from tests/data/models/llama-cls > /dev/null 2>&1
timeout 150 $BIN/rankd-bench make-model --preset qwen3-0.6b --out /tmp/mq06 --tokenizer-from tests/data/models/llama-cls > /dev/null 2>&1 || echo "0.6b make-model failed" >> $L
E=$OUT/engine.log
echo "== engine ($(( $(date +%s) - t0 )) s)" >> $L
for round in 1 2; do
  for shape in "m379 --tq 50 --ti 150 --ni 50" "m379 --tq 50 --ti 150 --ni 250" "mq06 --tq 50 --ti 150 --ni 50"; do
    set -- $shape; model=/tmp/$1; shift
    for p in bf16 fp8; do
      for v in "-" "RANKD_CUDA_FUSE_K_ROPE=1"; do
        envs=(); [[ $v != - ]] && envs=($v)
        echo "== $model $* $p [$v] round $round" >> $E
        timeout 60 env "${envs[@]}" $BIN/rankd-bench engine --backend cuda --model $model --iters 30 --strategy multi-item --graphs --precision $p "$@" >> $E 2>&1
      done
    done
  done
done
awk '/^== \/tmp/{h=$0} /^backend/{getline v; split(v, a, " +"); print h " | " a[10]}' $E >> $L
echo "== done ($(( $(date +%s) - t0 )) s)" >> $L
