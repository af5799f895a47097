#!/usr/bin/env bash
# Session 38 call A. Bundle b = d6fc52f: b07dfe7 (fast-accum switch), 6ee4db0 and 222f423 (grouped
# mainloop), bec0740 (forward refactor), e4b3adf (swizzled e4m3 output), 5b9cb11, 1ba291f, d6fc52f (row-scaled fp8 on
# the promoted kernels, RANKD_CUDA_FP8_PROMOTED=1), none run on a GPU before. Tests, demo, fp8 A/B, GEMMs, ncu.
for x in b; do mkdir -p build-gpu-$x && tar -C build-gpu-$x -xJf build-gpu-$x/rankd-bundle.tar.xz; done
export RANKD_TEST_DATA_DIR=$PWD/tests/data
L=$OUT/main.log
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > $L
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
lib() { echo $PWD/build-gpu-$1/lib:/usr/local/cuda/lib64; }
for x in b; do
  LD_LIBRARY_PATH=$(lib $x) timeout 100 build-gpu-$x/bin/cuda_hopper_gemm_test --gtest_color=no --gtest_filter='*Fp8*:*Group*' > $OUT/t_hopper_$x.log 2>&1; echo "hopper $x rc=$? ($(el) s)" >> $L
  grep -E '^\[  (PASSED|FAILED|SKIPPED) +\]|FAILED  \]|^\[       OK' $OUT/t_hopper_$x.log | tail -n 12 >> $L
done
echo "== demo ($(el) s)" >> $L
n=0
for v in "b -" "b RANKD_CUDA_FP8_PROMOTED=1" "b RANKD_CUDA_FP8_PROMOTED=1 RANKD_CUDA_FP8_LINEARS=qkv,gate_up,down"; do
  n=$((n + 1)); set -- $v; x=$1; shift; envs=(); [[ $1 != - ]] && envs=("$@")
  env "${envs[@]}" OUT=/tmp/gc$n BUNDLE=build-gpu-$x DEMO_PRECISIONS=fp8 timeout 90 scripts/gpu_check.sh demo 2>&1 | grep 'demo model' | sed "s/^/[$v] /" >> $L
done
echo "== models ($(el) s)" >> $L
export LD_LIBRARY_PATH=$(lib b)
timeout 100 build-gpu-b/bin/rankd-bench make-model --preset 379m --out /tmp/m379 --tokenizer-from tests/data/models/llama-cls > /dev/null 2>&1
(( $(el) < 220 )) && timeout 150 build-gpu-b/bin/rankd-bench make-model --preset qwen3-0.6b --out /tmp/mq06 --tokenizer-from tests/data/models/llama-cls > /dev/null 2>&1 || echo "0.6b make-model skipped/failed" >> $L
E=$OUT/engine.log
echo "== engine ($(el) s)" >> $L
for round in 1 2; do
  for shape in "m379 --tq 50 --ti 150 --ni 50" "mq06 --tq 50 --ti 150 --ni 50"; do
    set -- $shape; model=/tmp/$1; shift
    [[ -f $model/model.safetensors ]] || continue
    for v in "b fp8 -" "b fp8 RANKD_CUDA_FP8_PROMOTED=1" "b fp8 RANKD_CUDA_FP8_FAST_ACCUM=1" "b fp8 RANKD_CUDA_FP8_GROUP_SCALES=1" "b fp8 RANKD_CUDA_FP8_PROMOTED=1 RANKD_CUDA_FP8_LINEARS=qkv,gate_up,down" "b bf16 -"; do
      set -- $v; x=$1; prec=$2; shift 2; envs=(); [[ $1 != - ]] && envs=("$@")
      echo "== $model [$v] round $round" >> $E
      LD_LIBRARY_PATH=$(lib $x) timeout 50 env "${envs[@]}" build-gpu-$x/bin/rankd-bench engine --backend cuda --model $model --iters 30 --strategy multi-item --graphs --precision $prec ${shape#* } >> $E 2>&1
    done
  done
  (( $(el) < 300 )) || break
done
awk '/^== \/tmp/{h=$0} /^backend/{getline v; split(v, a, " +"); print h " | " a[10]}' $E >> $L
grep -h "GEMM of" $E | sort | uniq -c | sort -rn | head -40 > $OUT/choices.log
echo "== gemm ($(el) s)" >> $L
for x in b; do
  (( $(el) < 340 )) && LD_LIBRARY_PATH=$(lib $x) timeout 60 build-gpu-$x/bin/rankd-bench kernels --filter gemm --shape 379m > $OUT/gemm_$x.log 2>&1; echo "gemm $x rc=$?" >> $L
done
echo "== backend tests ($(el) s)" >> $L
if (( $(el) < 380 )); then
timeout 100 build-gpu-b/bin/cuda_backend_test --gtest_color=no --gtest_filter='*OwnGemmFp8*:*Fp8OnSome*:*Fp8Checkpoint*:CudaPdlTest.*' > $OUT/t_backend.log 2>&1; echo "backend rc=$?" >> $L
grep -E '^\[  (PASSED|FAILED) +\]|FAILED  \]' $OUT/t_backend.log | tail -n 16 >> $L
fi
echo "== profile ($(el) s)" >> $L
if (( $(el) < 440 )); then
  echo "===== profile fp8 b promoted + down" >> $OUT/profile.log
  timeout 40 env RANKD_CUDA_PROFILE=1 RANKD_CUDA_FP8_PROMOTED=1 RANKD_CUDA_FP8_LINEARS=qkv,gate_up,down build-gpu-b/bin/rankd-bench engine --backend cuda --model /tmp/m379 --tq 50 --ti 150 --ni 50 --iters 10 --strategy multi-item --precision fp8 >> $OUT/profile.log 2>&1
fi
echo "== ncu ($(el) s)" >> $L
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
for v in "qkv f8prom128 T=7500" "qkv f8cublaslt T=7500" "gate_up+swiglu ownpp128 T=7500" "gate_up+swiglu cublaslt T=7500" "qkv f8grp128 T=7500" "gate_up+swiglu f8ownpp128q T=7500"; do
  (( $(el) < 500 )) || break
  echo "===== $v" >> $OUT/ncu.log
  timeout 40 $NCU --clock-control none -k 'regex:Hopper|nvjet|xmma|cutlass|gemm' --launch-skip 1 --launch-count 1 \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section MemoryWorkloadAnalysis \
    build-gpu-b/bin/rankd-bench kernels --filter gemm --shape 379m --variant "$v" --iters 1 --warmup 1 >> $OUT/ncu.log 2>&1
done
echo "== done ($(el) s)" >> $L
