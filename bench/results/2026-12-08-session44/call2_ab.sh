#!/usr/bin/env bash
# Session 44, call 2 (carry ["build-gpu-s"]; after call1_setup.sh on the same warm machine): the
# attention A/B interleaved in one call: h (e105de3), k (2f7f6bc: the first K/V copy before q's
# rotation), l (e105de3's kernel at 4 blocks a multiprocessor); libraries from /tmp/keep/lib.
S=build-gpu-s; [[ -d /tmp/keep/lib ]] || { echo "no /tmp/keep: call1_setup.sh first" >> $OUT/main.log; exit 3; }
for x in k l m; do mkdir -p /tmp/keep/$x && tar -C /tmp/keep/$x -xJf $S/$x.tar.xz; done
export LD_LIBRARY_PATH=/tmp/keep/lib:/usr/local/cuda/lib64 RANKD_TEST_DATA_DIR=$PWD/tests/data
L=$OUT/main.log; t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader >> $L; hostname >> $L
B=/tmp/keep/h/bin
[[ -d /tmp/m379 ]] || $B/rankd-bench make-model --preset 379m --out /tmp/m379 --tokenizer-from tests/data/models/llama-cls > /dev/null 2>&1
[[ -d /tmp/m06 ]] || $B/rankd-bench make-model --preset qwen3-0.6b --out /tmp/m06 --tokenizer-from tests/data/models/llama-cls > /dev/null 2>&1
for side in h k l; do
  for tq in 50 1024; do
    timeout 90 /tmp/keep/$side/bin/rankd-bench kernels --filter attention --shape both --tq $tq > $OUT/kernels_$side.log 2>&1
    grep -E "^(379m|qwen3)" $OUT/kernels_$side.log | grep -v "mma.sync\|pipelined" | awk -v s=$side '{$1=$1; print "[" s "] " $0}' | cut -c1-150 >> $L
  done
done
echo "== engine ($(el) s)" >> $L
for round in 1 2; do
for v in "m379 bf16" "m06 bf16" "m379 fp8"; do
  for side in h k l; do
    set -- $v; model=$1; prec=$2
    timeout 60 /tmp/keep/$side/bin/rankd-bench engine --backend cuda --model /tmp/$model --iters 30 --strategy multi-item --graphs --precision $prec --tq 50 --ti 150 --ni 50 > $OUT/run.log 2>&1
    echo "[$side $v] r$round $(grep -A1 '^backend' $OUT/run.log | tail -1 | awk '{print $10}')" >> $L
  done
done; done
echo "== fp8 profile ($(el) s)" >> $L
timeout 60 env RANKD_CUDA_PROFILE=1 /tmp/keep/k/bin/rankd-bench engine --backend cuda --model /tmp/m379 --tq 50 --ti 150 --ni 50 --iters 10 --strategy multi-item --precision fp8 > $OUT/profile_fp8.log 2>&1
sed -n "/score passes/,/host wall/p" $OUT/profile_fp8.log >> $L
echo "== done ($(el) s)" >> $L
