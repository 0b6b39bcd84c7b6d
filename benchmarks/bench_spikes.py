"""TA102 (loss spikes) on 1,000,000-point losses, in process: CPU time of the rule's check alone.

    python benchmarks/bench_spikes.py

Three losses of a million logged steps: a falling loss with Gaussian noise, a lognormal per-batch loss
(a heavy right tail: many points stand far above their trailing median) and a falling lognormal one.
The heavy tails are the costly case: every jump is compared with the excursions of the run's earlier
points above their own medians. Prints a Markdown section (as ``benchmarks/run.py`` gathers them); target
under 1 s each.
"""

from __future__ import annotations

import time

import numpy as np

from trainaudit.model import Run, Series
from trainaudit.rules.base import Context

N = 1_000_000
TARGET = 1.0


def _losses() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    t = np.arange(N)
    return {"falling, Gaussian noise": 3 * np.exp(-t / 2e5) + 0.05 * rng.standard_normal(N) + 1,
            "lognormal per batch": rng.lognormal(0, 1, N),
            "falling, lognormal per batch": (3 * np.exp(-t / 2e5) + 0.5) * rng.lognormal(0, 0.5, N)}


def main() -> int:
    from trainaudit.rules.numerics import LossSpike

    steps = np.arange(N, dtype=np.int64)
    print("## Loss spikes on 1M-point losses (`bench_spikes.py`)\n")
    print("TA102's check alone, in process, CPU time (`time.process_time`).\n")
    print("| loss (1M points) | spikes found | CPU s |")
    print("|---|---|---|")
    worst = 0.0
    for name, x in _losses().items():
        run = Run(series={"loss": Series("loss", steps, x, np.zeros(N, dtype=np.int64), np.zeros(N, dtype=np.int16))})
        ctx = Context.of(run)
        t0 = time.process_time()
        hits = LossSpike().check(ctx)
        cpu = time.process_time() - t0
        found = len(hits[0].data["spike_steps"]) if hits else 0
        print(f"| {name} | {found} | {cpu:.2f} |")
        worst = max(worst, cpu)
    print(f"\nTarget: under {TARGET:g} s each: {'met' if worst < TARGET else 'not met'} (worst {worst:.2f} s).")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
