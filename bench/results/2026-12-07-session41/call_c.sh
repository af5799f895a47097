#!/usr/bin/env bash
# Session 41, call C: Nsight Compute on the wgmma attention kernel (queue, and overlapped with
# RANKD_CUDA_ATTENTION_OVERLAP=1) in the 379M multi-item pass at Tq=50 and Tq=1024 (graphs off,
# one launch after the warm-up): where a 64-row unit's time goes (issue, stalls, MUFU, tensor).
F=${F:-build-gpu-h}; [[ -x $F/bin/rankd-bench ]] || tar -C $F -xJf $F/rankd-bundle.tar.xz
export LD_LIBRARY_PATH=$PWD/$F/lib:/usr/local/cuda/lib64
B=$F/bin; L=$OUT/main.log; t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader >> $L
[[ -f /tmp/m379/model.safetensors ]] || $B/rankd-bench make-model --preset 379m --out /tmp/m379 --tokenizer-from tests/data/models/llama-cls > /dev/null 2>&1
for tq in 50 1024; do for ov in 0 1; do
  name=attn_tq${tq}_ov$ov
  (( $(el) < 480 )) || break
  timeout 90 env RANKD_CUDA_ATTENTION_OVERLAP=$ov $NCU --clock-control none -k regex:PrefixAttention --launch-skip 30 --launch-count 1 --set full --import-source yes \
    -o /tmp/$name $B/rankd-bench engine --backend cuda --model /tmp/m379 --tq $tq --ti 150 --ni 50 --iters 2 --strategy multi-item --no-graphs >> $OUT/ncu.log 2>&1
  timeout 30 $NCU -i /tmp/$name.ncu-rep --page source --print-source sass --csv 2>> $OUT/ncu.log | gzip -c > $OUT/sass_$name.csv.gz
  timeout 30 $NCU -i /tmp/$name.ncu-rep --page details --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis > /tmp/$name.txt 2>&1; { echo "#### $name"; cat /tmp/$name.txt; } >> $OUT/details.txt
  grep -E "Duration|Registers Per|Achieved Occupancy|Issued Ipc|No Eligible|Compute \(SM\) Throughput|Memory Throughput" /tmp/$name.txt | sed "s/^/$name /" >> $L
  echo "== $name done ($(el) s)" >> $L
done; done
echo "== done ($(el) s)" >> $L
