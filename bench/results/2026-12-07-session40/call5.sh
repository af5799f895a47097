#!/usr/bin/env bash
# Nsight Compute on the new bundle (still unpacked from call 2/4): gate_up + SwiGLU, bf16 and
# e4m3, ping-pong 128: where the kernels stand after the epilogue and K-loop changes.
E=build-gpu-e; [[ -x $E/bin/rankd-bench ]] || tar -C $E -xJf $E/rankd-bundle.tar.xz; export LD_LIBRARY_PATH=$PWD/$E/lib:/usr/local/cuda/lib64; B=$E/bin
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu); L=$OUT/main.log; t0=$(date +%s)
for v in "gate_up+swiglu ownpp128 T=7500:gate_up_pp128" "gate_up+swiglu f8ownpp128 T=7500:gate_up_f8pp128"; do
  name=${v##*:}; variant=${v%:*}
  (( $(date +%s) - t0 < 120 )) || break
  timeout 70 $NCU --clock-control none -k 'regex:Hopper' --launch-skip 1 --launch-count 1 --set full --import-source yes \
    -o /tmp/$name $B/rankd-bench kernels --filter gemm --shape 379m --variant "$variant" --iters 1 --warmup 1 >> $L 2>&1
  timeout 30 $NCU -i /tmp/$name.ncu-rep --page source --print-source sass --csv 2>> $L | gzip -c > $OUT/sass_$name.csv.gz
  timeout 30 $NCU -i /tmp/$name.ncu-rep --page details --section WarpStateStats --section SpeedOfLight --section ComputeWorkloadAnalysis >> $L 2>&1
  echo "== $name done ($(( $(date +%s) - t0 )) s)" >> $L
done
