"""TensorBoard scalar reading: trainaudit's reader vs tensorboard's EventAccumulator.

    python benchmarks/bench_tensorboard.py            # prints a Markdown section
    python benchmarks/bench_tensorboard.py --runs 7

The event file (100k steps x 5 Megatron-style tags, written by torch's SummaryWriter) is
generated once and cached under benchmarks/data/. Each measurement is a whole child process
(interpreter start, imports, reading every scalar into memory), the two readers alternating,
and the median of the runs is reported. EventAccumulator is used as Megatron-LM's CI uses it:
``size_guidance={SCALARS: 0}`` (keep every point), ``Reload()``, then ``Scalars(tag)`` per tag.
Both children print the number of values and their sum, which must agree.
"""

from __future__ import annotations

import argparse
import math
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE / "data" / "tensorboard_100k"
STEPS = 100_000
TAGS = ("lm loss", "iteration-time", "mem-allocated-bytes", "num-zeros", "grad-norm")
TARGET = 5.0


def generate() -> Path:
    done = DATA / "COMPLETE"
    if done.exists():
        return next(DATA.glob("events.out.tfevents.*"))
    import shutil

    from torch.utils.tensorboard import SummaryWriter

    shutil.rmtree(DATA, ignore_errors=True)
    DATA.mkdir(parents=True)
    w = SummaryWriter(str(DATA), max_queue=1000, flush_secs=3600)
    for step in range(1, STEPS + 1):
        loss = 10.0 * math.exp(-step / 20000) + 0.01 * math.sin(step)
        w.add_scalar("lm loss", loss if step % 25000 else math.nan, step)
        w.add_scalar("iteration-time", 0.25 + 0.001 * (step % 7), step)
        w.add_scalar("mem-allocated-bytes", 2.0e10 + 1e6 * (step % 100), step)
        w.add_scalar("num-zeros", float(step % 3), step)
        w.add_scalar("grad-norm", 1.0 + 0.1 * math.cos(step), step)
    w.close()
    done.write_text(f"{STEPS} steps x {len(TAGS)} tags\n")
    return next(DATA.glob("events.out.tfevents.*"))


def child_ours(path: str) -> None:
    from trainaudit.ingest import load_run

    run, problems = load_run([path])
    assert not problems, problems
    n = sum(len(s) for s in run.series.values())
    total = sum(float(_nansum(s.values)) for s in run.series.values())
    print(n, repr(total))


def child_ea(path: str) -> None:
    from tensorboard.backend.event_processing.event_accumulator import SCALARS, EventAccumulator

    acc = EventAccumulator(path, size_guidance={SCALARS: 0})
    acc.Reload()
    n = 0
    total = 0.0
    for tag in acc.Tags()["scalars"]:
        events = acc.Scalars(tag)
        n += len(events)
        total += math.fsum(e.value for e in events if not math.isnan(e.value))
    print(n, repr(total))


def _nansum(values):  # type: ignore[no-untyped-def]
    import numpy as np

    return math.fsum(values[~np.isnan(values)].tolist())


def _time(which: str, path: Path) -> tuple[float, float, str]:
    """Wall and CPU (user + sys, from the OS accounting of the finished child) seconds."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, __file__, f"--child-{which}", str(path)], capture_output=True, text=True)
    took = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{which} child failed:\n{proc.stderr[-2000:]}")
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    return took, cpu, proc.stdout.strip()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--child-ours")
    ap.add_argument("--child-ea")
    args = ap.parse_args()
    if args.child_ours:
        child_ours(args.child_ours)
        return 0
    if args.child_ea:
        child_ea(args.child_ea)
        return 0
    t0 = time.perf_counter()
    path = generate()
    gen_s = time.perf_counter() - t0
    ours: list[float] = []
    theirs: list[float] = []
    cpu_ours: list[float] = []
    cpu_theirs: list[float] = []
    out_ours = out_ea = ""
    _time("ours", path)  # warm the page cache and .pyc files
    for _ in range(args.runs):
        t, c, out_ours = _time("ours", path)
        ours.append(t)
        cpu_ours.append(c)
        t, c, out_ea = _time("ea", path)
        theirs.append(t)
        cpu_theirs.append(c)
    n_ours, sum_ours = out_ours.split()
    n_ea, sum_ea = out_ea.split()
    same = n_ours == n_ea and math.isclose(float(sum_ours), float(sum_ea), rel_tol=1e-12)
    m_ours, m_ea = statistics.median(ours), statistics.median(theirs)
    ratio = m_ea / m_ours
    c_ours, c_ea = statistics.median(cpu_ours), statistics.median(cpu_theirs)
    size_mb = path.stat().st_size / 1e6
    print("## TensorBoard scalar reading\n")
    print(f"Reproduce: `python benchmarks/bench_tensorboard.py --runs {args.runs}`. One event file written by "
          f"`torch.utils.tensorboard.SummaryWriter`: {STEPS:,} steps x {len(TAGS)} tags "
          f"({', '.join(TAGS)}), {int(n_ours):,} scalars, {size_mb:.1f} MB "
          f"(generated once{'' if gen_s < 1 else f' in {gen_s:.0f} s'}, cached in `benchmarks/data/`). "
          "Each time is a whole child process (start-up, imports, reading every scalar into memory; "
          "ours: `trainaudit.ingest.load_run`, both CRCs verified; tensorboard: "
          "`EventAccumulator(path, size_guidance={SCALARS: 0})` + `Reload()` + `Scalars(tag)` for every tag), "
          f"the two alternating; median of {args.runs} runs. The machine is shared: CPU time "
          "(user + sys of the child) is less disturbed by other load than wall time.\n")
    print("| reader | median wall s | wall min-max s | median CPU s |")
    print("|---|---|---|---|")
    print(f"| trainaudit tensorboard reader | {m_ours:.2f} | {min(ours):.2f}-{max(ours):.2f} | {c_ours:.2f} |")
    print(f"| tensorboard EventAccumulator | {m_ea:.2f} | {min(theirs):.2f}-{max(theirs):.2f} | {c_ea:.2f} |")
    print(f"\nSpeed-up (median wall): **{ratio:.1f}x**; on CPU time {c_ea / c_ours:.1f}x "
          f"(target >= {TARGET:.0f}x: {'met' if ratio >= TARGET else 'NOT met'}). "
          f"Same values read by both: {'yes' if same else 'NO'} ({n_ours} vs {n_ea} values, sums {sum_ours} vs {sum_ea}).")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
