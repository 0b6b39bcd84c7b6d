"""Overhead of ``trainaudit.monitor`` at default settings on a CPU training loop.

    python benchmarks/bench_monitor.py                  # prints a Markdown section
    python benchmarks/bench_monitor.py --processes 5 --rounds 300

The loop: MLP 256-512-512-10 with ReLU, batch 128, Adam, cross-entropy, gradient clipping,
``loss.item()`` each step as any loop that logs does, one torch thread. One model and one
monitor per process; the monitor is attached for "monitored" blocks and detached
(``Monitor.paused()``) for "plain" blocks, ABBA within each round (plain, monitored, monitored,
plain) of ``--block`` steps each, so that both halves run the same model, the same memory and
the same machine load seconds apart.

Figures:
- end-to-end overhead: summed CPU time of this thread over the monitored blocks / over the
  plain blocks - 1, with the monitor as users get it. Every monitor cost is in it: hooks, the
  memory they keep alive, per-step statistics, JSONL, per-layer sampling, online rules, plus
  detaching and re-attaching the hooks around each plain block (not a cost of a real run: the
  figure errs high);
- time inside monitor code: wall time inside ``Monitor.step()`` and the monitor's hooks
  (``perf_counter``, ~0.1 us per reading) over the plain blocks' CPU time, measured in a second,
  shorter pass with a timed subclass of the monitor (its wrappers would add to the first figure).
Each process is one sample: the heap layout, and so the allocator's page faults and cache
behaviour, differs between processes and shifts a loop's speed by a few percent either way;
the median over processes is the result, the range is printed beside it. The rules' budget is a
share of wall time and plain blocks double the wall time between monitored steps, so rules run
about twice as often per monitored step here as in a run of their own (errs high too).
Target: 3 %.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

TARGET = 0.03
BATCH, DIMS = 128, (256, 512, 512, 10)


def child(rounds: int, block: int, options: dict[str, Any]) -> dict[str, float]:
    """One process: ABBA rounds on one model; returns summed CPU seconds and inside seconds."""
    import torch
    from torch import nn

    from trainaudit.monitor.core import Monitor
    from trainaudit.monitor.origin import NanOrigin

    torch.set_num_threads(1)
    torch.manual_seed(0)
    d = DIMS
    model = nn.Sequential(nn.Linear(d[0], d[1]), nn.ReLU(), nn.Linear(d[1], d[2]), nn.ReLU(), nn.Linear(d[2], d[3]))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(1)
    xs = torch.randn(100, BATCH, d[0], generator=g)
    ys = torch.randint(0, d[-1], (100, BATCH), generator=g)

    def timed(cls: type, names: tuple[str, ...]) -> type:
        """``cls`` with the wall time of the methods ``names`` (the hooks) added up in ``spent``."""

        def wrap(name: str) -> Any:
            method = getattr(cls, name)

            def run(self: Any, *a: Any) -> Any:
                t = time.perf_counter_ns()
                try:
                    return method(self, *a)
                finally:
                    self.spent += time.perf_counter_ns() - t

            return run

        return type("Timed" + cls.__name__, (cls,), {"spent": 0, **{n: wrap(n) for n in names}})

    # step() is timed by the loop; the hooks here
    TimedOrigin = timed(NanOrigin, ("_on_pre",))
    Timed = timed(Monitor, ("_on_opt_pre", "_on_opt_post"))
    Timed.origin_class = TimedOrigin

    step_no = 0

    def run(mon: Monitor | None, steps: int) -> tuple[float, int]:
        nonlocal step_no
        inside = 0
        c0 = time.thread_time()
        for _ in range(steps):
            j = step_no % len(xs)
            step_no += 1
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(xs[j]), ys[j])
            loss.backward()
            gn = nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            loss.item()
            if mon is not None:
                t = time.perf_counter_ns()
                mon.step(loss, grad_norm=gn)
                inside += time.perf_counter_ns() - t
        return time.thread_time() - c0, inside

    def spent(mon: Monitor) -> int:
        return getattr(mon, "spent", 0) + getattr(mon.origin_finder, "spent", 0)

    def abba(mon: Monitor, n: int) -> dict[str, Any]:
        def plain_block() -> tuple[float, float]:
            """(plain CPU seconds, CPU seconds of detaching and re-attaching the hooks)"""
            c = time.thread_time()
            pause = mon.paused()
            pause.__enter__()
            cost = time.thread_time() - c
            cpu, _ = run(None, block)
            c = time.thread_time()
            pause.__exit__(None, None, None)
            return cpu, cost + time.thread_time() - c

        tot: dict[str, Any] = {"plain": 0.0, "monitored": 0.0, "inside_ns": 0}
        per_round: list[float] = []
        for r in range(n + 3):  # 3 warm-up rounds: allocator, kernels, first rule evaluation
            spent0 = spent(mon)
            p1, c1 = plain_block()
            m1, i1 = run(mon, block)
            m2, i2 = run(mon, block)
            p2, c2 = plain_block()
            if r < 3:
                continue
            plain, monitored = p1 + p2, m1 + m2 + c1 + c2  # the pauses count as monitor cost
            tot["plain"] += plain
            tot["monitored"] += monitored
            tot["inside_ns"] += i1 + i2 + spent(mon) - spent0
            per_round.append(monitored / plain - 1)
        mon.close()
        tot["median_round"] = statistics.median(per_round)
        return tot

    with tempfile.TemporaryDirectory() as tmp:
        # end to end with the monitor as users get it (default settings, warnings off); then
        # the time inside its code with a timed subclass, whose extra frames stay out of the former
        e2e = abba(Monitor(model, opt, Path(tmp) / "e2e", warn=None, **options), rounds)
        inside = abba(Timed(model, opt, Path(tmp) / "inside", warn=None, **options), max(20, rounds // 3))
    return {"plain": e2e["plain"], "monitored": e2e["monitored"], "median_round": e2e["median_round"],
            "inside_share": inside["inside_ns"] / 1e9 / inside["plain"], "steps_per_half": rounds * 2 * block}


def measure(options: str, processes: int, rounds: int, block: int) -> list[dict[str, float]]:
    """One child process per sample, one after the other: two at once would share the cores."""
    results = []
    for _ in range(processes):
        out = subprocess.run([sys.executable, __file__, "--child", "--rounds", str(rounds), "--block", str(block),
                              "--options", options], check=True, capture_output=True, text=True).stdout
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results


def medians(results: list[dict[str, float]]) -> tuple[list[float], list[float], str]:
    e2e = [r["monitored"] / r["plain"] - 1 for r in results]
    inside = [r["inside_share"] for r in results]
    text = (f"end to end **{statistics.median(e2e):+.2%}** (range {min(e2e):+.2%} .. {max(e2e):+.2%}), inside the "
            f"monitor **{statistics.median(inside):.2%}** (range {min(inside):.2%} .. {max(inside):.2%})")
    return e2e, inside, text


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--processes", type=int, default=3, help="independent processes (samples)")
    ap.add_argument("--rounds", type=int, default=150, help="ABBA rounds per process")
    ap.add_argument("--block", type=int, default=10, help="steps per block")
    ap.add_argument("--options", default="{}", help='monitor options other than the defaults, JSON: \'{"nan_origin": false}\'')
    ap.add_argument("--no-breakdown", action="store_true", help="skip the second pass with nan_origin=False")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.rounds, args.block, json.loads(args.options))))
        return 0
    defaults = not json.loads(args.options)
    load0 = os.getloadavg()[0]
    results = measure(args.options, args.processes, args.rounds, args.block)
    nonan = None
    if defaults and not args.no_breakdown:
        nonan = measure('{"nan_origin": false}', args.processes, args.rounds, args.block)
    load1 = os.getloadavg()[0]
    e2e, inside, text = medians(results)
    steps = results[0]["steps_per_half"]
    print("## Live monitor overhead (bench_monitor.py)\n")
    opt_text = "" if defaults else f" --options '{args.options}'"
    print(f"`python benchmarks/bench_monitor.py --processes {args.processes} --rounds {args.rounds} --block "
          f"{args.block}{opt_text}`: MLP {'-'.join(map(str, DIMS))} (ReLU), batch {BATCH}, Adam, clip 1.0, one torch thread. "
          f"In each of {args.processes} processes, one model alternates between plain blocks (monitor detached with "
          f"`Monitor.paused()`) and monitored blocks of {args.block} steps, ABBA, {args.rounds} rounds ({steps} steps "
          f"each way). Monitor at {'default settings' if defaults else 'default settings except ' + args.options}: "
          "every=100 (per-layer grad norms and update/weight ratios), global "
          "stats every step (loss, lr, grad norm, non-finite count, step time), RSS every 10 steps, nan_origin=True "
          "(a forward pre-hook on the model keeps the inputs and RNG state; the optimizer's step pre-hook checks the "
          "gradients of the 1-D parameters before the update; a step is replayed only when they are non-finite), "
          "records written as JSONL and fed to the online rules in batches, rules over the last 2000 points within "
          "a 0.1 % time budget, no TensorBoard, warnings off. Machine: "
          f"{os.cpu_count()} cores shared with other jobs, 1-min load average {load0:.2f} at the start, {load1:.2f} "
          "at the end.\n")
    print("| process | plain step CPU (ms) | end-to-end overhead (CPU, sum) | median of per-round ratios | "
          "inside monitor code |")
    print("|---|---|---|---|---|")
    for i, (r, e, s) in enumerate(zip(results, e2e, inside), 1):
        print(f"| {i} | {r['plain'] / steps * 1000:.3f} | {e:+.2%} | {r['median_round']:+.2%} | {s:.2%} |")
    print(f"\nMedian over processes: {text}.\n")
    if nonan is not None:
        print(f"The same with `nan_origin=False` (no model hook, no gradient check before the update): "
              f"{medians(nonan)[2]}; the rest of the default figure is the cost of being able to locate the first "
              "NaN/Inf (docs/monitor.md).\n")
    if defaults:
        met = statistics.median(e2e) < TARGET and statistics.median(inside) < TARGET
        print(f"Target: overhead under {TARGET:.0%} of step time at default settings: "
              f"**{'met' if met else 'NOT met'}**.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
