#!/usr/bin/env bash
# Session 41, call 1 (bundle h: 9843c64 = 7f6a6e2 + the attention kernel in blocks of 2 and 3 warpgroups,
# RANKD_CUDA_ATTENTION_WARPGROUPS). The attention kernel tests (wide blocks against the CPU
# reference; overlapped = serial bit for bit), attention's rows at Tq 50 and 1024, the engine with
# the attention variants (379M Tq 50 and 1024, 0.6B) and the fp8 variants of session 40.
F=build-gpu-h; [[ -x $F/bin/rankd-bench ]] || tar -C $F -xJf $F/rankd-bundle.tar.xz
export LD_LIBRARY_PATH=$PWD/$F/lib:/usr/local/cuda/lib64 RANKD_TEST_DATA_DIR=$PWD/tests/data
B=$F/bin; L=$OUT/main.log; t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader >> $L; hostname >> $L
[[ -f /tmp/m379/model.safetensors ]] || $B/rankd-bench make-model --preset 379m --out /tmp/m379 --tokenizer-from tests/data/models/llama-cls > /dev/null 2>&1
echo "== tests ($(el) s)" >> $L
timeout ${TEST_S:-90} $B/cuda_kernels_test --gtest_color=no --gtest_filter='*Attention*:*Unsupported*' > $OUT/tests.log 2>&1
grep -E '^\[ *(FAILED|PASSED|OK) *\]|Failure|warpgroups|overlapped' $OUT/tests.log | head -40 >> $L
run() {  # run MODEL PRECISION "ENV..." [more rankd-bench flags]
  local model=$1 prec=$2 envs=() ; [[ $3 != - ]] && envs=($3); shift 3
  (( $(el) < ${GUARD:-230} )) || return
  echo "== [$model $prec ${envs[*]} $*]" >> $OUT/engine.log
  timeout 40 env "${envs[@]}" $B/rankd-bench engine --backend cuda --model /tmp/$model --iters 30 --strategy multi-item --graphs --precision $prec --ti 150 --ni 50 --log-level info "$@" >> $OUT/engine.log 2>&1
  echo "[$model $prec ${envs[*]} $*] $(grep -A1 '^backend' $OUT/engine.log | tail -1)" >> $L
}
rows() {  # rows TQ: attention's kernel rows (wgmma) at this prefix length
  (( $(el) < ${GUARD:-230} )) || return
  timeout 60 $B/rankd-bench kernels --filter attention --shape both --tq $1 > $OUT/attention_$1.log 2>&1
  grep -E "wgmma" $OUT/attention_$1.log | sed "s/^/tq=$1 /" | cut -c1-170 >> $L
}
O=RANKD_CUDA_ATTENTION_OVERLAP=1; W2=RANKD_CUDA_ATTENTION_WARPGROUPS=2; W3=RANKD_CUDA_ATTENTION_WARPGROUPS=3
echo "== rows and engine ($(el) s)" >> $L
rows 1024
for v in "-" "$W3 $O" "$O"; do run m379 bf16 "$v" --tq 1024; done
for v in "-" "$W3 $O" "$O"; do run m379 bf16 "$v" --tq 50; done
rows 50
(( $(el) < 200 )) && { [[ -f /tmp/m06/model.safetensors ]] || $B/rankd-bench make-model --preset qwen3-0.6b --out /tmp/m06 --tokenizer-from tests/data/models/llama-cls > /dev/null 2>&1; }
for v in "-" "$W2 $O"; do run m06 bf16 "$v" --tq 50; done
for v in "$W2 $O" "$W3" "$W2"; do run m379 bf16 "$v" --tq 1024; done
for v in "RANKD_CUDA_FP8_PROMOTED=1" "-"; do run m379 fp8 "$v" --tq 50; done
echo "== done ($(el) s)" >> $L
