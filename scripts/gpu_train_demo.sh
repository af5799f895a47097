#!/usr/bin/env bash
# On the GPU host: trains the demo model (models/demo-jobs-reranker) on one GPU and checks it with
# Hugging Face transformers. Needs python3 with torch (CUDA), sentencepiece and transformers; no
# rankd build, no network. Run from the repository root:
#
#   OUT=/some/dir scripts/gpu_train_demo.sh [TRAIN_SECONDS]     # default 240
#
# Writes (7 files):
#   $OUT/demo-jobs-reranker/{config.json,model.safetensors,tokenizer.model,rankd.yaml,
#                            train_log.json,hf_check.json}
#   $OUT/log.txt    the training and evaluation output (the evaluation's JSON report at the end)
# Then, where rankd is built: copy the six files into models/demo-jobs-reranker (tokenizer.model
# is scripts/demo_vocab/tokenizer.model, rankd.yaml the templates) and run
# scripts/eval_demo_model.py --rankd build/bin/rankd --update-card.
#
# Time: data generation and tokenization (--workers processes) about a minute, then training for
# TRAIN_SECONDS (validation included), then the evaluation (torch on the GPU, transformers on
# the CPU for 200 queries a set) about a minute.
set -euo pipefail
: "${OUT:?set OUT to the output folder}"
secs=${1:-240}
py=${PYTHON:-python3}
model="$OUT/demo-jobs-reranker"
mkdir -p "$model"
log="$OUT/log.txt"
{
  echo "== $(date -u +%FT%TZ) gpu_train_demo.sh, $secs s of training, commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
  nvidia-smi -L || true
  "$py" -c 'import torch, sentencepiece, transformers; print("torch", torch.__version__, "cuda", torch.cuda.is_available(), "transformers", transformers.__version__, "sentencepiece", sentencepiece.__version__)'
} 2>&1 | tee "$log"
workers=$(( $(nproc) > 16 ? 16 : $(nproc) ))
# TRAIN_VARIANTS: '|'-separated sets of trainer flags, each trained in parallel on the one GPU from
# one data generation (e.g. "-|--lr 2e-3 --batch-queries 128|--shape wide"; '-' for none). The
# variant with the best validation NDCG@10 (the training vocabulary; the heldout split plays no
# part in the choice) is the model written to $OUT; every variant's log is in log.txt.
IFS='|' read -r -a variants <<< "${TRAIN_VARIANTS:--}"
work=$(mktemp -d)
cache="$work/data.pt"
if (( ${#variants[@]} > 1 )); then  # generate once, before the trainers start
  PYTHONDONTWRITEBYTECODE=1 "$py" scripts/train_demo_model.py --device cpu --data-only \
    --workers "$workers" --data-cache "$cache" --out "$work/warm" > "$work/warm.log" 2>&1 ||
    { cat "$work/warm.log" | tee -a "$log"; exit 1; }
  grep '^data:' "$work/warm.log" | tee -a "$log"
fi
pids=()
for i in "${!variants[@]}"; do
  v=${variants[$i]}; [[ $v == - ]] && v=""
  echo "== variant $i: ${v:-(defaults)}" | tee -a "$log"
  # shellcheck disable=SC2086  # the variant's flags split on purpose
  PYTHONDONTWRITEBYTECODE=1 "$py" scripts/train_demo_model.py --device cuda --max-seconds "$secs" \
    --workers "$workers" --data-cache "$cache" --out "$work/v$i" $v > "$work/v$i.log" 2>&1 &
  pids+=($!)
done
for i in "${!pids[@]}"; do
  wait "${pids[$i]}" || echo "variant $i failed" | tee -a "$log"
  { echo "== variant $i log"; cat "$work/v$i.log"; } >> "$log"
done
best=$("$py" - "$work" "${#variants[@]}" <<'PY'
import json, os, sys
work, n = sys.argv[1], int(sys.argv[2])
got = []
for i in range(n):
    f = os.path.join(work, f"v{i}", "train_log.json")
    if os.path.exists(f):
        b = json.load(open(f))["best"]
        got.append((b["ndcg@10"], i))
        print(f"variant {i}: validation ndcg@10 {b['ndcg@10']:.4f} mrr@10 {b['mrr@10']:.4f}, "
              f"heldout mrr@10 {b['heldout']['mrr@10']:.4f} (step {b['step']})", file=sys.stderr)
print(max(got)[1] if got else -1)
PY
) 2> >(tee -a "$log" >&2)
[[ $best == -1 ]] && { echo "no variant trained" | tee -a "$log"; exit 1; }
echo "== chosen: variant $best (best validation ndcg@10)" | tee -a "$log"
cp "$work/v$best"/* "$model/"
echo "== $(date -u +%FT%TZ) evaluation" | tee -a "$log"
PYTHONDONTWRITEBYTECODE=1 "$py" scripts/eval_demo_model.py --model "$model" --no-rankd \
  --device cuda 2>&1 | tee -a "$log"
echo "== $(date -u +%FT%TZ) done" | tee -a "$log"
ls -la "$model" | tee -a "$log"
rm -rf "$work"
