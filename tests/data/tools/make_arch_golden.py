#!/usr/bin/env python3
"""make_arch_golden.py OUT_DIR CASES.json

Golden models for the Gemma, Gemma 2 and Mistral architectures, with sentencepiece-style
tokenizer.json files (the layout real Gemma / Llama 2 / Mistral checkpoints ship):

  gemma-tiny        GemmaForCausalLM: sqrt(hidden) embedding scale, (1 + w) RMSNorm, GeGLU
                    (gelu_pytorch_tanh), MQA, head_dim 32 != hidden / heads, tied; score: the logit
                    of token 4 ("yes") after bge-reranker-v2-gemma-style templates; Gemma-1
                    tokenizer.json (Replace(" ", "▁") normalizer, no pre-tokenizer, byte fallback)
  gemma2-tiny       Gemma2ForCausalLM: also attention / final logit soft-capping,
                    query_pre_attn_scalar, four norms a layer, sliding window 24 on alternating
                    layers (cases longer than the window); score yes/no; Gemma-2/3 tokenizer.json
                    (same + Split(" ", MergedWithPrevious))
  mistral-cls       MistralForSequenceClassification, GQA, no sliding window; Llama-2 tokenizer.json
                    (Prepend("▁") + Replace normalizers, legacy: true)
  mistral-sw-yesno  MistralForCausalLM, MQA, sliding window 20 on every layer, untied lm_head;
                    score yes/no; Llama-2 tokenizer.json with legacy: false

The tokenizers are ../models/llama-cls/tokenizer.model (sentencepiece BPE, byte fallback, trained
on the job-search corpus) written out as tokenizer.json the way transformers' SpmConverter does
(vocab from the pieces, merges from every split of a piece into two pieces, by piece score).
References are what Hugging Face transformers computes: AutoTokenizer for the ids, the model loaded
fresh from the saved files in float32 on the CPU for `score`, and in bfloat16 on the GPU for
`score_bf16_cuda` (embedding items too). golden.json's format is README.md's, plus `logits_at` ({id: logit} at the last
position for the yes/no ids) for causal models.
"""
import json
import math
import os
import sys

import sentencepiece as spm
import torch
import transformers
from transformers import (AutoTokenizer, Gemma2Config, Gemma2ForCausalLM, GemmaConfig,
                          GemmaForCausalLM, MistralConfig, MistralForCausalLM,
                          MistralForSequenceClassification)

HERE = os.path.dirname(os.path.abspath(__file__))
OUT, CASES_PATH = sys.argv[1], sys.argv[2]
CASES = json.load(open(CASES_PATH))
os.makedirs(OUT, exist_ok=True)
torch.backends.cuda.matmul.allow_tf32 = False
SP_MODEL = os.path.join(HERE, "..", "models", "llama-cls", "tokenizer.model")
sys.path.insert(0, HERE)
import make_corpus as mc  # noqa: E402  deterministic job-search text

mc.R.seed(77)
LONG_CASES = [  # prefixes and items longer than the sliding windows (20, 24 tokens)
    {"query": mc.item(long=True) + " " + mc.item(long=True),
     "items": [mc.item(long=True), "b", mc.item(long=False) * 2]},
    {"query": mc.query(), "items": [mc.item(long=True) * 3, mc.item(long=True)]},
]

BGE_QUERY_T = "A: {query}\n"
BGE_ITEM_T = ("B: {item}\nPredict whether passage B contains an answer to query A by providing a "
              "prediction of either 'Yes' or 'No'.")


