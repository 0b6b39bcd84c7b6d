"""`make demo`: run trainaudit on the bundled examples and say where the reports are.

1. `trainaudit diagnose examples/nan-after-lr-jump` : a real tiny training run (made by
   `python -m synth`) whose learning rate jumps 1000x at step 120 and goes NaN.
2. `trainaudit audit ...` on a CI failure built by `examples/make_audit_demo.py`: a small git
   repository (model-code change, container bump, golden refresh, a test moved to broken) and the
   artifacts of a passing and a failing CI run; the script prints the audit command, the verdict
   and where answer.md is.

Each command is printed before it runs, so it can be copied.
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def run(cmd: list[str], cwd: Path | None = None) -> int:
    shown = ["trainaudit", *cmd[3:]] if cmd[1:3] == ["-m", "trainaudit"] else cmd
    print(f"\n$ {shlex.join(shown)}", flush=True)
    return subprocess.run(cmd, cwd=cwd).returncode


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", default="trainaudit-out/demo", help="where the reports go")
    args = ap.parse_args()
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    ta = [sys.executable, "-m", "trainaudit"]
    rc = run([*ta, "diagnose", "examples/nan-after-lr-jump", "-o", str(out / "diagnose")], cwd=HERE.parent)
    if rc not in (0, 1):
        return rc
    print(f"\ndiagnose report: {out / 'diagnose' / 'answer.md'}")
    audit_dir = out / "audit"
    rc = run([sys.executable, str(HERE / "make_audit_demo.py"), "--out", str(audit_dir), "--run"], cwd=HERE.parent)
    if rc not in (0, 1):
        return rc
    return 0


if __name__ == "__main__":
    sys.exit(main())
