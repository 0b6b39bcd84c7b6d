"""Overhead of ``trainaudit.monitor`` at default settings on a CPU training loop.

    python benchmarks/bench_monitor.py            # prints a Markdown section
    python benchmarks/bench_monitor.py --steps 300 --rounds 15

The same loop (MLP 256-512-512-10 with ReLU, batch 128, Adam, cross-entropy, gradient clipping,
``loss.item()`` each step as any loop that logs does; one torch thread) runs with and without the
monitor attached, alternating, ``--rounds`` times each; each round is a fresh model with the same
seed. The whole loop is timed (forward, backward, update, and for the monitored rounds every
monitor cost: hooks, per-step statistics, JSONL writing, per-layer sampling, online rules).
Two figures: the monitor's own CPU time (inside ``step()`` and its hooks, per step, over the plain
step's CPU time) and the end-to-end paired difference (noisy on a shared machine). Target: 3 %.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

TARGET = 0.03


def build() -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
    return model, torch.optim.Adam(model.parameters(), lr=1e-3)


def timed_monitor(model: nn.Module, opt: torch.optim.Optimizer, log_dir: Path) -> Any:
    """The monitor with its hooks timed (CPU time of this thread spent in monitor code)."""
    from trainaudit.monitor.core import Monitor

    class Timed(Monitor):
        spent = 0.0

        def _on_forward(self, *a: Any) -> None:
            t = time.thread_time()
            super()._on_forward(*a)
            Timed.spent += time.thread_time() - t

        def _on_opt_pre(self, *a: Any) -> None:
            t = time.thread_time()
            super()._on_opt_pre(*a)
            Timed.spent += time.thread_time() - t

        def _on_opt_post(self, *a: Any) -> None:
            t = time.thread_time()
            super()._on_opt_post(*a)
            Timed.spent += time.thread_time() - t

    Timed.spent = 0.0
    return Timed(model, opt, log_dir, warn=None)


def loop(steps: int, log_dir: Path | None, timed: bool = False) -> tuple[float, float, float]:
    """(wall seconds, CPU seconds of this thread, CPU seconds inside monitor code) of the loop."""
    import trainaudit

    model, opt = build()
    g = torch.Generator().manual_seed(1)
    xs = torch.randn(steps, 128, 256, generator=g)
    ys = torch.randint(0, 10, (steps, 128), generator=g)
    if log_dir is None:
        mon = None
    elif timed:
        mon = timed_monitor(model, opt, log_dir)
    else:
        mon = trainaudit.monitor(model, opt, log_dir=log_dir, warn=None)
    inside = 0.0
    t0, c0 = time.perf_counter(), time.thread_time()
    for i in range(steps):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(xs[i]), ys[i])
        loss.backward()
        gn = nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        loss.item()
        if mon is not None:
            t = time.thread_time()
            mon.step(loss, grad_norm=float(gn))
            inside += time.thread_time() - t
    took, cpu = time.perf_counter() - t0, time.thread_time() - c0
    if mon is not None:
        mon.close()
        inside += getattr(type(mon), "spent", 0.0)
    return took, cpu, inside


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()
    torch.set_num_threads(1)
    plain: list[tuple[float, float, float]] = []
    mon: list[tuple[float, float, float]] = []
    timed: list[tuple[float, float, float]] = []
    with tempfile.TemporaryDirectory() as tmp:  # warm-up (allocator, kernels, imports)
        loop(50, None)
        loop(50, Path(tmp))
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            plain.append(loop(args.steps, None))
            mon.append(loop(args.steps, Path(tmp) / f"r{r}"))
            timed.append(loop(args.steps, Path(tmp) / f"t{r}", timed=True))
    ms = 1000 / args.steps
    p, m = statistics.median(x[0] for x in plain), statistics.median(x[0] for x in mon)
    pc, mc = statistics.median(x[1] for x in plain), statistics.median(x[1] for x in mon)
    # paired: each monitored round against the plain round just before it (same machine load)
    over_cpu = statistics.median(b[1] / a[1] - 1 for a, b in zip(plain, mon))
    over_wall = statistics.median(b[0] / a[0] - 1 for a, b in zip(plain, mon))
    # attributed: CPU time inside monitor code (step() and the hooks) over the plain step CPU time
    attributed = statistics.median(t[2] / a[1] for a, t in zip(plain, timed))
    print("## Live monitor overhead (bench_monitor.py)\n")
    print("`python benchmarks/bench_monitor.py`: MLP 256-512-512-10 (ReLU), batch 128, Adam, clip 1.0, one torch "
          f"thread, {args.steps} steps per round, {args.rounds} rounds each, alternating. Monitor at default settings: "
          "every=50 (per-layer grad norms and update/weight ratios), rules_every=25 with a 0.5 % CPU budget, RSS every 10 steps (online rules over the last 2000 "
          "points), nan_origin=True (forward hooks + output-gradient hooks), JSONL written every step, flushed every 0.5 s, "
          "no TensorBoard, warnings off.\n")
    print("| loop | median step, wall (ms) | median step, CPU (ms) | round range, wall (s) |")
    print("|---|---|---|---|")
    print(f"| plain | {p * ms:.3f} | {pc * ms:.3f} | {min(x[0] for x in plain):.2f} - {max(x[0] for x in plain):.2f} |")
    print(f"| with monitor | {m * ms:.3f} | {mc * ms:.3f} | {min(x[0] for x in mon):.2f} - {max(x[0] for x in mon):.2f} |")
    print(f"\nMonitor's own CPU time (inside `step()` and its hooks, timed in a third set of rounds), per step: "
          f"**{attributed:.2%}** of the plain step's CPU time (target < {TARGET:.0%}): "
          f"{'met' if attributed < TARGET else 'NOT met'}.\n")
    print(f"End to end (median of paired rounds, plain vs monitored): {over_cpu:+.1%} of step CPU time, {over_wall:+.1%} "
          "of wall time. On this shared 2-core machine the round-to-round spread of the *plain* loop alone is "
          f"{(max(x[1] for x in plain) / min(x[1] for x in plain) - 1):.0%} (CPU), larger than the target, so the end-to-end "
          "difference is reported as measured but the attributed figure is the one that resolves a 3 % budget.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
