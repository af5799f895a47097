#!/usr/bin/env bash
# Session 42, call 2b: the demo model's bar with RANKD_CUDA_FP8_PROMOTED=1 (its gate: call 1's
# Hopper GEMM tests). Bundle: BUNDLE_BINS="rankd" scripts/make_bundle.sh --archive build
# build-gpu-j (carry ["build-gpu-j"]).
F=build-gpu-j; [[ -x $F/bin/rankd ]] || tar -C $F -xJf $F/rankd-bundle.tar.xz
export LD_LIBRARY_PATH=$PWD/$F/lib:/usr/local/cuda/lib64 RANKD_TEST_DATA_DIR=$PWD/tests/data
B=$F/bin; L=$OUT/main.log; t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader >> $L; hostname >> $L
echo "== demo ($(el) s)" >> $L
env RANKD_CUDA_FP8_PROMOTED=1 OUT=/tmp/gcn BUNDLE=$F DEMO_PRECISIONS=fp8 timeout 120 scripts/gpu_check.sh demo 2>&1 | grep 'demo model' | sed "s/^/[PROMOTED=1] /" >> $L
env OUT=/tmp/gcn2 BUNDLE=$F DEMO_PRECISIONS=fp8 timeout 120 scripts/gpu_check.sh demo 2>&1 | grep 'demo model' | sed "s/^/[default] /" >> $L
echo "== done ($(el) s)" >> $L
