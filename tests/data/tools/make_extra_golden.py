#!/usr/bin/env python3
"""make_extra_golden.py OUT_DIR CORPUS.txt CASES.json

More golden models, for the loader paths the three shared ones do not reach. Each is scored by
Hugging Face transformers in float32 on the CPU *with the weights exactly as stored* (bf16/f16
weights are rounded first), plus in bf16 on the GPU, in golden.json's format (see README.md):

  qwen2-mqa-cls       Qwen2ForSequenceClassification, q/k/v biases, MQA (1 kv head), 3 labels
                      (score index 2), transformers 4.x config style (rope_theta at top level,
                      no head_dim), bf16 weights in 2 shards + model.safetensors.index.json
  llama3-rope-yesno   LlamaForCausalLM, llama3 rope scaling (4.x `rope_scaling`), untied lm_head,
                      GQA, f16 weights
  qwen3-cls-wide      Qwen3ForSequenceClassification, heads x head_dim (3 x 48) != hidden (96),
                      1 kv head
  llama3-tokjson-cls  LlamaForSequenceClassification whose tokenizer.json adds <|begin_of_text|>
                      through a TemplateProcessing post-processor (Llama-3 style)

The sentencepiece models reuse ../models/llama-cls/tokenizer.model. Also writes
OUT_DIR/tokenizer_cases.json: ids that HF tokenizers gives for hard strings, for both tokenizer.json
models, with and without special tokens.
"""
import json
import os
import shutil
import sys

import sentencepiece as spm
import torch
import transformers
from safetensors.torch import save_file
from transformers import (LlamaConfig, LlamaForCausalLM, LlamaForSequenceClassification,
                          PreTrainedTokenizerFast, Qwen2Config, Qwen2ForSequenceClassification,
                          Qwen3Config, Qwen3ForSequenceClassification)

HERE = os.path.dirname(os.path.abspath(__file__))
OUT, CORPUS, CASES_PATH = sys.argv[1], sys.argv[2], sys.argv[3]
CASES = json.load(open(CASES_PATH))
os.makedirs(OUT, exist_ok=True)
torch.backends.cuda.matmul.allow_tf32 = False

sys.argv = [sys.argv[0], OUT, CORPUS, CASES_PATH]
sys.path.insert(0, HERE)
import make_golden_tokjson as tj  # noqa: E402  (reads sys.argv at import)

SP_MODEL = os.path.join(HERE, "..", "models", "llama-cls", "tokenizer.model")


def to_4x_style(d, rope_scaling=None, drop_head_dim=False):
    """Rewrites config.json the way transformers 4.x wrote it."""
    p = os.path.join(d, "config.json")
    cfg = json.load(open(p))
    rp = cfg.pop("rope_parameters", {})
    cfg["rope_theta"] = rp.get("rope_theta", 10000.0)
    if rope_scaling:
        cfg["rope_scaling"] = rope_scaling
    if drop_head_dim:
        cfg.pop("head_dim", None)
    cfg["transformers_version"] = "4.51.3"
    cfg["torch_dtype"] = cfg.pop("dtype", "float32")
    json.dump(cfg, open(p, "w"), indent=2)


