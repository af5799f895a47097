#!/usr/bin/env bash
# Session 45 (carry ["build-gpu-s"]: rankd-bench of 2abec6e, session 45's last kernel commit, and
# as rankd-bench-base session 44's (069a7ca's kernels), in one archive): session 45's kernel
# changes before and after in one call. Kernel rows (attention at Tq 50 and 1024, QkvRope; both
# shapes; `... pf`: RANKD_CUDA_ATTENTION_PREFETCH, `... b3`: RANKD_CUDA_ATTENTION_THREE_BLOCKS),
# then the passes interleaved, two rounds: base; new (the copy loop, the deferred queue store, the
# first unit without the queue, QkvRope's registers, the last layer's attention on the items' last
# rows); new with the prefetch; on the 0.6B shape new
# with three blocks (and with both); on the 379M standard shape new with q rotated by QkvRope
# (RANKD_CUDA_FUSE_Q_ROPE=0); at Tq=1024 new with blocks of one warpgroup (auto runs 2 there; the
# copy loop changed what a tile costs each); on embedding items new with every GEMM variant and
# with PDL (their last measurements predate session 33's pp64 and session 40's kernels). Last the
# new bf16 passes' profiles.
F=build-gpu-s; [[ -x $F/bin/rankd-bench ]] || tar -C $F -xJf $F/rankd-bundle.tar.xz
export LD_LIBRARY_PATH=$PWD/$F/lib:/usr/local/cuda/lib64 RANKD_TEST_DATA_DIR=$PWD/tests/data
B=$F/bin; L=$OUT/main.log; t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader >> $L; hostname >> $L
$B/rankd-bench make-model --preset 379m --out /tmp/m379 --tokenizer-from tests/data/models/llama-cls > /dev/null 2>&1 &
$B/rankd-bench make-model --preset qwen3-0.6b --out /tmp/m06 --tokenizer-from tests/data/models/llama-cls > /dev/null 2>&1 &
echo "== kernels ($(el) s)" >> $L
for bin in rankd-bench-base rankd-bench; do
  for tq in 50 1024; do
    echo "# $bin attention tq $tq" >> $OUT/kernels.log
    timeout 120 $B/$bin kernels --filter attention --shape both --tq $tq >> $OUT/kernels.log 2>&1
  done
  echo "# $bin qkv_rope" >> $OUT/kernels.log
  timeout 60 $B/$bin kernels --filter qkv_rope --shape both >> $OUT/kernels.log 2>&1
done
grep -E "^#|^(379m|qwen3)" $OUT/kernels.log | grep -E "^#|wgmma (b4|overlap|wg2)|qkv_rope" | grep -v "wg2 overlap\|encode" | awk '{$1=$1; print}' | cut -c1-150 >> $L
wait
echo "== engine ($(el) s)" >> $L
for round in 1 2; do
for v in "m379 bf16 --tq 50 --ti 150 --ni 50" "m06 bf16 --tq 50 --ti 150 --ni 50" "m379 fp8 --tq 50 --ti 150 --ni 50" "m06 fp8 --tq 50 --ti 150 --ni 50" "m379 bf16 --tq 1024 --ti 150 --ni 50" "m379 bf16 --tq 50 --ti 150 --ni 250" "m379 bf16 --tq 50 --ti 16 --ni 50 --concurrency 8" "m379 bf16 --tq 50 --ni 250 --items embedding"; do
  for sw in "base" "-" "RANKD_CUDA_ATTENTION_PREFETCH=1" "RANKD_CUDA_ATTENTION_THREE_BLOCKS=1" "RANKD_CUDA_ATTENTION_THREE_BLOCKS=1 RANKD_CUDA_ATTENTION_PREFETCH=1" "RANKD_CUDA_ATTENTION_WARPGROUPS=1" "RANKD_CUDA_ATTENTION_WARPGROUPS=1 RANKD_CUDA_ATTENTION_PREFETCH=1" "RANKD_CUDA_FUSE_Q_ROPE=0" "RANKD_CUDA_OWN_GEMM_VARIANTS=all" "RANKD_CUDA_PDL=1"; do
    [[ $v != m06* && $sw == *THREE* ]] && continue  # (heads of 64: ignored)
    [[ $v != *"--tq 1024"* && $sw == *WARPGROUPS* ]] && continue  # (blocks of 2 only at Tq=1024)
    # q rotated by QkvRope (now 2 heads a lane) instead of in attention: the 379M standard shape.
    [[ $v != "m379 bf16 --tq 50 --ti 150 --ni 50" && $sw == *Q_ROPE* ]] && continue
    # Embedding items (the small pass): every GEMM variant (K slices on o_proj and down) and PDL.
    [[ $v != *embedding* && ( $sw == *VARIANTS* || $sw == *PDL* ) ]] && continue
    (( $(el) < ${UNTIL_S:-480} )) || break 3
    set -- $v; model=$1; prec=$2; shift 2; e=(); bin=rankd-bench
    [[ $sw == base ]] && bin=rankd-bench-base; [[ $sw == RANKD* ]] && e=($sw)
    timeout 60 env "${e[@]}" $B/$bin engine --backend cuda --model /tmp/$model --iters 30 --strategy multi-item --graphs --precision $prec "$@" > $OUT/run.log 2>&1
    echo "[$model $prec $* | $sw] r$round $(grep -A1 '^backend' $OUT/run.log | tail -1 | awk '{print $10}')" >> $L
  done
done; done
for v in "m379 -" "m379 RANKD_CUDA_ATTENTION_PREFETCH=1" "m06 -"; do
  set -- $v; model=$1; sw=$2; e=(); [[ $sw != - ]] && e=($sw)
  echo "== profile $model bf16 $sw ($(el) s)" >> $L
  timeout 60 env "${e[@]}" RANKD_CUDA_PROFILE=1 $B/rankd-bench engine --backend cuda --model /tmp/$model --tq 50 --ti 150 --ni 50 --iters 10 --strategy multi-item --precision bf16 > $OUT/profile.log 2>&1
  sed -n "/score passes/,/host wall/p" $OUT/profile.log >> $L
done
echo "== done ($(el) s)" >> $L
