#!/usr/bin/env bash
# Session 42 (prepared), call 3 (on a warm machine with build-gpu-h unpacked, or carry ["build-gpu-h"]):
# Nsight Compute on the layers where the own GEMM trails cuBLASLt (qkv, o_proj +=, down +=; bf16,
# 379M, T=7500): ours (ping-pong 128; down also cooperative 256) and cuBLASLt's kernel, speed of
# light, warp states, and ours' per-instruction samples (sass_top.py reads them). First the wgmma
# queue attention kernel at Tq=50 (51 us for 64 MB: 37% of DRAM; where its time goes).
F=build-gpu-h; [[ -x $F/bin/rankd-bench ]] || tar -C $F -xJf $F/rankd-bundle.tar.xz
export LD_LIBRARY_PATH=$PWD/$F/lib:/usr/local/cuda/lib64; B=$F/bin
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu); L=$OUT/main.log; t0=$(date +%s)
for v in "multi-item wgmma:attn50:PrefixAttention:1" "qkv ownpp128 T=7500:qkv_pp128:Hopper:1" "qkv cublaslt T=7500:qkv_lt:nvjet|xmma|sm90_|cutlass:25" \
         "o_proj+= ownpp128 T=7500:o_pp128:Hopper:1" "o_proj+= cublaslt T=7500:o_lt:nvjet|xmma|sm90_|cutlass:25" \
         "down+= own256 T=7500:down_256:Hopper:1" "down+= cublaslt T=7500:down_lt:nvjet|xmma|sm90_|cutlass:25"; do
  IFS=: read -r variant name regex skip <<< "$v"; FILTER=gemm; [[ $name == attn* ]] && FILTER=attention
  (( $(date +%s) - t0 < 420 )) || break
  timeout 80 $NCU --clock-control none -k "regex:$regex" --launch-skip $skip --launch-count 1 --set full --import-source yes \
    -o /tmp/$name $B/rankd-bench kernels --filter ${FILTER:-} --shape 379m --variant "$variant" --iters 30 --warmup 1 >> $OUT/ncu_run.log 2>&1
  echo "== $name ($(( $(date +%s) - t0 )) s)" >> $L
  [[ $regex == Hopper || $regex == PrefixAttention ]] && timeout 30 $NCU -i /tmp/$name.ncu-rep --page source --print-source sass --csv 2>> $L | gzip -c > $OUT/sass_$name.csv.gz
  timeout 30 $NCU -i /tmp/$name.ncu-rep --page details --section WarpStateStats --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section LaunchStats --section Occupancy >> $L 2>&1
done
echo "== done ($(( $(date +%s) - t0 )) s)" >> $L
