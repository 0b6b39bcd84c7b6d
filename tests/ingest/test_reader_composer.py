"""Composer ConsoleLogger multi-line records and llm-foundry logging lines."""

from __future__ import annotations

import csv
import math
from pathlib import Path

from shared_data import run_cli, sample_block, write_lines
from trainaudit.ingest import detect, load_run
from trainaudit.ingest.sources import expand_inputs

RECORDS = sample_block("composer_llmfoundry.txt", "scripts/train/README.md")
LOGGING = sample_block("composer_llmfoundry.txt", "llm-foundry/pull/884")
MEGATRON = sample_block("megatron.txt", "Megatron-LM/issues/756")
HF = sample_block("hf_transformers.txt", "transformers/pull/35207")


def _detected(path: Path) -> str:
    return detect(expand_inputs([str(path)]))[0].reader.name


def _tab_indented(lines: list[str]) -> list[str]:
    # The README indents items with 9 spaces; the program writes "\t " (console_logger.py).
    return ["\t " + ln.lstrip() if ln.startswith(" ") else ln for ln in lines]


def test_records_with_readme_indentation(tmp_path: Path) -> None:
    run, problems = load_run([str(write_lines(tmp_path / "train.log", RECORDS))])
    assert problems == [] and run.frameworks == ["composer"] and run.meta["framework"] == "composer"
    ce = run.series["LanguageCrossEntropy"]
    assert ce.steps.tolist() == [1, 2] and ce.values.tolist() == [10.9736, 10.9724]
    assert ce.lines.tolist() == [2, 6]
    assert run.series["Perplexity"].values.tolist() == [58312.0586, 58243.8086]
    assert run.series["loss/train/total"].lines.tolist() == [4, 8]
    assert run.events == []


def test_tab_indented_records_and_foundry_logging(tmp_path: Path) -> None:
    run, _ = load_run([str(write_lines(tmp_path / "train.log", LOGGING + _tab_indented(RECORDS)))])
    assert run.series["loss/train/total"].steps.tolist() == [1, 2]
    assert run.series["loss/train/total"].values.tolist() == [10.9736, 10.9724]
    assert run.series["loss/train/total"].lines.tolist() == [6, 10]
    assert run.meta["run_name"] == "interactive-il0GeA"
    assert run.meta["seed"] == 17
    assert run.events == []


def test_time_batch_epoch_headers_eval_records_and_nan(tmp_path: Path) -> None:
    # Header and item shapes from composer's console_logger.py :
    # epoch-based progress, a record whose time/batch gives the step, an eval record and NaN.
    lines = _tab_indented(RECORDS) + [
        "[epoch=2][batch=3/100]:",
        "\t Train loss/train/total: nan",
        "\t Train time/batch: 103",
        "[Eval batch=1/4] Eval on eval data",
        "\t Eval metrics/eval/LanguageCrossEntropy: 10.9802",
        "\t Eval Perplexity: inf",
        "[epoch=2][batch=4/100]:",
        "\t Train loss/train/total: 10.9001",
    ]
    run, _ = load_run([str(write_lines(tmp_path / "train.log", lines))])
    loss = run.series["loss/train/total"]
    assert loss.steps.tolist() == [1, 2, 103, 104]  # time/batch; then (2-1)*100 + 4
    assert math.isnan(loss.values[2]) and loss.values[3] == 10.9001
    assert run.series["metrics/eval/LanguageCrossEntropy"].steps.tolist() == [103]
    assert run.series["eval/Perplexity"].values.tolist() == [math.inf]
    assert run.series["Perplexity"].steps.tolist() == [1, 2]


def test_cli_parse(tmp_path: Path) -> None:
    out = tmp_path / "rows.csv"
    proc = run_cli("parse", str(write_lines(tmp_path / "train.log", RECORDS)), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "composer" in proc.stdout
    rows = [(r["step"], r["value"], r["line"]) for r in csv.DictReader(out.open()) if r["metric"] == "Perplexity"]
    assert rows == [("1", "58312.0586", "3"), ("2", "58243.8086", "7")]


def test_detection(tmp_path: Path) -> None:
    assert _detected(write_lines(tmp_path / "a.log", RECORDS)) == "composer"
    assert _detected(write_lines(tmp_path / "b.log", _tab_indented(RECORDS))) == "composer"
    assert _detected(write_lines(tmp_path / "c.log", LOGGING + RECORDS)) == "composer"
    assert _detected(write_lines(tmp_path / "m.log", MEGATRON)) == "megatron"
    assert _detected(write_lines(tmp_path / "h.log", HF)) == "hf"
