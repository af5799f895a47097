#!/usr/bin/env python3
"""MRR@10 and NDCG@10 of the demo reranker on three query sets, scored by rankd itself.

Sets (each beside a BM25 baseline over words):
  test      held-out queries of the training distribution (scripts/demo_data.py --split test)
  heldout   held-out vocabulary and templates: job families, places, skills, company words and
            query and posting phrasings that training never saw (demo_data.py --split heldout)
  requests  tests/demo/requests.jsonl: ordinary job-search requests written by hand, not by the
            generator, one relevant posting among ten
and the README's short examples (example.jsonl; "rust engineer in berlin" against "Barista,
Lisbon", ...): which posting comes first.

Scorers: `rankd score --model DIR` (the numbers of the model card), the training code's torch
model on the same bf16 weights (their largest difference to rankd's is reported), Hugging Face's
LlamaForSequenceClassification when transformers is importable (on the first --hf-queries of each
set), and BM25. --update-card rewrites the metrics section of DIR/README.md. A run with
transformers writes DIR/hf_check.json; a later run without it (where rankd is built) carries that
check into the card when it was made on the same weights and queries.

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

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
REQUESTS = os.path.join(ROOT, "tests", "demo", "requests.jsonl")
CARD_BEGIN = "<!-- metrics:begin (scripts/eval_demo_model.py --update-card writes this section) -->"
CARD_END = "<!-- metrics:end -->"
SETS = ("test", "heldout", "requests")
SET_NAMES = {"test": "held-out queries", "heldout": "held-out vocabulary and templates",
             "requests": "hand-written requests"}
# The README's short examples besides example.jsonl: (query, documents, the matching one).
README_CASES = [
    ("rust engineer in berlin", ["Barista, Lisbon", "Rust developer, Berlin", "Go developer, Munich"],
     "Rust developer, Berlin"),
    ("rust engineer in berlin", ["Barista, Lisbon", "Rust developer, Berlin"], "Rust developer, Berlin"),
]


def readme_cases(model_dir):
    """[(query, items, index of the match)]: example.jsonl's (id "match") and README_CASES.
    example.jsonl is the README's, in models/demo-jobs-reranker: a freshly trained model's folder
    (the GPU host's) has none."""
    cases = []
    path = os.path.join(model_dir, "example.jsonl")
    if not os.path.exists(path):
        path = os.path.join(tdm.MODEL_DIR, "example.jsonl")
    with open(path) as f:
        for line in f:
            ex = json.loads(line)
            items = [it["text"] for it in ex["items"]]
            cases.append((ex["query"], items, [it["id"] for it in ex["items"]].index("match")))
    return cases + [(q, items, items.index(m)) for q, items, m in README_CASES]


def load_set(name, n):
    """[{"query", "items", "grades"}] of one set (n queries; all of requests.jsonl)."""
    if name == "requests":
        with open(REQUESTS) as f:
            return [json.loads(line) for line in f]
    return demo_data.examples(name, n)


def rankd_scores(binary, model_dir, examples, extra_args):
    with tempfile.TemporaryDirectory() as tmp:
        inp, out = os.path.join(tmp, "in.jsonl"), os.path.join(tmp, "out.jsonl")
        with open(inp, "w") as f:
            for ex in examples:
                f.write(json.dumps({"query": ex["query"], "items": ex["items"]}, ensure_ascii=False) + "\n")
        subprocess.run([binary, "score", "--model", model_dir, "--input", inp, "--output", out,
                        *extra_args], check=True)
        with open(out) as f:
            return [[s["score"] if isinstance(s, dict) else s for s in json.loads(line)["scores"]]
                    for line in f]


def hf_model(model_dir):
    """Hugging Face's LlamaForSequenceClassification on the folder, float32."""
    from transformers import LlamaForSequenceClassification
    return LlamaForSequenceClassification.from_pretrained(
        model_dir, dtype=torch.float32, attn_implementation="eager").eval()


def hf_scores(m, encoded):
    """hf_model()'s scores, one query a batch."""
    out = []
    with torch.no_grad():
        for seqs in encoded:
            ids, lengths = tdm.pack(seqs, "cpu")
            mask = torch.arange(ids.shape[1])[None, :] < lengths[:, None]
            out.append(m(input_ids=ids, attention_mask=mask.long()).logits[:, 0].tolist())
    return out


def words(s):
    return re.findall(r"\w+", s.lower())


def bm25_scores(examples, k1=1.2, b=0.75):
    """BM25 of each posting for its query's words; document frequencies over all the set's
    postings."""
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


def card_section(rows, notes, readme):
    head = " | ".join(f"{SET_NAMES[s]}: MRR@10 | NDCG@10" for s in SETS)
    lines = [CARD_BEGIN, "", f"| scored by | {head} |", "|---|" + "---|---|" * len(SETS)]
    for name, m in rows:
        cells = " | ".join(f"{m[s]['mrr@10']:.4f} | {m[s]['ndcg@10']:.4f}" if s in m else "- | -"
                           for s in SETS)
        lines.append(f"| {name} | {cells} |")
    lines += ["", "The README's short examples (rankd's scores, the top posting first):", ""]
    for c in readme:
        mark = "the match first" if c["top"] == c["match"] else "NOT the match first"
        ranked = ", ".join(f"{json.dumps(c['items'][i])} {c['scores'][i]:.3f}" for i in c["order"])
        lines.append(f"- {json.dumps(c['query'])}: {ranked} ({mark})")
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
    ap.add_argument("--queries", type=int, default=1000, help="test and heldout queries (24 postings each)")
    ap.add_argument("--hf-queries", type=int, default=200, help="queries per set for transformers")
    ap.add_argument("--rankd", default="build/bin/rankd", help="the rankd binary")
    ap.add_argument("--rankd-args", default="", help="more `rankd score` flags, e.g. '--backend cuda'")
    ap.add_argument("--no-rankd", action="store_true", help="skip rankd (no card update then)")
    ap.add_argument("--no-hf", action="store_true", help="skip transformers even if importable")
    ap.add_argument("--device", default="cpu", help="the torch scores' device (float32)")
    ap.add_argument("--update-card", action="store_true", help="rewrite the card's metrics section")
    ap.add_argument("--json", help="write the results here too")
    a = ap.parse_args()
    if a.update_card and a.no_rankd:
        sys.exit("--update-card needs rankd's scores (leave out --no-rankd)")
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=os.path.join(a.model, "tokenizer.model"))
    model = tdm.load_model(a.model, a.device)
    sets = {s: load_set(s, a.queries) for s in SETS}
    readme = readme_cases(a.model)
    sets["readme"] = [{"query": q, "items": items} for q, items, _ in readme]
    encoded = {s: tdm.encode_examples(sp, exs) for s, exs in sets.items()}
    scores = {"torch": {s: tdm.score_examples(model, encoded[s], a.device) for s in sets},
              "bm25": {s: bm25_scores(sets[s]) for s in SETS}}
    if not a.no_rankd:
        scores["rankd"] = {s: rankd_scores(a.rankd, a.model, sets[s], a.rankd_args.split()) for s in sets}
    with open(os.path.join(a.model, "model.safetensors"), "rb") as f:
        weights = hashlib.sha256(f.read()).hexdigest()
    sizes = {s: len(sets[s]) for s in SETS}
    hf_path = os.path.join(a.model, "hf_check.json")
    hf, hf_check = False, None
    if not a.no_hf:
        try:
            import transformers
            hf = f"transformers {transformers.__version__}"
        except ImportError:
            print("transformers is not importable: no Hugging Face check", file=sys.stderr)
    if hf:
        hf_check = {"transformers": transformers.__version__, "torch": torch.__version__,
                    "weights_sha256": weights, "set_sizes": sizes, "hf_queries": a.hf_queries,
                    "sets": {}}
        hfm = hf_model(a.model)
        for s in list(SETS) + ["readme"]:
            n = a.hf_queries if s in ("test", "heldout") else len(sets[s])
            hs = hf_scores(hfm, encoded[s][:n])
            entry = {"queries": n, "max_abs_diff_vs_torch": max_diff(hs, scores["torch"][s][:n])}
            if s in SETS:
                entry["metrics"] = demo_data.ranking_metrics(hs, [ex["grades"] for ex in sets[s][:n]])
                entry["torch_metrics"] = demo_data.ranking_metrics(
                    scores["torch"][s][:n], [ex["grades"] for ex in sets[s][:n]])
            else:
                entry["scores"] = hs
            hf_check["sets"][s] = entry
        with open(hf_path, "w") as f:
            json.dump(hf_check, f, indent=1)
            f.write("\n")
    elif os.path.exists(hf_path):
        with open(hf_path) as f:
            earlier = json.load(f)
        if (earlier.get("weights_sha256") == weights and earlier.get("set_sizes") == sizes and
                "sets" in earlier):
            hf_check = earlier
            hf = f"hf_check.json, transformers {earlier['transformers']}"
    results = {k: {s: demo_data.ranking_metrics(v[s], [ex["grades"] for ex in sets[s]])
                   for s in SETS} for k, v in scores.items()}
    ref = "rankd" if "rankd" in scores else "torch"
    readme_out = []
    for (q, items, match), sc in zip(readme, scores[ref]["readme"]):
        order = sorted(range(len(items)), key=lambda i: -sc[i])
        readme_out.append({"query": q, "items": items, "scores": sc, "order": order,
                           "top": order[0], "match": match})
    diffs = {}
    if "rankd" in scores:
        diffs["rankd_vs_torch"] = max(max_diff(scores["rankd"][s], scores["torch"][s]) for s in sets)
    if hf_check:
        diffs["hf_vs_torch"] = max(e["max_abs_diff_vs_torch"] for e in hf_check["sets"].values())
    report = {"set_sizes": sizes, "metrics": results, "readme": readme_out,
              "readme_match_first": all(c["top"] == c["match"] for c in readme_out),
              "max_abs_diff": diffs, "weights_sha256": weights}
    if hf_check:
        report["hf"] = {s: e.get("metrics") for s, e in hf_check["sets"].items() if s in SETS}
    print(json.dumps(report, indent=1))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(report, f, indent=1)
    if a.update_card:
        rankd_cmd = " ".join(["rankd score", *a.rankd_args.split()])
        names = {"rankd": f"rankd (`{rankd_cmd}`)", "torch": "training code (torch, float32)",
                 "bm25": "BM25 baseline (words)"}
        rows = [(names[k], results[k]) for k in ("rankd", "torch", "bm25")]
        notes = [f"test: {sizes['test']} queries of `scripts/demo_data.py jsonl --split test`, "
                 f"heldout: {sizes['heldout']} of `--split heldout`, 24 postings each, graded 0-3; "
                 f"requests: the {sizes['requests']} hand-written requests of "
                 "tests/demo/requests.jsonl, 10 postings each, one relevant. MRR@10 counts the "
                 "first grade-3 posting, NDCG@10 gains 2^grade - 1.",
                 f"largest |rankd - torch| score difference: {diffs['rankd_vs_torch']:.2e}" +
                 (f"; |transformers - torch| ({hf}, on the first {hf_check['hf_queries']} queries "
                  f"of test and heldout and all of the rest): {diffs['hf_vs_torch']:.2e}" if hf_check else
                  "; no transformers check on these weights"),
                 f"model.safetensors sha256 {weights[:16]}"]
        update_card(os.path.join(a.model, "README.md"), card_section(rows, notes, readme_out))


if __name__ == "__main__":
    main()
