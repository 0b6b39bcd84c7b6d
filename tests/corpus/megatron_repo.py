"""The Megatron-LM dev set (``tests/corpus/megatron``) as real git repositories and CI artifacts.

Each case records the commits of ``good..bad`` (titles, bodies, authors, dates, the files they
touched and the ``+``/``-`` lines of configuration-like files), the failing test's golden values
and ``model_config.yaml``, and the values the failing run produced. :func:`rebuild` turns that into
a real repository with ``git fast-import`` (tests run without network):

- a first commit stands for the good revision: every file the range touches exists there (with the
  ``-`` lines its later diffs remove), the failing test's golden holds ``golden.json`` and its
  config ``model_config_good.yaml`` (else ``model_config.yaml``);
- one commit per listed commit, oldest first, with the same title, body, author and date, touching
  the listed files: recorded diff lines are applied (so ``git show`` shows them), other files get a
  new line naming the original commit, ``D`` deletes and ``R`` moves the file unchanged; merge
  commits become ordinary commits with their first-parent files;
- at ``bad`` the test's config is ``model_config.yaml``; for ``split`` cases the bad commit is the
  refresh commit *without* the failing golden's new content;
- commits after ``bad`` (the refresh of non-split cases, fixes, reverts) follow it; a refresh of the
  failing golden writes ``actual.json`` there.

:func:`failing_artifacts` lays out what Megatron-LM's CI uploads for the failing job: the actual
values under the golden file's own name (``run_ci_test.sh`` writes them to
``$OUTPUT_PATH/$(basename $GOLDEN_VALUES_PATH)``) in the ``logs-<test case>-<run id>`` artifact.
:func:`job_log` writes a GitHub Actions job log of the same failure: the launcher's argument echo,
Megatron's iteration lines, and the comparator's pytest output worded as
``tests/functional_tests/python_test_utils/common.py`` logs it.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

CORPUS = Path(__file__).resolve().parent / "megatron"
EMAIL = "rebuilt@example.invalid"


@dataclass
class Case:
    path: Path
    case: dict
    commits: list[dict]
    after_bad: list[dict]

    @property
    def id(self) -> str:
        return str(self.case["id"])

    @property
    def label(self) -> dict:
        return dict(self.case["label"])

    @property
    def golden_path(self) -> str:
        return f"{self.case['test_dir']}/{self.case['golden_file']}"

    @property
    def config_path(self) -> str:
        return f"{self.case['test_dir']}/model_config.yaml"

    def text(self, name: str) -> str | None:
        p = self.path / name
        return p.read_text(encoding="utf-8") if p.is_file() else None


def cases(root: Path = CORPUS) -> list[Case]:
    out = []
    for d in sorted(p for p in root.iterdir() if (p / "case.json").is_file()):
        history = json.loads((d / "commits.json").read_text(encoding="utf-8"))
        out.append(Case(d, json.loads((d / "case.json").read_text(encoding="utf-8")), history["commits"],
                        history.get("after_bad", [])))
    return out


@dataclass
class Rebuilt:
    path: Path
    good: str  # rebuilt sha standing for the good revision
    bad: str
    shas: dict[str, str] = field(default_factory=dict)  # original sha -> rebuilt sha (good included)

    def original(self, rebuilt_sha: str) -> str | None:
        return next((o for o, r in self.shas.items() if r == rebuilt_sha), None)


def _quote(path: str) -> str:
    """A path as git fast-import reads it (C-style quoted)."""
    return '"' + path.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _stamp(iso: str) -> str:
    d = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    off = d.utcoffset()
    minutes = int(off.total_seconds() // 60) if off else 0
    sign = "+" if minutes >= 0 else "-"
    return f"{int(d.timestamp())} {sign}{abs(minutes) // 60:02d}{abs(minutes) % 60:02d}"


def _renames_into(commits: list[dict], path: str) -> set[str]:
    """Every earlier name of ``path`` (it may have been moved in the range)."""
    names = {path}
    for c in reversed(commits):
        for f in c["files"]:
            if f["status"] == "R" and f["path"] in names and f.get("from"):
                names.add(f["from"])
    return names


class _Tree:
    """File contents as line lists, and the fast-import stream that records their changes."""

    def __init__(self) -> None:
        self.files: dict[str, list[str]] = {}
        self.out: list[bytes] = []
        self.mark = 0

    def blob(self, lines: list[str]) -> bytes:
        data = ("\n".join(lines) + "\n").encode("utf-8") if lines else b""
        return b"data %d\n" % len(data) + data + b"\n"

    def commit(self, title: str, body: str, author: str, date: str, ops: list[tuple[str, str]],
               parent: int | None) -> int:
        self.mark += 1
        msg = (title + ("\n\n" + body if body else "") + "\n").encode("utf-8")
        who = f"{author or 'unknown'} <{EMAIL}> {_stamp(date)}".encode()
        self.out.append(b"commit refs/heads/main\nmark :%d\nauthor %s\ncommitter %s\ndata %d\n%s\n"
                        % (self.mark, who, who, len(msg), msg))
        if parent is not None:
            self.out.append(b"from :%d\n" % parent)
        for op, path in ops:
            if op == "D":
                self.out.append(b"D " + _quote(path).encode("utf-8") + b"\n")
            else:
                self.out.append(b"M 100644 inline " + _quote(path).encode("utf-8") + b"\n"
                                + self.blob(self.files[path]))
        return self.mark


def _apply(lines: list[str], diff: list[str]) -> list[str]:
    """Remove the ``-`` lines and put the ``+`` lines where the last removal was (else at the end)."""
    out = list(lines)
    at = len(out)
    for d in diff:
        if d.startswith("-"):
            try:
                at = out.index(d[1:])
                del out[at]
            except ValueError:
                pass
        elif d.startswith("+"):
            out.insert(min(at, len(out)), d[1:])
            at = min(at, len(out) - 1) + 1
    return out


def _base_lines(commits: list[dict], path: str) -> list[str]:
    """Lines the file needs at the good revision: every ``-`` line no earlier ``+`` line provides."""
    have: list[str] = []
    need: list[str] = []
    for c in commits:
        for d in c.get("diffs", {}).get(path, []):
            if d.startswith("-"):
                if d[1:] in have:
                    have.remove(d[1:])
                else:
                    need.append(d[1:])
            elif d.startswith("+"):
                have.append(d[1:])
    return need


def rebuild(case: Case, dest: Path) -> Rebuilt:
    """A real git repository of ``case``'s history in ``dest`` (created)."""
    c = case.case
    bad = c["bad"]
    config_names = _renames_into(case.commits, case.config_path)
    # a test folder renamed in the range takes its golden along (a new golden is then added where the
    # old one is deleted)
    golden_names = _renames_into(case.commits, case.golden_path) | {
        f"{n.rsplit('/', 1)[0]}/{c['golden_file']}" for n in config_names}
    golden_text = (case.text("golden.json") or "").splitlines()
    actual_text = (case.text("actual.json") or "").splitlines()
    config_bad = (case.text("model_config.yaml") or "").splitlines()
    config_good = (case.text("model_config_good.yaml") or case.text("model_config.yaml") or "").splitlines()
    history = list(case.commits) + [x for x in case.after_bad if x["sha"] != bad]
    tree = _Tree()

    # -- the good revision: everything the range modifies, deletes or renames away already exists
    added: set[str] = set()
    base: dict[str, list[str]] = {}
    for commit in history:
        for f in commit["files"]:
            p, st = f["path"], f["status"]
            sources = [f["from"]] if st == "R" and f.get("from") else []
            for q in sources + ([p] if st in ("M", "D") else []):
                if q not in added and q not in base:
                    base[q] = _base_lines(history, q) or [f"# {q} at the good revision"]
            if st in ("A", "R"):
                added.add(p)
    for names, text, final in ((golden_names, golden_text, case.golden_path),
                               (config_names, config_good, case.config_path)):
        present = [n for n in names if n in base]
        for n in present:
            base[n] = text
        if not present:
            base[final] = text
    tree.files.update(base)
    marks: dict[str, int] = {}
    good_mark = tree.commit(f"Good revision {c['good'][:10]} (rebuilt; its own changes are not recorded)", "",
                            "unknown", case.commits[0]["date"] if case.commits else "2025-01-01T00:00:00+00:00",
                            [("M", p) for p in sorted(base)], None)
    marks[c["good"]] = good_mark

    # -- one commit per listed commit
    parent = good_mark
    for commit in history:
        ops: list[tuple[str, str]] = []
        after = history.index(commit) >= len(case.commits)
        split_bad = c.get("split") and commit["sha"] == bad
        diffs = commit.get("diffs", {})
        for f in commit["files"]:
            p, st = f["path"], f["status"]
            if st == "D":
                if p in tree.files:
                    del tree.files[p]
                    ops.append(("D", p))
                continue
            if st == "R" and f.get("from") in tree.files:
                tree.files[p] = tree.files.pop(f["from"])
                ops.append(("D", f["from"]))
                if p not in diffs and p not in golden_names and p not in config_names:
                    ops.append(("M", p))  # moved as it was: the record says nothing of a change
                    continue
            if p in golden_names:
                # the failing golden: unchanged until a refresh after bad writes the run's values
                tree.files[p] = actual_text if after and not split_bad else golden_text
            elif p in config_names:
                tree.files[p] = _apply(tree.files.get(p, config_good), diffs[p]) if p in diffs else \
                    tree.files.get(p, config_good)
            elif p in diffs:
                tree.files[p] = _apply(tree.files.get(p, []), diffs[p])
            else:
                tree.files[p] = tree.files.get(p, []) + [f"# changed by {commit['sha'][:12]}"]
            ops.append(("M", p))
        if commit["sha"] == bad:
            for name in config_names:
                if name in tree.files and tree.files[name] != config_bad:
                    tree.files[name] = config_bad
                    ops.append(("M", name))
        parent = tree.commit(commit["title"], commit.get("body", ""), commit.get("author", ""), commit["date"], ops,
                             parent)
        marks[commit["sha"]] = parent

    dest.mkdir(parents=True, exist_ok=True)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(dest), "GIT_CONFIG_NOSYSTEM": "1"}
    subprocess.run(["git", "init", "-q", "-b", "main", str(dest)], check=True, env=env, capture_output=True)
    marks_file = dest / ".git" / "rebuilt-marks"
    subprocess.run(["git", "-C", str(dest), "fast-import", "--quiet", f"--export-marks={marks_file}"],
                   input=b"".join(tree.out), check=True, env=env, capture_output=True)
    by_mark = dict(line.split() for line in marks_file.read_text().splitlines())
    shas = {orig: by_mark[f":{m}"] for orig, m in marks.items()}
    subprocess.run(["git", "-C", str(dest), "reset", "-q", "--hard", shas[bad]], check=True, env=env,
                   capture_output=True)
    return Rebuilt(dest, shas[c["good"]], shas[bad], shas)


