#!/usr/bin/env bash
# Session 43: the one call if only one machine comes (bundle h, carry ["build-gpu-h"]): the Hopper
# GEMM tests that gate every unmeasured kernel change (K slices, head norm in the RoPE epilogue,
# six-stage ping-pong, the promoted fp8 kernels), then the engine A/Bs that decide the defaults
# (two rounds, interleaved), the GEMM rows of ping-pong 128 against cuBLASLt, the attention ceiling.
F=build-gpu-h; [[ -x $F/bin/rankd-bench ]] || tar -C $F -xJf $F/rankd-bundle.tar.xz
export LD_LIBRARY_PATH=$PWD/$F/lib:/usr/local/cuda/lib64 RANKD_TEST_DATA_DIR=$PWD/tests/data
B=$F/bin; L=$OUT/main.log; t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader >> $L; hostname >> $L
$B/rankd-bench make-model --preset 379m --out /tmp/m379 --tokenizer-from tests/data/models/llama-cls > /dev/null 2>&1 &
$B/rankd-bench make-model --preset qwen3-0.6b --out /tmp/m06 --tokenizer-from tests/data/models/llama-cls > /dev/null 2>&1 &
echo "== hopper test ($(el) s)" >> $L
timeout ${HOPPER_S:-200} $B/cuda_hopper_gemm_test --gtest_color=no --gtest_filter="${HOPPER_FILTER:-*KSlices*:*RopeHeadNorm*:*RopeEpilogue*:*Precondition*:*EveryEpilogue*:*Fp8Operands*:*GatedFp8*}" > $OUT/hopper.log 2>&1; echo "rc $?" >> $L
grep -E '^\[ *(OK|FAILED|PASSED) *\]|Failure' $OUT/hopper.log | cut -c1-200 | head -40 >> $L
wait
echo "== engine ($(el) s)" >> $L
for round in 1 2; do
for v in "m379 bf16 50 -" "m379 bf16 50 RANKD_CUDA_FOLD_NORMS=1" "m379 bf16 50 RANKD_CUDA_ATTENTION_WARPGROUPS=auto" "m379 bf16 1024 -" "m379 bf16 1024 RANKD_CUDA_ATTENTION_WARPGROUPS=auto" "m379 fp8 50 -" "m379 fp8 50 RANKD_CUDA_FP8_PROMOTED=1" "m379 fp8 50 RANKD_CUDA_FP8_PROMOTED=1 RANKD_CUDA_FP8_FAST_ACCUM=gate_up" "m06 bf16 50 -" "m06 bf16 50 RANKD_CUDA_FUSE_QK_NORM=1" "m06 bf16 50 RANKD_CUDA_ATTENTION_OVERLAP=auto"; do
  (( $(el) < ${ENGINE_UNTIL_S:-420} )) || break 2
  set -- $v; model=$1; prec=$2; tq=$3; shift 3; envs=(); [[ $1 != - ]] && envs=("$@")
  echo "== [$v] round $round" >> $OUT/engine.log
  timeout 40 env "${envs[@]}" $B/rankd-bench engine --backend cuda --model /tmp/$model --iters 30 --strategy multi-item --graphs --precision $prec --tq $tq --ti 150 --ni 50 --log-level info > $OUT/run.log 2>&1
  cat $OUT/run.log >> $OUT/engine.log
  echo "[$v] r$round $(grep -A1 '^backend' $OUT/run.log | tail -1) | $(grep -o 'passes with attention in blocks of warpgroups: [0-9]*' $OUT/run.log | tail -1)" >> $L
done; done
echo "== embedding ($(el) s)" >> $L
for v in "-" "RANKD_CUDA_OWN_GEMM_VARIANTS=all"; do
  envs=(); [[ $v != - ]] && envs=($v)
  timeout 40 env "${envs[@]}" $B/rankd-bench engine --backend cuda --model /tmp/m379 --iters 100 --strategy ibpc --graphs --precision bf16 --tq 50 --ni 250 --items embedding --log-level info > $OUT/emb.log 2>&1
  echo "[emb ibpc $v] $(grep -A1 '^backend' $OUT/emb.log | tail -1)" >> $L
done
echo "== gemm ($(el) s)" >> $L
for v in "pp128 T=7500" "cublaslt T=7500"; do
  (( $(el) < 520 )) && timeout 40 $B/rankd-bench kernels --filter gemm --shape 379m --variant "$v" >> $OUT/gemm.log 2>&1
done
grep -E "^379m" $OUT/gemm.log | grep -E " (own|)pp128 |cublaslt" | awk '{print $1, $3, $4, $5, $9}' >> $L
echo "== attention ceiling ($(el) s)" >> $L
(( $(el) < 540 )) && timeout 45 python3 bench/attention_ceiling.py --iters 30 >> $L 2>&1
echo "== done ($(el) s)" >> $L
