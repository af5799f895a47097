#!/usr/bin/env python3
"""Trains the demo reranker (models/demo-jobs-reranker) on scripts/demo_data.py's task.

A LlamaForSequenceClassification (one label) written in plain torch with Hugging Face's parameter
names and math (RMSNorm, rotate-half RoPE, grouped-query attention, SiLU MLP, the score head read
at the last token), so it runs on torch 1.13 (CPU) as on torch 2.x (CUDA) without transformers.
It trains on exactly the sequences rankd builds: [bos] + tok(query_template(query)) +
tok(item_template(item)), the two tokenized separately. Loss: listwise softmax cross-entropy
against the graded targets (2^grade - 1, normalized) over one query's candidates, plus a small
pointwise term that keeps sigmoid(score) near grade / 3. The checkpoint with the best sum of
validation and novel NDCG@10 is written, in bf16, with config.json (transformers 5.x style), a
safetensors file, tokenizer.model and rankd.yaml (the templates).

The validation split (the training vocabulary, held-out queries) and the novel split (training
templates, every job, place and skill made up) pick the checkpoint; the heldout split (vocabulary
and templates training never sees) is scored beside them for the log only.
Training data is generated, tokenized and padded by --workers processes (scripts/demo_encode.py:
spawned, torch-free; deterministic: the same data for any number of workers; progress lines with
their rate) into one int16 tensor that lives on the device; every step has the same shape
([batch queries x candidates, --max-len]), so no step waits on the host and, on CUDA, the decoder
layers run through torch.compile (eager if that fails), with a fused AdamW. SIGUSR1 prints every
thread's Python stack (faulthandler).
The cosine schedule follows wall time: it ends at --max-seconds, compilation included.

  scripts/gpu_train_demo.sh    # on one H200: this with --device cuda, then the checks
  scripts/train_demo_model.py --device cpu --smoke --threads 2 --max-seconds 600 --out DIR
"""
import argparse
import faulthandler
import itertools
import json
import math
import os
import platform
import shutil
import signal
import struct
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import demo_data  # noqa: E402
from demo_encode import (  # noqa: E402,F401  (encode_examples: eval_demo_model uses it)
    BOS, ITEM_TEMPLATE, PAD, QUERY_TEMPLATE, START_METHOD, ChunkPool, encode_examples,
    encoded_chunk, packed_chunk)

MODEL_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models",
                         "demo-jobs-reranker")
EVAL_SPLITS = ("validation", "novel", "heldout")  # scored every eval; the first two pick
SHAPES = {  # hidden, layers, heads, kv heads, intermediate
    "full": dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                 num_key_value_heads=2, intermediate_size=768),
    "wide": dict(hidden_size=384, num_hidden_layers=4, num_attention_heads=6,
                 num_key_value_heads=2, intermediate_size=1024),
    "deep": dict(hidden_size=256, num_hidden_layers=6, num_attention_heads=4,
                 num_key_value_heads=2, intermediate_size=768),
    "smoke": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, intermediate_size=192),
}


def hf_config(shape, vocab_size):
    heads = shape["num_attention_heads"]
    return {
        "architectures": ["LlamaForSequenceClassification"], "attention_bias": False,
        "attention_dropout": 0.0, "bos_token_id": BOS, "dtype": "bfloat16", "eos_token_id": 2,
        "head_dim": shape["hidden_size"] // heads, "hidden_act": "silu",
        "hidden_size": shape["hidden_size"], "id2label": {"0": "LABEL_0"},
        "initializer_range": 0.02, "intermediate_size": shape["intermediate_size"],
        "label2id": {"LABEL_0": 0}, "max_position_embeddings": 512, "mlp_bias": False,
        "model_type": "llama", "num_attention_heads": heads,
        "num_hidden_layers": shape["num_hidden_layers"],
        "num_key_value_heads": shape["num_key_value_heads"], "pad_token_id": PAD,
        "pretraining_tp": 1, "rms_norm_eps": 1e-06,
        "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"},
        "tie_word_embeddings": False, "transformers_version": "5.17.0", "use_cache": False,
        "vocab_size": vocab_size,
    }


