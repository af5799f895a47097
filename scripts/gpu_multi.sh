#!/usr/bin/env bash
# On a GPU host, from the relocatable bundle (scripts/make_bundle.sh --archive BUILD bundle): issue
# 7's checks of one `rankd serve` over several GPUs, on the standard workload (379M Llama,
# multi-item, Tq=50, Ti=150, Ni=50):
#   1. one worker on GPU 0 alone, closed-loop peak (rankd-bench load, 8 calls in flight);
#   2. `workers.gpus: all` (one worker per GPU), the same load scaled by the GPU count: aggregate
#      items/s against N x step 1 (issue 7's bar: within 10%), and every GPU busy (nvidia-smi);
#   3. the same server under load while the worker of the last GPU is killed (SIGKILL): the load
#      must see no failed call, the pool must be back to full strength afterwards.
# With one GPU (to check the script itself) step 2 runs two workers on it and step 3 kills one.
# Logs and JSON go to ${OUT:-/tmp/rankd-multi}: multi.log (summary), serve_*.log, *.json.
#
#   scripts/gpu_multi.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/rankd-multi}
BUNDLE=${BUNDLE:-bundle}
MODEL=${MODEL:-/tmp/rankd-379m}
DURATION=${DURATION:-20}
mkdir -p "$OUT"
LOG=$OUT/multi.log
if [[ ! -d $BUNDLE/bin && -f $BUNDLE/rankd-bundle.tar.xz ]]; then
  tar -C "$BUNDLE" -xJf "$BUNDLE/rankd-bundle.tar.xz" || exit 1
fi
BUNDLE=$(realpath "$BUNDLE")
export LD_LIBRARY_PATH=$BUNDLE/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
BIN=$BUNDLE/bin
say() { echo "$*" | tee -a "$LOG"; }
[[ -f $MODEL/model.safetensors ]] ||
  "$BIN/rankd-bench" make-model --preset 379m --out "$MODEL" \
    --tokenizer-from tests/data/models/llama-cls >>"$LOG" 2>&1
GPUS=$(nvidia-smi -L | grep -c '^GPU ')
say "== gpu_multi $(date -u +%FT%TZ), $GPUS GPU(s): $(nvidia-smi --query-gpu=name --format=csv,noheader | sort | uniq -c | xargs)"
PER_GPU=1
[[ $GPUS == 1 ]] && PER_GPU=2  # script check on one GPU: two workers share it

# config NAME GPUS WORKERS_PER_GPU: a serve config for the standard workload.
config() {
  cat >"$OUT/$1.yaml" <<EOF
model: {dir: $MODEL, backend: cuda, cuda_strategy: multi-item}
server: {listen: "127.0.0.1:0", metrics_listen: "127.0.0.1:0", http_listen: "", queue_size: 256}
workers: {count: 0, gpus: $2, workers_per_gpu: $3}
logging: {level: warn}
EOF
}
server_pid=
# start NAME: rankd serve with $OUT/NAME.yaml; sets target, metrics.
start() {
  local ready=$OUT/$1.ready.json
  rm -f "$ready"
  "$BIN/rankd" serve --config "$OUT/$1.yaml" --ready-file "$ready" >>"$OUT/serve_$1.log" 2>&1 &
  server_pid=$!
  for _ in $(seq 240); do [[ -s $ready ]] && break; sleep 0.5; done
  [[ -s $ready ]] || { say "$1: rankd serve did not get ready"; return 1; }
  target=127.0.0.1:$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["grpc_port"])' "$ready")
  metrics=http://127.0.0.1:$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["metrics_port"])' "$ready")/metrics
  # Ready means min_ready workers; wait for all of them.
  for _ in $(seq 240); do
    [[ $(metric rankd_workers_up) == $(metric rankd_workers_configured) ]] && return 0
    sleep 0.5
  done
  say "$1: not every worker came up"
}
stop() { kill -TERM "$server_pid" 2>/dev/null; wait "$server_pid" 2>/dev/null; }
metric() {
  python3 - "$metrics" "$1" <<'PY'
import sys, urllib.request
text = urllib.request.urlopen(sys.argv[1], timeout=5).read().decode()
total = sum(float(l.split()[-1]) for l in text.splitlines()
            if l.startswith(sys.argv[2]) and (l[len(sys.argv[2])] in " {"))
print(int(total))
PY
}
# load NAME CONCURRENCY: closed-loop load, its JSON in $OUT/NAME.json; prints items/s.
load() {
  "$BIN/rankd-bench" load --target "$target" --tq 50 --ti 150 --ni 50 --vocab 32000 \
    --concurrency "$2" --duration "$DURATION" --warmup-s 3 --connections 4 \
    --json "$OUT/$1.json" >>"$LOG" 2>&1
  python3 -c 'import json,sys; print(round(json.load(open(sys.argv[1]))["items_per_s"]))' "$OUT/$1.json"
}
failed() {
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("requests_failed", 0))' "$1"
}

