"""Overhead of ``trainaudit.monitor`` at default settings on a CPU training loop.

    python benchmarks/bench_monitor.py            # prints a Markdown section
    python benchmarks/bench_monitor.py --rounds 60 --block 50

Two copies of the same loop (MLP 256-512-512-10 with ReLU, batch 128, Adam, cross-entropy,
gradient clipping, ``loss.item()`` each step as any loop that logs does; one torch thread), one
plain and one with the monitor attached, live in one process and run in alternating blocks of
``--block`` steps, ABBA within each round (plain, monitored, monitored, plain), so that both
see the same machine load at the same moment. A block is a multiple of the monitor's sampling
periods, so each monitored block holds its share of per-layer sampling and RSS reads.

Figures, each the median over rounds of a per-round value (with the quartiles):
- end-to-end overhead: monitored block CPU time / plain block CPU time - 1 (CPU time of this
  thread; wall time is printed too). Every monitor cost is in it: hooks, the memory the hooks
  keep alive, per-step statistics, JSONL, per-layer sampling, online rules;
- in-monitor share: CPU time inside ``Monitor.step()`` and the monitor's hooks over the plain
  block's CPU time.
The rules' budget is a share of wall time; interleaving doubles the wall time between monitored
steps, so rules run about twice as often per monitored step here as in a run of their own:
the figures err high. Target: 3 % (issue 6).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

TARGET = 0.03
BATCH, DIMS = 128, (256, 512, 512, 10)


def build() -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    d = DIMS
    model = nn.Sequential(nn.Linear(d[0], d[1]), nn.ReLU(), nn.Linear(d[1], d[2]), nn.ReLU(), nn.Linear(d[2], d[3]))
    return model, torch.optim.Adam(model.parameters(), lr=1e-3)


def timed_monitor(model: nn.Module, opt: torch.optim.Optimizer, log_dir: Path) -> Any:
    """The monitor at default settings (warnings off), with the CPU time of this thread spent in
    its hooks added up in ``spent`` (``step()`` is timed by the caller)."""
    from trainaudit.monitor.core import Monitor

    class Timed(Monitor):
        spent = 0.0

        def _on_forward(self, *a: Any) -> None:
            t = time.thread_time()
            super()._on_forward(*a)
            self.spent += time.thread_time() - t

        def _on_model_forward(self, *a: Any) -> None:
            t = time.thread_time()
            super()._on_model_forward(*a)
            self.spent += time.thread_time() - t

        def _on_opt_pre(self, *a: Any) -> None:
            t = time.thread_time()
            super()._on_opt_pre(*a)
            self.spent += time.thread_time() - t

        def _on_opt_post(self, *a: Any) -> None:
            t = time.thread_time()
            super()._on_opt_post(*a)
            self.spent += time.thread_time() - t

    return Timed(model, opt, log_dir, warn=None)


@dataclass
class Loop:
    model: nn.Module
    opt: torch.optim.Optimizer
    mon: Any = None
    i: int = 0
    inside: float = 0.0  # CPU seconds in step() (hooks: mon.spent)
    blocks: list[tuple[float, float, float]] = field(default_factory=list)  # (cpu, wall, inside)

    def run(self, xs: torch.Tensor, ys: torch.Tensor, steps: int) -> None:
        model, opt, mon = self.model, self.opt, self.mon
        in0 = self.inside + (mon.spent if mon is not None else 0.0)
        t0, c0 = time.perf_counter(), time.thread_time()
        for _ in range(steps):
            j = self.i % len(xs)
            self.i += 1
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(xs[j]), ys[j])
            loss.backward()
            gn = nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            loss.item()
            if mon is not None:
                t = time.thread_time()
                mon.step(loss, grad_norm=float(gn))
                self.inside += time.thread_time() - t
        cpu, wall = time.thread_time() - c0, time.perf_counter() - t0
        self.blocks.append((cpu, wall, self.inside + (mon.spent if mon is not None else 0.0) - in0))


def quart(xs: list[float]) -> str:
    q = statistics.quantiles(xs, n=4)
    return f"{q[0]:+.2%} .. {q[2]:+.2%}"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--block", type=int, default=50, help="steps per block (a multiple of every=50 keeps sampling even)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(1)
    xs = torch.randn(100, BATCH, DIMS[0], generator=g)
    ys = torch.randint(0, DIMS[-1], (100, BATCH), generator=g)
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        plain = Loop(*build())
        m, o = build()
        mon = Loop(m, o, timed_monitor(m, o, Path(tmp)))
        for loop in (plain, mon, mon, plain):  # warm-up: allocator, kernels, first rule evaluation
            loop.run(xs, ys, args.block)
        plain.blocks.clear()
        mon.blocks.clear()
        for _ in range(args.rounds):
            for loop in (plain, mon, mon, plain):
                loop.run(xs, ys, args.block)
        mon.mon.close()
    load1 = os.getloadavg()[0]
    # per round: the two blocks of each loop summed (ABBA cancels a linear drift within the round)
    rounds = []
    for r in range(args.rounds):
        p = [a + b for a, b in zip(plain.blocks[2 * r], plain.blocks[2 * r + 1])]
        q = [a + b for a, b in zip(mon.blocks[2 * r], mon.blocks[2 * r + 1])]
        rounds.append((q[0] / p[0] - 1, q[1] / p[1] - 1, q[2] / p[0], p[0], q[0]))
    over_cpu = [x[0] for x in rounds]
    over_wall = [x[1] for x in rounds]
    share = [x[2] for x in rounds]
    per_step = 1000 / (2 * args.block)
    p_ms = statistics.median(x[3] for x in rounds) * per_step
    m_ms = statistics.median(x[4] for x in rounds) * per_step
    plain_cpu = [x[3] for x in rounds]
    spread = max(plain_cpu) / min(plain_cpu) - 1
    e2e = statistics.median(over_cpu)
    inside = statistics.median(share)
    print("## Live monitor overhead (bench_monitor.py)\n")
    print(f"`python benchmarks/bench_monitor.py --rounds {args.rounds} --block {args.block}`: MLP "
          f"{'-'.join(map(str, DIMS))} (ReLU), batch {BATCH}, Adam, clip 1.0, one torch thread. A plain and a monitored "
          f"copy of the loop in one process, alternating in blocks of {args.block} steps, ABBA, {args.rounds} rounds "
          f"({args.rounds * 2 * args.block} steps each). Monitor at default settings: every=50 (per-layer grad norms and "
          "update/weight ratios), global stats every step (loss, lr, grad norm, non-finite count, step time), RSS every "
          "10 steps, nan_origin=True (forward hooks + backward pre-hooks on the nodes of module outputs), records built, "
          "written as JSONL and fed to the online rules in batches (every 25 steps or 0.5 s, at once on urgent steps), "
          "rules over the last 2000 points within a 0.5 % wall-time budget, no TensorBoard, warnings "
          f"off. Machine: {os.cpu_count()} cores shared with other jobs, 1-min load average {load0:.2f} at the start, "
          f"{load1:.2f} at the end.\n")
    print("| loop | median step CPU (ms) |")
    print("|---|---|")
    print(f"| plain | {p_ms:.3f} |")
    print(f"| with monitor | {m_ms:.3f} |")
    print("\n| figure (median of per-round values) | median | quartiles |")
    print("|---|---|---|")
    print(f"| end-to-end overhead, CPU time | **{e2e:+.2%}** | {quart(over_cpu)} |")
    print(f"| end-to-end overhead, wall time | {statistics.median(over_wall):+.2%} | {quart(over_wall)} |")
    print(f"| time inside monitor code (step() + hooks) / plain step CPU | {inside:.2%} | {quart(share)} |")
    met = e2e < TARGET and inside < TARGET
    print(f"\nTarget (issue 6): overhead under {TARGET:.0%} of step time at default settings: "
          f"**{'met' if met else 'NOT met'}** (end to end {e2e:+.2%}, inside the monitor {inside:.2%}). "
          f"Spread of the plain loop's per-round CPU time: {spread:.0%} (other jobs on the machine); the per-round "
          "ratio compares blocks run seconds apart and so cancels most of it.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
