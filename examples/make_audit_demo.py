"""Build the bundled ``trainaudit audit`` example and (with ``--run``) audit it.

The example is a small Megatron-like git repository with a realistic history (a container bump, a
model-code change, a golden refresh of another test, a test moved to the broken list) and the CI
artifacts of a passing and a failing run of ``gpt3_tp1_pp1``: Megatron training logs and the CI
job log with the golden-value gate's own output. The failing run's lm loss leaves the 5 % band from
step 40, after the model-code change: the audit should answer ``real_regression`` and name that
commit as the suspect, not the container bump that sits in the same range.

Everything is deterministic text (no torch needed): the committed copy of the artifacts lives in
``examples/audit-demo/``; the git repository is built at demo time (a repository cannot be committed
inside this one).

    python examples/make_audit_demo.py --out trainaudit-out/audit-demo --run
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

CASE = "tests/functional_tests/test_cases/gpt/gpt3_tp1_pp1"
GOLDEN = f"{CASE}/golden_values_dev_dgx_h100.json"
STEPS = range(1, 101)
PREFIX = "INFO     tests.functional_tests.python_test_utils.common:common.py"
HERE = Path(__file__).resolve().parent


def golden_loss(step: int) -> float:
    return round(2.0 + 8.0 * math.exp(-step / 25.0), 5)


def zeros(step: int) -> float:
    return float(100 + (step * 37) % 61)


def regressed(step: int) -> float:
    return round(golden_loss(step) * (1.06 if step >= 40 else 1.0), 5)


def golden_json(loss, nz) -> str:  # type: ignore[no-untyped-def]
    def block(f):  # type: ignore[no-untyped-def]
        return {"start_step": 1, "end_step": 100, "step_interval": 1, "values": {str(s): f(s) for s in STEPS}}

    return json.dumps({"lm loss": block(loss), "num-zeros": block(nz)}, indent=4) + "\n"


def megatron_log(loss) -> str:  # type: ignore[no-untyped-def]
    lines = ["using world size: 8, data-parallel size: 8, context-parallel size: 1, tensor-model-parallel size: 1, "
             "pipeline-model-parallel size: 1", "training ..."]
    for s in STEPS:
        lines.append(f" [2026-04-05 10:{s // 60:02d}:{s % 60:02d}] iteration {s:8d}/     100 | consumed samples: "
                     f"{s * 32:12d} | elapsed time per iteration (ms): {812.0 + (s % 7):.1f} | learning rate: "
                     f"1.000000E-04 | global batch size:    32 | lm loss: {loss(s):.6E} | loss scale: 1.0 | "
                     f"grad norm: {1.5 + s / 100:.3f} | num zeros: {zeros(s):.1f} | number of skipped iterations:   0 | "
                     "number of nan iterations:   0 |")
    return "\n".join(lines) + "\n"


def job_log() -> str:
    bad = [s for s in STEPS if s >= 40][:5]
    act = ", ".join(str(regressed(s)) for s in bad) + ", ..."
    gold = ", ".join(str(golden_loss(s)) for s in bad) + ", ..."
    lines = [f"+ export TRAINING_PARAMS_PATH=./{CASE}/model_config.yaml",
             "Running pytest checks against golden values",
             f"{PREFIX}:210 DETERMINISTIC test for metric num-zeros: PASSED",
             f"{PREFIX}:210 APPROXIMATE test for metric num-zeros: PASSED",
             f"{PREFIX}:188 Actual values: {act}", f"{PREFIX}:189 Golden values: {gold}",
             "ERROR    tests.functional_tests.python_test_utils.common:common.py:195 Exact comparison of lm loss: FAILED",
             f"{PREFIX}:188 Actual values: {act}", f"{PREFIX}:189 Golden values: {gold}",
             "ERROR    tests.functional_tests.python_test_utils.common:common.py:195 Approximate comparison of lm loss: "
             "FAILED",
             "E       AssertionError: The following metrics failed: lm loss",
             "=========================== 1 failed in 3.21s ==========================="]
    return "\n".join(lines) + "\n"


def write_artifacts(dest: Path) -> None:
    for side, loss in (("failing", regressed), ("passing", golden_loss)):
        (dest / side).mkdir(parents=True, exist_ok=True)
        (dest / side / "train.log").write_text(megatron_log(loss), encoding="utf-8")
    (dest / "failing" / "job.log").write_text(job_log(), encoding="utf-8")


def _git(repo: Path, *args: str, date: str | None = None) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "demo", "GIT_AUTHOR_EMAIL": "demo@example.org",
           "GIT_COMMITTER_NAME": "demo", "GIT_COMMITTER_EMAIL": "demo@example.org"}
    if date:
        env["GIT_AUTHOR_DATE"] = env["GIT_COMMITTER_DATE"] = date
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env=env).stdout.strip()


def _commit(repo: Path, title: str, files: dict[str, str], date: str) -> str:
    for rel, text in files.items():
        p = repo / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")
        _git(repo, "add", rel)
    _git(repo, "commit", "-q", "-m", title, date=date)
    return _git(repo, "rev-parse", "HEAD")


def build_repo(repo: Path) -> dict[str, str]:
    if repo.exists():
        shutil.rmtree(repo)
    repo.mkdir(parents=True)
    _git(repo, "init", "-q", "-b", "main")
    recipe = "products:\n  - test_case: [{case}]\n    products:\n      - environment: [dev]\n        scope: [{scope}]\n"
    shas = {"good": _commit(repo, "Initial import", {
        "megatron/core/transformer/attention.py": "def attention(q, k, v):\n    return q @ k.T @ v\n",
        "docker/Dockerfile.ci.dev": "FROM nvcr.io/nvidia/pytorch:26.03-py3\n",
        "tests/test_utils/recipes/h100/gpt.yaml": recipe.format(case="gpt3_tp1_pp1", scope="mr-github"),
        "tests/test_utils/recipes/h100/bert.yaml": recipe.format(case="bert_tp1_pp1", scope="mr-github"),
        GOLDEN: golden_json(golden_loss, zeros),
        "tests/functional_tests/test_cases/bert/bert_tp1_pp1/golden_values_dev_dgx_h100.json":
            golden_json(lambda s: round(golden_loss(s) + 1, 5), zeros),
        f"{CASE}/model_config.yaml": "ENV_VARS:\n  NVTE_ALLOW_NONDETERMINISTIC_ALGO: 0\nMODEL_ARGS:\n  --train-iters: 100\n"
                                     "METRICS:\n  - \"lm loss\"\n  - \"num-zeros\"\n",
        "README.md": "megatron-like demo\n"}, "2026-06-01T10:00:00+00:00")}
    _commit(repo, "chore: Update Docker image version to 26.04-py3",
            {"docker/Dockerfile.ci.dev": "FROM nvcr.io/nvidia/pytorch:26.04-py3\n"}, "2026-06-02T10:00:00+00:00")
    _commit(repo, "Refresh bert golden values", {
        "tests/functional_tests/test_cases/bert/bert_tp1_pp1/golden_values_dev_dgx_h100.json":
            golden_json(lambda s: round(golden_loss(s) + 1.00001, 5), zeros)}, "2026-06-03T10:00:00+00:00")
    _commit(repo, "Move bert_tp1_pp1 to broken: flaky on dgx_h100", {
        "tests/test_utils/recipes/h100/bert.yaml": recipe.format(case="bert_tp1_pp1", scope="mr-github-broken")},
        "2026-06-04T10:00:00+00:00")
    shas["bad"] = _commit(repo, "Fuse attention softmax scaling", {
        "megatron/core/transformer/attention.py": "def attention(q, k, v):\n    return (q @ k.T / 8) @ v\n"},
        "2026-06-05T10:00:00+00:00")
    return shas


def trainaudit_command(cwd: Path) -> list[str]:
    """How to run this interpreter's trainaudit from ``cwd``, as a user can copy it: the console
    script installed beside the interpreter (``.venv/bin/trainaudit`` after ``make demo``, which
    is not on PATH until the venv is activated), else ``python -m trainaudit``."""
    here = Path(sys.executable).parent
    script = here / ("trainaudit.exe" if os.name == "nt" else "trainaudit")
    target = script if script.is_file() else Path(sys.executable)
    shown = os.path.relpath(target, cwd) if target.is_relative_to(Path.cwd()) else str(target)
    if os.sep not in shown:
        shown = os.path.join(".", shown)
    return [shown] if target == script else [shown, "-m", "trainaudit"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("trainaudit-out/audit-demo"), help="where to build and audit")
    ap.add_argument("--artifacts-only", type=Path, metavar="DIR",
                    help="only (re)write the artifacts into DIR (used to refresh examples/audit-demo)")
    ap.add_argument("--run", action="store_true", help="run the audit and print the verdict and the report path")
    args = ap.parse_args(argv)
    if args.artifacts_only:
        write_artifacts(args.artifacts_only)
        return 0
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    shas = build_repo(out / "repo")
    art = out / "artifacts"
    if art.exists():
        shutil.rmtree(art)
    bundled = HERE / "audit-demo"
    if bundled.is_dir():
        shutil.copytree(bundled, art)
    else:
        write_artifacts(art)
    cmd = ["audit", "artifacts/failing", "--passing", "artifacts/passing", "--repo", "repo",
           "--good", shas["good"], "--bad", shas["bad"], "-o", "report"]
    print(f"$ cd {shlex.quote(str(out))} && {shlex.join([*trainaudit_command(out), *cmd])}", flush=True)
    if not args.run:
        return 0
    proc = subprocess.run([sys.executable, "-m", "trainaudit", *cmd], cwd=out)
    if proc.returncode not in (0, 1):  # 1: the audit completed and found the failure (docs/cli.md)
        return proc.returncode
    print(f"answer.md: {out / 'report' / 'answer.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
