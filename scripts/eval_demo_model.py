#!/usr/bin/env python3
"""Held-out MRR@10 and NDCG@10 of the demo reranker, scored by rankd itself.

Scores the test split of scripts/demo_data.py (queries never seen in training) three or four
ways: `rankd score --model DIR` (the numbers of the model card), the training code's torch model
on the same bf16 weights (their largest difference to rankd's is reported), Hugging Face's
LlamaForSequenceClassification when transformers is importable, and a BM25 baseline over words.
--update-card rewrites the metrics section of DIR/README.md. A run with transformers writes
DIR/hf_check.json; a later run without it (where rankd is built) carries that check into the card
when it was made on the same weights and queries.

  scripts/eval_demo_model.py --rankd build/bin/rankd --update-card
  scripts/eval_demo_model.py --no-rankd          # a host without a rankd build: torch and HF only
"""
import argparse
import collections
import hashlib
import json
import math
import os
import re
import subprocess
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import demo_data  # noqa: E402
import train_demo_model as tdm  # noqa: E402

CARD_BEGIN = "<!-- metrics:begin (scripts/eval_demo_model.py --update-card writes this section) -->"
CARD_END = "<!-- metrics:end -->"


def rankd_scores(binary, model_dir, examples, extra_args):
    with tempfile.TemporaryDirectory() as tmp:
        inp, out = os.path.join(tmp, "in.jsonl"), os.path.join(tmp, "out.jsonl")
        with open(inp, "w") as f:
            for ex in examples:
                f.write(json.dumps({"query": ex["query"], "items": ex["items"]}, ensure_ascii=False) + "\n")
        subprocess.run([binary, "score", "--model", model_dir, "--input", inp, "--output", out,
                        *extra_args], check=True)
        with open(out) as f:
            return [json.loads(line)["scores"] for line in f]


def hf_scores(model_dir, encoded):
    """Hugging Face's LlamaForSequenceClassification on the folder, float32, one query a batch."""
    from transformers import LlamaForSequenceClassification
    m = LlamaForSequenceClassification.from_pretrained(
        model_dir, dtype=torch.float32, attn_implementation="eager").eval()
    out = []
    with torch.no_grad():
        for seqs in encoded:
            ids, lengths = tdm.pack(seqs, "cpu")
            mask = torch.arange(ids.shape[1])[None, :] < lengths[:, None]
            out.append(m(input_ids=ids, attention_mask=mask.long()).logits[:, 0].tolist())
    return out


def bm25_scores(examples, k1=1.2, b=0.75):
    """BM25 of each posting for its query's words; document frequencies over all test postings."""
    words = lambda s: re.findall(r"\w+", s.lower())
    docs = [[words(it) for it in ex["items"]] for ex in examples]
    df = collections.Counter(w for ds in docs for d in ds for w in set(d))
    n = sum(len(ds) for ds in docs)
    avg = sum(len(d) for ds in docs for d in ds) / n
    out = []
    for ex, ds in zip(examples, docs):
        q = words(ex["query"])
        row = []
        for d in ds:
            tf = collections.Counter(d)
            row.append(sum(math.log(1 + (n - df[w] + 0.5) / (df[w] + 0.5)) * tf[w] * (k1 + 1) /
                           (tf[w] + k1 * (1 - b + b * len(d) / avg)) for w in q if w in tf))
        out.append(row)
    return out


def max_diff(a, b):
    return max(abs(x - y) for ra, rb in zip(a, b) for x, y in zip(ra, rb))


def card_section(rows, notes):
    lines = [CARD_BEGIN, "", "| scored by | MRR@10 | NDCG@10 |", "|---|---|---|"]
    lines += [f"| {name} | {m['mrr@10']:.4f} | {m['ndcg@10']:.4f} |" for name, m in rows]
    lines += [""] + [f"- {n}" for n in notes] + ["", CARD_END]
    return "\n".join(lines)