def sp_tokenizer_json(style, legacy=None):
    """The sentencepiece model as a tokenizer.json in `style` (llama2 | gemma | gemma2)."""
    sp = spm.SentencePieceProcessor(model_file=SP_MODEL)
    n = sp.get_piece_size()
    names = {0: "<unk>", 1: "<s>", 2: "</s>", 3: "<pad>"}
    if style != "llama2":
        names = {0: "<unk>", 1: "<bos>", 2: "<eos>", 3: "<pad>"}
    pieces = [names.get(i, sp.id_to_piece(i)) for i in range(n)]
    vocab = {p: i for i, p in enumerate(pieces)}
    scored = sorted(range(n), key=lambda i: -sp.get_score(i))  # stable: ties keep id order
    merges = []
    for i in scored:
        if sp.is_control(i) or sp.is_unknown(i) or sp.is_byte(i):
            continue
        p = pieces[i]
        local = [(p[:k], p[k:]) for k in range(1, len(p)) if p[:k] in vocab and p[k:] in vocab]
        merges += sorted(local, key=lambda lr: (vocab[lr[0]], vocab[lr[1]]))
    bos = names[1]
    added = [dict(id=i, content=names[i], single_word=False, lstrip=False, rstrip=False,
                  normalized=False, special=True) for i in range(4)]
    replace = {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}
    if style == "llama2":
        normalizer = {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "\u2581"}, replace]}
    else:
        normalizer = replace
    pre = None
    if style == "gemma2":
        pre = {"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithPrevious",
               "invert": False}
    post = {"type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": bos, "type_id": 0}},
                       {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": bos, "type_id": 0}},
                     {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": bos, "type_id": 1}},
                     {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {bos: {"id": bos, "ids": [1], "tokens": [bos]}}}
    decoders = [{"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
                {"type": "ByteFallback"}, {"type": "Fuse"}]
    if style == "llama2":
        decoders.append({"type": "Strip", "content": " ", "start": 1, "stop": 0})
    model = {"type": "BPE", "dropout": None, "unk_token": "<unk>",
             "continuing_subword_prefix": None, "end_of_word_suffix": None, "fuse_unk": True,
             "byte_fallback": True, "ignore_merges": False, "vocab": vocab,
             "merges": [f"{a} {b}" for a, b in merges]}
    tj = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
          "normalizer": normalizer, "pre_tokenizer": pre, "post_processor": post,
          "decoder": {"type": "Sequence", "decoders": decoders}, "model": model}
    cfg = {"add_bos_token": True, "add_eos_token": False, "bos_token": bos,
           "eos_token": names[2], "pad_token": names[3], "unk_token": "<unk>",
           "clean_up_tokenization_spaces": False, "spaces_between_special_tokens": False,
           "model_max_length": 8192,
           "tokenizer_class": "LlamaTokenizer" if style == "llama2" else "GemmaTokenizer"}
    if style == "llama2":
        cfg["legacy"] = legacy
    return tj, cfg, vocab


def reinit(model, seed, offset_norms):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name and p.dim() == 1:  # Gemma scales by (1 + w): w near 0
                p.copy_((0.0 if offset_norms else 1.0) + 0.1 * torch.randn(p.shape, generator=g))
            elif p.dim() == 1:
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            elif "embed_tokens" in name:
                p.copy_(torch.randn(p.shape, generator=g))
            else:
                p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(p.shape[1]))


def score_of(logits, score):
    """(score, logits_at) at the last position; logits: [1, T, V] (causal) or [1, labels]."""
    if score["type"] == "classifier":
        return float(logits[0, score["index"]]), None
    last = logits[0, -1].float()
    if score["type"] == "logit":
        at = {str(score["token_id"]): float(last[score["token_id"]])}
        return float(last[score["token_id"]]), at
    y, n = score["yes_id"], score["no_id"]
    return float(last[y] - last[n]), {str(y): float(last[y]), str(n): float(last[n])}


def build(name, cls, cfgcls, cfg_kw, score, style, qt, it, seed, embeds, legacy=None):
    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    tj, tcfg, vocab = sp_tokenizer_json(style, legacy)
    json.dump(tj, open(os.path.join(d, "tokenizer.json"), "w"), ensure_ascii=False, indent=1)
    json.dump(tcfg, open(os.path.join(d, "tokenizer_config.json"), "w"), indent=2)
    tok = AutoTokenizer.from_pretrained(d)
    if score["type"] == "yes_no":
        score.update(yes_id=vocab["yes"], no_id=vocab["no"])
    elif score["type"] == "logit":
        score.update(token_id=vocab["yes"], token="yes")
    cfg = cfgcls(**dict(cfg_kw, pad_token_id=3, bos_token_id=1, eos_token_id=2))
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    init = cls(cfg).float().eval()
    reinit(init, seed, offset_norms=style != "llama2")
    init.save_pretrained(d, safe_serialization=True)
    del init
    # The references run on models loaded fresh from the saved files.
    model = cls.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").eval()
    gpu = None
    if torch.cuda.is_available():
        gpu = cls.from_pretrained(d, dtype=torch.bfloat16, attn_implementation="eager")
        gpu = gpu.cuda().eval()
    g = dict(model=name, transformers=transformers.__version__, torch=torch.__version__,
             score=score, bos_id=1, query_template=qt, item_template=it,
             tokenizer_class=type(tok).__name__, definition=__doc__, cases=[],
             embedding_cases=[])
    worst = 0.0
    longest = 0
    for c in CASES + LONG_CASES:
        prefix = tok(qt.format(query=c["query"]))["input_ids"]
        entry = dict(query=c["query"], prefix_ids=prefix, items=[])
        for text in c["items"]:
            item = tok(it.format(item=text), add_special_tokens=False)["input_ids"]
            ids = torch.tensor([prefix + item])
            longest = max(longest, ids.shape[1])
            with torch.no_grad():
                s, at = score_of(model(input_ids=ids).logits, score)
            rec = dict(text=text, ids=item, score=s)
            if at:
                rec["logits_at"] = at
                if score["type"] == "yes_no":
                    rec["yes_no_logits"] = [at[str(score["yes_id"])], at[str(score["no_id"])]]
            if gpu is not None:
                with torch.no_grad():
                    sb, _ = score_of(gpu(input_ids=ids.cuda()).logits.float().cpu(), score)
                rec["score_bf16_cuda"] = sb
                worst = max(worst, abs(sb - s) / max(1.0, abs(s)))
            entry["items"].append(rec)
        g["cases"].append(entry)
    if embeds:
        gen = torch.Generator().manual_seed(7)
        emb = model.get_input_embeddings()
        for c in CASES[:2] + LONG_CASES[:1]:
            prefix = tok(qt.format(query=c["query"]))["input_ids"]
            with torch.no_grad():
                pe = emb(torch.tensor([prefix]))
            entry = dict(query=c["query"], prefix_ids=prefix, items=[])
            for k in [1, 3, 30]:
                E = torch.randn((1, k, cfg.hidden_size), generator=gen)
                with torch.no_grad():
                    s, _ = score_of(model(inputs_embeds=torch.cat([pe, E], dim=1)).logits, score)
                rec = dict(embeddings=E[0].tolist(), score=s)
                if gpu is not None:  # HF's own bf16 error on embedding items too
                    with torch.no_grad():
                        ids = torch.tensor([prefix]).cuda()
                        pb = gpu.get_input_embeddings()(ids)
                        eb = E.to(torch.bfloat16).cuda()
                        lb = gpu(inputs_embeds=torch.cat([pb, eb], dim=1)).logits.float().cpu()
                    rec["score_bf16_cuda"], _ = score_of(lb, score)
                entry["items"].append(rec)
            g["embedding_cases"].append(entry)
    g["max_rel_err_bf16_cuda_vs_fp32"] = worst
    json.dump(g, open(os.path.join(d, "golden.json"), "w"), ensure_ascii=False, indent=1)
    print(name, type(tok).__name__, "params", sum(p.numel() for p in model.parameters()),
          "longest", longest, "max_rel_bf16", round(worst, 4), flush=True)


def main():
    jobs = [
        lambda: build("gemma-tiny", GemmaForCausalLM, GemmaConfig,
                      dict(vocab_size=1024, hidden_size=64, intermediate_size=160,
                           num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=1,
                           head_dim=32, rms_norm_eps=1e-6, rope_theta=10000.0,
                           hidden_activation="gelu_pytorch_tanh", tie_word_embeddings=True,
                           max_position_embeddings=2048),
                      dict(type="logit"), "gemma", BGE_QUERY_T, BGE_ITEM_T, 61, True),
        lambda: build("gemma2-tiny", Gemma2ForCausalLM, Gemma2Config,
                      dict(vocab_size=1024, hidden_size=64, intermediate_size=128,
                           num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                           head_dim=32, rms_norm_eps=1e-6, rope_theta=10000.0,
                           hidden_activation="gelu_pytorch_tanh", query_pre_attn_scalar=24,
                           attn_logit_softcapping=4.0, final_logit_softcapping=8.0,
                           sliding_window=24, tie_word_embeddings=True,
                           max_position_embeddings=2048),
                      dict(type="yes_no"), "gemma2", "{query}", "{item}", 62, True),
        lambda: build("mistral-cls", MistralForSequenceClassification, MistralConfig,
                      dict(vocab_size=1024, hidden_size=64, intermediate_size=176,
                           num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                           head_dim=16, rms_norm_eps=1e-5, rope_theta=1000000.0,
                           sliding_window=None, num_labels=1, tie_word_embeddings=False,
                           max_position_embeddings=2048),
                      dict(type="classifier", index=0), "llama2", "{query}", "{item}", 63, True,
                      legacy=True),
        lambda: build("mistral-sw-yesno", MistralForCausalLM, MistralConfig,
                      dict(vocab_size=1024, hidden_size=64, intermediate_size=160,
                           num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=1,
                           head_dim=16, rms_norm_eps=1e-5, rope_theta=10000.0,
                           sliding_window=20, tie_word_embeddings=False,
                           max_position_embeddings=2048),
                      dict(type="yes_no"), "llama2", "{query}", "{item}", 64, False,
                      legacy=False),
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
