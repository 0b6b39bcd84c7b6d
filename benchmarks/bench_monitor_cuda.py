"""Overhead of ``trainaudit.monitor`` on a CUDA training loop: GPT-2 style models, bf16 autocast,
fused AdamW.

    python benchmarks/bench_monitor_cuda.py                      # prints a Markdown section
    python benchmarks/bench_monitor_cuda.py --rounds 20 --sizes small

Without a CUDA device it says so and exits 0 without numbers.

Models (decoder-only, pre-LayerNorm, causal attention with ``scaled_dot_product_attention``, GELU
MLP, tied byte-level embeddings of 256 tokens): "86M" is 12 layers of width 768 (GPT-2 small's
blocks), "3.3M" is 4 layers of width 256. Each step: forward and loss under
``torch.autocast("cuda", torch.bfloat16)``, backward, ``clip_grad_norm_`` (its tensor passed to the
monitor as ``grad_norm=``), ``AdamW(fused=True)``, ``zero_grad``; the loop itself reads nothing
from the GPU, so any sync in a monitored step is the monitor's.

One model, optimizer and monitor per (size, variant); the monitor is detached for "plain" blocks
with ``Monitor.paused()`` and attached for "monitored" blocks of ``--block`` (20) steps, ABBA within
each round (plain, monitored, monitored, plain), after warm-up steps. Each block is timed from a
``torch.cuda.synchronize()`` to the next (wall clock), so both kinds pay one drain per block.
Entering and leaving ``paused()`` (which reads the monitor's pending steps, and re-attaches its
hooks) is timed too and counted as monitor cost: a real run reads its batches without waiting,
so the figure errs high. Overhead = summed monitored time / summed plain time - 1; the median of
the per-round ratios is printed beside it.

Variants: ``default`` (``nan_origin=True``: the gradient check before the update stays on the
GPU, its flag is the fused optimizer's ``found_inf``), ``nan_origin=False``, and ``foreach-adamw``
(the defaults with AdamW not fused: the check is read before each update, one sync per step).
A last pass of ``2 * block`` monitored steps counts the synchronizing calls PyTorch reports
(``torch.cuda.set_sync_debug_mode("warn")``,
https://pytorch.org/docs/stable/generated/torch.cuda.set_sync_debug_mode.html); a sampled step
(step 1 and every ``every`` = 100 steps: per-layer norms) reads at once and would count if it
fell in that pass.
Target: default settings cost at most 1 % of step time, no sync on a healthy step.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

TARGET = 0.01
SIZES = {  # name: (layers, width, heads, sequence, batch)
    "86M": (12, 768, 12, 1024, 16),
    "3.3M": (4, 256, 4, 256, 64),
}
VARIANTS = {  # name: (monitor options, fused optimizer)
    "default": ({}, True),
    "nan_origin=False": ({"nan_origin": False}, True),
    "foreach-adamw": ({}, False),  # defaults, AdamW not fused
}
VOCAB = 256


def build(layers: int, width: int, heads: int, seq: int) -> Any:
    import torch
    from torch import nn
    from torch.nn import functional as F

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln_1, self.ln_2 = nn.LayerNorm(width), nn.LayerNorm(width)
            self.attn, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
            self.fc, self.out = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, t, c = x.shape
            q, k, v = self.attn(self.ln_1(x)).split(c, dim=2)
            q, k, v = (z.view(b, t, heads, c // heads).transpose(1, 2) for z in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, c)
            x = x + self.proj(y)
            return x + self.out(F.gelu(self.fc(self.ln_2(x))))

    class GPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.wte, self.wpe = nn.Embedding(VOCAB, width), nn.Embedding(seq, width)
            self.blocks = nn.ModuleList(Block() for _ in range(layers))
            self.ln_f = nn.LayerNorm(width)

        def forward(self, idx: torch.Tensor) -> torch.Tensor:
            x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
            for blk in self.blocks:
                x = blk(x)
            return self.ln_f(x) @ self.wte.weight.t()  # tied output layer

    return GPT()


def run_variant(size: str, options: dict[str, Any], fused: bool, rounds: int, block: int, warmup: int,
                tmp: Path) -> dict[str, Any]:
    import torch
    from torch.nn import functional as F

    from trainaudit.monitor.core import Monitor

    layers, width, heads, seq, batch = SIZES[size]
    torch.manual_seed(0)
    model = build(layers, width, heads, seq).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=fused)
    g = torch.Generator(device="cuda").manual_seed(1)
    data = [torch.randint(0, VOCAB, (batch, seq + 1), device="cuda", generator=g) for _ in range(8)]
    mon = Monitor(model, opt, tmp / f"{size}-{len(options)}-{fused}", warn=None, **options)
    n = [0]

    def steps(k: int, monitored: bool) -> None:
        for _ in range(k):
            d = data[n[0] % len(data)]
            n[0] += 1
            with torch.autocast("cuda", dtype=torch.bfloat16):
                logits = model(d[:, :-1])
                loss = F.cross_entropy(logits.reshape(-1, VOCAB).float(), d[:, 1:].reshape(-1))
            loss.backward()
            gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            if monitored:
                mon.step(loss, grad_norm=gn)

    def timed(fn: Any, *a: Any) -> float:
        torch.cuda.synchronize()
        t = time.perf_counter()
        fn(*a)
        torch.cuda.synchronize()
        return time.perf_counter() - t

    def plain_block() -> tuple[float, float]:
        pause = mon.paused()
        cost = timed(pause.__enter__)
        plain = timed(steps, block, False)
        cost += timed(pause.__exit__, None, None, None)
        return plain, cost

    steps(warmup, True)
    plain_s = monitored_s = 0.0
    ratios: list[float] = []
    for _ in range(rounds):
        p1, c1 = plain_block()
        m1 = timed(steps, block, True)
        m2 = timed(steps, block, True)
        p2, c2 = plain_block()
        plain_s += p1 + p2
        monitored_s += m1 + m2 + c1 + c2
        ratios.append((m1 + m2 + c1 + c2) / (p1 + p2) - 1)
    # synchronizing calls PyTorch sees in monitored steps (the loop itself makes none)
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            steps(2 * block, True)
        finally:
            torch.cuda.set_sync_debug_mode("default")
    syncs = sum(1 for w in caught if "synchroniz" in str(w.message).lower())
    mon.close()
    params = sum(p.numel() for p in model.parameters())
    return {"params": params, "plain_ms": plain_s / (2 * rounds * block) * 1000, "overhead": monitored_s / plain_s - 1,
            "median_round": statistics.median(ratios), "syncs_per_step": syncs / (2 * block)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=10, help="ABBA rounds per (size, variant)")
    ap.add_argument("--block", type=int, default=20, help="steps per block")
    ap.add_argument("--warmup", type=int, default=30, help="monitored steps before timing")
    ap.add_argument("--sizes", default=",".join(SIZES), help="comma-separated: " + ", ".join(SIZES))
    ap.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated: " + ", ".join(VARIANTS))
    args = ap.parse_args()
    sizes = [s for s in args.sizes.split(",") if s]
    variants = [v for v in (x.strip() for x in args.variants.split(",")) if v]
    for s in sizes:
        if s not in SIZES:
            ap.error(f"unknown size {s!r}")
    for v in variants:
        if v not in VARIANTS:
            ap.error(f"unknown variant {v!r}")
    picked = [v for v in VARIANTS if v in variants]
    print("## Live monitor overhead on a GPU (bench_monitor_cuda.py)\n")
    try:
        import torch
    except ImportError:
        print("Not run: torch is not installed.")
        return 0
    if not torch.cuda.is_available():
        print("Not run: no CUDA device on this machine (the script measures only on a GPU).")
        return 0
    print(f"`python benchmarks/bench_monitor_cuda.py --rounds {args.rounds} --block {args.block}`: "
          f"{torch.cuda.get_device_name()}, torch {torch.__version__}, CUDA {torch.version.cuda}. GPT-2 style "
          "models, bf16 autocast, AdamW, clip_grad_norm_; plain and monitored blocks of "
          f"{args.block} steps, ABBA, {args.rounds} rounds each way per row, after {args.warmup} warm-up steps "
          "(see the script's docstring).\n")
    print("| model | params | variant | plain step (ms) | overhead (sum) | median of per-round ratios | "
          "syncs per monitored step |")
    print("|---|---|---|---|---|---|---|")
    met = True
    with tempfile.TemporaryDirectory() as tmp:
        for size in sizes:
            layers, width, _, seq, batch = SIZES[size]
            for name in picked:
                options, fused = VARIANTS[name]
                r = run_variant(size, options, fused, args.rounds, args.block, args.warmup, Path(tmp))
                torch.cuda.empty_cache()
                print(f"| {size} ({layers}x{width}, batch {batch}x{seq}) | {r['params'] / 1e6:.1f}M | {name} | "
                      f"{r['plain_ms']:.2f} | {r['overhead']:+.2%} | {r['median_round']:+.2%} | "
                      f"{r['syncs_per_step']:.2f} |", flush=True)
                if name == "default":
                    met = met and r["overhead"] <= TARGET and math.isclose(r["syncs_per_step"], 0.0)
    print(f"\nTarget: default settings cost at most {TARGET:.0%} of step time with no sync on a healthy step: "
          f"**{'met' if met else 'NOT met'}**.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
