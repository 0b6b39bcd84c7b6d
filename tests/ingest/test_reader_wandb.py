"""W&B run folders. The `wandb` client is not installed here (and its offline mode no longer writes
wandb-history.jsonl), so the folder is built by hand to the documented layout
(wandb/wandb#1768), with the verbatim wandb-summary.json of
tests/fixtures/log_samples/wandb_mlflow.txt (HF Trainer WandbCallback run)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from shared_data import run_cli, sample_block, write_lines

from trainaudit.ingest import load_run
from trainaudit.ingest.base import Sample
from trainaudit.ingest.formats.wandb import WandbReader

SUMMARY_SOURCE = "0-KaiKai-0/stanford_alpaca"

CONFIG_YAML = """wandb_version: 1

_wandb:
  desc: null
  value:
    cli_version: 0.15.12
    framework: huggingface
learning_rate:
  desc: null
  value: 2.0e-05
per_device_train_batch_size:
  desc: null
  value: 4
optim:
  desc: null
  value: adamw_torch
"""


def _history_lines() -> list[str]:
    # HF WandbCallback: train/ prefixes, train/global_step as the step; W&B writes NaN / Infinity.
    rows = [
        {"train/loss": 1.25, "train/learning_rate": 2e-05, "train/epoch": 0.01, "train/global_step": 10,
         "_timestamp": 1701416844.1, "_runtime": 12.5, "_step": 0},
        {"train/loss": 1.0, "train/learning_rate": 1.9e-05, "train/epoch": 0.02, "train/global_step": 20,
         "_timestamp": 1701416850.2, "_runtime": 18.75, "_step": 1},
        {"eval/loss": 1.5, "eval/runtime": 3.0, "train/global_step": 20, "_timestamp": 1701416852.0,
         "_runtime": 20.5, "_step": 2},
    ]
    lines = [json.dumps(r) for r in rows]
    # NaN / inf loss, a nested dict and a histogram media dict (skipped); no step key -> _step
    lines.append('{"train/loss": NaN, "grad": {"norm": Infinity, "max": -Infinity}, '
                 '"weights": {"_type": "histogram", "values": [1, 2], "bins": [0, 1, 2]}, '
                 '"_timestamp": 1701416860.0, "_runtime": 28.0, "_step": 30}')
    lines.append('{"train/loss": 0.9, "_runtime": 30.0, "_st')  # killed mid-write
    return lines


@pytest.fixture()
def run_dir(tmp_path: Path) -> Path:
    root = tmp_path / "wandb" / "offline-run-20231201_074724-ab12cd34"
    files = root / "files"
    files.mkdir(parents=True)
    write_lines(files / "wandb-history.jsonl", _history_lines())
    write_lines(files / "wandb-summary.json", sample_block("wandb_mlflow.txt", SUMMARY_SOURCE))
    (files / "config.yaml").write_text(CONFIG_YAML, encoding="utf-8")
    write_lines(files / "requirements.txt", ["torch==2.1.0", "transformers==4.35.2"])
    # the binary transaction log: ':W&B' header, 0xBEE1 magic, version 0, then a record
    (root / "run-ab12cd34.wandb").write_bytes(b":W&B\xe1\xbe\x00" + b"\x8f\x12\x00\x00\x05\x00\x01" + bytes(40))
    return root


def test_history_summary_config(run_dir: Path) -> None:
    run, problems = load_run([str(run_dir)])
    assert not [p for p in problems if p.fatal]
    loss = run.series["train/loss"]
    assert loss.steps.tolist() == [10, 20, 30]
    assert loss.values[0] == 1.25 and loss.values[1] == 1.0 and math.isnan(loss.values[2])
    assert loss.lines.tolist() == [1, 2, 4]
    assert run.series["eval/loss"].steps.tolist() == [20] and run.series["eval/loss"].lines.tolist() == [3]
    assert run.series["grad.norm"].values.tolist() == [math.inf]
    assert run.series["grad.max"].values.tolist() == [-math.inf]
    assert run.series["_runtime"].value_at(20) == 20.5  # eval row at the same step is read last
    assert "weights" not in run.series and "_timestamp" not in run.series and "_step" not in run.series
    # summary (verbatim public sample) -> meta; with a history beside it, not extra data points
    assert run.meta["wandb.summary.train/train_loss"] == 0.5294419806848214
    assert run.meta["wandb.summary._runtime"] == 13153.060567855835
    assert run.meta["wandb.runtime_s"] == 13217.0
    assert "train/train_loss" not in run.series
    assert run.meta["config.learning_rate"] == 2e-05
    assert run.meta["config.per_device_train_batch_size"] == 4 and run.meta["config.optim"] == "adamw_torch"
    assert run.meta["framework"] == "wandb"
    fmts = {s.path.rsplit("/", 1)[-1]: s.format for s in run.sources}
    assert fmts["wandb-history.jsonl"] == fmts["wandb-summary.json"] == fmts["config.yaml"] == "wandb"
    # the binary .wandb log is skipped as an unknown binary file, not a crash
    [skip] = [p for p in problems if p.path.endswith("run-ab12cd34.wandb")]
    assert not skip.fatal and "unknown format (binary file)" in skip.message
    assert "run-ab12cd34.wandb" not in fmts


def test_summary_alone_gives_last_values(tmp_path: Path) -> None:
    """Current clients keep history only in the binary log: then the summary is the data."""
    files = tmp_path / "files"
    files.mkdir()
    write_lines(files / "wandb-summary.json", sample_block("wandb_mlflow.txt", SUMMARY_SOURCE))
    run, problems = load_run([str(tmp_path)])
    assert problems == []
    assert run.series["train/loss"].steps.tolist() == [1218]  # train/global_step
    assert run.series["train/loss"].values.tolist() == [0.338]
    assert run.series["train/train_loss"].values.tolist() == [0.5294419806848214]


def test_sniff_by_content_when_renamed() -> None:
    r = WandbReader()
    hist = _history_lines()[0].encode() + b"\n"
    assert r.sniff(Sample.from_head("wandb-history.jsonl", hist)) == 0.95
    assert r.sniff(Sample.from_head("history.jsonl", hist)) == 0.9
    summ = "\n".join(sample_block("wandb_mlflow.txt", SUMMARY_SOURCE)).encode()
    assert r.sniff(Sample.from_head("summary.json", summ)) == 0.9
    assert r.sniff(Sample.from_head("config.yaml", CONFIG_YAML.encode())) == 0.95
    assert r.sniff(Sample.from_head("config.yaml", b"lr: 0.1\nbatch: 4\n")) == 0.0
    assert r.sniff(Sample.from_head("x.jsonl", b'{"loss": 1.0, "step": 3}\n')) == 0.0


def test_cli_binary_wandb_file_alone_exits_2(run_dir: Path) -> None:
    proc = run_cli("parse", str(run_dir / "run-ab12cd34.wandb"))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().count("\n") == 0
    assert "unknown format" in proc.stderr and "binary" in proc.stderr


def test_cli_run_folder(run_dir: Path) -> None:
    proc = run_cli("parse", str(run_dir))
    assert proc.returncode == 0, proc.stderr
    assert "wandb" in proc.stdout and "Traceback" not in proc.stderr
    assert "10..30" in proc.stdout
