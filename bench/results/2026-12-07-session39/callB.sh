#!/usr/bin/env bash
# Session 39 call B. Bundle c (with the norm fold, RANKD_CUDA_FOLD_NORMS=1, and its tests): the promoted kernels (kRowPromoted, kGroup) rebuilt without the
# wgmma serialization ptxas reported (C7514/C7518): each K block's wgmmas into their own sets,
# waited for (wait 0), then added into d. Tests, GEMM rows, demo MRR@10, fp8 A/B, ncu.
for x in c; do mkdir -p build-gpu-$x && tar -C build-gpu-$x -xJf build-gpu-$x/rankd-bundle.tar.xz; done
export RANKD_TEST_DATA_DIR=$PWD/tests/data
L=$OUT/main.log
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > $L
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
export LD_LIBRARY_PATH=$PWD/build-gpu-c/lib:/usr/local/cuda/lib64
B=build-gpu-c/bin
timeout 100 $B/cuda_hopper_gemm_test --gtest_color=no --gtest_filter='*Fp8*:*Group*:*NormFold*:*Precond*' > $OUT/t_hopper.log 2>&1; echo "hopper rc=$? ($(el) s)" >> $L
grep -E '^\[  (PASSED|FAILED|SKIPPED) +\]|FAILED  \]|^\[       OK' $OUT/t_hopper.log | tail -n 12 >> $L
timeout 150 $B/cuda_backend_test --gtest_color=no --gtest_filter='*FoldedNorms*' > $OUT/t_backend.log 2>&1; echo "backend rc=$? ($(el) s)" >> $L
grep -E '^\[  (PASSED|FAILED|SKIPPED) +\]|FAILED  \]' $OUT/t_backend.log | tail -n 30 >> $L
echo "== gemm ($(el) s)" >> $L
timeout 60 $B/rankd-bench kernels --filter gemm --shape 379m --variant f8 > $OUT/gemm_379m.log 2>&1; echo "gemm rc=$?" >> $L
timeout 60 $B/rankd-bench kernels --filter gemm --shape 379m --variant T=7500 > $OUT/gemm_379m_all.log 2>&1; echo "gemm 379m all rc=$?" >> $L
timeout 30 $B/rankd-bench kernels --filter rms_norm --shape 379m > $OUT/norm_379m.log 2>&1; echo "norm rc=$?" >> $L
echo "== demo ($(el) s)" >> $L
n=0
for v in "RANKD_CUDA_FP8_PROMOTED=1" "RANKD_CUDA_FP8_GROUP_SCALES=1" "RANKD_CUDA_FP8_FAST_ACCUM=1"; do
  n=$((n + 1))
  env $v OUT=/tmp/gc$n BUNDLE=build-gpu-c DEMO_PRECISIONS=fp8 timeout 90 scripts/gpu_check.sh demo 2>&1 | grep 'demo model' | sed "s/^/[$v] /" >> $L
done
echo "== models ($(el) s)" >> $L
timeout 100 $B/rankd-bench make-model --preset 379m --out /tmp/m379 --tokenizer-from tests/data/models/llama-cls > /dev/null 2>&1
timeout 150 $B/rankd-bench make-model --preset qwen3-0.6b --out /tmp/mq06 --tokenizer-from tests/data/models/llama-cls > /dev/null 2>&1
E=$OUT/engine.log
echo "== engine ($(el) s)" >> $L
for round in 1 2; do
  for model in m379 mq06; do
    for v in "fp8 -" "fp8 RANKD_CUDA_FP8_PROMOTED=1" "fp8 RANKD_CUDA_FP8_GROUP_SCALES=1" "fp8 RANKD_CUDA_FP8_FAST_ACCUM=1" "bf16 -" "bf16 RANKD_CUDA_FOLD_NORMS=1"; do
      set -- $v; prec=$1; shift; envs=(); [[ $1 != - ]] && envs=("$@")
      echo "== $model [$v] round $round" >> $E
      timeout 50 env "${envs[@]}" $B/rankd-bench engine --backend cuda --model /tmp/$model --iters 30 --strategy multi-item --graphs --precision $prec --tq 50 --ti 150 --ni 50 >> $E 2>&1
    done
  done
  (( $(el) < 200 )) || break
done
awk '/^== m/{h=$0} /^backend/{getline v; split(v, a, " +"); print h " | " a[10]}' $E >> $L
grep -h "GEMM of" $E | sort | uniq -c | sort -rn | head -40 > $OUT/choices.log
echo "== ncu ($(el) s)" >> $L
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
for v in "qkv f8prom128 T=7500" "gate_up+swiglu f8prom128 T=7500"; do
  (( $(el) < 330 )) || break
  echo "===== $v" >> $OUT/ncu.log
  timeout 40 $NCU --clock-control none -k 'regex:Hopper' --launch-skip 1 --launch-count 1 \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats \
    $B/rankd-bench kernels --filter gemm --shape 379m --variant "$v" --iters 1 --warmup 1 >> $OUT/ncu.log 2>&1
done
echo "== ncu source ($(el) s)" >> $L
if (( $(el) < 360 )); then
  timeout 60 $NCU --clock-control none -k 'regex:Hopper' --launch-skip 1 --launch-count 1 --set full --import-source yes \
    -o /tmp/gu_pp128 $B/rankd-bench kernels --filter gemm --shape 379m --variant "gate_up+swiglu ownpp128 T=7500" --iters 1 --warmup 1 > $OUT/ncu_src_run.log 2>&1
  timeout 40 $NCU -i /tmp/gu_pp128.ncu-rep --page source --print-source sass --csv > /tmp/sass.csv 2> $OUT/ncu_src_err.log
  gzip -c /tmp/sass.csv > $OUT/sass_gate_up_pp128.csv.gz
fi
echo "== done ($(el) s)" >> $L
