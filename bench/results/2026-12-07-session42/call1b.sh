#!/usr/bin/env bash
# Session 42 (prepared), call 1b, on call 1's machine and bundle:
#   BUNDLE_BINS="rankd-bench cuda_hopper_gemm_test" scripts/make_bundle.sh --archive build \
#     build-gpu-h      (carry ["build-gpu-h"]; with rankd too it no longer fits beside the tree)
# the engine: fp8 +-PROMOTED, Tq=1024 with attention warpgroups 1 / auto, the 0.6B +-FUSE_QK_NORM
# and +-OVERLAP, embedding items with the default variants and with all (the K-sliced one among
# them; the GEMM choices in the log),
# eager profiles of 379M bf16 and of the embedding pass.
F=build-gpu-h; [[ -x $F/bin/rankd-bench ]] || tar -C $F -xJf $F/rankd-bundle.tar.xz
export LD_LIBRARY_PATH=$PWD/$F/lib:/usr/local/cuda/lib64 RANKD_TEST_DATA_DIR=$PWD/tests/data
B=$F/bin; L=$OUT/main.log; t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader >> $L; hostname >> $L
[[ -f /tmp/m379/model.safetensors ]] || $B/rankd-bench make-model --preset 379m --out /tmp/m379 --tokenizer-from tests/data/models/llama-cls > /dev/null 2>&1
echo "== engine ($(el) s)" >> $L
[[ -f /tmp/m06/model.safetensors ]] || $B/rankd-bench make-model --preset qwen3-0.6b --out /tmp/m06 --tokenizer-from tests/data/models/llama-cls > /dev/null 2>&1
for v in "m379 fp8 50 -" "m379 fp8 50 RANKD_CUDA_FP8_PROMOTED=1" "m379 bf16 1024 -" "m379 bf16 1024 RANKD_CUDA_ATTENTION_WARPGROUPS=auto" "m379 bf16 50 RANKD_CUDA_ATTENTION_WARPGROUPS=auto" "m379 bf16 50 -" "m379 bf16 50 RANKD_CUDA_FOLD_NORMS=1" "m06 bf16 50 -" "m06 bf16 50 RANKD_CUDA_FUSE_QK_NORM=1" "m06 bf16 50 RANKD_CUDA_ATTENTION_OVERLAP=1"; do
  set -- $v; model=$1; prec=$2; tq=$3; shift 3; envs=(); [[ $1 != - ]] && envs=("$@")
  echo "== [$v]" >> $OUT/engine.log
  timeout 40 env "${envs[@]}" $B/rankd-bench engine --backend cuda --model /tmp/$model --iters 30 --strategy multi-item --graphs --precision $prec --tq $tq --ti 150 --ni 50 --log-level info >> $OUT/engine.log 2>&1
  echo "[$v] $(grep -A1 '^backend' $OUT/engine.log | tail -1) | $(grep -o 'passes with attention in blocks of warpgroups: [0-9]*' $OUT/engine.log | tail -1)" >> $L
done
echo "== embedding ($(el) s)" >> $L
for v in "-" "RANKD_CUDA_OWN_GEMM_VARIANTS=all"; do
  envs=(); [[ $v != - ]] && envs=($v)
  timeout 40 env "${envs[@]}" $B/rankd-bench engine --backend cuda --model /tmp/m379 --iters 100 --strategy ibpc --graphs --precision bf16 --tq 50 --ni 250 --items embedding --log-level info > $OUT/emb.log 2>&1
  echo "[emb ibpc $v] $(grep -A1 '^backend' $OUT/emb.log | tail -1)" >> $L
  grep -o 'GEMM of [0-9]* rows.*' $OUT/emb.log | cut -c1-400 >> $L
done
echo "== profile ($(el) s)" >> $L
timeout 40 env RANKD_CUDA_PROFILE=1 $B/rankd-bench engine --backend cuda --model /tmp/m379 --tq 50 --ti 150 --ni 50 --iters 10 --strategy multi-item --precision bf16 > $OUT/profile.log 2>&1
timeout 40 env RANKD_CUDA_PROFILE=1 $B/rankd-bench engine --backend cuda --model /tmp/m379 --tq 50 --ni 250 --iters 10 --strategy ibpc --items embedding --precision bf16 > $OUT/profile_emb.log 2>&1
echo "== done ($(el) s)" >> $L
