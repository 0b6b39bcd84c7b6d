"""torchtitan metric lines: units, thousands separators, rank prefixes, duplicate ranks."""

from __future__ import annotations

import csv
import math
from pathlib import Path

from shared_data import run_cli, sample_block, write_lines
from trainaudit.ingest import detect, load_run
from trainaudit.ingest.sources import expand_inputs

GRAD_NORM = sample_block("torchtitan.txt", "torchtitan/pull/3393")
MID_2025 = sample_block("torchtitan.txt", "torchtitan/pull/1287")
DUPLICATES = sample_block("torchtitan.txt", "torchtitan/pull/2389")
MEGATRON = sample_block("megatron.txt", "Megatron-LM/issues/756")
NANOGPT = sample_block("nanogpt.txt", "nanoGPT/issues/167")


def _detected(path: Path) -> str:
    return detect(expand_inputs([str(path)]))[0].reader.name


def test_metric_line_fields(tmp_path: Path) -> None:
    run, problems = load_run([str(write_lines(tmp_path / "train.log", GRAD_NORM))])
    assert problems == [] and run.frameworks == ["torchtitan"] and run.meta["framework"] == "torchtitan"
    assert run.series["loss"].steps.tolist() == [14, 15]
    assert run.series["loss"].values.tolist() == [3.24405, 3.10680]
    assert run.series["grad_norm"].values.tolist() == [0.8319, 0.8587]
    assert run.series["memory(GiB)"].values.tolist() == [9.46, 9.46]
    assert run.series["memory(%)"].values.tolist() == [64.99, 64.99]
    assert run.series["tps"].values.tolist() == [7282.0, 7334.0]  # "7,282"
    assert run.series["tflops"].values.tolist() == [0.52, 0.53]
    assert run.series["mfu(%)"].values.tolist() == [0.17, 0.17]
    assert run.series["loss"].lines.tolist() == [1, 2]
    assert "loss@rank0" not in run.series  # [rank0]: is the only rank: plain names
    assert run.events == []


def test_interleaved_lines_and_no_grad_norm(tmp_path: Path) -> None:
    run, _ = load_run([str(write_lines(tmp_path / "train.log", MID_2025))])
    assert run.series["loss"].steps.tolist() == [200, 210]
    assert run.series["loss"].values.tolist() == [6.1384, 6.0388]
    assert run.series["loss"].lines.tolist() == [2, 4]  # GC and profiler lines are not metrics
    assert run.series["tps"].values.tolist() == [5856.0, 5593.0]
    assert "grad_norm" not in run.series
    assert run.events == []


def test_duplicate_rank_lines_keep_first_copy(tmp_path: Path) -> None:
    run, _ = load_run([str(write_lines(tmp_path / "train.log", DUPLICATES))])
    assert run.series["loss"].steps.tolist() == [4, 5]
    assert run.series["loss"].values.tolist() == [7.62585, 7.07623]
    assert run.series["tflops"].values.tolist() == [314.71, 313.36]  # first of the two step-4 lines
    assert run.series["tflops"].lines.tolist() == [1, 3]
    assert run.series["tps"].values.tolist() == [10050.0, 10007.0]
    assert run.meta["torchtitan.lines_per_step"] == 2


def test_colours_ranks_nan_and_validation(tmp_path: Path) -> None:
    # torchtitan colours each field even in files (torchtitan/tools/logging.py's Color codes; the
    # fixture copies were stripped): rebuild the sample line with them, then a second rank,
    # a NaN loss with 'mfu: N/A', and a validation line from the log_validation template.
    red, green, turquoise, reset = "\x1b[31m", "\x1b[32m", "\x1b[38;2;54;234;195m", "\x1b[39m"
    body = GRAD_NORM[0].split("INFO - ", 1)[1]
    coloured = ("[rank0]:[titan] 2026-05-18 16:04:46,338 - root - INFO - "
                + body.replace("step:", red + "step:").replace("loss:", green + "loss:")
                .replace("memory:", turquoise + "memory:") + reset)
    rank1 = GRAD_NORM[0].replace("[rank0]:", "[rank1]:").replace("3.24405", "3.25001")
    nan_line = (GRAD_NORM[1].replace("3.10680", "    nan").replace("0.8587", "   nan")
                .replace("mfu: 0.17%", "mfu: N/A"))
    validate = "[rank0]:[titan] 2026-05-18 16:04:48,001 - root - INFO - validate step: 15  loss:  3.3012  memory:  9.46GiB(64.99%)  tps: 12,345"
    run, _ = load_run([str(write_lines(tmp_path / "train.log", [coloured, rank1, nan_line, validate]))])
    assert run.series["loss"].steps.tolist() == [14, 15]
    assert run.series["loss"].values[0] == 3.24405 and math.isnan(run.series["loss"].values[1])
    assert math.isnan(run.series["grad_norm"].value_at(15))
    assert run.series["mfu(%)"].steps.tolist() == [14]  # N/A is not a value
    assert run.series["loss@rank1"].values.tolist() == [3.25001]
    assert run.series["validate/loss"].values.tolist() == [3.3012]
    assert run.series["validate/tps"].value_at(15) == 12345.0
    assert run.series["memory(%)"].value_at(14) == 64.99


def test_cli_parse(tmp_path: Path) -> None:
    out = tmp_path / "rows.csv"
    proc = run_cli("parse", str(write_lines(tmp_path / "train.log", DUPLICATES)), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "torchtitan" in proc.stdout
    rows = [(r["step"], r["value"], r["line"]) for r in csv.DictReader(out.open()) if r["metric"] == "memory(GiB)"]
    assert rows == [("4", "66.91", "1"), ("5", "66.91", "3")]


def test_detection(tmp_path: Path) -> None:
    for i, block in enumerate((GRAD_NORM, MID_2025, DUPLICATES)):
        assert _detected(write_lines(tmp_path / f"t{i}.log", block)) == "torchtitan"
    assert _detected(write_lines(tmp_path / "m.log", MEGATRON)) == "megatron"
    assert _detected(write_lines(tmp_path / "n.log", NANOGPT)) == "nanogpt"
