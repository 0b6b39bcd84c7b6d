"""NeMo 2 ProgressPrinter lines and NeMo 1.x tqdm postfixes, on the verbatim samples."""

from __future__ import annotations

import math
from pathlib import Path

from shared_data import run_cli, sample_block, write_lines
from trainaudit.ingest import detect, load_run
from trainaudit.ingest.sources import expand_inputs
from trainaudit.model import EventKind

NEMO2 = sample_block("nemo.txt", "bionemo-recipes/pull/740")
NEMO1 = sample_block("nemo.txt", "NeMo-Framework-Launcher/issues/55")
NEMO1_NCCL = sample_block("error_signatures.txt", "pytorch/issues/118369")
BRIDGE = sample_block("megatron.txt", "Megatron-Bridge/issues/4024")
LIGHTNING = sample_block("pytorch_lightning.txt", "pytorch-lightning/issues/4225")


def _detected(path: Path) -> str:
    return detect(expand_inputs([str(path)]))[0].reader.name


def test_nemo2_progress_printer_step_is_global_step(tmp_path: Path) -> None:
    log = write_lines(tmp_path / "nemo2.log", NEMO2)
    run, problems = load_run([str(log)])
    assert problems == [] and run.frameworks == ["nemo"] and run.meta["framework"] == "nemo2"
    loss = run.series["reduced_train_loss"]
    assert loss.steps.tolist() == [120, 121, 125]
    assert loss.values.tolist() == [1.233, 1.288, 1.34]
    assert loss.lines.tolist() == [1, 2, 3]
    assert run.series["lr"].values.tolist() == [3e-05] * 3
    assert run.series["consumed_samples"].values.tolist() == [121.0, 122.0, 126.0]
    assert run.series["train_step_timing in s"].value_at(121) == 0.03163
    assert run.series["val_loss"].value_at(125) == 4.106
    assert "global_step" not in run.series  # it is the step, not a metric
    assert run.events == []


def test_nemo2_nan_and_validation_lines(tmp_path: Path) -> None:
    # ProgressPrinter formats values with {:.4}: a NaN loss prints as "nan"; validation lines
    # carry only their counter.
    nan_line = NEMO2[1].replace("reduced_train_loss: 1.288", "reduced_train_loss: nan")
    log = write_lines(tmp_path / "nemo2.log", [NEMO2[0], "Validation: iteration 1/4", nan_line])
    run, _ = load_run([str(log)])
    loss = run.series["reduced_train_loss"]
    assert loss.steps.tolist() == [120, 121]
    assert loss.values[0] == 1.233 and math.isnan(loss.values[1])


def test_nemo1_tqdm_postfix(tmp_path: Path) -> None:
    log = write_lines(tmp_path / "nemo1.log", NEMO1)
    run, problems = load_run([str(log)])
    assert problems == [] and run.meta["framework"] == "nemo1"
    assert run.series["reduced_train_loss"].steps.tolist() == [794]
    assert run.series["reduced_train_loss"].values.tolist() == [3.09]
    assert run.series["loss"].value_at(794) == 3.1
    assert run.series["consumed_samples"].value_at(794) == 1.63e6
    assert "v_num" not in run.series and "global_step" not in run.series


def test_nemo1_rounded_global_step_uses_bar_offset(tmp_path: Path) -> None:
    # tqdm prints global_step with 3 significant digits once it is large ("3.2e+4"); the bar
    # counter plus the offset seen on an exact state keeps the steps distinct.
    later = NEMO1[0].replace("795/77225", "32040/77225").replace("global_step=794.0", "global_step=3.2e+4")
    log = write_lines(tmp_path / "nemo1.log", [NEMO1[0] + "\r" + later])
    run, _ = load_run([str(log)])
    assert run.series["reduced_train_loss"].steps.tolist() == [794, 32039]
    assert run.series["reduced_train_loss"].lines.tolist() == [1, 1]


def test_nemo1_bar_glued_to_nccl_timeout(tmp_path: Path) -> None:
    log = write_lines(tmp_path / "nemo1.log", NEMO1_NCCL)
    run, _ = load_run([str(log)])
    assert _detected(log) == "nemo"
    # No exact global_step in this log: the rounded one is all there is.
    assert run.series["reduced_train_loss"].steps.tolist() == [32000]
    assert run.series["reduced_train_loss"].values.tolist() == [2.59]
    assert run.series["consumed_samples"].value_at(32000) == 2.56e7
    assert all(e.kind != EventKind.MISSING_METRIC for e in run.events)


def test_detection_nemo_vs_megatron_bridge_and_lightning(tmp_path: Path) -> None:
    assert _detected(write_lines(tmp_path / "a.log", NEMO2)) == "nemo"
    assert _detected(write_lines(tmp_path / "b.log", NEMO1)) == "nemo"
    # Megatron-Bridge prints Megatron iteration lines: those are the megatron reader's.
    assert _detected(write_lines(tmp_path / "c.log", BRIDGE)) == "megatron"
    # A plain Lightning bar (no NeMo keys) stays Lightning's.
    assert _detected(write_lines(tmp_path / "d.log", LIGHTNING)) == "lightning"


def test_cli_parse_nemo(tmp_path: Path) -> None:
    log = write_lines(tmp_path / "nemo2.log", NEMO2)
    out = tmp_path / "series.csv"
    res = run_cli("parse", str(log), "-o", str(out))
    assert res.returncode == 0, res.stderr
    assert "nemo" in res.stdout
    rows = out.read_text().splitlines()
    assert any(r.endswith(",120,reduced_train_loss,1.233") for r in rows), rows[:5]
