#!/usr/bin/env bash
# On the GPU host: trains the demo model (models/demo-jobs-reranker) on one GPU and checks it with
# Hugging Face transformers. Needs python3 with torch (CUDA), sentencepiece and transformers; no
# rankd build, no network. Run from the repository root:
#
#   OUT=/some/dir scripts/gpu_train_demo.sh [TRAIN_SECONDS]     # default 300
#
# Writes (7 files):
#   $OUT/demo-jobs-reranker/{config.json,model.safetensors,tokenizer.model,rankd.yaml,
#                            train_log.json,hf_check.json}
#   $OUT/log.txt    everything, as it happens: the host, the data step's progress, the variants'
#                   training ([vI] lines), the evaluation (its JSON report at the end)
# Then, where rankd is built: copy the six files into models/demo-jobs-reranker (tokenizer.model
# is scripts/demo_vocab/tokenizer.model, rankd.yaml the templates) and run
# scripts/eval_demo_model.py --rankd build/bin/rankd --update-card.
#
# Time: the header about 10 s; data generation and tokenization (200k training queries, 16
# processes) about 40 s, bounded by DATA_SECONDS (default 90: past it, the step's processes print
# their Python stacks into log.txt, are killed, and the script stops, so that a slow or stuck data
# step cannot eat the call); then the variants in parallel for TRAIN_SECONDS each (torch.compile
# of the layers, about 30-60 s, and validation every 15 s included; the cosine schedule ends at
# TRAIN_SECONDS) plus about 20 s of start and final validation; then the evaluation (torch on the
# GPU, transformers on the CPU for 200 queries a set) about 30 s: about TRAIN_SECONDS + 100 s in
# all, about TRAIN_SECONDS + DATA_SECONDS + 60 s at worst (450 s with the defaults). The variants
# share the GPU: two get about half its steps each.
set -euo pipefail
: "${OUT:?set OUT to the output folder}"
secs=${1:-300}
py=${PYTHON:-python3}
device=${DEVICE:-cuda}  # DEVICE=cpu: a dry run of the whole flow (with --smoke variants, small DATA_FLAGS)
model="$OUT/demo-jobs-reranker"
mkdir -p "$model"
log="$OUT/log.txt"
{
  echo "== $(date -u +%FT%TZ) gpu_train_demo.sh, $secs s of training, commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
  nvidia-smi -L || true
  echo "host: $(nproc) CPUs, $(awk '/MemTotal/ {t=$2} /MemAvailable/ {a=$2} END {printf "%.0f GiB memory (%.0f available)", t/2^20, a/2^20}' /proc/meminfo), $(df -h /tmp | awk 'NR==2 {print $4}') free in /tmp, /dev/shm: $( [[ -w /dev/shm ]] && echo writable || echo 'not writable')"
  "$py" -c 'import torch, sentencepiece, transformers; print("torch", torch.__version__, "cuda", torch.cuda.is_available(), "transformers", transformers.__version__, "sentencepiece", sentencepiece.__version__)' ||
    echo "(not every module imports: see above)"
} 2>&1 | tee "$log"
workers=$(( $(nproc) > 16 ? 16 : $(nproc) ))
# TRAIN_VARIANTS: '|'-separated sets of trainer flags, each trained in parallel on the one GPU from
# one data generation (e.g. "-|--lr 2e-3 --batch-queries 128|--shape wide"; '-' for none). The
# variant with the best sum of validation and novel NDCG@10 (the training vocabulary, and made-up
# names in the training templates; the heldout split plays no part in the choice) is the model written to $OUT.
IFS='|' read -r -a variants <<< "${TRAIN_VARIANTS:--}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cache="$work/data.pt"
# Generated once, before the trainers start (a variant's flags must not change the data:
# --train-queries, --val-queries, --max-len belong to this step, through DATA_FLAGS).
# Its output goes to log.txt as it comes: the Python, torch and start method in use, progress
# lines with their rate (the first once every worker has done a chunk), the cache written. At
# DATA_SECONDS, timeout sends SIGUSR1 to the step's processes (the trainer and its workers), each
# prints every thread's Python stack (faulthandler) into the log, and 5 s later they are killed.
data_bound=${DATA_SECONDS:-90}
echo "== $(date -u +%FT%TZ) data (bound ${data_bound}s)" | tee -a "$log"
set +e
# shellcheck disable=SC2086  # the flags split on purpose
PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 timeout -s USR1 -k 5 "$data_bound" \
  "$py" scripts/train_demo_model.py --device cpu --data-only --workers "$workers" \
  --data-cache "$cache" --out "$work/warm" ${DATA_FLAGS:-} 2>&1 | tee -a "$log"
