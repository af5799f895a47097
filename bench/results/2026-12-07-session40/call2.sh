#!/usr/bin/env bash
# Call 2 (same warm machine): the new bundle's tests, GEMM rows, engine A/B against call 1's
# bundle (still unpacked there), and the demo model.
E=build-gpu-e; C=build-gpu-c
mkdir -p $E && tar -C $E -xJf $E/rankd-bundle.tar.xz
export LD_LIBRARY_PATH=$PWD/$E/lib:/usr/local/cuda/lib64 RANKD_TEST_DATA_DIR=$PWD/tests/data
L=$OUT/main.log; t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader >> $L
hostname >> $L; ls $C/bin >> $L 2>&1
timeout 200 $E/bin/cuda_hopper_gemm_test --gtest_color=no 2>&1 | grep -E '^\[  (PASSED|FAILED)|FAILED  \]|Failure|Expected|Which is|actual' | head -40 >> $L
timeout 60 $E/bin/cuda_kernels_test --gtest_color=no --gtest_filter='*Glu*:*Silu*:*Swi*' 2>&1 | grep -E '^\[  (PASSED|FAILED)|FAILED  \]' >> $L
/usr/local/cuda/bin/cuobjdump -sass $E/bin/rankd-bench | awk '/Function :/{f=$3} /R2UR/{r[f]++} /HGMMA/{h[f]++} /IMAD.HI/{q[f]++} /STSM/{m[f]++} END{for(k in h) print r[k]+0, q[k]+0, m[k]+0, h[k], k}' | sort -k5 > $OUT/sass_e.txt
echo "== gemm ($(el) s)" >> $L
timeout 120 $E/bin/rankd-bench kernels --filter gemm --shape 379m --variant T=7500 > $OUT/gemm_e.log 2>&1
grep -E "pp128 |cublaslt|own256 " $OUT/gemm_e.log | awk '{print $3, $4, $9}' >> $L
$E/bin/rankd-bench make-model --preset 379m --out /tmp/m379 --tokenizer-from tests/data/models/llama-cls > /dev/null 2>&1
$E/bin/rankd-bench make-model --preset qwen3-0.6b --out /tmp/m06 --tokenizer-from tests/data/models/llama-cls > /dev/null 2>&1
echo "== engine ($(el) s)" >> $L
for round in 1 2; do
for v in "m379 bf16 -" "m379 fp8 -" "m379 fp8 RANKD_CUDA_FP8_FAST_ACCUM=1" "m06 bf16 -" "m06 fp8 RANKD_CUDA_FP8_FAST_ACCUM=1"; do
  for D in $C $E; do
    [[ -x $D/bin/rankd-bench ]] || continue
    set -- $v; model=$1; prec=$2; shift 2; envs=(); [[ $1 != - ]] && envs=("$@")
    echo "== [$D $v]" >> $OUT/engine.log
    timeout 40 env "${envs[@]}" $D/bin/rankd-bench engine --backend cuda --model /tmp/$model --iters 30 --strategy multi-item --graphs --precision $prec --tq 50 --ti 150 --ni 50 --log-level info >> $OUT/engine.log 2>&1
    echo "[$round $D $v] $(grep -A1 '^backend' $OUT/engine.log | tail -1)" >> $L
  done
done; done
echo "== demo ($(el) s)" >> $L
for v in "bf16 -" "fp8 -" "fp8 RANKD_CUDA_FP8_FAST_ACCUM=1"; do
  set -- $v; prec=$1; shift; envs=(); [[ $1 != - ]] && envs=("$@")
  env "${envs[@]}" OUT=/tmp/gc_${prec}_$# BUNDLE=$E DEMO_PRECISIONS=$prec timeout 100 scripts/gpu_check.sh demo 2>&1 | grep 'demo model' | sed "s/^/[$v] /" >> $L
done
echo "== done ($(el) s)" >> $L
