"""Work that stays linear in the number of files: a commit that adds 20 000 files (a real git
repository built with ``git fast-import`` in a temp dir, all of them files whose patches are read:
environment files under ``docker/``, test recipes, CI files) and a folder of 3 000 files that hold no
metrics (each one a problem to report). The work is counted, not timed (``workcount``): the lines
executed in the code under test must stay within a fixed number per file. Looking each patch header up
against every path, or each file against every problem reported so far, is quadratic and passes the
bound many times over; the counter stops such a run as soon as the bound is passed.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

import trainaudit.history.classify as classify
import trainaudit.ingest as ingest
import trainaudit.ingest.ranks as ranks
from trainaudit.history.classify import FailureShape
from trainaudit.history.trace import trace
from trainaudit.ingest import load_run
from trainaudit.ingest.sink import MAX_SERIES
from harness import RSS_BUDGET_MB, budget
from workcount import lines_executed

N_FILES = 20_000
LINES_PER_FILE = 300  # measured about 110 per file for the linear code; the quadratic one needed 1 500 per file at 2 000 files
HISTORY = str(Path(classify.__file__).parent)
CASE = "tests/functional_tests/test_cases/gpt/gpt3_tp1_pp1"


def _fast_import(root: Path, commits: list[tuple[str, dict[str, str]]]) -> None:
    """Commits (title, {path: text}) on ``main``, each on top of the one before, in one git process."""
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    subprocess.run(["git", "init", "-q", "-b", "main", str(root)], check=True, env=env)
    parts: list[bytes] = []
    for i, (title, files) in enumerate(commits):
        msg = title.encode()
        parts.append(b"commit refs/heads/main\n")
        parts.append(f"committer dev <dev@example.org> {1775037600 + 3600 * i} +0000\n".encode())
        parts.append(b"data %d\n%s\n" % (len(msg), msg))
        for path, text in files.items():
            data = text.encode()
            parts.append(b"M 100644 inline %s\ndata %d\n%s\n" % (path.encode(), len(data), data))
    subprocess.run(["git", "-C", str(root), "fast-import", "--quiet"], input=b"".join(parts), check=True, env=env)


def test_a_commit_adding_many_files_is_classified_in_linear_work(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    many = {f"docker/part{i // 1000}/Dockerfile.{i}": f"FROM nvcr.io/nvidia/pytorch:26.0{i % 9}-py3\n"
            for i in range(N_FILES // 2)}
    many |= {f"tests/test_utils/recipes/r{i}.yaml": f"- test_case: [case{i}]\n" for i in range(N_FILES // 4)}
    many |= {f".gitlab/ci/job{i}.yml": f"job{i}: {{}}\n" for i in range(N_FILES - len(many))}
    assert len(many) == N_FILES
    _fast_import(root, [
        ("Initial import", {"megatron/core/model.py": "x = 1\n", f"{CASE}/model_config.yaml": "METRICS: [lm loss]\n"}),
        ("Vendor every image and recipe", many),
        ("Change the model", {"megatron/core/model.py": "x = 2\n"}),
    ])
    shape = FailureShape(kind="real_regression", test_case=CASE, metrics=["lm loss"], config_path=f"{CASE}/model_config.yaml")
    with lines_executed((HISTORY,), LINES_PER_FILE * N_FILES) as seen:
        t = trace(str(root), "HEAD~2", "HEAD", shape)
    # the commit was read whole and judged: its environment change is seen
    vendored = next(c for c in t.commits if c.commit.title == "Vendor every image and recipe")
    assert len(vendored.commit.files) == N_FILES
    assert "env" in (vendored.evidence.parts if vendored.evidence else {})
    assert seen["lines"] <= LINES_PER_FILE * N_FILES


FOLDER_FILES = 3_000
SCAN_LINES_PER_FILE = 100  # measured 40 per file; looking each file up in the whole problems list took 540 at 1 000


def test_a_folder_of_many_files_without_metrics_is_scanned_in_linear_work(tmp_path: Path) -> None:
    folder = tmp_path / "many"
    folder.mkdir()
    for i in range(FOLDER_FILES):
        (folder / f"note{i}.txt").write_text("hello world\n")
    (folder / "train.jsonl").write_text("".join(f'{{"step": {s}, "loss": {1.0 / s}}}\n' for s in range(1, 20)))
    with lines_executed((ingest.__file__,), SCAN_LINES_PER_FILE * FOLDER_FILES) as seen:
        run, problems = load_run([str(folder)])
    loss = run.metric("loss")
    assert loss is not None and len(loss.steps) == 19
    assert len(problems) == FOLDER_FILES and all("no metrics or events found" in str(p) for p in problems)
    assert seen["lines"] <= SCAN_LINES_PER_FILE * FOLDER_FILES


# -- inputs that would make one series per number, per column, per name --------------------------------
# Memory is the measure here (the harness's peak resident set); before the cap each of these made a
# series per number/column/name, each matched against every role (1 to 2 GB).
WIDE = {
    "one line of 524 288 numbers": ("one.log", lambda: " ".join(f"{(i * 7919) % 10007 / 997:.4f}" for i in range(1 << 19)) + "\n"),
    "a CSV with 100 000 columns": ("wide.csv", lambda: "step," + ",".join(f"c{i}" for i in range(100_000)) + "\n"
                                   + "".join(f"{s}," + ",".join(["1.5"] * 100_000) + "\n" for s in range(1, 4))),
    "a JSONL with 300 000 metric names": ("names.jsonl", lambda: "".join(
        json.dumps({"step": s, **{f"m{i}": 1.0 for i in range(s * 100_000, (s + 1) * 100_000)}}) + "\n" for s in range(3))),
}


@pytest.mark.parametrize("case", sorted(WIDE))
def test_series_per_input_are_capped_in_bounded_memory(case: str, tmp_path: Path) -> None:
    name, text = WIDE[case]
    (tmp_path / name).write_text(text())
    with budget(120) as got:
        run, problems = load_run([str(tmp_path / name)])
    assert len(run.series) <= MAX_SERIES
    assert any(f"beyond the first {MAX_SERIES} left out" in str(p) and not p.fatal for p in problems), problems
    assert got["rss_mb"] < RSS_BUDGET_MB, got


RANK_FILES = 2_000
RANK_LINES_PER_FILE = 4_000  # lines run in ingest/__init__.py and ingest/ranks.py per log: measured 2 570 (its 40 lines all in the head, all read)


def test_a_folder_of_many_rank_logs_is_skimmed_in_linear_work_and_bounded_memory(tmp_path: Path) -> None:
    # thousands of per-rank logs of one job: all but one skimmed, each at a fixed cost, keeping at
    # most its share of the values it compares (ranks.KEPT_BUDGET in all)
    folder = tmp_path / "ranks"
    folder.mkdir()
    for r in range(RANK_FILES):
        (folder / f"rank_{r:05d}.log").write_text("".join(
            f"[rank{r}]: iteration {s:8d}/      40 | lm loss: {2.0 / s:.6E} | grad norm: 1.000 |"
            " number of nan iterations:   0 |\n" for s in range(1, 41)))
    with lines_executed((ingest.__file__, ranks.__file__), RANK_LINES_PER_FILE * RANK_FILES) as seen:
        run, problems = load_run([str(folder)])
    assert seen["lines"] <= RANK_LINES_PER_FILE * RANK_FILES
    assert sum(bool(s.note) for s in run.sources) == RANK_FILES - 1
    assert len(run.series["lm loss"]) == 40  # the rank read in full
    # one problem names the skimmed ranks as a range, not one by one
    assert any(f"per-rank logs skimmed (ranks 1-{RANK_FILES - 1})" in p.message for p in problems)
    # what each may keep to compare shrinks with their number (the skims' own bound: tests/ingest)
    assert ranks.keep_per_rank(RANK_FILES - 1) == ranks.KEPT_BUDGET // (RANK_FILES - 1) < ranks.MAX_KEPT
