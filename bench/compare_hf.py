#!/usr/bin/env python3
"""Hugging Face transformers on the same model and workload as `rankd-bench engine`, in the same
run on the same GPU, printed side by side with rankd.

    python3 bench/compare_hf.py --model DIR [--tq 50 --ti 150 --ni 50] [--iters 20]
        [--rankd-bench bundle/bin/rankd-bench] [--precisions bf16,fp8] [--json OUT.json]

The model is a *ForSequenceClassification (score: its classifier row 0) or a *ForCausalLM scored
as a yes/no reranker (Qwen3-Reranker's shape): the logit of token 4 minus that of token 5 at the
last position, the head rankd-bench engine uses for causal LMs by default. HF computes the LM
head at the last position only (logits_to_keep=1), as a reranker served by HF would.

Peers (bf16, SDPA attention):
  hf-eager            one forward over Ni full sequences (prefix + item), score at the last token
  hf-eager-prefix     prefix forward once with use_cache, its KV expanded to Ni rows, items after it
  hf-compile          hf-eager under torch.compile (the strongest peer without writing kernels)
  hf-*-embedding      --embedding-items: each item is one hidden-size vector (inputs_embeds), the
                      prefix recomputed per item (what HF offers for embedding items)
With --rankd-bench, rankd-bench engine runs for each strategy, graphs setting and precision of
--precisions and its rows join the table (peer names carry "-fp8" for fp8). Requests are random
token ids (a fresh prefix per request, BOS first).
"""
import argparse
import json
import subprocess
import sys
import time

import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSequenceClassification


YES_NO = (4, 5)  # rankd-bench engine's default head for *ForCausalLM: yes_no:4,5


def load(model_dir):
    cfg = AutoConfig.from_pretrained(model_dir)
    seqcls = "SequenceClassification" in cfg.architectures[0]
    cls = AutoModelForSequenceClassification if seqcls else AutoModelForCausalLM
    model = cls.from_pretrained(model_dir, dtype=torch.bfloat16, attn_implementation="sdpa")
    return model.cuda().eval(), cfg


def is_causal_lm(model):  # torch.compile's wrapper forwards attributes to the model
    return hasattr(model, "lm_head")


def head_score(model, logits):
    """[N, num_labels] classifier logits or [N, vocab] last-position LM logits -> [N] scores."""
    return logits[:, YES_NO[0]] - logits[:, YES_NO[1]] if is_causal_lm(model) else logits[:, 0]


def requests(cfg, args, n):
    g = torch.Generator().manual_seed(args.seed)
    out = []
    for _ in range(n):
        prefix = torch.randint(4, cfg.vocab_size, (1, args.tq), generator=g)
        prefix[0, 0] = cfg.bos_token_id if cfg.bos_token_id is not None else 1
        items = torch.randint(4, cfg.vocab_size, (args.ni, args.ti), generator=g)
        out.append((prefix.cuda(), items.cuda()))
    return out


def last_scores(model, **kw):
    """The score of each row: the classifier's (pooled at the last token), or yes minus no."""
    if is_causal_lm(model):
        kw["logits_to_keep"] = 1
    logits = model(**kw).logits
    return head_score(model, logits if logits.dim() == 2 else logits[:, -1])


def run_naive(model, prefix, items):
    ids = torch.cat([prefix.expand(items.shape[0], -1), items], dim=1)
    return last_scores(model, input_ids=ids)


def run_prefix_cache(model, prefix, items):
    n = items.shape[0]
    cache = model.model(input_ids=prefix, use_cache=True).past_key_values
    for layer in cache.layers:  # expand the prefix KV to one row per item
        layer.keys = layer.keys.expand(n, -1, -1, -1).contiguous()
        layer.values = layer.values.expand(n, -1, -1, -1).contiguous()
    pos = torch.arange(prefix.shape[1], prefix.shape[1] + items.shape[1], device=items.device)
    hidden = model.model(input_ids=items, past_key_values=cache, use_cache=True,
                         position_ids=pos.unsqueeze(0).expand(n, -1)).last_hidden_state
    head = model.lm_head if is_causal_lm(model) else model.score
    return head_score(model, head(hidden[:, -1]))


def run_embedding(model, prefix, embeds):
    pe = model.get_input_embeddings()(prefix).expand(embeds.shape[0], -1, -1)
    return last_scores(model, inputs_embeds=torch.cat([pe, embeds], dim=1))


def time_peer(name, fn, reqs, args):
    try:
        return _time_peer(name, fn, reqs, args)
    except Exception as e:  # one peer failing must not lose the others' rows
        print(f"{name} failed: {type(e).__name__}: {e}", flush=True)
        return dict(peer=name + " (failed)", items_per_s=0.0, p50_ms=0.0, p99_ms=0.0)


