"""The monitor's HF TrainerCallback and Lightning Callback on real runs of the real libraries
(tiny models built from configs, generated data, CPU, no downloads): the records match what the
framework itself logged, the alerts fire at the injected fault, and "stop" ends the fit through
the framework's own stop flag."""

from __future__ import annotations

import csv
import json
import math
import os
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from trainaudit.rules import Config
from synth import frameworks

K = frameworks.K
# Wall-clock rules are left out (another process on a shared CI machine can slow any step).
FAST: dict[str, Any] = {"rules_budget": 0.0, "warn": None, "config": Config(ignore=["TA406", "TA407", "TA408"])}


def records(log_dir: Path, kind: str = "step") -> list[dict[str, Any]]:
    lines = (log_dir / "trainaudit-monitor.jsonl").read_text(encoding="utf-8").splitlines()
    return [r for r in map(json.loads, lines) if r.get("type") == kind]


def hf_history(case_dir: Path) -> dict[int, dict[str, Any]]:
    state = json.loads((case_dir / "trainer_state.json").read_text(encoding="utf-8"))
    return {e["step"]: e for e in state["log_history"] if "loss" in e and "train_runtime" not in e}


def csv_rows(case_dir: Path) -> dict[int, dict[str, str]]:
    """metrics.csv training rows by 1-based optimizer step (the CSV counts steps done before the batch)."""
    with (case_dir / "metrics.csv").open(encoding="utf-8", newline="") as fh:
        rows: dict[int, dict[str, str]] = {}
        for r in csv.DictReader(fh):  # Lightning writes the lr (LearningRateMonitor) on its own row
            rows.setdefault(int(r["step"]) + 1, {}).update({k: v for k, v in r.items() if v})
    return {s: r for s, r in rows.items() if "train_loss" in r}


def test_hf_callback_records_what_the_trainer_logged(tmp_path: Path) -> None:
    from trainaudit.monitor.hf import TrainAuditCallback

    cb = TrainAuditCallback(log_dir=str(tmp_path / "mon"), **FAST)
    frameworks.run_hf_healthy(tmp_path, callbacks=[cb])
    assert cb.monitor is not None and cb.monitor.alerts == []
    steps = records(tmp_path / "mon")
    history = hf_history(tmp_path)
    assert [r["step"] for r in steps] == list(range(1, frameworks.STEPS + 1)) == sorted(history)
    for s in (1, 2, 57, 200):
        rec, logged = steps[s - 1], history[s]
        assert rec["loss"] == pytest.approx(logged["loss"], rel=1e-6)  # the model's loss = HF's per-step loss
        assert rec["grad_norm"] == pytest.approx(logged["grad_norm"], rel=1e-6)  # HF's norm before clipping
        assert rec["lr"] == pytest.approx(logged["learning_rate"], rel=1e-9)  # the lr of that update
    assert steps[0]["lr"] == 0.0 and steps[20]["lr"] == pytest.approx(3e-3)  # warm-up from 0 (HF), peak at 21
    assert "grad_norm/transformer.h.0.attn.c_attn" in steps[0]  # per-module norms on sampled steps
    start, end = records(tmp_path / "mon", "start")[0], records(tmp_path / "mon", "end")[0]
    assert start["framework"] == "hf" and start["model"] == "GPT2LMHeadModel"
    assert end == {"type": "end", "step": 200, "status": "completed", "completed": True, "alerts": 0}


def test_hf_callback_finds_the_nan_batch_and_stops_the_trainer(tmp_path: Path) -> None:
    from trainaudit.monitor.hf import TrainAuditCallback

    seen: list[Any] = []
    cb = TrainAuditCallback(log_dir=str(tmp_path / "mon"), stop_on="critical", on_alert=seen.append,
                            save_batch_on="critical", **FAST)
    frameworks.run_hf_nan_batch(tmp_path, callbacks=[cb])
    assert cb.monitor is not None
    origin = [a for a in cb.monitor.alerts if a.rule == "MON101"]
    assert len(origin) == 1 and origin[0].last_step == K and origin[0].first_bad_step == K
    assert origin[0].data["phase"] == "forward" and origin[0].metric == "net.0" and origin[0].data["input_nonfinite"]
    assert all(a.last_step >= K for a in cb.monitor.alerts) and [a.rule for a in seen] == [a.rule for a in cb.monitor.alerts]
    # the true loss is NaN in the monitor's record while HF's own log shows the filtered 0.0
    last = records(tmp_path / "mon")[-1]
    assert last["step"] == K and last["loss"] == "nan" and last["grad_norm"] == "nan"  # the writer's NaN spelling
    assert hf_history(tmp_path)[K]["loss"] == 0.0
    # stopped through control.should_training_stop, right after step K
    state = json.loads((tmp_path / "trainer_state.json").read_text(encoding="utf-8"))
    assert state["global_step"] == K and state["max_steps"] == frameworks.STEPS
    assert records(tmp_path / "mon", "end")[0]["status"] == "stopped"
    import torch

    saved = torch.load(tmp_path / "mon" / "batches" / f"step{K}.pt")
    # the batch as the Trainer passed it to model(**inputs), with the corrupt record's NaN
    assert set(saved) == {"x", "labels"} and tuple(saved["x"].shape) == (32, 20)
    assert torch.isnan(saved["x"]).nonzero().tolist() == [[3, 5]]