# -- the failing job's artifacts ----------------------------------------------------------------
def run_id(case: Case) -> str:
    return str(int(case.case["refresh"][:8], 16) % 10**10)


def failing_artifacts(case: Case, dest: Path) -> Path:
    """``logs-<test case>-<run id>/<golden file name>`` holding the failing run's values."""
    folder = dest / f"logs-{case.case['test_case']}-{run_id(case)}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / case.case["golden_file"]).write_text(case.text("actual.json") or "", encoding="utf-8")
    return folder


# -- the failing and passing job logs ---------------------------------------------------------------
COMMON = "tests.functional_tests.python_test_utils.common:common.py"


def _values(path: Path) -> dict[str, dict[int, float | str]]:
    data = json.loads(path.read_text(encoding="utf-8"))
    out: dict[str, dict[int, float | str]] = {}
    for metric, body in data.items():
        if not isinstance(body, dict) or "values" not in body:
            continue
        vals = body["values"]
        if isinstance(vals, list):
            start, step = int(body.get("start_step", 0)), max(int(body.get("step_interval", 1)), 1)
            out[metric] = {start + i * step: v for i, v in enumerate(vals)}
        else:
            out[metric] = {int(k): v for k, v in vals.items()}
    return out


def _ts(step: int) -> str:
    return f"2026-05-04T10:{(step // 60) % 60:02d}:{step % 60:02d}.{(step * 7919) % 10**7:07d}Z"