class RMSNorm(torch.nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class Attention(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = (
            c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"])
        h = c["hidden_size"]
        self.q_proj = torch.nn.Linear(h, self.heads * self.head_dim, bias=False)
        self.k_proj = torch.nn.Linear(h, self.kv_heads * self.head_dim, bias=False)
        self.v_proj = torch.nn.Linear(h, self.kv_heads * self.head_dim, bias=False)
        self.o_proj = torch.nn.Linear(self.heads * self.head_dim, h, bias=False)

    def forward(self, x, cos, sin):
        b, n, _ = x.shape  # x: [b, n, hidden]; cos, sin: [n, head_dim]
        q = self.q_proj(x).view(b, n, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, n, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, n, self.kv_heads, self.head_dim).transpose(1, 2)
        cos, sin = cos.to(q.dtype), sin.to(q.dtype)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = self.heads // self.kv_heads  # HF repeat_kv: each kv head serves `rep` query heads
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
        if hasattr(F, "scaled_dot_product_attention"):
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # torch 1.x: HF's eager attention
            w = (q @ k.transpose(2, 3)) * self.head_dim ** -0.5
            mask = torch.ones(n, n, dtype=torch.bool, device=x.device).triu(1)
            w = w.masked_fill(mask, torch.finfo(w.dtype).min)
            o = torch.softmax(w, dim=-1, dtype=torch.float32).to(q.dtype) @ v
        return self.o_proj(o.transpose(1, 2).reshape(b, n, -1))


class Mlp(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        h, i = c["hidden_size"], c["intermediate_size"]
        self.gate_proj = torch.nn.Linear(h, i, bias=False)
        self.up_proj = torch.nn.Linear(h, i, bias=False)
        self.down_proj = torch.nn.Linear(i, h, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.self_attn = Attention(c)
        self.mlp = Mlp(c)
        self.input_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.post_attention_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class Backbone(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_tokens = torch.nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.layers = torch.nn.ModuleList(Layer(c) for _ in range(c["num_hidden_layers"]))
        self.norm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])


class Reranker(torch.nn.Module):
    """LlamaForSequenceClassification, num_labels 1: parameter names as Hugging Face's."""

    def __init__(self, c):
        super().__init__()
        self.model = Backbone(c)
        self.score = torch.nn.Linear(c["hidden_size"], 1, bias=False)
        d = c["head_dim"]
        theta = c["rope_parameters"]["rope_theta"]
        self.register_buffer(
            "inv_freq", 1.0 / theta ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d),
            persistent=False)
        for m in self.modules():
            if isinstance(m, (torch.nn.Linear, torch.nn.Embedding)):
                torch.nn.init.normal_(m.weight, std=c["initializer_range"])

    def forward(self, ids, lengths, layers=None):
        """ids: [b, n] right-padded token ids; lengths: [b] -> scores [b] at each last token.
        layers: callables to run instead of self.model.layers (their compiled forms)."""
        n = ids.shape[1]
        freqs = torch.arange(n, device=ids.device).float()[:, None] * self.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)  # [n, head_dim]
        cos, sin = emb.cos(), emb.sin()
        x = self.model.embed_tokens(ids)
        for layer in layers or self.model.layers:
            x = layer(x, cos, sin)
        x = self.model.norm(x)
        last = x[torch.arange(ids.shape[0], device=ids.device), lengths - 1]  # [b, hidden]
        return self.score(last).float().squeeze(-1)


# safetensors, written and read without the safetensors package.
def save_safetensors(path, tensors):
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().to("cpu", torch.bfloat16).contiguous()
        data = t.view(torch.int16).numpy().tobytes()
        header[name] = {"dtype": "BF16", "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for b in blobs:
            f.write(b)


def load_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = bytearray(f.read())
    dtypes = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32}
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        s, e = info["data_offsets"]
        t = torch.frombuffer(data[s:e], dtype=dtypes[info["dtype"]]) if e > s else torch.empty(0)
        out[name] = t.reshape(info["shape"]).float()
    return out


def load_model(model_dir, device="cpu"):
    with open(os.path.join(model_dir, "config.json")) as f:
        c = json.load(f)
    m = Reranker(c)
    m.load_state_dict(load_safetensors(os.path.join(model_dir, "model.safetensors")))
    return m.to(device).eval()


def packed_train(n, tokenizer, pool, max_len):
    """The first n examples of the train split (demo_data.examples("train", n): every example of
    chunks 0, 1, 2, ... in order), generated and tokenized by `pool` (a ChunkPool) and packed:
    ids int16 [n, candidates, N], lengths int16 [n, candidates], grades int8 [n, candidates] and
    the number of sequences cut.
    N is the longest sequence, at most max_len: the few longer sequences (a posting of four long
    skills and a long extra; 6 in 10,000 at 64) lose their last tokens."""
    per_chunk = demo_data.CHUNK * 0.85
    chunks, have, k = [], 0, 0
    while have < n:
        todo = max(1, math.ceil((n - have) / per_chunk * 1.05))
        args = [("train", k + i, tokenizer) for i in range(todo)]
        for c in pool.map(packed_chunk, args, what="train", count=lambda c: c[0]):
            if have < n:
                chunks.append(c)
                have += c[0]
        k += todo
    cands = demo_data.CANDIDATES
    big = min(max_len, max(c[1] for c in chunks))
    ids = torch.full((n, cands, big), PAD, dtype=torch.int16)
    lengths = torch.empty((n, cands), dtype=torch.int16)
    grades = torch.empty((n, cands), dtype=torch.int8)
    at = 0
    for count, m, b_ids, b_len, b_grades in chunks:
        take = min(count, n - at)
        t = torch.frombuffer(bytearray(b_ids), dtype=torch.int16).view(count, cands, m)
        ids[at:at + take, :, :min(m, big)] = t[:take, :, :big]
        lengths[at:at + take] = torch.frombuffer(bytearray(b_len), dtype=torch.int16).view(count, cands)[:take]
        grades[at:at + take] = torch.frombuffer(bytearray(b_grades), dtype=torch.int8).view(count, cands)[:take]
        at += take
    cut = int((lengths > big).sum())
    return ids, lengths.clamp_(max=big), grades, cut


def encoded_examples(split, n, tokenizer, pool):
    """n examples of `split` (as demo_data.examples gives them) and their encode_examples() ids,
    generated and tokenized by `pool` (a ChunkPool)."""
    def map_fn(_, args):
        got = pool.map(encoded_chunk, [(sp, k, tokenizer) for sp, k in args], what=split, count=len)
        for chunk in got:
            for ex, enc in chunk:
                ex["ids"] = enc
        return [[ex for ex, _ in chunk] for chunk in got]
    exs = demo_data.examples(split, n, map_fn=map_fn)
    return exs, [ex.pop("ids") for ex in exs]


def pack(seqs, device):
    """Lists of ids -> right-padded [b, n] ids and [b] lengths on `device`."""
    n = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), n), PAD, dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, :len(s)] = torch.tensor(s)
    return ids.to(device), torch.tensor([len(s) for s in seqs], device=device)


