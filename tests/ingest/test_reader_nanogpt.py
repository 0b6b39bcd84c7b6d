"""nanoGPT train.py stdout and llm.c step lines."""

from __future__ import annotations

import csv
import math
from pathlib import Path

from shared_data import corpus_log, run_cli, sample_block, write_lines
from trainaudit.ingest import detect, load_run
from trainaudit.ingest.sources import expand_inputs
from trainaudit.model import EventKind

EVAL = corpus_log("nanogpt-karpathy-nanoGPT-97")[:11]  # pre-MFU iter lines, an eval line, a checkpoint save
PRE_MFU = EVAL[:3]
MFU = sample_block("nanogpt.txt", "nanoGPT/issues/167")
SENTINEL = corpus_log("nanogpt-karpathy-nanoGPT-392")  # mfu -100.00% until measured, comments after lines
MEGATRON = sample_block("megatron.txt", "Megatron-LM/issues/756")
TORCHTITAN = sample_block("torchtitan.txt", "torchtitan/pull/3393")


def _detected(path: Path) -> str:
    return detect(expand_inputs([str(path)]))[0].reader.name


def test_iter_lines_with_and_without_mfu(tmp_path: Path) -> None:
    run, problems = load_run([str(write_lines(tmp_path / "train.log", PRE_MFU + MFU))])
    assert problems == [] and run.frameworks == ["nanogpt"] and run.meta["framework"] == "nanogpt"
    loss = run.series["loss"]
    assert loss.steps.tolist() == [791, 792, 793, 36298, 36299]
    assert loss.values.tolist() == [1.2052, 1.1750, 1.0942, 5.8465, 6.2880]
    assert run.series["time_ms"].value_at(792) == 745.47
    assert run.series["mfu"].steps.tolist() == [36298, 36299]  # the pre-MFU lines have none
    assert run.series["mfu"].values.tolist() == [0.01, 0.01]
    assert run.series["mfu"].lines.tolist() == [4, 5]
    assert run.events == []


def test_eval_line_and_checkpoint(tmp_path: Path) -> None:
    run, _ = load_run([str(write_lines(tmp_path / "train.log", EVAL))])
    loss = run.series["loss"]
    assert loss.steps.tolist() == list(range(791, 800)) and loss.values.tolist()[:2] == [1.2052, 1.1750]
    assert run.series["time_ms"].value_at(794) == 745.64
    assert run.series["val/loss"].steps.tolist() == [800] and run.series["val/loss"].values.tolist() == [3.7535]
    assert run.series["train/loss"].values.tolist() == [0.9795] and run.series["train/loss"].lines.tolist() == [10]
    [ev] = run.events
    assert ev.kind is EventKind.PHASE and ev.line == 11 and ev.step == 800 and ev.data["path"] == "out-shakespeare"


def test_nan_loss_is_kept(tmp_path: Path) -> None:
    # nanoGPT prints a NaN loss as 'nan' with its usual template (f"iter {iter_num}: loss {lossf:.4f}, ...")
    lines = [*PRE_MFU, "iter 794: loss nan, time 745.64ms"]
    run, _ = load_run([str(write_lines(tmp_path / "train.log", lines))])
    loss = run.series["loss"]
    assert loss.steps.tolist() == [791, 792, 793, 794] and math.isnan(loss.values[3]) and loss.lines.tolist()[-1] == 4


def test_mfu_sentinel_is_not_a_value(tmp_path: Path) -> None:
    # nanoGPT prints running_mfu=-1.0 as 'mfu -100.00%' until it has measured 5 iterations
    run, _ = load_run([str(write_lines(tmp_path / "train.log", SENTINEL))])
    assert run.series["loss"].steps.tolist()[:6] == [0, 1, 2, 3, 4, 5]
    assert run.series["mfu"].steps.tolist()[0] == 5 and run.series["mfu"].values.tolist()[0] == 0.05


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
    proc = run_cli("parse", str(write_lines(tmp_path / "train.log", [*PRE_MFU, "iter 794: loss nan, time 745.64ms"])),
                   "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "nanogpt" in proc.stdout
    rows = [(r["step"], r["value"], r["line"]) for r in csv.DictReader(out.open()) if r["metric"] == "loss"]
    assert rows == [("791", "1.2052", "1"), ("792", "1.175", "2"), ("793", "1.0942", "3"), ("794", "nan", "4")]


def test_detection(tmp_path: Path) -> None:
    for i, block in enumerate((PRE_MFU, MFU, EVAL, SENTINEL)):
        assert _detected(write_lines(tmp_path / f"n{i}.log", block)) == "nanogpt"
    assert _detected(write_lines(tmp_path / "m.log", MEGATRON)) == "megatron"
    assert _detected(write_lines(tmp_path / "t.log", TORCHTITAN)) == "torchtitan"
    assert _detected(write_lines(tmp_path / "x.log", ["saving checkpoint to out"])) == "text"
