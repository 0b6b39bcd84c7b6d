"""Benchmark: ``trainaudit diagnose`` end to end on generated logs of every common format, and on a
directory of per-rank logs, against ``grep -c`` on the same file.

    python benchmarks/bench_formats.py [--sizes 10M,100M,1G] [--formats hf,keras,...] [--runs 1]
                                       [--ranks 512] [--rank-size 10M] [--fail-from 0.8] [--data DIR]

Logs are generated once into benchmarks/data/ (git-ignored; ``--data`` for another place) by
gen_format_logs.py: HF Trainer stdout (tqdm redraws and log dicts), Lightning and Keras progress
bars, DeepSpeed inside an HF log, torchtitan, torchrun ``[rankN]:`` lines of 8 ranks, Megatron-LM
and the generic mix; each run fails from ``--fail-from`` of the file on (NaN, then a traceback).
Each measurement is a whole process (interpreter start-up, ingest, rules, answer, plots): wall
time, CPU time (user + system of the process and its workers) and peak RSS (the largest process),
as bench_parse_megatron.py measures them; the median of the runs. ``grep -c loss`` on the same
file is measured the same way; the ratio is diagnose's wall time over grep's. The rank directory
(``--ranks`` logs of ``--rank-size``, rank ``ranks // 3`` failing first, the others timing out in
NCCL after it) is diagnosed once; the answer must name the rank that failed first.
Prints a Markdown section.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"
sys.path.insert(0, str(HERE))

from bench_parse_megatron import measure  # noqa: E402
from gen_format_logs import NAMES, generate, parse_size, rank_logs  # noqa: E402

TARGETS = {"100M": 50.0, "1G": 100.0}  # MB/s of diagnose, end to end
TARGET_SECONDS = {"10M": 1.0}  # wall seconds of diagnose, end to end
TARGET_RSS_MB = 300.0
TARGET_RANKS_S = 90.0
FORMATS = ["hf", "lightning", "keras", "deepspeed", "megatron", "torchtitan", "torchrun", "generic"]


def ensure_log(fmt: str, size_text: str, fail_from: float, data: Path) -> Path:
    data.mkdir(exist_ok=True)
    path = data / f"fmt_{fmt}_{size_text}_fail{fail_from:g}.log"
    if not path.exists() or path.stat().st_size < parse_size(size_text) * 0.9:
        tmp = path.with_suffix(".tmp")
        generate(fmt, tmp, parse_size(size_text), seed=0, fail_from=fail_from)
        tmp.replace(path)
    return path


def ensure_ranks(n: int, size_text: str, data: Path) -> Path:
    path = data / f"ranks_{n}x{size_text}"
    done = path / ".complete"
    if not done.exists():
        rank_logs(path, parse_size(size_text), n, n // 3)
        done.write_text("")
    return path


def diagnose(target: Path, out: Path) -> dict:
    return measure([sys.executable, "-m", "trainaudit", "diagnose", str(target), "-o", str(out), "--quiet",
                    "--fail-on", "never"])


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="10M,100M,1G")
    ap.add_argument("--formats", default=",".join(FORMATS), help=f"some of {', '.join(NAMES)}")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--fail-from", type=float, default=0.8)
    ap.add_argument("--ranks", type=int, default=512, help="per-rank logs in the directory (0: none)")
    ap.add_argument("--rank-size", default="10M")
    ap.add_argument("--data", type=Path, default=DATA, help="where the generated logs go")
    a = ap.parse_args(argv)
    out = a.data / "formats-out"
    # An installed package runs from compiled bytecode (pip compiles it): compile it once here, and
    # let the measured processes write it, so that no run pays for compiling ~200 modules.
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    subprocess.run([sys.executable, "-c", "import compileall, pathlib, trainaudit; "
                    "compileall.compile_dir(pathlib.Path(trainaudit.__file__).parent, quiet=1)"], check=True)
    rows = []
    missed: list[str] = []
    for size_text in a.sizes.split(","):
        target = TARGETS.get(size_text)
        seconds = TARGET_SECONDS.get(size_text)
        for fmt in a.formats.split(","):
            log = ensure_log(fmt, size_text, a.fail_from, a.data)
            mb = log.stat().st_size / 1e6
            subprocess.run(["cat", str(log)], stdout=subprocess.DEVNULL, check=True)  # warm the page cache
            runs = [diagnose(log, out) for _ in range(a.runs)]
            greps = [measure(["grep", "-c", "loss", str(log)]) for _ in range(3)]
            answer = json.loads((out / "answer.json").read_text(encoding="utf-8"))
            wall = statistics.median(r["wall"] for r in runs)
            cpu = statistics.median(r["cpu"] for r in runs)
            rss = max(r["rss_kb"] for r in runs) / 1024
            grep = statistics.median(r["wall"] for r in greps)
            mbs = mb / wall
            ok = (target is None or mbs >= target) and (seconds is None or wall < seconds)
            if not ok or rss > TARGET_RSS_MB:
                missed.append(f"{fmt} {size_text}")
            fa = answer["final_answer"]
            rows.append(f"| {fmt} | {size_text} ({mb:.0f} MB) | {wall:.1f} s | {cpu:.1f} s | {mbs:.1f} MB/s "
                        f"| {mb / cpu:.1f} MB/s | {wall / grep:.0f}x | {rss:.0f} MB | {fa['verdict']} / {fa['category']} "
                        f"| {'-' if target is None and seconds is None else 'yes' if ok else 'no'} |")
            print(rows[-1], file=sys.stderr, flush=True)
    rank_row = ""
    if a.ranks:
        d = ensure_ranks(a.ranks, a.rank_size, a.data)
        total = sum(p.stat().st_size for p in d.glob("*.log")) / 1e6
        subprocess.run(f"cat {d}/*.log > /dev/null", shell=True, check=True)
        r = diagnose(d, out)
        grep = measure(["grep", "-rc", "loss", str(d)])
        answer = json.loads((out / "answer.json").read_text(encoding="utf-8"))
        root = a.ranks // 3
        named = any(f"rank {root} failed first" in f.get("message", "") for f in answer.get("findings", []))
        ok = r["wall"] < TARGET_RANKS_S and named and r["rss_kb"] / 1024 <= TARGET_RSS_MB
        if not ok:
            missed.append(f"{a.ranks} ranks")
        rank_row = (f"| {a.ranks} x {a.rank_size} ({total:.0f} MB) | {r['wall']:.1f} s | {r['cpu']:.1f} s "
                    f"| {total / r['wall']:.1f} MB/s | {r['wall'] / grep['wall']:.0f}x | {r['rss_kb'] / 1024:.0f} MB "
                    f"| {'yes' if named else 'no'} (rank {root}) | {'yes' if ok else 'no'} |")
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print("## diagnose on every format, end to end (bench_formats.py)\n")
    print(f"`python benchmarks/bench_formats.py --sizes {a.sizes} --runs {a.runs} --ranks {a.ranks}`: "
          "`trainaudit diagnose` (whole process: start-up, ingest, rules, answer, plots) on logs generated by "
          f"`benchmarks/gen_format_logs.py`, each failing from {a.fail_from:g} of the file on (NaN, then a "
          f"traceback). {cpus} cores, 1-minute load average {load:.1f} at the end. MB/s (wall) is the target's; "
          "MB/s (CPU) is what the same work costs without the other jobs' load; x grep: diagnose's wall time "
          "over `grep -c loss` on the same file.\n")
    print("| format | log | wall | CPU | MB/s (wall) | MB/s (CPU) | x grep | peak RSS | answer | target |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    if rank_row:
        print("\n| rank directory | wall | CPU | MB/s | x grep | peak RSS | names the first rank | target |")
        print("|---|---|---|---|---|---|---|---|")
        print(rank_row)
    print(f"\nTargets: {', '.join(f'{s}: {t:.0f} MB/s' for s, t in TARGETS.items())} (wall), "
          f"{', '.join(f'{s}: under {t:g} s' for s, t in TARGET_SECONDS.items())} (wall), peak RSS <= "
          f"{TARGET_RSS_MB:.0f} MB, the rank directory in under {TARGET_RANKS_S:.0f} s naming the first rank. "
          + ("All met." if not missed else f"NOT met: {', '.join(missed)}."))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
