#!/usr/bin/env bash
# Session 44 (carry ["build-gpu-n"]: rankd-bench and cuda_kernels_test of d649f2f): the attention
# variants' GPU tests (cuda_kernels_test's attention cases: the early copy and four blocks give the
# queue kernel's bits), their kernel rows (Tq 50 and 1024, both shapes), then the passes with
# RANKD_CUDA_ATTENTION_EARLY_COPY=1 / RANKD_CUDA_ATTENTION_FOUR_BLOCKS=1 against the default,
# interleaved, two rounds; last the fp8 pass's profile.
F=build-gpu-n; [[ -x $F/bin/rankd-bench ]] || tar -C $F -xJf $F/rankd-bundle.tar.xz
export LD_LIBRARY_PATH=$PWD/$F/lib:/usr/local/cuda/lib64 RANKD_TEST_DATA_DIR=$PWD/tests/data
B=$F/bin; L=$OUT/main.log; t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader >> $L; hostname >> $L
$B/rankd-bench make-model --preset 379m --out /tmp/m379 --tokenizer-from tests/data/models/llama-cls > /dev/null 2>&1 &
$B/rankd-bench make-model --preset qwen3-0.6b --out /tmp/m06 --tokenizer-from tests/data/models/llama-cls > /dev/null 2>&1 &
echo "== cuda_kernels_test attention ($(el) s)" >> $L
timeout 200 $B/cuda_kernels_test --gtest_color=no --gtest_filter='*Attention*' > $OUT/test_attention.log 2>&1; echo "rc $?" >> $L
grep -E '^\[ *(FAILED|PASSED) *\]|tests ran|Failure' $OUT/test_attention.log | head -20 >> $L
echo "== kernels ($(el) s)" >> $L
for tq in 50 1024; do
  timeout 120 $B/rankd-bench kernels --filter attention --shape both --tq $tq >> $OUT/kernels.log 2>&1
done
grep -E "^(379m|qwen3)" $OUT/kernels.log | grep -v "mma.sync\|pipelined\|overlap\|wg3" | awk '{$1=$1; print}' | cut -c1-150 >> $L
wait
echo "== engine ($(el) s)" >> $L
for round in 1 2; do
for v in "m379 bf16" "m06 bf16" "m379 fp8"; do
  for sw in "-" "RANKD_CUDA_ATTENTION_EARLY_COPY=1" "RANKD_CUDA_ATTENTION_FOUR_BLOCKS=1"; do
    [[ $v == m06* && $sw == *FOUR* ]] && continue  # (heads of 128: ignored)
    (( $(el) < ${UNTIL_S:-480} )) || break 3
    set -- $v; model=$1; prec=$2; e=(); [[ $sw != - ]] && e=($sw)
    timeout 60 env "${e[@]}" $B/rankd-bench engine --backend cuda --model /tmp/$model --iters 30 --strategy multi-item --graphs --precision $prec --tq 50 --ti 150 --ni 50 > $OUT/run.log 2>&1
    echo "[$v $sw] r$round $(grep -A1 '^backend' $OUT/run.log | tail -1 | awk '{print $10}')" >> $L
  done
done; done
echo "== fp8 profile ($(el) s)" >> $L
timeout 60 env RANKD_CUDA_PROFILE=1 $B/rankd-bench engine --backend cuda --model /tmp/m379 --tq 50 --ti 150 --ni 50 --iters 10 --strategy multi-item --precision fp8 > $OUT/profile_fp8.log 2>&1
sed -n "/score passes/,/host wall/p" $OUT/profile_fp8.log >> $L
echo "== done ($(el) s)" >> $L
