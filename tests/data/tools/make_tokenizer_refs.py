#!/usr/bin/env python3
"""make_tokenizer_refs.py TOKENIZERS_DIR OUT_DIR

Reference ids of full-size, real tokenizers, as transformers' AutoTokenizer gives them: for each
TOKENIZERS_DIR/<name>/ holding tokenizer.json (or tokenizer.json.xz) and tokenizer_config.json,
writes OUT_DIR/<name>.json:

  {"tokenizer": name, "transformers": version, "tokenizers": version, "class": AutoTokenizer's class,
   "effective": the pipeline AutoTokenizer really runs (normalizer, pre_tokenizer, post_processor,
                model flags) -- it may differ from tokenizer.json (legacy, add_prefix_space, ...),
   "cases": [{"text": str, "ids": tok(text, add_special_tokens=False), "ids_special": tok(text)}]}

The strings are the hard cases of a tokenizer (scripts, emoji sequences, combining marks,
whitespace runs, special tokens written as text, text that needs byte fallback) plus job-search
text like the traffic rankd scores.
"""
import json
import lzma
import os
import shutil
import sys
import tempfile

import tokenizers
import transformers
from transformers import AutoTokenizer

HARD = [
    "", " ", "  ", "   ", "hello", " hello", "  hello", "hello ", "hello  world", "Hello, World!",
    "don't you're I'LL we've", "tab\there", "a\tb\tc", "line1\nline2\r\nline3\n\n\n", "\n",
    "\n\nstarts with newlines", "   leading and trailing   ", "1234567890", "12345678901234567890",
    "3.14159 and 2,718", "emoji 🚀🚀 and 👩‍👩‍👧 family", "👨‍💻 coder 👍🏽 🇺🇸🇯🇵", "中文数据科学家",
    "ソフトウェアエンジニア", "안녕하세요 세계", "مرحبا بالعالم", "नमस्ते दुनिया", "สวัสดีครับ",
    "café naïve coöperate", "e\u0301 combining (decomposed)", "Zürich São Paulo", "Ελληνικά",
    "Привет, мир", "𠀋𠀍 supplementary plane", "\u0001\u0002 control chars", "a\u00a0b\u2003c",
    "\u200bzero\u200bwidth", "ﬁ ligature and Ａ fullwidth", "▁already▁meta▁space", "▁", "<0x41>",
    "<0x0A> literal", "<s>hi</s>", "<unk>", "<bos>text<eos>", "<pad>", "<start_of_turn>user\nhi",
    "<|im_start|>user\nhi<|im_end|>", "a<|endoftext|>b", "<|begin_of_text|>x", "   \n  \t ",
    "$35/hr. 401(k) 5+ years", "ALLCAPS and MiXeD", "camelCaseWordsHere snake_case_words",
    "x" * 200, "🙂" * 30, "ab" * 150, "Hello世界123abc", "https://example.com/jobs?id=42&q=c++",
    "C++/CUDA, Python; Go & Rust!", "email: jane.doe@example.com", "  multiple   inner    spaces ",
    "trailing newline\n", "Senior Software Engineer — remote (EU) · €90k–€120k",
    "A: senior backend engineer\n", "B: We are looking for a Go developer in Berlin.\n",
    "Predict whether passage B contains an answer to query A by providing a prediction of either "
    "'Yes' or 'No'.", "Yes", " Yes", "yes", "No",
]


def job_strings():
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, here)
    import make_corpus as mc  # noqa: E402  deterministic generator
    mc.R.seed(99)
    return [mc.query() for _ in range(10)] + [mc.item(long=True) for _ in range(10)]


def effective(tok):
    backend = getattr(tok, "backend_tokenizer", None) or getattr(tok, "_tokenizer", None)
    if backend is None:
        return None
    d = json.loads(backend.to_str())
    m = d.get("model", {})
    return dict(normalizer=d.get("normalizer"), pre_tokenizer=d.get("pre_tokenizer"),
                post_processor=d.get("post_processor"),
                model={k: v for k, v in m.items() if k not in ("vocab", "merges")},
                added_tokens=len(d.get("added_tokens", [])))


def main():
    src, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    strings = HARD + job_strings()
    for name in sorted(os.listdir(src)):
        d = os.path.join(src, name)
        if not os.path.isdir(d):
            continue
        try:
            with tempfile.TemporaryDirectory() as tmp:
                for f in os.listdir(d):
                    p = os.path.join(d, f)
                    if f.endswith(".xz"):
                        with lzma.open(p) as a, open(os.path.join(tmp, f[:-3]), "wb") as b:
                            shutil.copyfileobj(a, b)
                    else:
                        shutil.copy(p, tmp)
                tok = AutoTokenizer.from_pretrained(tmp)
                cases = [dict(text=t, ids=tok(t, add_special_tokens=False)["input_ids"],
                              ids_special=tok(t)["input_ids"]) for t in strings]
                ref = dict(tokenizer=name, transformers=transformers.__version__,
                           tokenizers=tokenizers.__version__, **{"class": type(tok).__name__},
                           effective=effective(tok), cases=cases)
            with open(os.path.join(out, name + ".json"), "w") as f:
                json.dump(ref, f, ensure_ascii=False, indent=1)
            print(name, type(tok).__name__, len(cases), "cases", flush=True)
        except Exception as e:  # keep going: one tokenizer failing must not lose the others
            import traceback
            traceback.print_exc()
            print("FAILED", name, e, flush=True)


if __name__ == "__main__":
    main()