def save_weights(model, d, dtype, shards):
    sd = {k: v.detach().to(dtype).contiguous() for k, v in model.state_dict().items()}
    if getattr(model.config, "tie_word_embeddings", False):
        sd.pop("lm_head.weight", None)
    for f in os.listdir(d):
        if f.endswith(".safetensors") or f.endswith(".index.json"):
            os.remove(os.path.join(d, f))
    if shards == 1:
        save_file(sd, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
        return
    names = sorted(sd)
    per = (len(names) + shards - 1) // shards
    weight_map = {}
    for s in range(shards):
        fname = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        part = {n: sd[n] for n in names[s * per:(s + 1) * per]}
        save_file(part, os.path.join(d, fname), metadata={"format": "pt"})
        weight_map.update({n: fname for n in part})
    total = sum(v.numel() * v.element_size() for v in sd.values())
    json.dump({"metadata": {"total_size": total}, "weight_map": weight_map},
              open(os.path.join(d, "model.safetensors.index.json"), "w"), indent=2)


def score_of(logits, score):
    if score["type"] == "classifier":
        return float(logits[0, score["index"]]), None
    last = logits[0, -1]
    y, n = score["yes_id"], score["no_id"]
    return float(last[y] - last[n]), [float(last[y]), float(last[n])]


def golden_for(name, model, cfg, cls, score, encode_prefix, encode_item, cases, extra, embeds):
    gpu = cls(cfg).eval()
    gpu.load_state_dict(model.state_dict())
    gpu = gpu.to(torch.bfloat16).cuda()
    g = dict(model=name, transformers=transformers.__version__, torch=torch.__version__,
             score=score, definition=__doc__, cases=[], embedding_cases=[], **extra)
    worst = 0.0
    for c in cases:
        prefix = encode_prefix(c["query"])
        entry = dict(query=c["query"], prefix_ids=prefix, items=[])
        for text in c["items"]:
            item = encode_item(text)
            ids = torch.tensor([prefix + item])
            with torch.no_grad():
                s, lg = score_of(model(input_ids=ids).logits, score)
                sb, _ = score_of(gpu(input_ids=ids.cuda()).logits.float().cpu(), score)
            rec = dict(text=text, ids=item, score=s, score_bf16_cuda=sb)
            if lg:
                rec["yes_no_logits"] = lg
            worst = max(worst, abs(sb - s) / max(1.0, abs(s)))
            entry["items"].append(rec)
        g["cases"].append(entry)
    if embeds:
        gen = torch.Generator().manual_seed(7)
        emb = model.get_input_embeddings()
        for c in cases[:2]:
            prefix = encode_prefix(c["query"])
            pe = emb(torch.tensor([prefix]))
            entry = dict(query=c["query"], prefix_ids=prefix, items=[])
            for k in [1, 3]:
                E = torch.randn((1, k, cfg.hidden_size), generator=gen)
                with torch.no_grad():
                    s, _ = score_of(model(inputs_embeds=torch.cat([pe, E], dim=1)).logits, score)
                entry["items"].append(dict(embeddings=E[0].tolist(), score=s))
            g["embedding_cases"].append(entry)
    g["max_rel_err_bf16_cuda_vs_fp32"] = worst
    return g


def build_sp(name, cls, cfgcls, cfg_kw, score, dtype, shards, rope_scaling_4x, drop_head_dim,
             seed, embeds):
    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    shutil.copy(SP_MODEL, os.path.join(d, "tokenizer.model"))
    sp = spm.SentencePieceProcessor(model_file=SP_MODEL)
    if score["type"] == "yes_no":
        score.update(yes_id=sp.piece_to_id("yes"), no_id=sp.piece_to_id("no"))
    cfg_kw = dict(cfg_kw, pad_token_id=3, bos_token_id=1, eos_token_id=2)
    cfg = cfgcls(**cfg_kw)
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    model = cls(cfg).float().eval()
    tj.reinit(model, seed)
    with torch.no_grad():  # the reference runs on the weights exactly as stored
        for p in model.parameters():
            p.copy_(p.to(dtype).float())
    model.save_pretrained(d, safe_serialization=True)
    save_weights(model, d, dtype, shards)
    if rope_scaling_4x or drop_head_dim:
        to_4x_style(d, rope_scaling_4x, drop_head_dim)
    g = golden_for(name, model, cfg, cls, score,
                   lambda q: [sp.bos_id()] + sp.encode(q), lambda x: sp.encode(x), CASES,
                   dict(bos_id=sp.bos_id()), embeds)
    json.dump(g, open(os.path.join(d, "golden.json"), "w"), ensure_ascii=False, indent=1)
    print(name, "max_rel_bf16", round(g["max_rel_err_bf16_cuda_vs_fp32"], 4), flush=True)


HARD = [
    "", " ", "  ", "hello", " hello", "hello  world", "Hello, World!", "don't you're I'LL we've",
    "tab\there", "line1\nline2\r\nline3\n\n\n", "   leading and trailing   ", "1234567890",
    "3.14159 and 2,718", "emoji 🚀🚀 and 👩‍👩‍👧 family", "中文数据科学家", "ソフトウェアエンジニア",
    "café naïve coöperate", "e\u0301 combining (decomposed)", "Zürich São Paulo", "Ελληνικά",
    "<|im_start|>user\nhi<|im_end|>", "a<|endoftext|>b", "<|begin_of_text|>x", "   \n  \t ",
    "$35/hr. 401(k) 5+ years", "ALLCAPS and MiXeD", "x" * 200, "🙂" * 30, "a\u00a0b\u2003c",
    "\u200bzero\u200bwidth", "ﬁ ligature and Ａ fullwidth",
]


def build_tokjson_llama():
    specials = ["<|begin_of_text|>", "<|end_of_text|>"]
    tok = tj.train(tj.LLAMA3_PAT, specials, 1200, bos="<|begin_of_text|>")
    score = dict(type="classifier", index=0)
    cfg = dict(vocab_size=1280, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
               num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-5,
               rope_theta=500000.0, num_labels=1, tie_word_embeddings=False,
               bos_token_id=tok.token_to_id("<|begin_of_text|>"),
               eos_token_id=tok.token_to_id("<|end_of_text|>"),
               pad_token_id=tok.token_to_id("<|end_of_text|>"))
    tj.build("llama3-tokjson-cls", tok, dict(bos_token="<|begin_of_text|>",
                                             eos_token="<|end_of_text|>",
                                             pad_token="<|end_of_text|>"),
             LlamaForSequenceClassification, LlamaConfig, cfg, score, "{query}", "{item}", CASES,
             seed=21)


def tokenizer_cases():
    out = {}
    qdir = os.path.join(HERE, "..", "models", "qwen3-reranker-tiny")
    for name, d in [("qwen3-reranker-tiny", qdir), ("llama3-tokjson-cls",
                                                     os.path.join(OUT, "llama3-tokjson-cls"))]:
        fast = PreTrainedTokenizerFast(tokenizer_file=os.path.join(d, "tokenizer.json"))
        out[name] = [dict(text=t, with_special=fast(t)["input_ids"],
                          without_special=fast(t, add_special_tokens=False)["input_ids"])
                     for t in HARD]
    json.dump(out, open(os.path.join(OUT, "tokenizer_cases.json"), "w"), ensure_ascii=False,
              indent=1)
    print("tokenizer cases", {k: len(v) for k, v in out.items()}, flush=True)


def main():
    jobs = [
        lambda: build_sp("qwen2-mqa-cls", Qwen2ForSequenceClassification, Qwen2Config,
                         dict(vocab_size=1024, hidden_size=64, intermediate_size=144,
                              num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=1,
                              rms_norm_eps=1e-6, rope_theta=1000000.0, num_labels=3,
                              tie_word_embeddings=False, use_sliding_window=False),
                         dict(type="classifier", index=2), torch.bfloat16, 2, None, True, 31,
                         True),
        lambda: build_sp("llama3-rope-yesno", LlamaForCausalLM, LlamaConfig,
                         dict(vocab_size=1024, hidden_size=64, intermediate_size=160,
                              num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                              rms_norm_eps=1e-5, tie_word_embeddings=False,
                              max_position_embeddings=2048,
                              rope_parameters=dict(rope_type="llama3", rope_theta=500000.0,
                                                   factor=8.0, low_freq_factor=1.0,
                                                   high_freq_factor=4.0,
                                                   original_max_position_embeddings=64)),
                         dict(type="yes_no"), torch.float16, 1,
                         dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                              high_freq_factor=4.0, original_max_position_embeddings=64),
                         False, 41, False),
        lambda: build_sp("qwen3-cls-wide", Qwen3ForSequenceClassification, Qwen3Config,
                         dict(vocab_size=1024, hidden_size=96, intermediate_size=192,
                              num_hidden_layers=2, num_attention_heads=3, num_key_value_heads=1,
                              head_dim=48, rms_norm_eps=1e-6, rope_theta=1000000.0, num_labels=1,
                              tie_word_embeddings=False),
                         dict(type="classifier", index=0), torch.float32, 1, None, False, 51,
                         True),
        build_tokjson_llama,
        tokenizer_cases,
    ]
    for job in jobs:
        try:
            job()
        except Exception as e:  # keep going: one model failing must not lose the others
            import traceback
            traceback.print_exc()
            print("FAILED", e, flush=True)


if __name__ == "__main__":
    main()
