#!/usr/bin/env bash
# Session 39 call C (bundle c, as call B): Nsight Compute's per-instruction view (SASS, stall
# samples) of three GEMMs: the bf16 gate_up + SwiGLU on ping-pong 128 (the mainloop against
# cuBLASLt's), and the norm fold's o_proj (kResidualNorm) and gate_up (rows' rms) on the same
# schedule, to see where the fold's epilogues stall. At most 8 files come back.
mkdir -p build-gpu-c && tar -C build-gpu-c -xJf build-gpu-c/rankd-bundle.tar.xz
export LD_LIBRARY_PATH=$PWD/build-gpu-c/lib:/usr/local/cuda/lib64
B=build-gpu-c/bin
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
L=$OUT/main.log
t0=$(date +%s)
for v in "gate_up+swiglu ownpp128 T=7500:gate_up_pp128" "o_proj+= foldpp128 T=7500:o_proj_fold" "gate_up+swiglu foldpp128 T=7500:gate_up_fold"; do
  name=${v##*:}; variant=${v%:*}
  (( $(date +%s) - t0 < 150 )) || break
  timeout 60 $NCU --clock-control none -k 'regex:Hopper' --launch-skip 1 --launch-count 1 --set full --import-source yes \
    -o /tmp/$name $B/rankd-bench kernels --filter gemm --shape 379m --variant "$variant" --iters 1 --warmup 1 >> $L 2>&1
  timeout 30 $NCU -i /tmp/$name.ncu-rep --page source --print-source sass --csv 2>> $L | gzip -c > $OUT/sass_$name.csv.gz
  timeout 30 $NCU -i /tmp/$name.ncu-rep --page details --section WarpStateStats --section SpeedOfLight --section MemoryWorkloadAnalysis >> $L 2>&1
  echo "== $name done ($(( $(date +%s) - t0 )) s)" >> $L
done
