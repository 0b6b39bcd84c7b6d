"""Run every benchmark and write docs/benchmarks.md.

Each ``benchmarks/bench_*.py`` is a script that, run as ``python bench_x.py``, does its
measurements (generating its own data under ``benchmarks/data/``, which git ignores) and prints
a Markdown section (a ``## title``, what was measured, a table, the target and whether it was
met). This runner executes them one after another (never in parallel: timings would interfere)
and concatenates their sections.

    python benchmarks/run.py            # all
    python benchmarks/run.py megatron   # only bench_*megatron*.py
"""

from __future__ import annotations

import platform
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DOC = HERE.parent / "docs" / "benchmarks.md"


def main(argv: list[str]) -> int:
    wanted = argv[1:]
    scripts = sorted(p for p in HERE.glob("bench_*.py") if not wanted or any(w in p.stem for w in wanted))
    sections: list[str] = []
    failed = 0
    for script in scripts:
        print(f"== {script.name}", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
        took = time.perf_counter() - t0
        if proc.returncode != 0:
            failed += 1
            sections.append(f"## {script.stem}\n\nFAILED (exit {proc.returncode}):\n\n```\n{proc.stderr[-2000:]}\n```\n")
        else:
            sections.append(proc.stdout.strip() + "\n")
        print(f"   {took:.1f} s", file=sys.stderr)
    if wanted and DOC.exists():
        print("\n\n".join(sections))
        print("(partial run: docs/benchmarks.md not rewritten)", file=sys.stderr)
        return 1 if failed else 0
    header = (
        "# Benchmarks\n\n"
        "Produced by `make bench` (`python benchmarks/run.py`). Machine: "
        f"{platform.machine()}, {_cpus()} cores, Python {platform.python_version()}. "
        "Each section says how to reproduce it alone.\n\n"
    )
    DOC.write_text(header + "\n\n".join(sections), encoding="utf-8")
    print(f"wrote {DOC}", file=sys.stderr)
    return 1 if failed else 0


def _cpus() -> int:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
