"""Benchmark: ``trainaudit diagnose`` on a 1M-step Megatron-format log with every metric, whole
process (start-up, ingest, rules, answer.json with quoted lines and sha256, plots), target < 10 s.

    python benchmarks/bench_diagnose.py

The log is written once to benchmarks/data/ (git-ignored) with numpy: a noisy decaying loss
with warm-up + cosine lr, grad norm, loss scale, step time, memory, and a grad-norm + loss spike
at iteration 600000 followed by an lr jump and divergence at 800000, so every rule does real work
and the report has findings to quote and plot.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"
N = 1_000_000
TARGET_S = 10.0


def make_log(path: Path) -> None:
    rng = np.random.default_rng(0)
    it = np.arange(1, N + 1)
    warm = 2000
    lr = np.where(it < warm, 3e-4 * it / warm, 3e-5 + 0.5 * (3e-4 - 3e-5) * (1 + np.cos(np.pi * (it - warm) / (N - warm))))
    lr[800_000:] *= 20  # the injected lr jump
    loss = 2.0 + 8.0 * np.exp(-it / 20_000) + 0.03 * rng.standard_normal(N)
    loss[599_999] *= 3.0  # a one-step spike
    loss[800_000:] += np.linspace(0, 4, N - 800_000)  # divergence after the jump
    gn = 1.0 + 0.1 * rng.standard_normal(N) ** 2
    gn[599_998] = 40.0
    tm = 410 + 5 * rng.standard_normal(N)
    mem = 20_000 + 10 * rng.standard_normal(N)
    lines = np.char.add(np.char.add(" iteration ", np.char.rjust(it.astype(str), 8)), f"/ {N} |")
    with path.open("w", encoding="utf-8") as f:
        f.write("[before the start of training step] datetime: 2025-01-01 00:00:00\n")
        step = 100_000
        for lo in range(0, N, step):
            hi = min(N, lo + step)
            rows = [
                f"{lines[i]} consumed samples: {it[i] * 512:12d} | elapsed time per iteration (ms): {tm[i]:.1f} | "
                f"learning rate: {lr[i]:.6E} | global batch size:   512 | lm loss: {loss[i]:.6E} | loss scale: 1.0 | "
                f"grad norm: {gn[i]:.3f} | number of skipped iterations:   0 | number of nan iterations:   0 |\n"
                for i in range(lo, hi)]
            f.writelines(rows)
            f.write(f"[Rank 0] (after {hi} iterations) memory (MB) | allocated: {mem[hi - 1]:.1f} | "
                    f"max allocated: {mem[hi - 1] + 900:.1f} | reserved: 24000.0 | max reserved: 24000.0\n")
        f.write("[after training is done] datetime: 2025-01-09 00:00:00\n")


def main() -> int:
    DATA.mkdir(exist_ok=True)
    log = DATA / "diagnose_1m_megatron.log"
    if not log.exists() or log.stat().st_size < 100_000_000:
        make_log(log)
    out = DATA / "diagnose-out"
    times = []
    answer = {}
    for _ in range(2):
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "trainaudit", "diagnose", str(log), "-o", str(out), "--quiet",
                               "--fail-on", "never"],  # the run is unhealthy on purpose: exit 1 by default
                              capture_output=True, text=True)
        times.append(time.perf_counter() - t0)
        if proc.returncode != 0:
            print(proc.stderr, file=sys.stderr)
            return 1
        answer = json.loads((out / "answer.json").read_text())
    fa = answer["final_answer"]
    best = min(times)
    size_mb = log.stat().st_size / 1e6
    rules = sorted({f["rule"] for f in answer["findings"]})
    print("## diagnose: 1M-step run, whole process\n")
    print(f"`python benchmarks/bench_diagnose.py`: `trainaudit diagnose` (new process: start-up, ingest, all rules, "
          f"answer.json with quoted lines and sha256, answer.md, plots) on a generated Megatron-format log of "
          f"{N:,} iterations ({size_mb:.0f} MB; lm loss, lr, grad norm, loss scale, step time, skipped/nan counters, "
          "memory) with an injected spike at 600000 and an lr jump + divergence at 800001.\n")
    print("| run | seconds |\n|---|---|")
    for k, t in enumerate(times, 1):
        print(f"| {k} | {t:.2f} |")
    print(f"\nResult: verdict `{fa['verdict']}`, category `{fa['category']}`, first bad step {fa['first_bad_step']}, "
          f"rules fired {', '.join(rules)}; validation passed: {answer['validation']['all_passed']}.\n")
    print(f"Target: under {TARGET_S:.0f} s. {'Met' if best < TARGET_S else 'NOT met'} (best {best:.2f} s).")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