def update_card(path, section):
    with open(path) as f:
        text = f.read()
    begin, end = text.find(CARD_BEGIN), text.find(CARD_END)
    if begin < 0 or end < begin:
        sys.exit(f"{path}: no metrics section ({CARD_BEGIN!r} ... {CARD_END!r})")
    with open(path, "w") as f:
        f.write(text[:begin] + section + text[end + len(CARD_END):])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=tdm.MODEL_DIR)
    ap.add_argument("--queries", type=int, default=1000, help="test queries (24 postings each)")
    ap.add_argument("--rankd", default="build/bin/rankd", help="the rankd binary")
    ap.add_argument("--rankd-args", default="", help="more `rankd score` flags, e.g. '--backend cuda'")
    ap.add_argument("--no-rankd", action="store_true", help="skip rankd (no card update then)")
    ap.add_argument("--no-hf", action="store_true", help="skip transformers even if importable")
    ap.add_argument("--update-card", action="store_true", help="rewrite the card's metrics section")
    ap.add_argument("--json", help="write the results here too")
    a = ap.parse_args()
    if a.update_card and a.no_rankd:
        sys.exit("--update-card needs rankd's scores (leave out --no-rankd)")
    import sentencepiece as spm

    test = demo_data.examples("test", a.queries)
    grades = [ex["grades"] for ex in test]
    sp = spm.SentencePieceProcessor(model_file=os.path.join(a.model, "tokenizer.model"))
    encoded = tdm.encode_examples(sp, test)
    torch_s = tdm.score_examples(tdm.load_model(a.model), encoded, "cpu")
    results = {"torch": demo_data.ranking_metrics(torch_s, grades),
               "bm25": demo_data.ranking_metrics(bm25_scores(test), grades)}
    diffs = {}
    if not a.no_rankd:
        rankd_s = rankd_scores(a.rankd, a.model, test, a.rankd_args.split())
        results["rankd"] = demo_data.ranking_metrics(rankd_s, grades)
        diffs["rankd_vs_torch"] = max_diff(rankd_s, torch_s)
    with open(os.path.join(a.model, "model.safetensors"), "rb") as f:
        weights = hashlib.sha256(f.read()).hexdigest()
    hf_path = os.path.join(a.model, "hf_check.json")
    hf = False
    if not a.no_hf:
        try:
            import transformers
            hf = f"transformers {transformers.__version__}"
        except ImportError:
            print("transformers is not importable: no Hugging Face check", file=sys.stderr)
    if hf:
        hf_s = hf_scores(a.model, encoded)
        results["hf"] = demo_data.ranking_metrics(hf_s, grades)
        diffs["hf_vs_torch"] = max_diff(hf_s, torch_s)
        with open(hf_path, "w") as f:
            json.dump({"transformers": transformers.__version__, "torch": torch.__version__,
                       "test_queries": len(test), "weights_sha256": weights,
                       "metrics": results["hf"], "max_abs_diff_vs_torch": diffs["hf_vs_torch"]},
                      f, indent=1)
            f.write("\n")
    elif os.path.exists(hf_path):
        with open(hf_path) as f:
            earlier = json.load(f)
        if earlier["weights_sha256"] == weights and earlier["test_queries"] == len(test):
            results["hf"] = earlier["metrics"]
            diffs["hf_vs_torch"] = earlier["max_abs_diff_vs_torch"]
            hf = f"hf_check.json, transformers {earlier['transformers']}"
    report = {"test_queries": len(test), "candidates": sum(len(g) for g in grades),
              "metrics": results, "max_abs_diff": diffs, "weights_sha256": weights}
    print(json.dumps(report, indent=1))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(report, f, indent=1)
    if a.update_card:
        rankd_cmd = " ".join(["rankd score", *a.rankd_args.split()])
        names = {"rankd": f"rankd (`{rankd_cmd}`)", "torch": "training code (torch, float32)",
                 "hf": f"transformers LlamaForSequenceClassification ({hf})",
                 "bm25": "BM25 baseline (words)"}
        rows = [(names[k], results[k]) for k in ("rankd", "torch", "hf", "bm25") if k in results]
        notes = [f"{len(test)} held-out test queries ({report['candidates']} postings, graded 0-3): "
                 "`scripts/demo_data.py jsonl --split test`; MRR@10 counts the first grade-3 "
                 "posting, NDCG@10 gains 2^grade - 1.",
                 f"largest |rankd - torch| score difference: {diffs['rankd_vs_torch']:.2e}" +
                 (f"; |transformers - torch|: {diffs['hf_vs_torch']:.2e}" if hf else ""),
                 f"model.safetensors sha256 {weights[:16]}"]
        update_card(os.path.join(a.model, "README.md"), card_section(rows, notes))


if __name__ == "__main__":
    main()
