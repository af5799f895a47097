#!/usr/bin/env bash
# The next session's first call (prepared in session 41; it got no machine then). Bundle of HEAD:
#   BUNDLE_BINS="rankd rankd-bench cuda_hopper_gemm_test" scripts/make_bundle.sh --archive build \
#     build-gpu-h      (carry ["build-gpu-h"]; tree + bundle must stay under the tool's 64 MiB)
# The Hopper GEMM test binary whole (session 40's f8acce8 / e5a75d0 / 0ae6a48 on a GPU for the
# first time: the gate to turning RANKD_CUDA_FP8_PROMOTED on), the demo model's bar with
# RANKD_CUDA_FP8_PROMOTED=1 (and with gate_up's fast accumulation), a second round of the
# promoted fp8 A/B and the 0.6B's overlap alone, the per-layer GEMM rows, and embedding items
# (ibpc, Ni=250) with and without RANKD_CUDA_FOLD_NORMS=1.
F=build-gpu-h; [[ -x $F/bin/rankd-bench ]] || tar -C $F -xJf $F/rankd-bundle.tar.xz
export LD_LIBRARY_PATH=$PWD/$F/lib:/usr/local/cuda/lib64 RANKD_TEST_DATA_DIR=$PWD/tests/data
B=$F/bin; L=$OUT/main.log; t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader >> $L; hostname >> $L
[[ -f /tmp/m379/model.safetensors ]] || $B/rankd-bench make-model --preset 379m --out /tmp/m379 --tokenizer-from tests/data/models/llama-cls > /dev/null 2>&1
echo "== demo ($(el) s)" >> $L
for v in "RANKD_CUDA_FP8_PROMOTED=1" "RANKD_CUDA_FP8_FAST_ACCUM=gate_up RANKD_CUDA_FP8_PROMOTED=1"; do
  env $v OUT=/tmp/gcn BUNDLE=$F DEMO_PRECISIONS=fp8 timeout 80 scripts/gpu_check.sh demo 2>&1 | grep 'demo model' | sed "s/^/[$v] /" >> $L
done
echo "== engine ($(el) s)" >> $L
[[ -f /tmp/m06/model.safetensors ]] || $B/rankd-bench make-model --preset qwen3-0.6b --out /tmp/m06 --tokenizer-from tests/data/models/llama-cls > /dev/null 2>&1
for v in "m379 fp8 -" "m379 fp8 RANKD_CUDA_FP8_PROMOTED=1" "m06 fp8 -" "m06 fp8 RANKD_CUDA_FP8_PROMOTED=1" "m06 bf16 -" "m06 bf16 RANKD_CUDA_ATTENTION_OVERLAP=1"; do
  set -- $v; model=$1; prec=$2; shift 2; envs=(); [[ $1 != - ]] && envs=("$@")
  echo "== [$v]" >> $OUT/engine.log
  timeout 40 env "${envs[@]}" $B/rankd-bench engine --backend cuda --model /tmp/$model --iters 30 --strategy multi-item --graphs --precision $prec --tq 50 --ti 150 --ni 50 --log-level info >> $OUT/engine.log 2>&1
  echo "[$v] $(grep -A1 '^backend' $OUT/engine.log | tail -1)" >> $L
done
echo "== gemm ($(el) s)" >> $L
timeout 120 $B/rankd-bench kernels --filter gemm --shape 379m --variant T=7500 > $OUT/gemm.log 2>&1
grep -E "pp128 |pp128c2 |cublaslt|prom128 " $OUT/gemm.log | awk '{print $3, $4, $9}' >> $L
echo "== embedding items ($(el) s)" >> $L
for round in 1 2; do
for v in "-" "RANKD_CUDA_FOLD_NORMS=1"; do
  envs=(); [[ $v != - ]] && envs=($v)
  echo "== [emb $v]" >> $OUT/engine.log
  timeout 40 env "${envs[@]}" $B/rankd-bench engine --backend cuda --model /tmp/m379 --iters 100 --strategy ibpc --graphs --precision bf16 --tq 50 --ni 250 --items embedding --log-level info >> $OUT/engine.log 2>&1
  echo "[$round emb ibpc $v] $(grep -A1 '^backend' $OUT/engine.log | tail -1)" >> $L
done; done
echo "== hopper test ($(el) s)" >> $L
timeout $(( 590 - $(el) )) $B/cuda_hopper_gemm_test --gtest_color=no 2>&1 | grep -E '^\[ *(OK|FAILED|PASSED) *\]|Failure' >> $L
echo "== done ($(el) s)" >> $L
