#!/usr/bin/env bash
# Session 39 call D (bundle d: the fold's row sums loaded before the K blocks, RowSums): the fold's
# kernel test, its GEMM rows against the unfused ones, and the bf16 A/B on 379M.
mkdir -p build-gpu-c && tar -C build-gpu-c -xJf build-gpu-c/rankd-bundle.tar.xz
export LD_LIBRARY_PATH=$PWD/build-gpu-c/lib:/usr/local/cuda/lib64 RANKD_TEST_DATA_DIR=$PWD/tests/data
B=build-gpu-c/bin
L=$OUT/main.log
t0=$(date +%s)
timeout 30 $B/cuda_hopper_gemm_test --gtest_color=no --gtest_filter='*NormFold*' 2>&1 | grep -E '^\[  (PASSED|FAILED)|FAILED  \]|Failure' >> $L
timeout 40 $B/rankd-bench kernels --filter gemm --shape 379m --variant T=7500 2>&1 | grep -E "fold|ownpp128 |own256 " | grep -v f8 >> $L
echo "== model ($(( $(date +%s) - t0 )) s)" >> $L
timeout 60 $B/rankd-bench make-model --preset 379m --out /tmp/m379 --tokenizer-from tests/data/models/llama-cls > /dev/null 2>&1
for v in - RANKD_CUDA_FOLD_NORMS=1 - RANKD_CUDA_FOLD_NORMS=1; do
  (( $(date +%s) - t0 < 120 )) || break
  envs=(); [[ $v != - ]] && envs=("$v")
  echo "== [$v]" >> $L
  timeout 25 env "${envs[@]}" $B/rankd-bench engine --backend cuda --model /tmp/m379 --iters 30 --strategy multi-item --graphs --precision bf16 --tq 50 --ti 150 --ni 50 2>&1 | grep -A1 "^backend" | tail -1 >> $L
done
echo "== done ($(( $(date +%s) - t0 )) s)" >> $L
