#!/usr/bin/env bash
# Session 36 call 2: the fp8 Hopper GEMM test again (tolerance from call 1), the demo model's fp8
# fidelity on the default (own GEMM timed), fp8 shapes own vs cuBLASLt, fp8 profile.
B=build-gpu-a
tar -C $B -xJf $B/rankd-bundle.tar.xz
export LD_LIBRARY_PATH=$PWD/$B/lib:/usr/local/cuda/lib64
BIN=$B/bin
L=$OUT/main.log
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > $L
t0=$(date +%s)
timeout 120 $BIN/cuda_hopper_gemm_test --gtest_color=no --gtest_filter='*Fp8*' > $OUT/t_hopper.log 2>&1; echo "hopper fp8 rc=$?" >> $L
grep -E '^\[  (PASSED|FAILED|SKIPPED) +\]|^\[       OK|FAILED  \]' $OUT/t_hopper.log | tail -n 8 >> $L
echo "== demo ($(( $(date +%s) - t0 )) s)" >> $L
for p in fp8 bf16; do
  timeout 60 /usr/bin/env python3 scripts/eval_demo_model.py --rankd $BIN/rankd --rankd-args "--backend cuda --precision $p" --no-hf --json /tmp/demo_$p.json > $OUT/demo_$p.log 2>&1; echo "demo $p rc=$?" >> $L
  python3 -c "import json; m=json.load(open('/tmp/demo_$p.json'))['metrics']['rankd']; print('$p', {k: round(v['mrr@10'], 4) for k, v in m.items()})" >> $L 2>&1
  grep -o "the [^G]*GEMM of [0-9]* rows, [0-9]* -> [0-9]*\|: [^:]* for this shape" $OUT/demo_$p.log | paste - - | sort | uniq -c | head -16 >> $L
done
echo "== models ($(( $(date +%s) - t0 )) s)" >> $L
M=/tmp/m379; Q=/tmp/mq06
timeout 100 $BIN/rankd-bench make-model --preset 379m --out $M --tokenizer-from tests/data/models/llama-cls > /dev/null 2>&1
timeout 150 $BIN/rankd-bench make-model --preset qwen3-0.6b --out $Q --tokenizer-from tests/data/models/llama-cls > /dev/null 2>&1 || echo "0.6b make-model failed" >> $L
E=$OUT/engine.log
echo "== engine ($(( $(date +%s) - t0 )) s)" >> $L
for round in 1 2; do
  for shape in "m379 --tq 50 --ti 150 --ni 50" "m379 --tq 50 --ti 150 --ni 250" "m379 --tq 50 --ti 32 --ni 50" "m379 --tq 50 --ti 16 --ni 50 --concurrency 8" "m379 --tq 1024 --ti 150 --ni 50" "m379 --tq 50 --ni 250 --items embedding" "mq06 --tq 50 --ti 150 --ni 50" "mq06 --tq 50 --ti 150 --ni 250"; do
    set -- $shape; model=/tmp/$1; shift
    for v in "-" "RANKD_CUDA_OWN_GEMM=0" "RANKD_CUDA_FUSE_K_ROPE=1"; do
      envs=(); [[ $v != - ]] && envs=($v)
      echo "== $model $* [$v] round $round" >> $E
      timeout 60 env "${envs[@]}" $BIN/rankd-bench engine --backend cuda --model $model --iters 30 --strategy multi-item --graphs --precision fp8 "$@" >> $E 2>&1
    done
  done
done
awk '/^== \/tmp/{h=$0} /^backend/{getline v; split(v, a, " +"); print h " | " a[10]}' $E >> $L
echo "== profile ($(( $(date +%s) - t0 )) s)" >> $L
for v in "-" "RANKD_CUDA_FUSE_K_ROPE=1" "RANKD_CUDA_OWN_GEMM=0"; do
  envs=(); [[ $v != - ]] && envs=($v)
  echo "===== profile fp8 [$v]" >> $OUT/profile.log
  timeout 60 env RANKD_CUDA_PROFILE=1 "${envs[@]}" $BIN/rankd-bench engine --backend cuda --model $M --tq 50 --ti 150 --ni 50 --iters 10 --strategy multi-item --precision fp8 >> $OUT/profile.log 2>&1
done
echo "== done ($(( $(date +%s) - t0 )) s)" >> $L
