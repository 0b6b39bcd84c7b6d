"""The whole ``trainaudit audit`` of the bundled example (target: under 5 s, whole process, median).

The example (examples/make_audit_demo.py: a Megatron-like git repository with a container bump, a
model-code change, a golden refresh and a test moved to broken, plus the Megatron logs and CI job
log of a passing and a failing run) is built once under benchmarks/data/ (gitignored). The timed
command is the real CLI in a fresh process: staging, test-case/golden discovery at --bad, the
golden gate, the diagnosis of both runs, the history trace with --find-fix, answer.json/answer.md
and the PNG plots. No downloads are involved.

    python benchmarks/bench_audit.py
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE / "data" / "audit-demo"
RUNS = 5
TARGET_S = 5.0


def main() -> None:
    sys.path.insert(0, str(HERE.parent / "examples"))
    import make_audit_demo as demo

    t0 = time.perf_counter()
    DATA.mkdir(parents=True, exist_ok=True)
    shas = demo.build_repo(DATA / "repo")
    demo.write_artifacts(DATA / "artifacts")
    build = time.perf_counter() - t0
    cmd = [sys.executable, "-m", "trainaudit", "audit", "artifacts/failing", "--passing", "artifacts/passing",
           "--repo", "repo", "--good", shas["good"], "--bad", shas["bad"], "--find-fix", "-o", "report", "--quiet",
           "--fail-on", "never"]  # the example fails on purpose: exit 1 by default
    times: list[float] = []
    for _ in range(RUNS):
        t = time.perf_counter()
        subprocess.run(cmd, cwd=DATA, check=True, capture_output=True)
        times.append(time.perf_counter() - t)
    answer = json.loads((DATA / "report" / "answer.json").read_text())
    fa = answer["final_answer"]
    med = statistics.median(times)
    print("## audit: the bundled example, end to end\n")
    print("`trainaudit audit` on the bundled example (examples/make_audit_demo.py), whole process (interpreter "
          f"start, imports, git, gate, diagnosis of both runs, history with --find-fix, report and plots), "
          f"{RUNS} runs. Building the example took {build:.2f} s (not timed).\n")
    print("| runs | median (s) | min (s) | max (s) | verdict | commit named | validation |")
    print("|---|---|---|---|---|---|---|")
    top = answer["commits"][0] if answer["commits"] else {"sha": "-", "role": "-"}
    print(f"| {RUNS} | {med:.2f} | {min(times):.2f} | {max(times):.2f} | {fa['verdict']} | "
          f"`{top['sha'][:10]}` ({top['role']}) | {'passed' if answer['validation']['all_passed'] else 'FAILED'} |")
    print(f"\nTarget: under {TARGET_S:.0f} s (median): **{'met' if med < TARGET_S else 'NOT met'}**.")


if __name__ == "__main__":
    main()
