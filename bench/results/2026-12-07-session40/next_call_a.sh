#!/usr/bin/env bash
# For the next session's first device call (A), then B on the same machine if it stays warm: the
# bundle of HEAD as build-gpu-f
#   BUNDLE_BINS="rankd rankd-client rankd-bench cuda_hopper_gemm_test cuda_backend_test" \
#     scripts/make_bundle.sh --archive build build-gpu-f     (carry ["build-gpu-f"])
# Unmeasured since session 40's runs: f8acce8 (the e4m3 epilogue's scales loaded under the last
# wgmma group) and the epilogue buffers sized to the output block (gate_up's ring a sixth stage,
# ping-pong 64 eight). A: the whole Hopper GEMM test binary (about 270 s), every GEMM row, the
# engine (fp8 default against RANKD_CUDA_FP8_PROMOTED=1, whose gate_up kernel now beats cuBLASLt:
# 132 vs 153 us; fast accumulation on every layer and on gate_up alone (the others promoted or on
# cuBLASLt); bf16 with RANKD_CUDA_OWN_GEMM_VARIANTS=all (gate_up's ping-pong in clusters of 2 now
# beats ping-pong alone: 145.4 vs 153.7 us, session 40); 0.6B). B: the golden fp8 backend tests,
# the demo bar, embedding items with and without the norm fold, Nsight Compute.
F=build-gpu-f; [[ -x $F/bin/rankd-bench ]] || tar -C $F -xJf $F/rankd-bundle.tar.xz
export LD_LIBRARY_PATH=$PWD/$F/lib:/usr/local/cuda/lib64 RANKD_TEST_DATA_DIR=$PWD/tests/data
B=$F/bin; L=$OUT/main.log; t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader >> $L; hostname >> $L
[[ -f /tmp/m379/model.safetensors ]] || $B/rankd-bench make-model --preset 379m --out /tmp/m379 --tokenizer-from tests/data/models/llama-cls > /dev/null 2>&1
[[ -f /tmp/m06/model.safetensors ]] || $B/rankd-bench make-model --preset qwen3-0.6b --out /tmp/m06 --tokenizer-from tests/data/models/llama-cls > /dev/null 2>&1
echo "== tests ($(el) s)" >> $L
timeout 330 $B/cuda_hopper_gemm_test --gtest_color=no 2>&1 | grep -E '^\[ *(OK|FAILED|PASSED) *\]|Failure' >> $L
echo "== gemm ($(el) s)" >> $L
timeout 120 $B/rankd-bench kernels --filter gemm --shape 379m --variant T=7500 > $OUT/gemm.log 2>&1
grep -E "pp128 |cublaslt|prom128 " $OUT/gemm.log | awk '{print $3, $4, $9}' >> $L
echo "== engine ($(el) s)" >> $L
for round in 1; do
for v in "m379 fp8 -" "m379 fp8 RANKD_CUDA_FP8_PROMOTED=1" "m379 fp8 RANKD_CUDA_FP8_FAST_ACCUM=1" "m379 fp8 RANKD_CUDA_FP8_FAST_ACCUM=gate_up" "m379 fp8 RANKD_CUDA_FP8_FAST_ACCUM=gate_up RANKD_CUDA_FP8_PROMOTED=1" "m379 bf16 -" "m379 bf16 RANKD_CUDA_OWN_GEMM_VARIANTS=all" "m06 fp8 -" "m06 fp8 RANKD_CUDA_FP8_PROMOTED=1" "m06 fp8 RANKD_CUDA_FP8_FAST_ACCUM=gate_up RANKD_CUDA_FP8_PROMOTED=1" "m06 bf16 -" "m06 bf16 RANKD_CUDA_OWN_GEMM_VARIANTS=all"; do
  set -- $v; model=$1; prec=$2; shift 2; envs=(); [[ $1 != - ]] && envs=("$@")
  echo "== [$v]" >> $OUT/engine.log
  timeout 40 env "${envs[@]}" $B/rankd-bench engine --backend cuda --model /tmp/$model --iters 30 --strategy multi-item --graphs --precision $prec --tq 50 --ti 150 --ni 50 --log-level info >> $OUT/engine.log 2>&1
  echo "[$round $v] $(grep -A1 '^backend' $OUT/engine.log | tail -1)" >> $L
done; done
echo "== done ($(el) s)" >> $L
