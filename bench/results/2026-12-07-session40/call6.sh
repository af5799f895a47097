#!/usr/bin/env bash
# fp8 default (cuBLASLt for the row-scaled layers) against RANKD_CUDA_FP8_PROMOTED=1 (the promoted
# own kernels timed per shape) on the new bundle, and the demo model's bar with PROMOTED=1.
E=build-gpu-e; [[ -x $E/bin/rankd-bench ]] || tar -C $E -xJf $E/rankd-bundle.tar.xz
export LD_LIBRARY_PATH=$PWD/$E/lib:/usr/local/cuda/lib64; B=$E/bin; L=$OUT/main.log; t0=$(date +%s)
hostname >> $L
[[ -f /tmp/m379/model.safetensors ]] || $B/rankd-bench make-model --preset 379m --out /tmp/m379 --tokenizer-from tests/data/models/llama-cls > /dev/null 2>&1
[[ -f /tmp/m06/model.safetensors ]] || $B/rankd-bench make-model --preset qwen3-0.6b --out /tmp/m06 --tokenizer-from tests/data/models/llama-cls > /dev/null 2>&1
for round in 1 2; do
for v in "m379 fp8 -" "m379 fp8 RANKD_CUDA_FP8_PROMOTED=1" "m06 fp8 -" "m06 fp8 RANKD_CUDA_FP8_PROMOTED=1"; do
  set -- $v; model=$1; prec=$2; shift 2; envs=(); [[ $1 != - ]] && envs=("$@")
  echo "== [$v]" >> $OUT/engine6.log
  timeout 40 env "${envs[@]}" $B/rankd-bench engine --backend cuda --model /tmp/$model --iters 30 --strategy multi-item --graphs --precision $prec --tq 50 --ti 150 --ni 50 --log-level info >> $OUT/engine6.log 2>&1
  echo "[$round $v] $(grep -A1 '^backend' $OUT/engine6.log | tail -1)" >> $L
done; done
echo "== demo ($(( $(date +%s) - t0 )) s)" >> $L
RANKD_CUDA_FP8_PROMOTED=1 OUT=/tmp/gc6 BUNDLE=$E DEMO_PRECISIONS=fp8 timeout 100 scripts/gpu_check.sh demo 2>&1 | grep 'demo model' >> $L
echo "== done ($(( $(date +%s) - t0 )) s)" >> $L
