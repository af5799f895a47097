#!/usr/bin/env bash
# Session 45 (carry ["build-gpu-s"], after call_s.sh, on the same warm machine if it still is):
# Nsight Compute on the attention kernels of 2abec6e where the next step is decided: the default
# D 64 kernel (four blocks) at Tq=50, without and with RANKD_CUDA_ATTENTION_PREFETCH (does a
# unit's start still wait on q?), at Tq=1024 (never profiled: issue-, MUFU- or latency-bound?)
# beside blocks of 2 warpgroups, and the D 128 overlapped kernel at two and three blocks; speed of
# light, warp states, occupancy and (the Tq=1024 one) per-instruction samples.
F=build-gpu-s; [[ -x $F/bin/rankd-bench ]] || tar -C $F -xJf $F/rankd-bundle.tar.xz
export LD_LIBRARY_PATH=$PWD/$F/lib:/usr/local/cuda/lib64; B=$F/bin
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu); L=$OUT/main.log; t0=$(date +%s)
for v in "379m:50:multi-item wgmma b4:b4_50" "379m:50:multi-item wgmma b4 pf:b4pf_50" \
         "379m:1024:multi-item wgmma b4:b4_1024" "379m:1024:multi-item wgmma wg2:wg2_1024" \
         "qwen3-0.6b:50:multi-item wgmma overlap:ov_d128" "qwen3-0.6b:50:multi-item wgmma overlap b3:ovb3_d128"; do
  IFS=: read -r shape tq variant name <<< "$v"
  (( $(date +%s) - t0 < 480 )) || break
  timeout 80 $NCU --clock-control none -k "regex:PrefixAttention" --launch-skip 1 --launch-count 1 --set full \
    --import-source yes -o /tmp/$name $B/rankd-bench kernels --filter attention --shape $shape --tq $tq \
    --variant "$variant" --iters 30 --warmup 1 >> $OUT/ncu_run.log 2>&1
  echo "== $name: $shape Tq=$tq '$variant' ($(( $(date +%s) - t0 )) s)" >> $L
  [[ $name == b4_1024 ]] && timeout 30 $NCU -i /tmp/$name.ncu-rep --page source --print-source sass --csv 2>> $L | gzip -c > $OUT/sass_$name.csv.gz
  timeout 30 $NCU -i /tmp/$name.ncu-rep --page details --section WarpStateStats --section SpeedOfLight \
    --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section LaunchStats --section Occupancy >> $L 2>&1
done
echo "== done ($(( $(date +%s) - t0 )) s)" >> $L
