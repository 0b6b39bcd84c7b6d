"""nanoGPT train.py stdout and llm.c step lines."""

from __future__ import annotations

import csv
import math
from pathlib import Path

from shared_data import run_cli, sample_block, write_lines
from trainaudit.ingest import detect, load_run
from trainaudit.ingest.sources import expand_inputs
from trainaudit.model import EventKind

PRE_MFU = sample_block("nanogpt.txt", "nanoGPT/issues/110")
MFU = sample_block("nanogpt.txt", "nanoGPT/issues/167")
TIMESTAMPED = sample_block("nanogpt.txt", "nanoGPT/issues/215")
MEGATRON = sample_block("megatron.txt", "Megatron-LM/issues/756")
TORCHTITAN = sample_block("torchtitan.txt", "torchtitan/pull/3393")


def _detected(path: Path) -> str:
    return detect(expand_inputs([str(path)]))[0].reader.name


def test_iter_lines_with_and_without_mfu(tmp_path: Path) -> None:
    run, problems = load_run([str(write_lines(tmp_path / "train.log", PRE_MFU + MFU))])
    assert problems == [] and run.frameworks == ["nanogpt"] and run.meta["framework"] == "nanogpt"
    loss = run.series["loss"]
    assert loss.steps.tolist() == [1631, 1632, 1633, 36298, 36299]
    assert loss.values.tolist() == [4.0863, 3.7441, 3.9848, 5.8465, 6.2880]
    assert run.series["time_ms"].value_at(1632) == 563.15
    assert run.series["mfu"].steps.tolist() == [36298, 36299]  # the pre-MFU lines have none
    assert run.series["mfu"].values.tolist() == [0.01, 0.01]
    assert run.series["mfu"].lines.tolist() == [4, 5]
    assert run.events == []


def test_timestamps_eval_line_nan_and_checkpoint(tmp_path: Path) -> None:
    run, _ = load_run([str(write_lines(tmp_path / "train.log", TIMESTAMPED))])
    loss = run.series["loss"]
    assert loss.steps.tolist() == [2990, 3000, 3010]
    assert loss.values.tolist()[:2] == [3.8853, 4.2490]
    assert math.isnan(loss.values[2]) and loss.lines.tolist() == [1, 4, 5]  # 'loss nan' is kept
    assert run.series["time_ms"].value_at(3000) == 35392.33
    assert run.series["val/loss"].steps.tolist() == [3000]
    assert run.series["val/loss"].values.tolist() == [4.0427]
    assert run.series["train/loss"].values.tolist() == [4.0390]
    assert run.series["train/loss"].lines.tolist() == [2]
    [ev] = run.events
    assert ev.kind is EventKind.PHASE and ev.line == 3 and ev.step == 3000 and ev.data["path"] == "out"


def test_mfu_sentinel_is_not_a_value(tmp_path: Path) -> None:
    # nanoGPT prints running_mfu=-1.0 as 'mfu -100.00%' until it has measured 5 iterations
    # (research notes §5.1); the line is the sample's format with that sentinel.
    first = MFU[0].replace("iter 36298", "iter 0").replace("mfu 0.01%", "mfu -100.00%")
    run, _ = load_run([str(write_lines(tmp_path / "train.log", [first] + MFU))])
    assert run.series["loss"].steps.tolist() == [0, 36298, 36299]
    assert run.series["mfu"].steps.tolist() == [36298, 36299]


def test_llmc_step_lines(tmp_path: Path) -> None:
    # llm.c has no verbatim sample in the fixtures: these follow its printf templates
    # ("step %4d/%d: train loss %f (%f ms, %d tok/s)" in train_gpt2.cu and
    # "step %d: train loss %f (took %f ms)" in train_gpt2.c) and the variant quoted in the task.
    lines = ["step    1/74: train loss 4.367631 (acc 4.367631) (1420.98 ms, 0 tok/s)",
             "step    2/74: train loss 4.298173 (341.105011 ms, 12008 tok/s)",
             "step 3: train loss nan (took 1650.301000 ms)"]
    run, _ = load_run([str(write_lines(tmp_path / "llmc.log", lines))])
    assert run.frameworks == ["nanogpt"] and run.meta["framework"] == "llm.c"
    assert run.meta["num_iterations"] == 74
    assert run.series["loss"].steps.tolist() == [1, 2, 3]
    assert run.series["loss"].values.tolist()[:2] == [4.367631, 4.298173]
    assert math.isnan(run.series["loss"].values[2])
    assert run.series["time_ms"].values.tolist() == [1420.98, 341.105011, 1650.301]
    assert run.series["tok/s"].values.tolist() == [0.0, 12008.0]


def test_cli_parse(tmp_path: Path) -> None:
    out = tmp_path / "rows.csv"
    proc = run_cli("parse", str(write_lines(tmp_path / "train.log", TIMESTAMPED)), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "nanogpt" in proc.stdout
    rows = [(r["step"], r["value"], r["line"]) for r in csv.DictReader(out.open()) if r["metric"] == "loss"]
    assert rows == [("2990", "3.8853", "1"), ("3000", "4.249", "4"), ("3010", "nan", "5")]


def test_detection(tmp_path: Path) -> None:
    for i, block in enumerate((PRE_MFU, MFU, TIMESTAMPED)):
        assert _detected(write_lines(tmp_path / f"n{i}.log", block)) == "nanogpt"
    assert _detected(write_lines(tmp_path / "m.log", MEGATRON)) == "megatron"
    assert _detected(write_lines(tmp_path / "t.log", TORCHTITAN)) == "torchtitan"
    assert _detected(write_lines(tmp_path / "x.log", ["saving checkpoint to out"])) == "text"
