#!/usr/bin/env bash
# On the GPU host (see README, "Measuring"): the standard workload through rankd-bench and the HF
# peers in one run. Uses the relocatable bundle (scripts/make_bundle.sh) and writes JSON + a log to
# ${OUT:-/tmp/rankd-bench-out}.
#   scripts/gpu_bench.sh [quick]     quick: rankd only, no torch.compile peers
set -uo pipefail
cd "$(dirname "$0")/.."
BUNDLE=${BUNDLE:-bundle}
OUT=${OUT:-/tmp/rankd-bench-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/$BUNDLE/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PYTHONUNBUFFERED=1
BENCH=$PWD/$BUNDLE/bin/rankd-bench
MODEL=${MODEL:-/tmp/rankd-379m}
log() { echo "== $*" | tee -a "$OUT/bench.log"; }

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee -a "$OUT/bench.log"
[[ -f $MODEL/model.safetensors ]] || "$BENCH" make-model --preset 379m --out "$MODEL" \
  --tokenizer-from tests/data/models/llama-cls | tee -a "$OUT/bench.log"

if [[ ${1:-} == quick ]]; then
  for strategy in ibpc multi-item; do
    for graphs in --graphs --no-graphs; do
      for ni in 50 250; do
        log "rankd engine $strategy $graphs ni=$ni"
        "$BENCH" engine --backend cuda --model "$MODEL" --tq 50 --ti 150 --ni $ni --iters 50 \
          --strategy $strategy $graphs --json "$OUT/engine_${strategy}_${graphs#--}_$ni.json" \
          2>&1 | tee -a "$OUT/bench.log"
      done
    done
  done
  log "rankd engine embedding items ni=250"
  "$BENCH" engine --backend cuda --model "$MODEL" --tq 50 --ni 250 --items embedding --iters 100 \
    --json "$OUT/engine_embedding_250.json" 2>&1 | tee -a "$OUT/bench.log"
  exit 0
fi

for ni in 50 250; do
  log "compare ni=$ni"
  python3 bench/compare_hf.py --model "$MODEL" --tq 50 --ti 150 --ni $ni --iters 20 \
    --rankd-bench "$BENCH" --json "$OUT/compare_ni$ni.json" 2>&1 | tee -a "$OUT/bench.log"
done
log "compare embedding items ni=250"
python3 bench/compare_hf.py --model "$MODEL" --tq 50 --ni 250 --embedding-items --iters 20 \
  --rankd-bench "$BENCH" --json "$OUT/compare_embedding.json" 2>&1 | tee -a "$OUT/bench.log"
