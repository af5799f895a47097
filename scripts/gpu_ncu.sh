#!/usr/bin/env bash
# On the GPU host: Nsight Compute reports of the CUDA backend's kernels on the standard workload
# (multi-item, Ni=50, graphs off so that every kernel is its own launch), one ncu run per kernel
# family after the warm-up passes. Text reports go to $OUT/ncu_<name>.txt.
#
#   scripts/gpu_ncu.sh [NAME...]   NAME: attention rms_norm qkv_rope swiglu gemm (default: all)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/rankd-ncu}
BUNDLE=${BUNDLE:-bundle}
MODEL_379M=${MODEL_379M:-/tmp/rankd-379m}
NCU=${NCU:-$(command -v ncu || echo /usr/local/cuda/bin/ncu)}
mkdir -p "$OUT"
if [[ ! -d $BUNDLE/bin && -f $BUNDLE/rankd-bundle.tar.xz ]]; then
  tar -C "$BUNDLE" -xJf "$BUNDLE/rankd-bundle.tar.xz" || exit 1
fi
BUNDLE=$(realpath "$BUNDLE")
export LD_LIBRARY_PATH=$BUNDLE/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
BIN=$BUNDLE/bin
[[ -f $MODEL_379M/model.safetensors ]] ||
  "$BIN/rankd-bench" make-model --preset 379m --out "$MODEL_379M" \
    --tokenizer-from tests/data/models/llama-cls >"$OUT/make_model.log" 2>&1
STRATEGY=${STRATEGY:-multi-item}
bench=("$BIN/rankd-bench" engine --backend cuda --model "$MODEL_379M" --tq 50 --ti 150 --ni 50
  --iters 2 --strategy "$STRATEGY" --no-graphs)
# name  kernel regex  launches to skip  launches  sections
profile() {
  local name=$1 regex=$2 skip=$3 count=$4
  shift 4
  timeout 300 "$NCU" --clock-control none -k "regex:$regex" --launch-skip "$skip" \
    --launch-count "$count" "$@" "${bench[@]}" >"$OUT/ncu_$name.txt" 2>&1
  echo "ncu $name rc=$?"
}
names=("$@")
[[ ${#names[@]} == 0 ]] && names=(attention rms_norm qkv_rope swiglu gemm)
basic=(--section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy
  --section LaunchStats --section WarpStateStats --section SchedulerStats)
for n in "${names[@]}"; do
  case $n in
    attention) profile attention PrefixAttention 100 1 --set full --import-source no \
      --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio' ;;
    rms_norm) profile rms_norm RmsNorm 200 2 "${basic[@]}" ;;
    qkv_rope) profile qkv_rope QkvRope 100 1 "${basic[@]}" ;;
    swiglu) profile swiglu SwiGlu 100 1 "${basic[@]}" ;;
    gemm) profile gemm 'nvjet|gemm|xmma|cutlass' 400 8 --section SpeedOfLight --section LaunchStats \
      --section Occupancy ;;
  esac
done