# 1. one GPU
config one "[0]" 1
start one || exit 1
one=$(load one 8)
stop
say "one GPU (gpus: [0], 1 worker): $one items/s"

# 2. every GPU
config all all "$PER_GPU"
start all || exit 1
nvidia-smi dmon -s u -c $((DURATION + 5)) >"$OUT/dmon.log" 2>&1 &
dmon=$!
all=$(load all $((8 * GPUS)))
wait "$dmon" 2>/dev/null
workers=$(metric rankd_workers_configured)
say "all GPUs (gpus: all, $workers workers): $all items/s"
python3 - "$one" "$all" "$GPUS" <<'PY' | tee -a "$LOG"
import sys
one, all_, n = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
ratio = all_ / (n * one)
verdict = "within 10%" if ratio >= 0.9 else "NOT within 10%"
print(f"aggregate {all_:.0f} items/s = {all_ / one:.2f} x one GPU; {ratio:.1%} of {n} x one GPU ({verdict})")
PY
say "GPU utilisation during the load (nvidia-smi dmon, sm %, per GPU: mean of samples > 0):"
python3 - "$OUT/dmon.log" <<'PY' | tee -a "$LOG"
import collections, sys
use = collections.defaultdict(list)
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) > 1 and f[0].isdigit() and f[1].isdigit():
        use[int(f[0])].append(int(f[1]))
for gpu, v in sorted(use.items()):
    busy = [x for x in v if x > 0]
    print(f"  GPU {gpu}: {sum(busy) / max(len(busy), 1):.0f}% over {len(busy)} of {len(v)} samples")
PY

# 3. kill the last GPU's (last) worker under load
restarts_before=$(metric rankd_worker_restarts_total)
load kill $((8 * GPUS)) >/dev/null &
loader=$!
sleep 8
victim=
for pid in $(pgrep -f "rankd worker" | sort -n); do
  env_gpu=$(tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | sed -n 's/^CUDA_VISIBLE_DEVICES=//p')
  [[ $env_gpu == $((GPUS - 1)) ]] && victim=$pid
done
if [[ -n $victim ]]; then
  kill -KILL "$victim"
  say "killed worker pid $victim (GPU $((GPUS - 1))) under load at $(date -u +%T)"
else
  say "no worker process found for GPU $((GPUS - 1))"
fi
wait "$loader"
kill_items=$(python3 -c 'import json,sys; print(round(json.load(open(sys.argv[1]))["items_per_s"]))' "$OUT/kill.json")
kill_failed=$(failed "$OUT/kill.json")
for _ in $(seq 120); do
  [[ $(metric rankd_workers_up) == "$workers" ]] && break
  sleep 0.5
done
say "under the kill: $kill_items items/s, $kill_failed failed calls; afterwards $(metric rankd_workers_up) of $workers workers up, restarts $restarts_before -> $(metric rankd_worker_restarts_total)"
stop
[[ -n $victim && $kill_failed == 0 ]] || exit 1
