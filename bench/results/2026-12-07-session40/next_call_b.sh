#!/usr/bin/env bash
# The next session's call B (after next_call_a.sh). Bundle of the same HEAD as build-gpu-g:
#   BUNDLE_BINS="rankd rankd-client rankd-bench cuda_backend_test" \
#     scripts/make_bundle.sh --archive build build-gpu-g     (carry ["build-gpu-g"])
# The golden fp8 backend tests (the own GEMM promoted, fast, and gate_up fast with the others
# promoted), the demo model's bar with PROMOTED=1 and with gate_up's fast accumulation, every
# GEMM row, embedding items (ibpc, Ni=250) with and without RANKD_CUDA_FOLD_NORMS=1 (two kernels a
# layer fewer: does it pay where a pass is small?), then Nsight Compute on the bf16 GEMMs that
# still trail cuBLASLt (qkv, o_proj, down on ping-pong 128) and cuBLASLt's down: why qkv runs at
# 61% of the tensor peak where gate_up runs at 86%.
F=build-gpu-g; [[ -x $F/bin/rankd-bench ]] || tar -C $F -xJf $F/rankd-bundle.tar.xz
export LD_LIBRARY_PATH=$PWD/$F/lib:/usr/local/cuda/lib64 RANKD_TEST_DATA_DIR=$PWD/tests/data
B=$F/bin; L=$OUT/main.log; t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader >> $L; hostname >> $L
[[ -f /tmp/m379/model.safetensors ]] || $B/rankd-bench make-model --preset 379m --out /tmp/m379 --tokenizer-from tests/data/models/llama-cls > /dev/null 2>&1
echo "== backend tests ($(el) s)" >> $L
timeout 200 $B/cuda_backend_test --gtest_color=no --gtest_filter='*OwnGemmFp8*:*AttentionWgmma*' 2>&1 | grep -E '^\[ *(FAILED|PASSED|SKIPPED) *\]|Failure' | tail -30 >> $L
echo "== demo ($(el) s)" >> $L
for v in "RANKD_CUDA_FP8_PROMOTED=1" "RANKD_CUDA_FP8_FAST_ACCUM=gate_up RANKD_CUDA_FP8_PROMOTED=1" "RANKD_CUDA_FP8_FAST_ACCUM=gate_up"; do
  env $v OUT=/tmp/gcn BUNDLE=$F DEMO_PRECISIONS=fp8 timeout 80 scripts/gpu_check.sh demo 2>&1 | grep 'demo model' | sed "s/^/[$v] /" >> $L
done
echo "== gemm ($(el) s)" >> $L
timeout 120 $B/rankd-bench kernels --filter gemm --shape 379m --variant T=7500 > $OUT/gemm.log 2>&1
grep -E "pp128 |pp128c2 |cublaslt|prom128 " $OUT/gemm.log | awk '{print $3, $4, $9}' >> $L
echo "== embedding items ($(el) s)" >> $L
for round in 1 2; do
for v in "-" "RANKD_CUDA_FOLD_NORMS=1"; do
  envs=(); [[ $v != - ]] && envs=($v)
  echo "== [emb $v]" >> $OUT/engine.log
  timeout 40 env "${envs[@]}" $B/rankd-bench engine --backend cuda --model /tmp/m379 --iters 100 --strategy ibpc --graphs --precision bf16 --tq 50 --ni 250 --items embedding --log-level info >> $OUT/engine.log 2>&1
  echo "[$round emb ibpc $v] $(grep -A1 '^backend' $OUT/engine.log | tail -1)" >> $L
done; done
echo "== ncu ($(el) s)" >> $L
for v in "qkv ownpp128 T=7500:qkv_pp128" "o_proj+= ownpp128 T=7500:o_proj_pp128" "down+= ownpp128 T=7500:down_pp128" "down+= cublaslt T=7500:down_cublaslt"; do
  name=${v##*:}; variant=${v%:*}
  (( $(el) < 500 )) || break
  timeout 60 $NCU --clock-control none -k 'regex:Hopper|nvjet|sm90|gemm' --launch-skip 1 --launch-count 1 --set full --import-source yes \
    -o /tmp/$name $B/rankd-bench kernels --filter gemm --shape 379m --variant "$variant" --iters 1 --warmup 1 >> $OUT/ncu.log 2>&1
  [[ $name == *cublaslt ]] || timeout 30 $NCU -i /tmp/$name.ncu-rep --page source --print-source sass --csv 2>> $OUT/ncu.log | gzip -c > $OUT/sass_$name.csv.gz
  timeout 30 $NCU -i /tmp/$name.ncu-rep --page details --section WarpStateStats --section SpeedOfLight --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis >> $OUT/ncu.log 2>&1
  echo "== $name done ($(el) s)" >> $L
done
echo "== done ($(el) s)" >> $L
