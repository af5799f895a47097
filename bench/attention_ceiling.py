#!/usr/bin/env python3
"""What the best library attention kernels reach on issue 25's items-over-prefix shape.

Issue 25 asks for attention at >= 450 TFLOP/s on the items-over-prefix work (379M, Tq=1024,
Ti=150, Ni=50). This times PyTorch's scaled_dot_product_attention backends (FlashAttention,
cuDNN, memory-efficient) on the same work laid out densely: every item's Ti query rows against
the prefix's Tq keys plus its own Ti keys, no mask (the flash and cuDNN kernels take no
arbitrary mask; the items' causal triangle is computed whole, so these kernels do a little more
work than rankd's, about Ti / 2 keys a row, and their rate is counted on the work they do).

  python3 bench/attention_ceiling.py [--tq 1024] [--ti 150] [--ni 50] [--iters 50]

Prints, per model shape (379M: 16 heads of 64; the 0.6B: 16 q heads and 8 kv heads of 128) and
backend, the median time of --iters launches and TFLOP/s (4 * rows * keys * head_dim * heads),
beside what rankd's kernel would need for 450 TFLOP/s on its own FLOP count. A backend that
refuses the shape says so. No result is made up: a backend that fails prints its error.
"""
import argparse
import statistics

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
import torch.nn.functional as F

SHAPES = {
    "379m": dict(heads=16, kv_heads=16, head_dim=64),
    "qwen3-0.6b": dict(heads=16, kv_heads=8, head_dim=128),
}
BACKENDS = {
    "flash": SDPBackend.FLASH_ATTENTION,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
}


def time_ms(fn, iters):
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tq", type=int, default=1024)
    p.add_argument("--ti", type=int, default=150)
    p.add_argument("--ni", type=int, default=50)
    p.add_argument("--iters", type=int, default=50)
    a = p.parse_args()
    for v, name in (("tq", "--tq"), ("ti", "--ti"), ("ni", "--ni"), ("iters", "--iters")):
        if getattr(a, v) < 1:
            p.error(f"{name} must be at least 1 (got {getattr(a, v)})")
    dev = torch.device("cuda")
    print(f"# {torch.cuda.get_device_name(dev)}, torch {torch.__version__}, "
          f"Tq={a.tq} Ti={a.ti} Ni={a.ni}, bf16, median of {a.iters}")
    keys = a.tq + a.ti
    for shape, s in SHAPES.items():
        h, kvh, d = s["heads"], s["kv_heads"], s["head_dim"]
        g = torch.Generator(device=dev).manual_seed(0)
        q = torch.randn(a.ni, h, a.ti, d, device=dev, dtype=torch.bfloat16, generator=g)
        k = torch.randn(a.ni, kvh, keys, d, device=dev, dtype=torch.bfloat16, generator=g)
        v = torch.randn(a.ni, kvh, keys, d, device=dev, dtype=torch.bfloat16, generator=g)
        flops = 4.0 * a.ni * a.ti * keys * d * h
        # rankd's count: each item row sees the prefix and the item's causal triangle.
        rankd_flops = 4.0 * a.ni * h * d * (a.ti * a.tq + a.ti * (a.ti + 1) / 2)
        print(f"{shape}: {flops / 1e9:.1f} GFLOP dense here, {rankd_flops / 1e9:.1f} in rankd's "
              f"count; 450 TFLOP/s on rankd's count is {rankd_flops / 450e12 * 1e6:.1f} us")
        for bname, backend in BACKENDS.items():
            def run():
                with sdpa_kernel([backend]):
                    return F.scaled_dot_product_attention(q, k, v, enable_gqa=kvh != h)
            try:
                ms = time_ms(run, a.iters)
            except RuntimeError as e:  # the backend refuses the shape or the device
                print(f"  {bname:10s} refused: {str(e).splitlines()[0][:160]}")
                continue
            print(f"  {bname:10s} {ms * 1e3:8.1f} us  {flops / ms / 1e9:6.1f} TFLOP/s")


if __name__ == "__main__":
    main()
