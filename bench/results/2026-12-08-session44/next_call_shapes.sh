#!/usr/bin/env bash
# Next session (carry ["build-gpu-p"]: rankd-bench of 069a7ca's code): issue 25's shapes under
# session 44's defaults (attention at four blocks an SM; fp8 = gate_up alone in e4m3), two rounds,
# then the bf16 and fp8 passes' profiles. On an H200 these are the first H200 numbers since
# session 35.
F=build-gpu-p; [[ -x $F/bin/rankd-bench ]] || tar -C $F -xJf $F/rankd-bundle.tar.xz
export LD_LIBRARY_PATH=$PWD/$F/lib:/usr/local/cuda/lib64 RANKD_TEST_DATA_DIR=$PWD/tests/data
B=$F/bin; L=$OUT/main.log; t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader >> $L; hostname >> $L
$B/rankd-bench make-model --preset 379m --out /tmp/m379 --tokenizer-from tests/data/models/llama-cls > /dev/null 2>&1 &
$B/rankd-bench make-model --preset qwen3-0.6b --out /tmp/m06 --tokenizer-from tests/data/models/llama-cls > /dev/null 2>&1 &
wait
echo "== shapes ($(el) s)" >> $L
for round in 1 2; do
for v in "m379 bf16 --tq 50 --ti 150 --ni 50" "m379 fp8 --tq 50 --ti 150 --ni 50" "m06 bf16 --tq 50 --ti 150 --ni 50" "m06 fp8 --tq 50 --ti 150 --ni 50" "m379 bf16 --tq 50 --ti 150 --ni 250" "m379 bf16 --tq 1024 --ti 150 --ni 50" "m379 bf16 --tq 50 --ti 16 --ni 50 --concurrency 8" "m379 bf16 --tq 50 --ni 250 --items embedding"; do
  (( $(el) < ${UNTIL_S:-420} )) || break 2
  set -- $v; model=$1; prec=$2; shift 2
  timeout 60 $B/rankd-bench engine --backend cuda --model /tmp/$model --iters 30 --strategy multi-item --graphs --precision $prec "$@" > $OUT/run.log 2>&1
  echo "[$v] r$round $(grep -A1 '^backend' $OUT/run.log | tail -1 | awk '{print $10}')" >> $L
done; done
# A/B: q rotated before attention (RANKD_CUDA_FUSE_Q_ROPE=0: QkvRope rotates q and k; attention
# loads q as it is, without the rotations' loads), the first step toward prefetching the next
# unit's q; and attention at three blocks (RANKD_CUDA_ATTENTION_FOUR_BLOCKS=0), two rounds.
echo "== A/B ($(el) s)" >> $L
for round in 1 2; do
  for sw in "-" "RANKD_CUDA_FUSE_Q_ROPE=0" "RANKD_CUDA_ATTENTION_FOUR_BLOCKS=0"; do
    e=(); [[ $sw != - ]] && e=($sw)
    timeout 60 env "${e[@]}" $B/rankd-bench engine --backend cuda --model /tmp/m379 --iters 30 --strategy multi-item --graphs --precision bf16 --tq 50 --ti 150 --ni 50 > $OUT/run.log 2>&1
    echo "[m379 bf16 $sw] r$round $(grep -A1 '^backend' $OUT/run.log | tail -1 | awk '{print $10}')" >> $L
  done
done
for prec in bf16 fp8; do
  echo "== profile $prec ($(el) s)" >> $L
  timeout 60 env RANKD_CUDA_PROFILE=1 $B/rankd-bench engine --backend cuda --model /tmp/m379 --tq 50 --ti 150 --ni 50 --iters 10 --strategy multi-item --precision $prec > $OUT/profile_$prec.log 2>&1
  sed -n "/score passes/,/host wall/p" $OUT/profile_$prec.log >> $L
done
echo "== done ($(el) s)" >> $L
