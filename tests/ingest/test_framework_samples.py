"""Verbatim log output of frameworks that have no reader of their own, each with the series it
must give (``framework_samples/<name>/expect.json``: the source URL, where in it the excerpt is,
the logger that prints it, the format that reads it, the steps, some metrics' values, names that
must not become metrics, and the events by kind)."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import pytest

from trainaudit.ingest import load_run

SAMPLES = Path(__file__).parent / "framework_samples"
NAMES = sorted(p.name for p in SAMPLES.iterdir() if p.is_dir())


def test_every_sample_has_its_expectations() -> None:
    assert len(NAMES) >= 8
    for name in NAMES:
        expect = json.loads((SAMPLES / name / "expect.json").read_text())
        assert expect["source"].startswith("https://github.com/")
        assert {"framework", "where", "logger", "format", "steps", "metrics", "absent", "events"} <= set(expect)
        assert (SAMPLES / name / "log.txt").read_text(encoding="utf-8").strip()


@pytest.mark.parametrize("name", NAMES)
def test_framework_sample(name: str) -> None:
    expect = json.loads((SAMPLES / name / "expect.json").read_text())
    run, problems = load_run([str(SAMPLES / name / "log.txt")])
    assert problems == []
    assert [s.format for s in run.sources] == [expect["format"]]
    first = next(iter(expect["metrics"]))  # the steps of the first metric named
    assert run.series[first].steps.tolist() == expect["steps"]
    for metric, values in expect["metrics"].items():
        assert metric in run.series, sorted(run.series)
        got = run.series[metric].values.tolist()
        assert len(got) == len(values), (metric, got)
        for g, v in zip(got, values, strict=True):
            assert (math.isnan(g) if v == "nan" else g == pytest.approx(v)), (metric, got)
    for junk in expect["absent"]:
        assert junk not in run.series, sorted(run.series)
    assert dict(Counter(e.kind.value for e in run.events)) == expect["events"]


def test_stable_baselines3_tables_are_one_record_per_dump(tmp_path: Path) -> None:
    """Three dumps of the sample's table (total_timesteps moved, as the next dumps print it), with a
    warning between two of them: one record per table, at its total_timesteps."""
    table = (SAMPLES / "stable-baselines3" / "log.txt").read_text().splitlines()
    lines: list[str] = []
    for k, steps in enumerate((3584, 4096, 4608)):
        lines += [ln.replace("| 3584        |", f"| {steps:<11} |") for ln in table]
        if k == 0:
            lines.append("UserWarning: the environment was reset")
    log = tmp_path / "sb3.log"
    log.write_text("\n".join(lines) + "\n")
    run, _ = load_run([str(log)])
    assert run.series["train/loss"].steps.tolist() == [3584, 4096, 4608]
    assert run.series["train/loss"].lines.tolist() == [18, 38, 57]
    assert "total_timesteps" not in run.series and "loss" not in run.series


def test_ray_tune_results_are_one_record_per_block(tmp_path: Path) -> None:
    """Three reports of the Ray Train sample's trial (step moved, as the next reports print it), with
    a progress line between two of them: one record per 'Result for' block, at its step."""
    block = (SAMPLES / "ray-train" / "log.txt").read_text().splitlines()
    lines: list[str] = []
    for k, step in enumerate((800, 1600, 2400)):
        lines += [ln.replace("  step: 800", f"  step: {step}") for ln in block]
        if k == 0:
            lines.append("== Status ==")
    log = tmp_path / "tune.log"
    log.write_text("\n".join(lines) + "\n")
    run, _ = load_run([str(log)])
    assert run.series["train/loss"].steps.tolist() == [800, 1600, 2400]
    assert run.series["val/loss"].lines.tolist() == [19, 39, 58]
    assert "step" not in run.series and "timestamp" not in run.series and "== Status ==" not in run.series


def test_ray_train_result_boxes_are_one_record_per_iteration(tmp_path: Path) -> None:
    """Two reports of the Ray Train box sample (training_iteration moved, as the next report prints
    it): one record per box, at its training_iteration, the rows' keys as printed."""
    box = (SAMPLES / "ray-train-box" / "log.txt").read_text().splitlines()
    lines = box + [ln.replace("training_iteration                            1",
                              "training_iteration                            2") for ln in box]
    log = tmp_path / "train.log"
    log.write_text("\n".join(lines) + "\n")
    run, _ = load_run([str(log)])
    assert run.series["loss"].steps.tolist() == [1, 2]
    assert run.series["loss"].lines.tolist() == [12, 26]
    assert "training_iteration" not in run.series and "Training result" not in run.series