def training_lines(values: dict[str, dict[int, float | str]], train_iters: int) -> list[str]:
    """Megatron's iteration lines (megatron/training/training.py ``training_log``) for every step
    the values hold: lm loss ``{:.6E}``, num zeros as logged, elapsed time in ms ``{:.1f}``."""
    loss, zeros, it = values.get("lm loss", {}), values.get("num-zeros", {}), values.get("iteration-time", {})
    steps = sorted(set(loss) | set(zeros) | set(it))
    out = []
    for s in steps:
        line = f" [2026-05-04 10:{(s // 60) % 60:02d}:{s % 60:02d}.{s:06d}] iteration {s:8d}/{train_iters:8d} |"
        line += f" consumed samples: {s * 32:12d} |"
        t = it.get(s)
        if isinstance(t, (int, float)) and math.isfinite(t):
            line += f" elapsed time per iteration (ms): {t * 1000.0:.1f} |"
        line += " learning rate: 1.500000E-04 | global batch size:    32 |"
        lv = loss.get(s)
        if isinstance(lv, (int, float)) and math.isfinite(lv):
            line += f" lm loss: {lv:.6E} |"
        line += " loss scale: 1.0 | grad norm: 1.234 |"
        z = zeros.get(s)
        if isinstance(z, (int, float)) and math.isfinite(z):
            line += f" num zeros: {z} |"
        line += " number of skipped iterations:   0 | number of nan iterations:   0 |"
        out.append(line)
    return out


