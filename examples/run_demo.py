"""`make demo`: run trainaudit on the bundled examples and say where the reports are.

1. `trainaudit diagnose examples/nan-after-lr-jump` : a real tiny training run (made by
   `python -m synth`) whose learning rate jumps 1000x at step 120 and goes NaN.
2. `trainaudit audit ...` on a CI failure built by `examples/make_audit_demo.py`: a small git
   repository (model-code change, container bump, golden refresh, a test moved to broken) and the
   artifacts of a passing and a failing CI run; the script prints the audit command, the verdict
   and where answer.md is.

Each command is printed before it runs, so it can be copied: with the path of the ``trainaudit``
installed in the virtual environment (``.venv/bin/trainaudit``), which is not on PATH until the
environment is activated.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from make_audit_demo import trainaudit_command  # noqa: E402  (the examples folder is not a package)


def run(cmd: list[str], cwd: Path) -> int:
    shown = [*trainaudit_command(cwd), *cmd[3:]] if cmd[1:3] == ["-m", "trainaudit"] else cmd
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
    exe = trainaudit_command(Path.cwd())[0]
    if shutil.which("trainaudit") is None:
        venv = Path(sys.executable).parent
        print(f"\ntrainaudit is installed in {os.path.relpath(venv.parent)}, not on PATH: run {exe} as above, or "
              f"`source {os.path.relpath(venv / 'activate')}` first to type plain `trainaudit`.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