def pack_examples(encoded):
    """Every example's candidates, right-padded: ids [examples, candidates, n] (int32) and
    lengths [examples, candidates]; all examples have the same number of candidates."""
    seqs = [s for ex in encoded for s in ex]
    lengths = torch.tensor([len(s) for s in seqs])
    n = int(lengths.max())
    flat = torch.tensor(list(itertools.chain.from_iterable(seqs)), dtype=torch.int32)
    rows = torch.repeat_interleave(torch.arange(len(seqs)), lengths)
    starts = torch.cumsum(lengths, 0) - lengths
    cols = torch.arange(len(flat)) - torch.repeat_interleave(starts, lengths)
    ids = torch.full((len(seqs), n), PAD, dtype=torch.int32)
    ids[rows, cols] = flat
    c = len(encoded[0])
    return ids.view(len(encoded), c, n), lengths.view(len(encoded), c)


@torch.no_grad()
def score_packed(model, ids, lengths, batch_queries=128):
    """Scores [examples, candidates] of pack_examples()' tensors (float32 compute)."""
    out = []
    for i in range(0, ids.shape[0], batch_queries):
        b_ids, b_len = ids[i:i + batch_queries], lengths[i:i + batch_queries]
        n = int(b_len.max())
        out.append(model(b_ids[:, :, :n].flatten(0, 1).long(), b_len.flatten().long()).view(b_len.shape))
    return torch.cat(out)


@torch.no_grad()
def score_examples(model, encoded, device, batch=512):
    """Scores of every candidate, one list per example (float32 compute)."""
    flat = [s for ex in encoded for s in ex]
    scores = []
    for i in range(0, len(flat), batch):
        ids, lengths = pack(flat[i:i + batch], device)
        scores.extend(model(ids, lengths).tolist())
    out, k = [], 0
    for ex in encoded:
        out.append(scores[k:k + len(ex)])
        k += len(ex)
    return out


