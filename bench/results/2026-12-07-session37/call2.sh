#!/usr/bin/env bash
# Session 37 call 2: the grouped fp8 GEMM (X scales per 64 K columns, promoted) and the gated
# epilogue into e4m3 with group scales. In order of need: kernel tests, the demo model's MRR@10
# (default, down in e4m3, group scales, both), the engine A/B on 379M and the 0.6B shape, the
# backend tests, a profile.
B=build-gpu-a
tar -C $B -xJf $B/rankd-bundle.tar.xz
export LD_LIBRARY_PATH=$PWD/$B/lib:/usr/local/cuda/lib64
export RANKD_TEST_DATA_DIR=$PWD/tests/data
BIN=$B/bin
L=$OUT/main.log
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > $L
t0=$(date +%s)
timeout 150 $BIN/cuda_hopper_gemm_test --gtest_color=no --gtest_filter='*Group*:*GatedFp8*' > $OUT/t_hopper.log 2>&1; echo "hopper rc=$?" >> $L
timeout 60 $BIN/cuda_kernels_test --gtest_color=no --gtest_filter='*Groups*' >> $OUT/t_hopper.log 2>&1; echo "kernels rc=$?" >> $L
grep -E '^\[  (PASSED|FAILED|SKIPPED) +\]|FAILED  \]|^\[       OK' $OUT/t_hopper.log | tail -n 14 >> $L
echo "== demo ($(( $(date +%s) - t0 )) s)" >> $L
n=0
for v in "-" "RANKD_CUDA_FP8_LINEARS=qkv,gate_up,down" "RANKD_CUDA_FP8_GROUP_SCALES=1" "RANKD_CUDA_FP8_GROUP_SCALES=1 RANKD_CUDA_FP8_LINEARS=qkv,gate_up,down"; do
  n=$((n + 1)); envs=(); [[ $v != - ]] && read -r -a envs <<<"$v"
  env "${envs[@]}" OUT=/tmp/gc$n BUNDLE=$B DEMO_PRECISIONS=fp8 timeout 90 scripts/gpu_check.sh demo 2>&1 | grep 'demo model' | sed "s/^/[$v] /" >> $L
done
grep -h 'group-scaled\|SwiGLU to fp8\|rror' /tmp/gc4/demo.log | head -8 > $OUT/demo_grouped.log
echo "== models ($(( $(date +%s) - t0 )) s)" >> $L
timeout 100 $BIN/rankd-bench make-model --preset 379m --out /tmp/m379 --tokenizer-from tests/data/models/llama-cls > /dev/null 2>&1
(( $(date +%s) - t0 < 170 )) && timeout 150 $BIN/rankd-bench make-model --preset qwen3-0.6b --out /tmp/mq06 --tokenizer-from tests/data/models/llama-cls > /dev/null 2>&1 || echo "0.6b make-model failed" >> $L
E=$OUT/engine.log
echo "== engine ($(( $(date +%s) - t0 )) s)" >> $L
for round in 1 2; do
  for shape in "m379 --tq 50 --ti 150 --ni 50" "mq06 --tq 50 --ti 150 --ni 50"; do
    set -- $shape; model=/tmp/$1; shift
    [[ -f $model/model.safetensors ]] || continue
    for v in "-" "RANKD_CUDA_FP8_LINEARS=qkv,gate_up,down" "RANKD_CUDA_FP8_GROUP_SCALES=1" "RANKD_CUDA_FP8_GROUP_SCALES=1 RANKD_CUDA_FP8_LINEARS=qkv,gate_up,down"; do
      envs=(); [[ $v != - ]] && read -r -a envs <<<"$v"
      echo "== $model $* [$v] round $round" >> $E
      timeout 50 env "${envs[@]}" $BIN/rankd-bench engine --backend cuda --model $model --iters 30 --strategy multi-item --graphs --precision fp8 "$@" >> $E 2>&1
    done
  done
done
awk '/^== \/tmp/{h=$0} /^backend/{getline v; split(v, a, " +"); print h " | " a[10]}' $E >> $L
echo "== backend tests ($(( $(date +%s) - t0 )) s)" >> $L
if (( $(date +%s) - t0 < 260 )); then
timeout 80 $BIN/cuda_backend_test --gtest_color=no --gtest_filter='*OwnGemmFp8*:*Fp8OnSome*' > $OUT/t_backend.log 2>&1; echo "backend rc=$?" >> $L
RANKD_CUDA_FP8_GROUP_SCALES=1 timeout 80 $BIN/cuda_backend_test --gtest_color=no --gtest_filter='*OwnGemmFp8*:*Fp8OnSome*' >> $OUT/t_backend.log 2>&1; echo "backend (group scales) rc=$?" >> $L
grep -E '^\[  (PASSED|FAILED|SKIPPED) +\]|FAILED  \]' $OUT/t_backend.log | tail -n 16 >> $L
fi
echo "== profile ($(( $(date +%s) - t0 )) s)" >> $L
for v in "RANKD_CUDA_FP8_LINEARS=qkv,gate_up,down" "RANKD_CUDA_FP8_GROUP_SCALES=1 RANKD_CUDA_FP8_LINEARS=qkv,gate_up,down"; do
  (( $(date +%s) - t0 < 320 )) || break
  envs=(); [[ $v != - ]] && read -r -a envs <<<"$v"
  echo "===== profile fp8 [$v]" >> $OUT/profile.log
  timeout 40 env RANKD_CUDA_PROFILE=1 "${envs[@]}" $BIN/rankd-bench engine --backend cuda --model /tmp/m379 --tq 50 --ti 150 --ni 50 --iters 10 --strategy multi-item --precision fp8 >> $OUT/profile.log 2>&1
done
echo "== done ($(( $(date +%s) - t0 )) s)" >> $L
