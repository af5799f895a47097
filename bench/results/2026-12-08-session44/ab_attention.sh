#!/usr/bin/env bash
# Session 44: attention A/B, one bundle a call, consecutive calls on one warm machine (F=build-gpu-h:
# e105de3, the baseline; F=build-gpu-k: the first K/V copy before q's rotation (2f7f6bc);
# F=build-gpu-l: the baseline's kernel at 4 blocks a multiprocessor (128 registers) instead of 3).
# Per kernel (rankd-bench kernels --filter attention, Tq 50 and 1024, both shapes) and per pass
# (379M and 0.6B bf16, multi-item, graphs, Tq=50 Ti=150 Ni=50, two rounds).
F=${F:?bundle dir}; [[ -x $F/bin/rankd-bench ]] || tar -C $F -xJf $F/rankd-bundle.tar.xz
export LD_LIBRARY_PATH=$PWD/$F/lib:/usr/local/cuda/lib64 RANKD_TEST_DATA_DIR=$PWD/tests/data
B=$F/bin; L=$OUT/main.log; t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
echo "== $F" >> $L; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader >> $L; hostname >> $L
$B/rankd-bench make-model --preset 379m --out /tmp/m379 --tokenizer-from tests/data/models/llama-cls > /dev/null 2>&1 &
$B/rankd-bench make-model --preset qwen3-0.6b --out /tmp/m06 --tokenizer-from tests/data/models/llama-cls > /dev/null 2>&1 &
for tq in 50 1024; do
  timeout 90 $B/rankd-bench kernels --filter attention --shape both --tq $tq >> $OUT/kernels.log 2>&1
done
grep -E "^(379m|qwen3)" $OUT/kernels.log | grep -v "mma.sync\|pipelined" | awk '{$1=$1; print}' | cut -c1-150 >> $L
wait
echo "== engine ($(el) s)" >> $L
for round in 1 2; do
for v in "m379 bf16" "m06 bf16" "m379 fp8"; do
  set -- $v; model=$1; prec=$2
  timeout 60 $B/rankd-bench engine --backend cuda --model /tmp/$model --iters 30 --strategy multi-item --graphs --precision $prec --tq 50 --ti 150 --ni 50 > $OUT/run.log 2>&1
  echo "[$v] r$round $(grep -A1 '^backend' $OUT/run.log | tail -1 | awk '{print $10}')" >> $L
done; done
echo "== done ($(el) s)" >> $L
