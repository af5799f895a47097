#!/usr/bin/env python3
"""Ranking fidelity of rankd's precisions against the float32 reference (issue 17's fidelity bar).

    python3 bench/fidelity.py --rankd bundle/bin/rankd [--backend cuda] [--precisions bf16,fp8]
        [--model-dir DIR ...] [--demo-queries 200] [--json OUT.json] [--markdown OUT.md]

Models: every tests/data/models/<name> with a golden.json, the demo model (models/
demo-jobs-reranker) and each --model-dir. Random-weight models (rankd-bench make-model) rank
nothing meaningful, so they are not included by default. Requests:
  - a golden model: its golden.json cases (prefix_ids + item ids, as HF tokenized them); the
    reference is golden.json's HF float32 score of each item;
  - any other dir: the test split of scripts/demo_data.py (job queries and postings, --demo-queries
    of them), tokenized by `rankd tokenize` with the dir's templates; the reference is HF float32
    computed here (transformers, dtype=torch.float32).
Peers, each scored on the same ids: HF bf16 (computed here), and `rankd score --backend B
--precision P` for each P (--backend cpu: the float32 reference backend, one row).
Per model and peer: the mean per-request Spearman correlation with the reference (requests of 2+
distinct items), the fraction of those requests whose top-1 item is the reference's, and the RMS error of
the scores. Without torch/transformers the HF columns are left out and models without a golden
reference are skipped (so the rankd-only columns run anywhere, e.g. against the CPU backend).
Exit status 1 when a peer could not score (its row says why); unmet bars only show in the table.
"""
import argparse
import glob
import json
import math
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BARS = dict(spearman=0.98, top1=0.95)  # issue 17: mean Spearman >= 0.98, same top-1 >= 95%

try:
    import torch
    import transformers
except ImportError:
    torch = transformers = None


def head_string(score):
    """golden.json's `score` as a rankd head spec."""
    t = score["type"]
    if t == "classifier":
        return f"classifier:{score.get('index', 0)}"
    if t == "yes_no":
        return f"yes_no:{score['yes_id']},{score['no_id']}"
    if t == "logit":
        return f"logit:{score['token_id']}"
    raise ValueError(f"unknown score type {t}")


def golden_requests(model_dir):
    """[(prefix_ids, [item_ids], [reference score])] and the head of golden.json."""
    g = json.load(open(os.path.join(model_dir, "golden.json")))
    reqs = [(c["prefix_ids"], [it["ids"] for it in c["items"]], [it["score"] for it in c["items"]])
            for c in g["cases"]]
    return reqs, head_string(g["score"])


def rankd_tokenize(rankd, model_dir, texts, template):
    args = [rankd, "tokenize", "--model", model_dir, "--template", template, "--log-level", "warn"]
    if template == "query":
        args.append("--special-tokens")
    p = subprocess.run(args, input="".join(json.dumps(t) + "\n" for t in texts),
                       capture_output=True, text=True, check=True)
    out = [json.loads(line) for line in p.stdout.splitlines()]
    bad = [o["error"] for o in out if "error" in o]
    if bad:
        raise RuntimeError(f"rankd tokenize {model_dir}: {bad[0]}")
    return [o["ids"] for o in out]


def demo_requests(rankd, model_dir, n):
    """The demo data's held-out queries, as ids of the dir's own templates; no reference."""
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    import demo_data  # noqa: E402
    exs = demo_data.examples("test", n)
    prefixes = rankd_tokenize(rankd, model_dir, [e["query"] for e in exs], "query")
    flat = rankd_tokenize(rankd, model_dir, [t for e in exs for t in e["items"]], "item")
    reqs, k = [], 0
    for e, p in zip(exs, prefixes):
        reqs.append((p, flat[k:k + len(e["items"])], None))
        k += len(e["items"])
    return reqs


def default_head(model_dir):
    """The head rankd picks for a dir: rankd.yaml's `head:` line, else by architecture."""
    y = os.path.join(model_dir, "rankd.yaml")
    if os.path.exists(y):
        for line in open(y):
            if line.startswith("head:"):
                return line.split(":", 1)[1].strip().strip("\"'")
    arch = json.load(open(os.path.join(model_dir, "config.json")))["architectures"][0]
    return "classifier:0" if "SequenceClassification" in arch else "yes_no:yes,no"


def rankd_scores(args, model_dir, head, reqs, precision):
    with tempfile.TemporaryDirectory() as tmp:
        inp, out = os.path.join(tmp, "in.jsonl"), os.path.join(tmp, "out.jsonl")
        with open(inp, "w") as f:
            for prefix, items, _ in reqs:
                f.write(json.dumps({"query_ids": prefix, "items": [{"ids": i} for i in items]}) + "\n")
        cmd = [args.rankd, "score", "--model", model_dir, "--backend", args.backend, "--head", head,
               "--input", inp, "--output", out, "--log-level", "warn"]
        if args.backend == "cuda":
            cmd += ["--precision", precision]
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            raise RuntimeError(f"rankd score {model_dir} {precision}: {p.stderr.strip()[-500:]}")
        lines = [json.loads(line) for line in open(out)]
    bad = [o["error"] for o in lines if "error" in o]
    if bad:
        raise RuntimeError(f"rankd score {model_dir}: {bad[0]}")
    return [o["scores"] for o in lines]