def test_lightning_callback_records_what_lightning_logged(tmp_path: Path) -> None:
    from trainaudit.monitor.lightning import TrainAuditCallback

    cb = TrainAuditCallback(log_dir=str(tmp_path / "mon"), **FAST)
    frameworks.run_pl_healthy(tmp_path, callbacks=[cb])
    assert cb.monitor is not None and cb.monitor.alerts == []
    steps = records(tmp_path / "mon")
    rows = csv_rows(tmp_path)
    assert [r["step"] for r in steps] == list(range(1, 193)) == sorted(rows)  # 3 epochs x 64 batches
    for s in (1, 64, 65, 192):
        rec, row = steps[s - 1], rows[s]
        assert rec["loss"] == pytest.approx(float(row["train_loss"]), rel=1e-6)
        assert rec["grad_norm"] == pytest.approx(float(row["grad_2.0_norm_total"]), rel=1e-5)  # before clipping
        assert rec["lr"] == pytest.approx(float(row["lr-Adam"]), rel=1e-6)
    end = records(tmp_path / "mon", "end")[0]
    assert end["status"] == "completed" and end["step"] == 192


def test_lightning_callback_stops_the_fit_at_the_first_nan(tmp_path: Path) -> None:
    from trainaudit.monitor.lightning import TrainAuditCallback

    cb = TrainAuditCallback(log_dir=str(tmp_path / "mon"), stop_on="critical", **FAST)
    frameworks.run_pl_nan_after_lr_jump(tmp_path, callbacks=[cb])
    assert cb.monitor is not None
    alerts = cb.monitor.alerts
    jump = [a for a in alerts if a.rule == "TA206"]
    assert jump and jump[0].first_bad_step == K and jump[0].last_step == K  # evaluated at once on the lr change
    critical = [a for a in alerts if a.severity == "critical"]
    steps = records(tmp_path / "mon")
    first_bad = next(r["step"] for r in steps if not (math.isfinite(float(r["loss"])) and math.isfinite(float(r["grad_norm"]))))
    assert K < first_bad <= K + 10
    assert critical and min(a.last_step for a in critical) == first_bad
    # trainer.should_stop: the fit ended after that step, far before the 200 planned
    assert steps[-1]["step"] == first_bad and max(csv_rows(tmp_path)) == first_bad
    assert records(tmp_path / "mon", "end")[0]["status"] == "stopped"


def test_lightning_callback_replays_training_step_to_find_the_nan_batch(tmp_path: Path) -> None:
    # training_step calls self.net, never the LightningModule's forward: the replay runs
    # training_step itself, with its self.log calls silenced; two micro-batches per update
    import lightning.pytorch as pl
    import torch

    from trainaudit.monitor.lightning import TrainAuditCallback

    class Module(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
            self.logged: list[str] = []

        def training_step(self, batch: Any, _idx: int) -> torch.Tensor:
            x, y = batch
            loss = torch.nn.functional.cross_entropy(self.net(x), y)
            self.log("train_loss", loss)
            return loss

        def log(self, name: str, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
            self.logged.append(name)
            super().log(name, *args, **kwargs)

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.01)

    torch.manual_seed(0)
    n = (2 * K + 4) * 16
    x, y = torch.randn(n, 8), torch.randint(0, 3, (n,))
    x[(2 * (K - 1) + 1) * 16 + 5, 2] = float("nan")  # in the second micro-batch of update K
    module = Module()
    cb = TrainAuditCallback(log_dir=str(tmp_path / "mon"), stop_on="critical", **FAST)
    trainer = pl.Trainer(max_epochs=1, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, accumulate_grad_batches=2,
                         callbacks=[cb])
    trainer.fit(module, torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=16))
    assert cb.monitor is not None
    [origin] = [a for a in cb.monitor.alerts if a.rule == "MON101"]
    assert origin.last_step == K and origin.metric == "net.0"
    assert origin.data["phase"] == "forward" and origin.data["input_nonfinite"] and origin.data["micro_batch"] == 1
    assert trainer.global_step == K  # stopped after the update of the NaN batch
    assert module.logged.count("train_loss") == 2 * K  # one per micro-batch: the replay logged nothing
    assert "log" not in vars(module)  # the silenced log is gone again


def test_the_hf_callback_leaves_loss_and_grad_norm_on_the_device(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from test_deferred_reads import Still, counting_reads

    from trainaudit.monitor.hf import TrainAuditCallback

    hooks = ("on_train_begin", "on_pre_optimizer_step", "on_optimizer_step", "on_step_end", "on_log", "on_train_end")
    with counting_reads(monkeypatch, tuple((TrainAuditCallback, h) for h in hooks)) as state:
        cb = TrainAuditCallback(log_dir=str(tmp_path / "mon"), clock=Still(), **FAST)
        frameworks.run_hf_healthy(tmp_path, callbacks=[cb])
    assert len(records(tmp_path / "mon")) == frameworks.STEPS == 200
    # the batches of 25 steps and the sampled steps (per-layer norms): no read per step, where the
    # callback used to read the loss and its own grad norm at every step (400 reads)
    assert sum(state["reads"].values()) <= 20, state["reads"]


def test_the_lightning_callback_reads_nothing_of_its_own_per_step(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from test_deferred_reads import Still, counting_reads

    from trainaudit.monitor.lightning import TrainAuditCallback

    hooks = ("on_train_start", "on_train_batch_start", "on_before_optimizer_step", "on_train_batch_end", "on_train_end")
    with counting_reads(monkeypatch, tuple((TrainAuditCallback, h) for h in hooks)) as state:
        cb = TrainAuditCallback(log_dir=str(tmp_path / "mon"), clock=Still(), **FAST)
        frameworks.run_pl_healthy(tmp_path, callbacks=[cb])
    assert len(records(tmp_path / "mon")) == 192
    # the for-each Adam's check before each update is the one read per step left (documented:
    # fused optimizers take the check on the device); the callback's grad norm is not read
    assert sum(state["reads"].values()) <= 192 + 20, state["reads"]