rc=${PIPESTATUS[0]}
set -e
if (( rc == 124 || rc == 137 )); then
  echo "== $(date -u +%FT%TZ) stopped: the data step ran past its bound of ${data_bound}s (DATA_SECONDS); its processes' stacks are above" | tee -a "$log"
  exit 1
elif (( rc )); then
  echo "== $(date -u +%FT%TZ) stopped: the data step failed (exit $rc)" | tee -a "$log"
  exit 1
fi
echo "== $(date -u +%FT%TZ) training" | tee -a "$log"
# Each variant's output goes to log.txt as it comes, its lines prefixed "[vI]" (so a run cut short
# still brings back how far it got). With several GPUs (CUDA_VISIBLE_DEVICES or nvidia-smi), the
# variants take them in turn; on one GPU they share it (two variants: about half its steps each).
if [[ -n ${CUDA_VISIBLE_DEVICES:-} ]]; then
  IFS=, read -r -a gpus <<< "$CUDA_VISIBLE_DEVICES"
else
  mapfile -t gpus < <(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null || true)
fi
(( ${#gpus[@]} )) || gpus=(0)
pids=()
for i in "${!variants[@]}"; do
  v=${variants[$i]}; [[ $v == - ]] && v=""
  gpu=${gpus[$(( i % ${#gpus[@]} ))]}
  echo "== variant $i on GPU $gpu: ${v:-(defaults)}" | tee -a "$log"
  # shellcheck disable=SC2086  # the variant's flags split on purpose
  ( CUDA_VISIBLE_DEVICES=$gpu PYTHONDONTWRITEBYTECODE=1 "$py" scripts/train_demo_model.py \
      --device "$device" --max-seconds "$secs" --workers "$workers" --data-cache "$cache" \
      --out "$work/v$i" ${DATA_FLAGS:-} $v 2>&1 | sed -u "s/^/[v$i] /" >> "$log"
    exit "${PIPESTATUS[0]}" ) &
  pids+=($!)
done
for i in "${!pids[@]}"; do
  wait "${pids[$i]}" || echo "variant $i failed" | tee -a "$log"
done
best=$("$py" - "$work" "${#variants[@]}" <<'PY'
import json, os, sys
work, n = sys.argv[1], int(sys.argv[2])
got = []
summary = open(os.path.join(work, "summary.txt"), "w")
for i in range(n):
    f = os.path.join(work, f"v{i}", "train_log.json")
    if os.path.exists(f):
        t = json.load(open(f))
        b = t["best"]
        got.append((b["pick"], i))
        print(f"variant {i}: validation ndcg@10 {b['ndcg@10']:.4f} mrr@10 {b['mrr@10']:.4f}, "
              f"novel ndcg@10 {b['novel']['ndcg@10']:.4f} mrr@10 {b['novel']['mrr@10']:.4f}, "
              f"heldout mrr@10 {b['heldout']['mrr@10']:.4f} (step {b['step']} of {t['steps']}, "
              f"{t['queries_seen']} queries, {t['layers']})", file=summary)
print(max(got)[1] if got else -1)
PY
)
tee -a "$log" < "$work/summary.txt"
[[ $best == -1 ]] && { echo "no variant trained" | tee -a "$log"; exit 1; }
echo "== chosen: variant $best (best validation + novel ndcg@10)" | tee -a "$log"
cp "$work/v$best"/* "$model/"
echo "== $(date -u +%FT%TZ) evaluation" | tee -a "$log"
PYTHONDONTWRITEBYTECODE=1 "$py" scripts/eval_demo_model.py --model "$model" --no-rankd \
  --device "$device" 2>&1 | tee -a "$log"
echo "== $(date -u +%FT%TZ) done" | tee -a "$log"
ls -la "$model" | tee -a "$log"
