#!/usr/bin/env bash
# The next session's first device call (A), then B (next_call_b.sh). Bundle of HEAD as build-gpu-f:
#   BUNDLE_BINS="rankd rankd-client rankd-bench cuda_hopper_gemm_test cuda_kernels_test" \
#     scripts/make_bundle.sh --archive build build-gpu-f     (carry ["build-gpu-f"])
# (the whole archive no longer fits beside the tree in the device tool's 64 MiB: B carries its own.)
# Unmeasured since session 40's runs: f8acce8 (the e4m3 epilogue's scales loaded under the last
# wgmma group), the epilogue buffers sized to the output block (gate_up's ring a sixth stage,
# ping-pong 64 eight), 88d43d5 + 91a98ca (RANKD_CUDA_ATTENTION_OVERLAP). A: the whole Hopper GEMM test
# binary (about 270 s), the attention kernel tests (overlap = queue bit for bit), attention's rows
# at Tq=50 and 1024, the engine: fp8 default against RANKD_CUDA_FP8_PROMOTED=1 (whose gate_up
# kernel now beats cuBLASLt: 132 vs 153 us), fast accumulation on every layer and on gate_up alone,
# bf16 with RANKD_CUDA_OWN_GEMM_VARIANTS=all (gate_up's ping-pong in clusters of 2 now beats
# ping-pong alone: 145.4 vs 153.7 us) and with RANKD_CUDA_ATTENTION_OVERLAP=1 (379M Tq=50 and
# 1024, 0.6B: heads of 64 and 128).
F=build-gpu-f; [[ -x $F/bin/rankd-bench ]] || tar -C $F -xJf $F/rankd-bundle.tar.xz
export LD_LIBRARY_PATH=$PWD/$F/lib:/usr/local/cuda/lib64 RANKD_TEST_DATA_DIR=$PWD/tests/data
B=$F/bin; L=$OUT/main.log; t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader >> $L; hostname >> $L
[[ -f /tmp/m379/model.safetensors ]] || $B/rankd-bench make-model --preset 379m --out /tmp/m379 --tokenizer-from tests/data/models/llama-cls > /dev/null 2>&1
[[ -f /tmp/m06/model.safetensors ]] || $B/rankd-bench make-model --preset qwen3-0.6b --out /tmp/m06 --tokenizer-from tests/data/models/llama-cls > /dev/null 2>&1
echo "== tests ($(el) s)" >> $L
timeout 100 $B/cuda_kernels_test --gtest_color=no --gtest_filter='*Attention*' 2>&1 | grep -E '^\[ *(FAILED|PASSED) *\]|Failure|overlapped' | head -20 >> $L
timeout 330 $B/cuda_hopper_gemm_test --gtest_color=no 2>&1 | grep -E '^\[ *(OK|FAILED|PASSED) *\]|Failure' >> $L
echo "== attention rows ($(el) s)" >> $L
for tq in 50 1024; do
  timeout 90 $B/rankd-bench kernels --filter attention --shape both --tq $tq > $OUT/attention_$tq.log 2>&1
  grep -E "wgmma" $OUT/attention_$tq.log | sed "s/^/tq=$tq /" | cut -c1-160 >> $L
done
echo "== engine ($(el) s)" >> $L
run() {  # run MODEL PRECISION "ENV..." [more rankd-bench flags]
  local model=$1 prec=$2 envs=() ; [[ $3 != - ]] && envs=($3); shift 3
  echo "== [$model $prec ${envs[*]} $*]" >> $OUT/engine.log
  timeout 40 env "${envs[@]}" $B/rankd-bench engine --backend cuda --model /tmp/$model --iters 30 --strategy multi-item --graphs --precision $prec --ti 150 --ni 50 --log-level info "$@" >> $OUT/engine.log 2>&1
  echo "[$model $prec ${envs[*]} $*] $(grep -A1 '^backend' $OUT/engine.log | tail -1)" >> $L
}
for v in "-" "RANKD_CUDA_FP8_PROMOTED=1" "RANKD_CUDA_FP8_FAST_ACCUM=1" "RANKD_CUDA_FP8_FAST_ACCUM=gate_up" "RANKD_CUDA_FP8_FAST_ACCUM=gate_up RANKD_CUDA_FP8_PROMOTED=1"; do
  run m379 fp8 "$v" --tq 50
done
for v in "-" "RANKD_CUDA_OWN_GEMM_VARIANTS=all" "RANKD_CUDA_ATTENTION_OVERLAP=1" "-"; do run m379 bf16 "$v" --tq 50; done
for v in "-" "RANKD_CUDA_ATTENTION_OVERLAP=1"; do run m379 bf16 "$v" --tq 1024; done
for v in "-" "RANKD_CUDA_FP8_PROMOTED=1" "RANKD_CUDA_FP8_FAST_ACCUM=gate_up RANKD_CUDA_FP8_PROMOTED=1"; do run m06 fp8 "$v" --tq 50; done
for v in "-" "RANKD_CUDA_OWN_GEMM_VARIANTS=all" "RANKD_CUDA_ATTENTION_OVERLAP=1"; do run m06 bf16 "$v" --tq 50; done
echo "== done ($(el) s)" >> $L