def gate_lines(failed: list[tuple[str, str, list[float], list[float]]], passed: list[tuple[str, str]],
               failed_metrics: list[str]) -> list[str]:
    """The comparator's pytest output (``pytest -s -o log_cli=true --log-cli-level=info``):
    ``Actual values: %s`` / ``Golden values: %s`` (INFO), then ``Exact|Approximate comparison of
    <metric>: FAILED`` (ERROR), ``DETERMINISTIC|APPROXIMATE test for metric <metric>: PASSED`` (INFO),
    and the assertion ``The following metrics failed: ...``."""
    out = ["============================= test session starts ==============================",
           "collecting ... collected 1 item", "",
           "tests/functional_tests/python_test_utils/test_pretraining_regular_pipeline.py::test_regular_pipeline ",
           "-------------------------------- live log call ---------------------------------"]
    for kind, metric in passed:
        out.append(f"INFO     {COMMON}:339 {kind} test for metric {metric}: PASSED")
    for check, metric, actual, golden in failed:
        out.append(f"INFO     {COMMON}:328 Actual values: {', '.join(_str(v) for v in actual)}")
        out.append(f"INFO     {COMMON}:331 Golden values: {', '.join(_str(v) for v in golden)}")
        out.append(f"ERROR    {COMMON}:346 {check} comparison of {metric}: FAILED")
    if failed_metrics:
        out += ["FAILED", "", "=================================== FAILURES ===================================",
                "_____________________________ test_regular_pipeline _____________________________",
                f"E       AssertionError: The following metrics failed: {', '.join(failed_metrics)}",
                "=========================== short test summary info ============================",
                "FAILED tests/functional_tests/python_test_utils/test_pretraining_regular_pipeline.py::"
                f"test_regular_pipeline - AssertionError: The following metrics failed: {', '.join(failed_metrics)}",
                "============================== 1 failed in 4.17s ==============================="]
    else:
        out += ["PASSED", "============================== 1 passed in 3.92s ==============================="]
    return out


