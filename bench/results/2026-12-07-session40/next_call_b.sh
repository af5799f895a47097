#!/usr/bin/env bash
# The next session's call B (after next_call_a.sh): Nsight Compute on the bf16 GEMMs that still
# trail cuBLASLt (qkv, o_proj, down on ping-pong 128) and cuBLASLt's down: why qkv runs at 61% of
# the tensor peak where gate_up runs at 86%; a second engine round.
F=build-gpu-f; [[ -x $F/bin/rankd-bench ]] || tar -C $F -xJf $F/rankd-bundle.tar.xz
export LD_LIBRARY_PATH=$PWD/$F/lib:/usr/local/cuda/lib64 RANKD_TEST_DATA_DIR=$PWD/tests/data
B=$F/bin; L=$OUT/main.log; t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader >> $L; hostname >> $L
[[ -f /tmp/m379/model.safetensors ]] || $B/rankd-bench make-model --preset 379m --out /tmp/m379 --tokenizer-from tests/data/models/llama-cls > /dev/null 2>&1
[[ -f /tmp/m06/model.safetensors ]] || $B/rankd-bench make-model --preset qwen3-0.6b --out /tmp/m06 --tokenizer-from tests/data/models/llama-cls > /dev/null 2>&1
echo "== ncu ($(el) s)" >> $L
for v in "qkv ownpp128 T=7500:qkv_pp128" "o_proj+= ownpp128 T=7500:o_proj_pp128" "down+= ownpp128 T=7500:down_pp128" "down+= cublaslt T=7500:down_cublaslt"; do
  name=${v##*:}; variant=${v%:*}
  timeout 60 $NCU --clock-control none -k 'regex:Hopper|nvjet|sm90|gemm' --launch-skip 1 --launch-count 1 --set full --import-source yes \
    -o /tmp/$name $B/rankd-bench kernels --filter gemm --shape 379m --variant "$variant" --iters 1 --warmup 1 >> $OUT/ncu.log 2>&1
  [[ $name == *cublaslt ]] || timeout 30 $NCU -i /tmp/$name.ncu-rep --page source --print-source sass --csv 2>> $OUT/ncu.log | gzip -c > $OUT/sass_$name.csv.gz
  timeout 30 $NCU -i /tmp/$name.ncu-rep --page details --section WarpStateStats --section SpeedOfLight --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis >> $OUT/ncu.log 2>&1
  echo "== $name done ($(el) s)" >> $L
done
echo "== engine ($(el) s)" >> $L
for round in 2; do
for v in "m379 fp8 -" "m379 fp8 RANKD_CUDA_FP8_PROMOTED=1" "m379 fp8 RANKD_CUDA_FP8_FAST_ACCUM=1" "m379 bf16 -" "m06 fp8 -" "m06 fp8 RANKD_CUDA_FP8_PROMOTED=1"; do
  set -- $v; model=$1; prec=$2; shift 2; envs=(); [[ $1 != - ]] && envs=("$@")
  echo "== [$v]" >> $OUT/engine.log
  timeout 40 env "${envs[@]}" $B/rankd-bench engine --backend cuda --model /tmp/$model --iters 30 --strategy multi-item --graphs --precision $prec --tq 50 --ti 150 --ni 50 --log-level info >> $OUT/engine.log 2>&1
  echo "[$round $v] $(grep -A1 '^backend' $OUT/engine.log | tail -1)" >> $L
done; done
echo "== done ($(el) s)" >> $L
