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
PYTHONDONTWRITEBYTECODE=1 "$py" scripts/train_demo_model.py --device cuda --max-seconds "$secs" \
  --workers "$workers" --out "$model" 2>&1 | tee -a "$log"
echo "== $(date -u +%FT%TZ) evaluation" | tee -a "$log"
PYTHONDONTWRITEBYTECODE=1 "$py" scripts/eval_demo_model.py --model "$model" --no-rankd \
  --device cuda 2>&1 | tee -a "$log"
echo "== $(date -u +%FT%TZ) done" | tee -a "$log"
ls -la "$model" | tee -a "$log"