class HfModel:
    """transformers' model of a dir in one dtype, scoring items one sequence at a time."""

    def __init__(self, model_dir, dtype, head):
        cfg = transformers.AutoConfig.from_pretrained(model_dir)
        seqcls = "SequenceClassification" in cfg.architectures[0]
        cls = (transformers.AutoModelForSequenceClassification if seqcls
               else transformers.AutoModelForCausalLM)
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        self.model = cls.from_pretrained(model_dir, dtype=dtype).to(self.device).eval()
        kind, _, arg = head.partition(":")
        if kind != "classifier" and not all(a.lstrip("-").isdigit() for a in arg.split(",")):
            tok = transformers.AutoTokenizer.from_pretrained(model_dir)  # pieces -> ids
            arg = ",".join(str(tok.convert_tokens_to_ids(a)) for a in arg.split(","))
        self.kind, self.ids = kind, [int(a) for a in arg.split(",")] if arg else [0]

    def score(self, prefix, item):
        ids = torch.tensor([prefix + item], device=self.device)
        with torch.inference_mode():
            logits = self.model(input_ids=ids).logits.float()
        z = logits[0] if logits.dim() == 2 else logits[0, -1]  # classifier: pooled at the last
        if self.kind == "yes_no":
            return (z[self.ids[0]] - z[self.ids[1]]).item()
        return z[self.ids[0]].item()

    def scores(self, reqs):
        return [[self.score(p, i) for i in items] for p, items, _ in reqs]