def _time_peer(name, fn, reqs, args):
    with torch.inference_mode():
        for r in reqs[:args.warmup]:
            fn(*r)
        torch.cuda.synchronize()
        lat = []
        t0 = time.perf_counter()
        for r in reqs[args.warmup:]:
            s = time.perf_counter()
            out = fn(*r)
            torch.cuda.synchronize()
            lat.append(time.perf_counter() - s)
            assert torch.isfinite(out.float()).all(), name
        total = time.perf_counter() - t0
    lat.sort()
    n_items = args.ni * len(lat)
    pick = lambda q: lat[min(len(lat) - 1, int(q * (len(lat) - 1) + 0.5))] * 1e3
    return dict(peer=name, items_per_s=n_items / total, p50_ms=pick(0.5), p99_ms=pick(0.99))


def rankd_rows(args):
    rows = []
    combos = [("ibpc", True), ("ibpc", False), ("multi-item", True), ("multi-item", False)]
    for precision in args.precisions.split(","):
        for strategy, graphs in combos:
            cmd = [args.rankd_bench, "engine", "--model", args.model, "--backend", "cuda",
                   "--tq", str(args.tq), "--ti", str(args.ti), "--ni", str(args.ni),
                   "--iters", str(args.rankd_iters), "--strategy", strategy,
                   "--graphs" if graphs else "--no-graphs", "--precision", precision,
                   "--json", "/tmp/rankd_bench.json"]
            if args.embedding_items:
                cmd += ["--items", "embedding"]
            name = f"rankd-{strategy}-graphs-{'on' if graphs else 'off'}"
            name += "" if precision == "bf16" else f"-{precision}"
            p = subprocess.run(cmd, capture_output=True, text=True)
            if p.returncode != 0:
                print(f"{name} failed: {p.stderr.strip()}", flush=True)
                continue
            r = json.load(open("/tmp/rankd_bench.json"))
            rows.append(dict(peer=name, precision=precision, items_per_s=r["items_per_s"],
                             p50_ms=r["latency_ms"]["p50"], p99_ms=r["latency_ms"]["p99"]))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--tq", type=int, default=50)
    ap.add_argument("--ti", type=int, default=150)
    ap.add_argument("--ni", type=int, default=50)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--embedding-items", action="store_true")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--rankd-bench", default="")
    ap.add_argument("--rankd-iters", type=int, default=50)
    ap.add_argument("--precisions", default="bf16", help="rankd-bench --precision values, comma-separated")
    ap.add_argument("--json", default="")
    args = ap.parse_args()

    torch.backends.cuda.matmul.allow_tf32 = True
    model, cfg = load(args.model)
    reqs = requests(cfg, args, args.warmup + args.iters)
    rows = []
    if args.embedding_items:
        g = torch.Generator().manual_seed(args.seed + 1)
        ereqs = [(p, torch.randn((args.ni, 1, cfg.hidden_size), generator=g).to("cuda", torch.bfloat16))
                 for p, _ in reqs]
        rows.append(time_peer("hf-eager-embedding", lambda p, e: run_embedding(model, p, e), ereqs, args))
        if not args.no_compile:
            compiled = torch.compile(model)
            rows.append(time_peer("hf-compile-embedding",
                                  lambda p, e: run_embedding(compiled, p, e), ereqs, args))
    else:
        rows.append(time_peer("hf-eager", lambda p, i: run_naive(model, p, i), reqs, args))
        rows.append(time_peer("hf-eager-prefix", lambda p, i: run_prefix_cache(model, p, i), reqs, args))
        if not args.no_compile:
            compiled = torch.compile(model)
            rows.append(time_peer("hf-compile", lambda p, i: run_naive(compiled, p, i), reqs, args))
    if args.rankd_bench:
        rows += rankd_rows(args)
    shape = f"tq={args.tq} ti={1 if args.embedding_items else args.ti} ni={args.ni}"
    print(f"\n{torch.cuda.get_device_name()}  transformers {transformers.__version__}  "
          f"torch {torch.__version__}  {cfg.architectures[0]}  {shape}")
    print(f"{'peer':34s} {'items/s':>10s} {'p50 ms':>8s} {'p99 ms':>8s}")
    for r in rows:
        print(f"{r['peer']:34s} {r['items_per_s']:10.1f} {r['p50_ms']:8.2f} {r['p99_ms']:8.2f}")
    if args.json:
        json.dump(dict(device=torch.cuda.get_device_name(), transformers=transformers.__version__,
                       torch=torch.__version__, model=args.model, architecture=cfg.architectures[0],
                       precisions=args.precisions.split(","), tq=args.tq, ti=args.ti, ni=args.ni,
                       embedding_items=args.embedding_items, rows=rows),
                  open(args.json, "w"), indent=1)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
