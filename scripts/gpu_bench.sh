#!/usr/bin/env bash
# The numbers of bench/RESULTS.md in one command, on a GPU host, from the relocatable bundle
# (scripts/make_bundle.sh --archive BUILD bundle) in the repository root:
#   1. the standard workload (ARCHITECTURE.md "Measuring": Tq=50, Ti=150) on each model of MODELS
#      (379m: the 379M Llama classifier; qwen3-0.6b: Qwen3-Reranker-0.6B's shape, a yes/no causal
#      LM; both random weights from rankd-bench make-model) through bench/compare_hf.py: HF eager,
#      HF with prefix-cache reuse, HF under torch.compile, and rankd-bench engine (ibpc and
#      multi-item x graphs on/off, each precision of PRECISIONS), Ni=50 and Ni=250, same run;
#   2. embedding items (one hidden-size vector per item), Ni=250, the same way;
#   3. per model and precision, `rankd serve --backend cuda` under `rankd-bench load`: closed
#      loop to find the peak, then open loop at 50/70/90% of it for p99 latency;
#   4. rankd-bench sweep: items/s and p99 vs Ni (engine), p99 and items/s vs offered load (serve),
#      as CSV and SVG plots.
# Everything lands in ${OUT:-/tmp/rankd-bench-out}: bench.log and results.tgz (JSON, CSV, SVG; file
# names carry the model preset, and the load phase's the precision).
#   MODELS="379m qwen3-0.6b" (make-model presets, made once into $MODELS_DIR/rankd-PRESET),
#   PRECISIONS=bf16,fp8 (rankd's --precision values).
#   scripts/gpu_bench.sh [compare] [load] [quick]    phases (default both); quick: no torch.compile
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/rankd-bench-out}
BUNDLE=${BUNDLE:-bundle}
MODELS=${MODELS:-379m qwen3-0.6b}
MODELS_DIR=${MODELS_DIR:-/tmp}
PRECISIONS=${PRECISIONS:-bf16,fp8}
mkdir -p "$OUT" "$OUT/json"
LOG=$OUT/bench.log
if [[ ! -d $BUNDLE/bin && -f $BUNDLE/rankd-bundle.tar.xz ]]; then
  tar -C "$BUNDLE" -xJf "$BUNDLE/rankd-bundle.tar.xz" || exit 1
fi
BUNDLE=$(realpath "$BUNDLE")
export LD_LIBRARY_PATH=$BUNDLE/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PYTHONUNBUFFERED=1
BIN=$BUNDLE/bin
log() { echo "== $(date -u +%H:%M:%S) $*" | tee -a "$LOG"; }
COMPILE=()
PHASES=()
for a in "$@"; do
  case $a in
    quick) COMPILE=(--no-compile) ;;
    compare | load) PHASES+=("$a") ;;
    *) echo "gpu_bench: unknown argument $a" >&2; exit 2 ;;
  esac
done
[[ ${#PHASES[@]} == 0 ]] && PHASES=(compare load)
has() { [[ " ${PHASES[*]} " == *" $1 "* ]]; }

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee -a "$LOG"
model_dir() { echo "$MODELS_DIR/rankd-$1"; }
for preset in $MODELS; do
  case $preset in
    qwen3-*) tok=tests/data/tokenizers/qwen3 ;;
    *) tok=tests/data/models/llama-cls ;;
  esac
  [[ -f $(model_dir "$preset")/model.safetensors ]] || "$BIN/rankd-bench" make-model \
    --preset "$preset" --out "$(model_dir "$preset")" --tokenizer-from "$tok" | tee -a "$LOG"
done

if has compare; then
for preset in $MODELS; do
MODEL=$(model_dir "$preset")
for ni in 50 250; do
  log "compare $preset ids ni=$ni"
  python3 bench/compare_hf.py --model "$MODEL" --tq 50 --ti 150 --ni $ni --iters 20 \
    "${COMPILE[@]}" --rankd-bench "$BIN/rankd-bench" --precisions "$PRECISIONS" \
    --json "$OUT/json/compare_${preset}_ni$ni.json" 2>&1 | grep -v Warning | tee -a "$LOG"
done
log "compare $preset embedding items ni=250"
python3 bench/compare_hf.py --model "$MODEL" --tq 50 --ni 250 --embedding-items --iters 20 \
  "${COMPILE[@]}" --rankd-bench "$BIN/rankd-bench" --precisions "$PRECISIONS" \
  --json "$OUT/json/compare_${preset}_embedding.json" 2>&1 | grep -v Warning | tee -a "$LOG"
done
fi

if has load; then
for preset in $MODELS; do
MODEL=$(model_dir "$preset")
vocab=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["vocab_size"])' "$MODEL/config.json")
for precision in ${PRECISIONS//,/ }; do
tag=${preset}_$precision
log "serve under load: $preset $precision"
ready=/tmp/rankd-bench-ready.json
rm -f "$ready"
"$BIN/rankd" serve --backend cuda --model "$MODEL" --precision "$precision" --workers 1 \
  --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 --http-listen '' --ready-file "$ready" --log-level warn >>"$OUT/serve.log" 2>&1 &
server=$!
for _ in $(seq 120); do [[ -s $ready ]] && break; sleep 0.5; done
if [[ -s $ready ]]; then
  port=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["grpc_port"])' "$ready")
  target=127.0.0.1:$port
  load() { "$BIN/rankd-bench" load --target "$target" --tq 50 --ti 150 --ni 50 --vocab "$vocab" "$@" \
             2>&1 | tee -a "$LOG"; }
  load --concurrency 2 --duration 5 >/dev/null   # warm-up: graphs captured, prefix pool grown
  load --concurrency 8 --duration 15 --json "$OUT/json/load_${tag}_closed_c8.json"
  peak_rps=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["requests_per_s"])' \
    "$OUT/json/load_${tag}_closed_c8.json")
  rates=$(python3 -c "print(','.join(str(round($peak_rps * p / 100, 2)) for p in (30, 50, 70, 90)))")
  log "sweep: engine over Ni, then serve at 30/50/70/90% of the closed-loop peak ($rates req/s)"
  "$BIN/rankd-bench" sweep --backend cuda --model "$MODEL" --strategy multi-item \
    --precision "$precision" --ni-list 10,50,100,250 --iters 10 --target "$target" \
    --rates "$rates" --duration 15 --warmup-s 2 --load-ni 50 --vocab "$vocab" \
    --out "$OUT/json/sweep_$tag" 2>&1 | tee -a "$LOG"
else
  log "rankd serve did not get ready"
fi
kill -TERM "$server" 2>/dev/null
wait "$server"
done
done
fi
tar -C "$OUT" -czf "$OUT/results.tgz" json && rm -rf "$OUT/json"
log "done"