def ranks(xs):
    """Ranks 1..n, ties sharing their mean rank (as scipy.stats.rankdata)."""
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    r = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for k in range(i, j + 1):
            r[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return r


def spearman(a, b):
    ra, rb = ranks(a), ranks(b)
    ma, mb = sum(ra) / len(ra), sum(rb) / len(rb)
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    va = sum((x - ma) ** 2 for x in ra)
    vb = sum((y - mb) ** 2 for y in rb)
    if va == 0 or vb == 0:
        return 1.0 if va == vb else 0.0  # all tied in both: the same ranking
    return cov / math.sqrt(va * vb)


def compare(reqs, ref, got):
    """Mean Spearman and top-1 agreement over requests of 2+ distinct items, RMS error over all
    items. A request's repeats of an item (the same ids; golden.json has some) count once in the
    ranking: their order is a tie in the reference and rounding noise in a peer."""
    rho, top1, sq, n = [], [], 0.0, 0
    for (_, items, _), r, g in zip(reqs, ref, got):
        assert len(r) == len(g) == len(items)
        sq += sum((x - y) ** 2 for x, y in zip(r, g))
        n += len(r)
        first = {}
        for i, ids in enumerate(items):
            first.setdefault(tuple(ids), i)
        keep = sorted(first.values())
        r, g = [r[i] for i in keep], [g[i] for i in keep]
        if len(r) >= 2:
            rho.append(spearman(r, g))
            top1.append(max(range(len(r)), key=r.__getitem__) == max(range(len(g)), key=g.__getitem__))
    return dict(spearman=sum(rho) / len(rho) if rho else float("nan"),
                top1=sum(top1) / len(top1) if top1 else float("nan"),
                rms_err=math.sqrt(sq / n) if n else float("nan"), ranked_requests=len(rho))


def model_dirs(args):
    dirs = sorted(os.path.dirname(p) for p in glob.glob(os.path.join(ROOT, "tests/data/models/*/golden.json")))
    demo = os.path.join(ROOT, "models/demo-jobs-reranker")
    if os.path.exists(os.path.join(demo, "config.json")):
        dirs.append(demo)
    return dirs + [os.path.abspath(d) for d in args.model_dir]


def evaluate(args, model_dir):
    name = os.path.basename(model_dir.rstrip("/"))
    golden = os.path.exists(os.path.join(model_dir, "golden.json"))
    if golden:
        reqs, head = golden_requests(model_dir)
    else:
        if torch is None:
            return dict(model=name, skipped="no golden.json and no torch for an HF float32 reference")
        reqs, head = demo_requests(args.rankd, model_dir, args.demo_queries), default_head(model_dir)
    row = dict(model=name, head=head, requests=len(reqs), items=sum(len(r[1]) for r in reqs),
               reference="golden.json (HF float32)" if golden else "HF float32 (here)", peers={})
    if golden:
        ref = [r[2] for r in reqs]
    else:
        ref = HfModel(model_dir, torch.float32, head).scores(reqs)
    if torch is not None:
        row["peers"]["hf-bf16"] = compare(reqs, ref, HfModel(model_dir, torch.bfloat16, head).scores(reqs))
    for precision in (["fp32"] if args.backend == "cpu" else args.precisions.split(",")):
        try:
            got = rankd_scores(args, model_dir, head, reqs, precision)
            row["peers"][f"rankd-{args.backend}-{precision}"] = compare(reqs, ref, got)
        except RuntimeError as e:
            print(f"{name}: {e}", file=sys.stderr)
            row["peers"][f"rankd-{args.backend}-{precision}"] = dict(failed=str(e)[-300:])
    return row


def fmt(v, pct=False):
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return f"{100 * v:.1f}%" if pct else f"{v:.4f}"


def markdown(rows, summary):
    out = ["| model | requests (ranked) | items | peer | Spearman | same top-1 | RMS error |",
           "|---|---|---|---|---|---|---|"]
    for r in rows:
        if "skipped" in r:
            out.append(f"| {r['model']} | skipped: {r['skipped']} | | | | | |")
            continue
        for peer, m in r["peers"].items():
            if "failed" in m:
                out.append(f"| {r['model']} | {r['requests']} | {r['items']} | {peer} | failed | | |")
                continue
            out.append(f"| {r['model']} | {r['requests']} ({m['ranked_requests']}) | {r['items']} | "
                       f"{peer} | {fmt(m['spearman'])} | {fmt(m['top1'], True)} | {fmt(m['rms_err'])} |")
    out += ["", f"All models, per peer (bars: mean Spearman >= {BARS['spearman']}, same top-1 >= "
            f"{100 * BARS['top1']:.0f}% of requests):", "",
            "| peer | models | ranked requests | mean Spearman | same top-1 | meets the bars |",
            "|---|---|---|---|---|---|"]
    for peer, s in summary.items():
        out.append(f"| {peer} | {s['models']} | {s['ranked_requests']} | {fmt(s['spearman'])} | "
                   f"{fmt(s['top1'], True)} | {'yes' if s['meets_bars'] else 'no'} |")
    return "\n".join(out) + "\n"


def summarize(rows):
    """Per peer, over every model: request-weighted mean Spearman and top-1."""
    acc = {}
    for r in rows:
        for peer, m in r.get("peers", {}).items():
            if "failed" in m or not m["ranked_requests"]:
                continue
            a = acc.setdefault(peer, dict(models=0, ranked_requests=0, rho=0.0, top1=0.0))
            a["models"] += 1
            a["ranked_requests"] += m["ranked_requests"]
            a["rho"] += m["spearman"] * m["ranked_requests"]
            a["top1"] += m["top1"] * m["ranked_requests"]
    out = {}
    for peer, a in acc.items():
        rho, top1 = a["rho"] / a["ranked_requests"], a["top1"] / a["ranked_requests"]
        out[peer] = dict(models=a["models"], ranked_requests=a["ranked_requests"], spearman=rho,
                         top1=top1, meets_bars=rho >= BARS["spearman"] and top1 >= BARS["top1"])
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rankd", default=os.path.join(ROOT, "build/bin/rankd"))
    ap.add_argument("--backend", default="cuda", choices=["cpu", "cuda"])
    ap.add_argument("--precisions", default="bf16,fp8", help="cuda: rankd precisions to score")
    ap.add_argument("--model-dir", action="append", default=[], help="another model dir (repeatable)")
    ap.add_argument("--no-defaults", action="store_true", help="only the --model-dir models")
    ap.add_argument("--demo-queries", type=int, default=200, help="requests for dirs without golden.json")
    ap.add_argument("--json", default="")
    ap.add_argument("--markdown", default="")
    args = ap.parse_args()
    dirs = [os.path.abspath(d) for d in args.model_dir] if args.no_defaults else model_dirs(args)
    rows = []
    for d in dirs:
        rows.append(evaluate(args, d))
        print(f"{rows[-1]['model']}: done", file=sys.stderr, flush=True)
    summary = summarize(rows)
    env = dict(backend=args.backend, rankd=args.rankd,
               transformers=transformers.__version__ if transformers else None,
               torch=torch.__version__ if torch else None,
               device=torch.cuda.get_device_name() if torch is not None and torch.cuda.is_available() else None)
    table = markdown(rows, summary)
    print(f"\n{json.dumps(env)}\n\n{table}")
    if args.markdown:
        open(args.markdown, "w").write(table)
    if args.json:
        json.dump(dict(env, bars=BARS, models=rows, summary=summary), open(args.json, "w"), indent=1)
    # A peer that could not score is a failed run; a bar not met is a measurement, not a failure.
    return 1 if any("failed" in m for r in rows for m in r.get("peers", {}).values()) else 0


if __name__ == "__main__":
    sys.exit(main())
