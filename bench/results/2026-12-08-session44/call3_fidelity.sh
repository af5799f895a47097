#!/usr/bin/env bash
# Session 44, call 3 (carry ["build-gpu-s"]; after call1_setup.sh on the same warm machine): fp8
# fidelity (bench/fidelity.py, 12 models, and the demo model's held-out MRR@10) of the old default
# (PROMOTED=0 FAST_ACCUM=0: the row-scaled layers on cuBLASLt) against the new (promoted, gate_up
# fast) with rankd of 2f7f6bc (m: bin/rankd only; libraries from /tmp/keep/lib).
S=build-gpu-s; [[ -d /tmp/keep/lib ]] || { echo "no /tmp/keep: call1_setup.sh first" >> $OUT/main.log; exit 3; }
mkdir -p /tmp/keep/m && tar -C /tmp/keep/m -xJf $S/m.tar.xz
export LD_LIBRARY_PATH=/tmp/keep/m/lib:/tmp/keep/lib:/usr/local/cuda/lib64 RANKD_TEST_DATA_DIR=$PWD/tests/data
F=/tmp/keep/m; L=$OUT/main.log; t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader >> $L; hostname >> $L
for v in "old RANKD_CUDA_FP8_PROMOTED=0 RANKD_CUDA_FP8_FAST_ACCUM=0" "new"; do
  set -- $v; name=$1; shift
  echo "== fidelity $name ($(el) s)" >> $L
  timeout 220 env "$@" python3 bench/fidelity.py --rankd $F/bin/rankd --backend cuda --precisions fp8 \
    --demo-queries 200 --json $OUT/fidelity_$name.json --markdown $OUT/fidelity_$name.md > $OUT/fidelity_$name.log 2>&1
  sed -n '/^All models/,$p' $OUT/fidelity_$name.md | grep rankd >> $L
  grep demo-jobs $OUT/fidelity_$name.md | grep rankd >> $L
done
echo "== demo old ($(el) s)" >> $L
env RANKD_CUDA_FP8_PROMOTED=0 RANKD_CUDA_FP8_FAST_ACCUM=0 OUT=/tmp/gcn_old BUNDLE=$F DEMO_PRECISIONS=fp8 timeout 120 scripts/gpu_check.sh demo 2>&1 | grep 'held-out' | sed "s/^/[old] /" >> $L
echo "== done ($(el) s)" >> $L
