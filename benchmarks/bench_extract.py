"""Benchmark: the format-agnostic extractor (``trainaudit parse --format text``) on generated logs of
mixed generic lines.

    python benchmarks/bench_extract.py [--runs 3] [--sizes 64M,1G] [--data DIR]

Logs are generated once into benchmarks/data/ (git-ignored; ``--data`` for another place) by
gen_generic_log.py. ``--format text`` makes the generic text reader read them (a sniffer would
hand a file with ``epoch N | step M | loss`` lines to the fairseq reader). Each measurement is a
whole process (interpreter start-up included), wall time, CPU time and peak RSS as in
bench_parse_megatron.py; the median of the runs is reported. Prints a Markdown section.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"
sys.path.insert(0, str(HERE))

from bench_parse_megatron import measure  # noqa: E402
from gen_generic_log import generate, parse_size  # noqa: E402

TARGET_MBS = 100.0
SPEED_TARGET_SIZE = "1G"


def ensure_log(size_text: str, data: Path) -> Path:
    data.mkdir(exist_ok=True)
    path = data / f"generic_{size_text}.log"
    if not path.exists() or path.stat().st_size < parse_size(size_text) * 0.98:
        tmp = path.with_suffix(".tmp")
        generate(tmp, parse_size(size_text), seed=0)
        tmp.replace(path)
    return path


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--sizes", default="64M,1G")
    ap.add_argument("--data", type=Path, default=DATA, help="where the generated logs go")
    a = ap.parse_args(argv)
    cmd = [sys.executable, "-m", "trainaudit", "parse", "-q", "--format", "text"]
    rows = []
    met: bool | None = None  # None: the target size was not run
    for size_text in a.sizes.split(","):
        log = ensure_log(size_text, a.data)
        mb = log.stat().st_size / 1e6
        subprocess.run(["cat", str(log)], stdout=subprocess.DEVNULL, check=True)  # warm the page cache
        runs = [measure([*cmd, str(log)]) for _ in range(a.runs)]
        wall = statistics.median(r["wall"] for r in runs)
        cpu = statistics.median(r["cpu"] for r in runs)
        rss = max(r["rss_kb"] for r in runs) / 1024
        mbs = mb / wall
        speed_ok = mbs >= TARGET_MBS if size_text == SPEED_TARGET_SIZE else None
        if speed_ok is not None:
            met = speed_ok
        speed = "-" if speed_ok is None else ("yes" if speed_ok else "no")
        with open(log, "rb") as f:
            n_lines = sum(1 for _ in f)
        rows.append(f"| {size_text} ({mb:.0f} MB, {n_lines / 1e6:.1f}M lines) | {a.runs} | {wall:.1f} s | {cpu:.1f} s "
                    f"| {mbs:.1f} MB/s | {rss:.0f} MB | {speed} |")
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    print("## Generic extractor (`trainaudit parse --format text mixed.log`)\n")
    print("Reproduce: `python benchmarks/bench_extract.py` (generates the logs into benchmarks/data/ once with "
          "`benchmarks/gen_generic_log.py`: interleaved `iter N loss X`, MXNet `Epoch[N] Batch[M] Speed:`, Caffe glog, "
          "`{'loss': ..}` dicts, JSON lines, tqdm bars, Markdown and whitespace tables, logging-module lines and "
          f"noise). Whole process, median of the runs, page cache warm, {cpus} cores.\n")
    print(f"| log | runs | wall | cpu | throughput | peak RSS | >= {TARGET_MBS:.0f} MB/s ({SPEED_TARGET_SIZE}) |")
    print("|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    print(f"\nTarget: the {SPEED_TARGET_SIZE} log at {TARGET_MBS:.0f} MB/s or more. "
          f"Overall: {'not measured' if met is None else 'met' if met else 'NOT met'}.")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
