#!/usr/bin/env bash
# Next session, call B (bundle j of HEAD: BUNDLE_BINS="rankd" scripts/make_bundle.sh --archive
# build build-gpu-j; carry ["build-gpu-j"]): fp8 fidelity of the old default (row-scaled layers on
# cuBLASLt) against session 43's (promoted, gate_up fast) on the same demo model: bench/fidelity.py
# (issue 25's 0.98 / 95% bar; session 43 measured only the new settings: 0.9823 / 93.8%) and the
# demo model's held-out MRR@10; and gate_up alone in e4m3 (is qkv's e4m3 what moves the top item?).
F=build-gpu-j; [[ -x $F/bin/rankd ]] || tar -C $F -xJf $F/rankd-bundle.tar.xz
export LD_LIBRARY_PATH=$PWD/$F/lib:/usr/local/cuda/lib64 RANKD_TEST_DATA_DIR=$PWD/tests/data
L=$OUT/main.log; t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader >> $L; hostname >> $L
for v in "old RANKD_CUDA_FP8_PROMOTED=0 RANKD_CUDA_FP8_FAST_ACCUM=0" "new" "gate_up_only RANKD_CUDA_FP8_LINEARS=gate_up"; do
  set -- $v; name=$1; shift
  echo "== fidelity $name ($(el) s)" >> $L
  timeout 200 env "$@" python3 bench/fidelity.py --rankd $F/bin/rankd --backend cuda --precisions fp8 \
    --demo-queries 200 --json $OUT/fidelity_$name.json --markdown $OUT/fidelity_$name.md > $OUT/fidelity_$name.log 2>&1
  sed -n '/^All models/,$p' $OUT/fidelity_$name.md | grep rankd >> $L
  grep demo-jobs $OUT/fidelity_$name.md | grep rankd >> $L
  env "$@" OUT=/tmp/gcn_$name BUNDLE=$F DEMO_PRECISIONS=fp8 timeout 120 scripts/gpu_check.sh demo 2>&1 | grep 'held-out' | sed "s/^/[$name] /" >> $L
done
echo "== done ($(el) s)" >> $L
