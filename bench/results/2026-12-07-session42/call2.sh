#!/usr/bin/env bash
# Session 42, call 2 (on call 1's warm machine, whose build-gpu-h and /tmp models it reuses where
# there). Bundle of HEAD: BUNDLE_BINS="rankd-bench cuda_backend_test" scripts/make_bundle.sh
# --archive build build-gpu-i (carry ["build-gpu-i"]).
# RANKD_CUDA_ATTENTION_WARPGROUPS=auto: its GPU test, then the engine at Tq=1024 and 50 (1, 2,
# auto) and the kernel at Tq=256 / 512 (where the threshold lies); 379M bf16 +-FOLD_NORMS (cf1609c
# and the grouped stream loads unmeasured), 0.6B bf16 +-OVERLAP; one eager profile of 379M bf16;
# the GEMM rows; embedding items +-FOLD_NORMS.
F=build-gpu-i; [[ -x $F/bin/rankd-bench ]] || tar -C $F -xJf $F/rankd-bundle.tar.xz
export LD_LIBRARY_PATH=$PWD/$F/lib:/usr/local/cuda/lib64 RANKD_TEST_DATA_DIR=$PWD/tests/data
B=$F/bin; L=$OUT/main.log; t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader >> $L; hostname >> $L
echo "== test ($(el) s)" >> $L
timeout 150 $B/cuda_backend_test --gtest_color=no --gtest_filter='*Warpgroups*:*AttentionWgmma*' > $OUT/test.log 2>&1; echo "rc $?" >> $L
grep -E '^\[ *(OK|FAILED|PASSED|SKIPPED) *\]|Failure' $OUT/test.log | head -20 >> $L
[[ -f /tmp/m379/model.safetensors ]] || $B/rankd-bench make-model --preset 379m --out /tmp/m379 --tokenizer-from tests/data/models/llama-cls > /dev/null 2>&1
[[ -f /tmp/m06/model.safetensors ]] || $B/rankd-bench make-model --preset qwen3-0.6b --out /tmp/m06 --tokenizer-from tests/data/models/llama-cls > /dev/null 2>&1
echo "== engine ($(el) s)" >> $L
for v in "m379 1024 -" "m379 1024 RANKD_CUDA_ATTENTION_WARPGROUPS=2" "m379 1024 RANKD_CUDA_ATTENTION_WARPGROUPS=auto" "m379 50 -" "m379 50 RANKD_CUDA_ATTENTION_WARPGROUPS=auto" "m379 50 RANKD_CUDA_FOLD_NORMS=1" "m06 50 -" "m06 50 RANKD_CUDA_ATTENTION_OVERLAP=1"; do
  set -- $v; model=$1; tq=$2; shift 2; envs=(); [[ $1 != - ]] && envs=("$@")
  echo "== [$v]" >> $OUT/engine.log
  timeout 40 env "${envs[@]}" $B/rankd-bench engine --backend cuda --model /tmp/$model --iters 30 --strategy multi-item --graphs --precision bf16 --tq $tq --ti 150 --ni 50 --log-level info >> $OUT/engine.log 2>&1
  echo "[$v] $(grep -A1 '^backend' $OUT/engine.log | tail -1) | $(grep -o 'passes with attention in blocks of warpgroups: [0-9]*' $OUT/engine.log | tail -1)" >> $L
done
echo "== attention kernels ($(el) s)" >> $L
for tq in 256 512; do
  timeout 60 $B/rankd-bench kernels --filter attention --shape 379m --tq $tq > $OUT/attention_$tq.log 2>&1
  grep -E "wgmma" $OUT/attention_$tq.log | grep -v ibpc | awk -v tq=$tq '{print "Tq=" tq, $0}' | cut -c1-150 >> $L
done
echo "== profile ($(el) s)" >> $L
timeout 40 env RANKD_CUDA_PROFILE=1 $B/rankd-bench engine --backend cuda --model /tmp/m379 --tq 50 --ti 150 --ni 50 --iters 10 --strategy multi-item --precision bf16 > $OUT/profile.log 2>&1
timeout 40 env RANKD_CUDA_PROFILE=1 $B/rankd-bench engine --backend cuda --model /tmp/m379 --tq 50 --ni 250 --iters 10 --strategy ibpc --items embedding --precision bf16 > $OUT/profile_emb.log 2>&1
echo "== gemm ($(el) s)" >> $L
timeout 120 $B/rankd-bench kernels --filter gemm --shape 379m --variant T=7500 > $OUT/gemm.log 2>&1
grep -E "pp128 |own256 |cublaslt|fold" $OUT/gemm.log | grep -v f8 | awk '{print $3, $4, $9}' >> $L
echo "== embedding items ($(el) s)" >> $L
for v in "-" "RANKD_CUDA_FOLD_NORMS=1"; do
  envs=(); [[ $v != - ]] && envs=($v)
  echo "== [emb $v]" >> $OUT/engine.log
  timeout 40 env "${envs[@]}" $B/rankd-bench engine --backend cuda --model /tmp/m379 --iters 100 --strategy ibpc --graphs --precision bf16 --tq 50 --ni 250 --items embedding --log-level info >> $OUT/engine.log 2>&1
  echo "[emb ibpc $v] $(grep -A1 '^backend' $OUT/engine.log | tail -1)" >> $L
done
echo "== done ($(el) s)" >> $L