def write_model(model, config, out_dir, tokenizer):
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
        f.write("\n")
    save_safetensors(os.path.join(out_dir, "model.safetensors"), model.state_dict())
    if os.path.abspath(tokenizer) != os.path.abspath(os.path.join(out_dir, "tokenizer.model")):
        shutil.copyfile(tokenizer, os.path.join(out_dir, "tokenizer.model"))
    with open(os.path.join(out_dir, "rankd.yaml"), "w") as f:
        f.write("# Written by scripts/train_demo_model.py: the prompt the model was trained on.\n")
        f.write(f"query_template: {json.dumps(QUERY_TEMPLATE)}\n")
        f.write(f"item_template: {json.dumps(ITEM_TEMPLATE)}\n")
        f.write("head: classifier:0\n")


def compile_layers(model, batch, autocast):
    """torch.compile of each decoder layer (one graph for all: same code, fixed shapes), tried on
    one training batch, forward and backward; None (eager) where torch has no compile or it
    fails. Returns (layers or None, seconds, what happened)."""
    if not hasattr(torch, "compile"):
        return None, 0.0, "no torch.compile (torch " + torch.__version__ + "): eager"
    t0 = time.time()
    try:
        layers = [torch.compile(layer, dynamic=False) for layer in model.model.layers]
        ids, lengths = batch
        with autocast:
            s = model(ids, lengths, layers)
        s.float().sum().backward()
        if ids.is_cuda:
            torch.cuda.synchronize()
        model.zero_grad(set_to_none=True)
        return layers, time.time() - t0, "compiled"
    except Exception as e:  # noqa: BLE001  any failure: train eager rather than not at all
        model.zero_grad(set_to_none=True)
        try:
            torch._dynamo.reset()
        except Exception:  # noqa: BLE001
            pass
        msg = f"{type(e).__name__}: {e}".splitlines()[0][:300]
        return None, time.time() - t0, f"torch.compile failed ({msg}): eager"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="model folder to write")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--smoke", action="store_true", help="small shape and data (CPU test runs)")
    ap.add_argument("--max-seconds", type=float, default=200,
                    help="training time bound (compilation included, final validation not)")
    ap.add_argument("--max-steps", type=int, default=0, help="step bound (0: none)")
    ap.add_argument("--train-queries", type=int, default=0, help="0: 200000 (smoke: 6000)")
    ap.add_argument("--val-queries", type=int, default=0, help="0: 500 (smoke: 200), each split")
    ap.add_argument("--batch-queries", type=int, default=0, help="queries per step (0: 128, smoke: 8)")
    ap.add_argument("--lr", type=float, default=0, help="peak learning rate (0: 1.5e-3, smoke: 3e-3)")
    ap.add_argument("--warmup", type=int, default=0, help="warmup steps (0: 300, smoke: 100)")
    ap.add_argument("--max-len", type=int, default=64,
                    help="training sequences are padded to the longest, cut at this many tokens")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0, help="CPU threads (0: torch's default)")
    ap.add_argument("--workers", type=int, default=min(16, os.cpu_count() or 1),
                    help="processes generating and tokenizing the data (spawned; 1: none, in this "
                         "process)")
    ap.add_argument("--eval-every", type=int, default=0, help="steps (0: 500, smoke: 100)")
    ap.add_argument("--eval-seconds", type=float, default=0,
                    help="validate every this many seconds instead of --eval-every (0: 15 on cuda, "
                         "else by steps)")
    ap.add_argument("--compile", choices=("auto", "on", "off"), default="auto",
                    help="torch.compile the decoder layers (auto: on cuda); eager if it fails")
    ap.add_argument("--tokenizer", default=demo_data.TOKENIZER, help="copied into --out")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="",
                    help="model shape (default: full, smoke with --smoke)")
    ap.add_argument("--data-cache", default="",
                    help="file of the generated and tokenized data: read if it exists, else "
                         "written (several trainers in parallel share one generation)")
    ap.add_argument("--data-only", action="store_true", help="stop once --data-cache is written")
    a = ap.parse_args()
    import sentencepiece as spm

    # Every thread's Python stack on SIGUSR1 (gpu_train_demo.sh's time bound sends it to the data
    # step and its workers before it kills them) and on a fatal signal.
    faulthandler.enable()
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    t0 = time.time()
    torch.manual_seed(a.seed)
    if a.threads:
        torch.set_num_threads(a.threads)
    device = torch.device(a.device)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    sp = spm.SentencePieceProcessor(model_file=a.tokenizer)
    n_train = a.train_queries or (6000 if a.smoke else 200000)
    n_val = a.val_queries or (200 if a.smoke else 500)
    bq = a.batch_queries or (8 if a.smoke else 128)
    a.lr = a.lr or (3e-3 if a.smoke else 1.5e-3)
    warmup = a.warmup or (100 if a.smoke else 300)
    eval_every = a.eval_every or (100 if a.smoke else 500)
    eval_seconds = a.eval_seconds or (15 if device.type == "cuda" else 0)
    key = {"n_train": n_train, "n_val": n_val, "max_len": a.max_len, "tokenizer": a.tokenizer,
           "task": demo_data.TASK, "evals": list(EVAL_SPLITS)}
    cached = torch.load(a.data_cache, weights_only=False) if a.data_cache and os.path.exists(a.data_cache) else None
    if cached is not None and cached["key"] != key:
        sys.exit(f"{a.data_cache} holds other data ({cached['key']}), not {key}")
    if cached is None:
        usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else "?"
        print(f"data: {n_train} train, {n_val} validation, novel and heldout queries each; python "
              f"{platform.python_version()}, torch {torch.__version__}, sentencepiece "
              f"{spm.__version__}, " + (f"{a.workers} workers ({START_METHOD})" if a.workers > 1
                                        else "no workers (in this process)") +
              f", {os.cpu_count()} CPUs ({usable} usable), {time.time() - t0:.1f}s", flush=True)
        with ChunkPool(a.workers, log=lambda line: print(line, flush=True)) as pool:
            packed = packed_train(n_train, a.tokenizer, pool, a.max_len)
            print(f"data: train packed, ids {list(packed[0].shape)} ({packed[3]} sequences cut), "
                  f"{time.time() - t0:.1f}s", flush=True)
            evals = {s: encoded_examples(s, n_val, a.tokenizer, pool) for s in EVAL_SPLITS}
        if a.data_cache:
            tmp = a.data_cache + ".tmp"
            torch.save({"key": key, "packed": packed, "evals": evals}, tmp)
            os.replace(tmp, a.data_cache)
            print(f"data: {a.data_cache} written ({os.path.getsize(a.data_cache) / 1e6:.0f} MB), "
                  f"{time.time() - t0:.1f}s", flush=True)
    else:
        packed, evals = cached["packed"], cached["evals"]
    del cached
    if a.data_only:
        print(f"data: {n_train} train / {n_val} validation, novel, heldout queries in "
              f"{a.data_cache}, {time.time() - t0:.1f}s", flush=True)
        return
    train_ids, train_lengths, train_grades = (t.to(device) for t in packed[:3])
    cut = packed[3]
    del packed
    eval_sets = {s: ([ex["grades"] for ex in exs], *(t.to(device) for t in pack_examples(enc)))
                 for s, (exs, enc) in evals.items()}
    del evals
    print(f"data: {n_train} train / {n_val} validation, novel, heldout queries, training "
          f"sequences padded to {train_ids.shape[-1]} tokens ({cut} cut), {time.time() - t0:.1f}s", flush=True)

    config = hf_config(SHAPES[a.shape or ("smoke" if a.smoke else "full")], sp.get_piece_size())
    model = Reranker(config).to(device)
    params = sum(p.numel() for p in model.parameters())
    print(f"model: {params / 1e6:.2f}M parameters, torch {torch.__version__}, {device}, "
          f"{bq} queries ({bq * demo_data.CANDIDATES} sequences) a step, peak lr {a.lr:g}", flush=True)
    opt_args = dict(lr=a.lr, weight_decay=0.01, betas=(0.9, 0.98))
    if device.type == "cuda" and int(torch.__version__.split(".")[0]) >= 2:
        opt_args["fused"] = True
    opt = torch.optim.AdamW(model.parameters(), **opt_args)
    autocast = (torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda"
                else torch.autocast("cpu", enabled=False))
    gen = torch.Generator().manual_seed(a.seed)

    def batch_at(idx):
        return (train_ids[idx].flatten(0, 1).long(), train_lengths[idx].flatten().long(),
                train_grades[idx].float())

    layers, compile_s, compile_note = None, 0.0, "eager"
    if a.compile == "on" or (a.compile == "auto" and device.type == "cuda"):
        ids0, len0, _ = batch_at(torch.arange(bq, device=device))
        layers, compile_s, compile_note = compile_layers(model, (ids0, len0), autocast)
    print(f"layers: {compile_note} ({compile_s:.1f}s)", flush=True)
    # The time bound holds compilation too: training has what is left of it.
    train_seconds = max(a.max_seconds - compile_s, 0.25 * a.max_seconds)

    perm, pos, step, best, log = None, 0, 0, None, []
    loss_sum, loss_n = torch.zeros((), device=device), 0
    t_start = time.time()
    last_eval, last_step = None, 0
    while True:
        elapsed = time.time() - t_start
        done = elapsed >= train_seconds or (a.max_steps and step >= a.max_steps)
        due = (last_eval is None or (time.time() - last_eval >= eval_seconds if eval_seconds
                                     else step % eval_every == 0))
        if due or done:
            model.eval()
            m = {s: demo_data.ranking_metrics(score_packed(model, ids, lengths).tolist(), grades)
                 for s, (grades, ids, lengths) in eval_sets.items()}
            model.train()
            loss_avg = (loss_sum / loss_n).item() if loss_n else None
            rate = (step - last_step) / (time.time() - last_eval) if last_eval else 0.0
            loss_sum, loss_n, last_step = torch.zeros((), device=device), 0, step
            log.append({"step": step, "seconds": round(elapsed, 1), "train_loss": loss_avg,
                        "steps_per_second": round(rate, 2), **m["validation"], "novel": m["novel"],
                        "heldout": m["heldout"]})
            print(f"step {step} {elapsed:.0f}s " + ("" if loss_avg is None else f"loss {loss_avg:.4f} ") +
                  f"({rate:.1f} steps/s) validation mrr@10 {m['validation']['mrr@10']:.4f} ndcg@10 "
                  f"{m['validation']['ndcg@10']:.4f}, novel mrr@10 {m['novel']['mrr@10']:.4f} ndcg@10 "
                  f"{m['novel']['ndcg@10']:.4f}, heldout mrr@10 {m['heldout']['mrr@10']:.4f} "
                  f"ndcg@10 {m['heldout']['ndcg@10']:.4f}", flush=True)
            # The checkpoint is picked on validation and novel (made-up names, training
            # templates); the heldout split plays no part in it.
            pick = m["validation"]["ndcg@10"] + m["novel"]["ndcg@10"]
            if best is None or pick > best[0]["pick"]:
                best = (dict(m["validation"], step=step, pick=pick, novel=m["novel"], heldout=m["heldout"]),
                        {k: v.detach().clone() for k, v in model.state_dict().items()})
            last_eval = time.time()
        if done:
            break
        if perm is None or pos + bq > len(perm):
            perm, pos = torch.randperm(n_train, generator=gen).to(device), 0
        ids, lengths, g = batch_at(perm[pos:pos + bq])
        pos += bq
        with autocast:
            s = model(ids, lengths, layers).view(g.shape)
        target = (2 ** g - 1) / (2 ** g - 1).sum(-1, keepdim=True)
        loss = -(target * F.log_softmax(s, dim=-1)).sum(-1).mean()
        loss = loss + 0.1 * F.binary_cross_entropy_with_logits(s, g / 3)
        frac = min(1.0, elapsed / train_seconds)
        if a.max_steps:
            frac = max(frac, step / a.max_steps)
        lr = a.lr * min(1.0, (step + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * frac))
        for group in opt.param_groups:
            group["lr"] = lr
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        loss_sum += loss.detach()
        loss_n += 1
        step += 1

    model.load_state_dict(best[1])
    write_model(model, config, a.out, a.tokenizer)
    train_s = time.time() - t_start
    with open(os.path.join(a.out, "train_log.json"), "w") as f:
        json.dump({"task": demo_data.TASK, "args": vars(a), "torch": torch.__version__,
                   "device": str(device), "layers": compile_note,
                   "compile_seconds": round(compile_s, 1), "train_seconds": round(train_s, 1),
                   "train_sequence_tokens": train_ids.shape[-1], "train_sequences_cut": cut,
                   "parameters": params, "steps": step, "queries_seen": step * bq,
                   "best": best[0], "validation": log},
                  f, indent=1)
        f.write("\n")
    print(f"wrote {a.out}: step {best[0]['step']} of {step} ({step * bq / n_train:.1f} epochs), "
          f"validation ndcg@10 {best[0]['ndcg@10']:.4f} mrr@10 {best[0]['mrr@10']:.4f}, heldout "
          f"mrr@10 {best[0]['heldout']['mrr@10']:.4f}, {time.time() - t0:.0f}s in all", flush=True)


if __name__ == "__main__":
    main()