def gate_output(case: Case, values: Path, checks: list[tuple[str, str, bool]]) -> list[str]:
    """The comparator's output for ``checks`` (``(exact|approximate, metric, passed)``, as Megatron's
    comparator decided them) on ``values`` against the case's golden: a failing check logs the actual
    and golden values it compared, in the golden file's step order, "nan" mapped to inf, and the
    median of the steady-state steps for iteration-time (``common.py``)."""
    golden = json.loads((case.path / "golden.json").read_text(encoding="utf-8"))
    actual = _values(values)
    failed, passed = [], []
    for check, metric, ok in checks:
        if ok:
            passed.append(("DETERMINISTIC" if check == "exact" else "APPROXIMATE", metric))
            continue
        g = golden[metric]["values"]
        steps = [int(k) for k in g]
        gv = [math.inf if isinstance(v, str) else float(v) for v in g.values()]
        av = [math.inf if isinstance(x, str) else float(x)
              for x in (actual.get(metric, {}).get(s, "nan") for s in steps)]
        if metric == "iteration-time":
            finite = [s for s, v in zip(steps, gv) if math.isfinite(v)]
            window = range(5, 21) if finite and finite[-1] <= 25 else range(30, 46)
            pick = [i for i, s in enumerate(steps) if s in finite and s in window] or \
                [i for i, s in enumerate(steps) if s in finite and s >= window.start][:4]
            gv, av = [statistics.median(gv[i] for i in pick)], [statistics.median(av[i] for i in pick)]
        failed.append(("Exact" if check == "exact" else "Approximate", metric, av, gv))
    return gate_lines(failed, passed, list(dict.fromkeys(m for _, m, _, _ in failed)))


def _str(v: float) -> str:
    """``str()`` of the comparator's values: Python floats, numpy's inf for "nan" strings."""
    return "inf" if isinstance(v, float) and math.isinf(v) else str(v)


def job_log(case: Case, sha: str, values: Path, gate: list[str], *, failed: bool) -> str:
    """A GitHub Actions job log (timestamps, ``##[group]`` markers, ANSI colour) of the test at ``sha``."""
    c = case.case
    model = c["test_dir"].split("/")[-2]
    golden_rel = f"./{case.golden_path}"
    vals = _values(values)
    iters = max((max(v) for v in vals.values() if v), default=50)
    body = [
        "##[group]Run actions/checkout@v4",
        "Syncing repository: NVIDIA/Megatron-LM",
        f"HEAD is now at {sha[:7]} {c['test_case']}",
        "##[endgroup]",
        "\x1b[1;34m┌─ launching test ─────────────────────────────────────────────────────────┐\x1b[0m",
        f"\x1b[1;34m│  test case : {c['test_case']}\x1b[0m",
        "\x1b[1;34m│  platform  : dgx_h100   scope: mr-github\x1b[0m",
        "##[group]Logs",
        "DATA_PATH=/mnt/artifacts",
        "OUTPUT_PATH=/opt/megatron-lm/assets_dir",
        "TENSORBOARD_PATH=/opt/megatron-lm/assets_dir/tensorboard",
        "TRAINING_SCRIPT_PATH=pretrain_gpt.py",
        f"TRAINING_PARAMS_PATH=./tests/functional_tests/test_cases/{model}/{c['test_dir'].split('/')[-1]}/model_config.yaml",
        f"GOLDEN_VALUES_PATH={golden_rel}",
        "RO_API_TOKEN=<redacted>",
        "+ TEST_TYPE=regular",
        "using world size: 8, data-parallel size: 8, context-parallel size: 1, tensor-model-parallel size: 1",
        "training ...",
        *training_lines(vals, iters),
        "[after training is done] datetime: 2026-05-04 10:59:59",
        "Running pytest checks against golden values",
        *gate,
        "##[endgroup]",
        ("\x1b[1;31m║   ❌  FAILED  (exit code: 1)                                  ║\x1b[0m" if failed else
         "\x1b[1;32m║   ✅  PASSED                                                             ║\x1b[0m"),
        (f"##[error]Result: ❌ {c['test_case']} — FAILED (exit 1)" if failed else
         f"##[notice]Result: ✅ {c['test_case']} — PASSED"),
    ]
    return "\n".join(f"{_ts(i)} {line}" for i, line in enumerate(body)) + "\n"
