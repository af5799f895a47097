#!/usr/bin/env bash
# Session 44 (carry ["build-gpu-j"]: rankd of e105de3, whose scores are HEAD's): fp8 fidelity of
# the old default (RANKD_CUDA_FP8_PROMOTED=0 RANKD_CUDA_FP8_FAST_ACCUM=0: the row-scaled layers on
# cuBLASLt) on the retrained demo model and the golden models (bench/fidelity.py), then its demo
# held-out MRR@10; session 43 measured the new default (0.9823 / 93.8%, MRR@10 0.8727).
F=build-gpu-j; [[ -x $F/bin/rankd ]] || tar -C $F -xJf $F/rankd-bundle.tar.xz
export LD_LIBRARY_PATH=$PWD/$F/lib:/usr/local/cuda/lib64 RANKD_TEST_DATA_DIR=$PWD/tests/data
L=$OUT/main.log; t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader >> $L; hostname >> $L
export RANKD_CUDA_FP8_PROMOTED=0 RANKD_CUDA_FP8_FAST_ACCUM=0
echo "== fidelity old ($(el) s)" >> $L
timeout 300 python3 bench/fidelity.py --rankd $F/bin/rankd --backend cuda --precisions fp8 \
  --demo-queries 200 --json $OUT/fidelity_old.json --markdown $OUT/fidelity_old.md > $OUT/fidelity_old.log 2>&1
echo "rc $?" >> $L
sed -n '/^All models/,$p' $OUT/fidelity_old.md | grep rankd >> $L
grep demo-jobs $OUT/fidelity_old.md | grep rankd >> $L
echo "== demo old ($(el) s)" >> $L
OUT=/tmp/gcn_old BUNDLE=$F DEMO_PRECISIONS=fp8 timeout 200 scripts/gpu_check.sh demo 2>&1 | grep 'held-out' >> $L
echo "== done ($(el) s)" >> $L
