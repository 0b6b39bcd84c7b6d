"""History tracing over a generated 50k-commit repository (target: under 5 s, whole process).

The repository is generated once with `git fast-import` under benchmarks/data/ (gitignored):
50 000 commits touching model code, docs, CI config and golden files in a realistic mix. The
timed command traces the last 1 000 and the whole 50 000 commits between --good and --bad:

    python benchmarks/bench_history.py
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"
REPO = DATA / "history-50k.git"
N = 50_000
RUNS = 3


def generate() -> None:
    if (REPO / "HEAD").exists():
        return
    DATA.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "-q", "--bare", str(REPO)], check=True)
    kinds = ["megatron/core/transformer/attention.py", "megatron/training/training.py", "docs/index.md",
             "tests/test_utils/recipes/gpt.yaml", "docker/Dockerfile.ci",
             "tests/functional_tests/test_cases/gpt/case1/golden_values_dev_dgx_h100.json",
             "tests/functional_tests/python_test_utils/common.py", "README.md"]
    lines: list[bytes] = []
    t = 1_700_000_000
    for i in range(1, N + 1):
        path = kinds[(i * 7) % len(kinds)]
        body = f"# revision {i}\n".encode()
        msg = f"change {i}: touch {path}\n".encode()
        lines.append(b"commit refs/heads/main\n")
        lines.append(f"mark :{i}\n".encode())
        lines.append(f"committer dev <dev@example.org> {t + i * 60} +0000\n".encode())
        lines.append(f"data {len(msg)}\n".encode() + msg)
        if i > 1:
            lines.append(f"from :{i - 1}\n".encode())
        lines.append(f"M 100644 inline {path}\n".encode())
        lines.append(f"data {len(body)}\n".encode() + body + b"\n")
    subprocess.run(["git", "-C", str(REPO), "fast-import", "--quiet"], input=b"".join(lines), check=True)
    subprocess.run(["git", "-C", str(REPO), "tag", "good-1k", "main~1000"], check=True)
    root = subprocess.run(["git", "-C", str(REPO), "rev-list", "--max-parents=0", "main"], check=True,
                          capture_output=True, text=True).stdout.strip()
    subprocess.run(["git", "-C", str(REPO), "tag", "root", root], check=True)


SCRIPT = """
import sys
from trainaudit.history.classify import FailureShape
from trainaudit.history.trace import trace
t = trace(sys.argv[1], sys.argv[2], "main", FailureShape(kind="real_regression",
          test_case="tests/functional_tests/test_cases/gpt/case1"), max_commits=int(sys.argv[3]))
print(t.n_commits, len(t.commits), t.truncated)
"""


def timed(good: str, max_commits: int) -> tuple[float, str]:
    times = []
    out = ""
    for _ in range(RUNS):
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-c", SCRIPT, str(REPO), good, str(max_commits)], check=True,
                              capture_output=True, text=True)
        times.append(time.perf_counter() - t0)
        out = proc.stdout.strip()
    return statistics.median(times), out


def main() -> None:
    t0 = time.perf_counter()
    generate()
    gen = time.perf_counter() - t0
    rows = []
    for good, cap, label in (("good-1k", 5000, "1 000 commits (good = main~1000)"),
                             ("root", 50_000, "all 50 000 commits (good = root)")):
        secs, out = timed(good, cap)
        n, classified, _truncated = out.split()
        rows.append(f"| {label} | {n} | {classified} | {secs:.2f} s | {'yes' if secs < 5 else 'NO'} |")
    print("## History tracing (50k-commit repository)\n")
    print(f"Repository generated with `git fast-import` ({N} commits, {gen:.1f} s, cached in benchmarks/data/). "
          f"Whole-process median of {RUNS} runs of `trace()` (git log with files, classification, ranking). "
          "Reproduce: `python benchmarks/bench_history.py`.\n")
    print("| range | commits listed | commits classified | time | under 5 s |")
    print("|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
