#!/usr/bin/env bash
# Call 3 (same warm machine as call 2, whose build-gpu-e is still unpacked): the baseline bundle
# (d1789f0) unpacked, GEMM rows of both, the engine A/B of both, interleaved.
C=build-gpu-c; E=build-gpu-e; mkdir -p $C && tar -C $C -xJf $C/rankd-bundle.tar.xz
L=$OUT/main.log; t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader >> $L; hostname >> $L; ls $E/bin >> $L
[[ -f /tmp/m379/model.safetensors ]] || $C/bin/rankd-bench make-model --preset 379m --out /tmp/m379 --tokenizer-from tests/data/models/llama-cls > /dev/null 2>&1
[[ -f /tmp/m06/model.safetensors ]] || $C/bin/rankd-bench make-model --preset qwen3-0.6b --out /tmp/m06 --tokenizer-from tests/data/models/llama-cls > /dev/null 2>&1
for D in $C; do
  export LD_LIBRARY_PATH=$PWD/$D/lib:/usr/local/cuda/lib64
  /usr/local/cuda/bin/cuobjdump -sass $D/bin/rankd-bench | awk '/Function :/{f=$3} /R2UR/{r[f]++} /HGMMA/{h[f]++} /IMAD.HI/{q[f]++} /STSM/{m[f]++} END{for(k in h) print r[k]+0, q[k]+0, m[k]+0, h[k], k}' | sort -k5 > $OUT/sass_${D#build-gpu-}.txt
  echo "== gemm $D ($(el) s)" >> $L
  timeout 120 $D/bin/rankd-bench kernels --filter gemm --shape 379m --variant T=7500 > $OUT/gemm3_${D#build-gpu-}.log 2>&1
  grep -E "pp128 |cublaslt|own256 " $OUT/gemm3_${D#build-gpu-}.log | awk '{print $3, $4, $9}' >> $L
done
echo "== engine ($(el) s)" >> $L
for round in 1; do
for v in "m379 bf16 -" "m379 fp8 -" "m379 fp8 RANKD_CUDA_FP8_FAST_ACCUM=1" "m06 bf16 -" "m06 fp8 RANKD_CUDA_FP8_FAST_ACCUM=1"; do
  for D in $C $E; do
    export LD_LIBRARY_PATH=$PWD/$D/lib:/usr/local/cuda/lib64
    set -- $v; model=$1; prec=$2; shift 2; envs=(); [[ $1 != - ]] && envs=("$@")
    echo "== [$D $v]" >> $OUT/engine3.log
    timeout 40 env "${envs[@]}" $D/bin/rankd-bench engine --backend cuda --model /tmp/$model --iters 30 --strategy multi-item --graphs --precision $prec --tq 50 --ti 150 --ni 50 --log-level info >> $OUT/engine3.log 2>&1
    echo "[$round $D $v] $(grep -A1 '^backend' $OUT/engine3.log | tail -1)" >> $L
  done
done; done
echo "== done ($(el) s)" >> $L
