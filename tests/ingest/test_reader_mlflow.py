"""MLflow FileStore run folders written by mlflow itself (mlflow-skinny, file: tracking URI), plus
the verbatim metric line of tests/fixtures/log_samples/wandb_mlflow.txt."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from shared_data import run_cli, sample_block, write_lines

from trainaudit.ingest import load_run
from trainaudit.ingest.base import Sample
from trainaudit.ingest.formats.mlflow import MLflowReader, metric_name
from trainaudit.model import EventKind, SourceKind


@pytest.fixture()
def mlruns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Two runs logged by mlflow: one finished, one failed mid-way; metric keys with '/'."""
    import mlflow

    # MLflow 3 refuses the file store unless asked; it is still what `mlruns/` folders contain.
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    monkeypatch.chdir(tmp_path)
    mlflow.set_tracking_uri((tmp_path / "mlruns").as_uri())
    try:
        mlflow.set_experiment("tiny-gpt")
        with mlflow.start_run(run_name="good"):
            mlflow.log_params({"lr": 0.0003, "optimizer": "adamw", "model/n_layer": 2})
            for step in range(0, 50, 10):
                mlflow.log_metric("train/loss", 3.0 - step / 100, step=step)
                mlflow.log_metric("grad_norm", math.nan if step == 30 else 1.0 + step / 10, step=step)
            mlflow.log_metrics({"val_loss": math.inf}, step=40)
        with pytest.raises(RuntimeError), mlflow.start_run(run_name="bad"):
            mlflow.log_metric("train/loss", 9.5, step=0)
            raise RuntimeError("diverged")  # mlflow marks the run FAILED on an exception
    finally:
        mlflow.set_tracking_uri(None)
    return tmp_path / "mlruns"


def _run_dir(mlruns: Path, name: str) -> Path:
    for meta in mlruns.glob("*/*/meta.yaml"):
        if f"run_name: {name}" in meta.read_text():
            return meta.parent
    raise AssertionError(f"run {name} not found")


def test_run_folder_written_by_mlflow(mlruns: Path) -> None:
    run_dir = _run_dir(mlruns, "good")
    assert (run_dir / "metrics" / "train" / "loss").is_file()  # '/' in a key -> nested folders
    run, problems = load_run([str(run_dir)])
    loss = run.series["train/loss"]
    assert loss.steps.tolist() == [0, 10, 20, 30, 40]
    assert loss.values.tolist() == [3.0, 2.9, 2.8, 2.7, 2.6]
    assert loss.lines.tolist() == [1, 2, 3, 4, 5]
    g = run.series["grad_norm"]
    assert g.value_at(20) == 3.0 and math.isnan(g.value_at(30))
    assert run.series["val_loss"].values.tolist() == [math.inf]
    assert run.meta["config.lr"] == 0.0003 and run.meta["config.optimizer"] == "adamw"
    assert run.meta["config.model/n_layer"] == 2.0
    assert run.meta["mlflow.run_name"] == "good" and run.meta["mlflow.status"] == "FINISHED"
    [phase] = [e for e in run.events if e.kind is EventKind.PHASE]
    assert phase.data["completed"] is True and phase.raw == "status: 3"
    formats = {s.path.split("/")[-1]: s.format for s in run.sources}
    assert formats["loss"] == "mlflow" and formats["meta.yaml"] == "mlflow"
    assert all(s.kind is SourceKind.METRICS for s in run.sources if s.format == "mlflow")
    # params/ and tags/ files carry no metrics: at most non-fatal notes, never a fatal problem
    assert not [p for p in problems if p.fatal]


def test_whole_mlruns_and_failed_run(mlruns: Path) -> None:
    run, problems = load_run([str(mlruns)])
    assert not [p for p in problems if p.fatal]
    assert run.meta.get("mlflow.experiment_name") in ("Default", "tiny-gpt")
    errors = [e for e in run.events if e.kind is EventKind.ERROR]
    assert len(errors) == 1 and errors[0].data["status"] == "FAILED"
    assert "ended with status FAILED" in errors[0].message
    # the failed run's one loss value is read too (two runs given together merge by step)
    bad = load_run([str(_run_dir(mlruns, "bad"))])[0]
    assert bad.series["train/loss"].values.tolist() == [9.5]


def test_experiment_folder_cli(mlruns: Path) -> None:
    exp = _run_dir(mlruns, "good").parent
    proc = run_cli("parse", str(exp))
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "mlflow" in proc.stdout and "train/loss" in proc.stdout.replace("\n", "")


def test_verbatim_fixture_line_and_documented_variants(tmp_path: Path) -> None:
    """The public sample (1010sb/ImageClass mlruns .../metrics/val_loss), plus the documented
    2-field legacy and 5-field dataset forms, in a hand-made folder of the same layout."""
    lines = sample_block("wandb_mlflow.txt", "mlruns/586757370402886605")
    assert lines == ["1691409746901 0.3188439607620239 0"]
    metrics = tmp_path / "mlruns" / "586757370402886605" / "3a9af4bdab714eb69a4ed7582c387268" / "metrics"
    metrics.mkdir(parents=True)
    write_lines(metrics / "val_loss", lines + ["1691409800000 0.2915 1", "1691409900000 nan 2"])
    write_lines(metrics / "acc", ["1691409746901 0.5", "1691409746902 0.75 3 eval_ds 1a2b3c"])
    run, problems = load_run([str(tmp_path / "mlruns")])
    assert problems == []
    v = run.series["val_loss"]
    assert v.steps.tolist() == [0, 1, 2]
    assert v.values[0] == 0.3188439607620239 and v.values[1] == 0.2915 and math.isnan(v.values[2])
    acc = run.series["acc"]
    assert acc.steps.tolist() == [0, 3] and acc.values.tolist() == [0.5, 0.75]


def test_sniff_line_shape() -> None:
    r = MLflowReader()
    assert r.sniff(Sample.from_head("loss", b"1691409746901 0.31 0\n1691409746902 0.30 1\n")) == 0.85
    assert r.sniff(Sample.from_head("loss", b"1691409746901 0.31\n")) == 0.5  # legacy, no step
    assert r.sniff(Sample.from_head("x.log", b"epoch 1 loss 0.3\n")) == 0.0
    assert r.sniff(Sample.from_head("x.log", b"1691409746901 hello 0\n")) == 0.0
    assert metric_name("a.zip!mlruns/1/abc/metrics/train/metrics/acc", "acc") == "train/metrics/acc"
    assert metric_name("val_loss", "val_loss") == "val_loss"
