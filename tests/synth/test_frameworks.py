"""Synth cases run through the real HF Trainer and Lightning: registered with labels, their
files are what the frameworks really printed and wrote, and the labels hold on those files."""

from __future__ import annotations

import csv
import json
import math
import os
import re

import pytest
from shared_data import run_synth
from synth_fixture import SynthRuns

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from synth import catalogue, frameworks

K = frameworks.K
DICT_RE = re.compile(r"\{'loss': [^}]*\}")


def test_framework_cases_are_registered_and_listed() -> None:
    cases = catalogue()
    names = ["hf-trainer-healthy", "hf-trainer-lr-jump", "hf-trainer-nan-batch", "lightning-healthy",
             "lightning-nan-after-lr-jump", "lightning-overfit"]
    assert all(n in cases and "framework" in cases[n].tags for n in names)
    assert {frameworks.needs(cases[n]) for n in names} == {"transformers", "lightning"}
    out = run_synth("--list").stdout
    line = next(ln for ln in out.splitlines() if ln.startswith("lightning-overfit "))
    assert "overfitting" in line and "[needs lightning]" in line
    assert "[needs" not in next(ln for ln in out.splitlines() if ln.startswith("nan-batch "))


def test_hf_trainer_nan_batch_is_hidden_by_the_trainer(synth_runs: SynthRuns) -> None:
    case = synth_runs.get("hf-trainer-nan-batch")
    assert (case.label["style"], case.label["category"], case.label["first_bad_step"]) == ("hf-trainer", "nan_inf", K)
    assert {f["path"]: f["format"] for f in case.label["files"]} == {
        "hf-trainer-nan-batch/stdout.log": "hf", "hf-trainer-nan-batch/trainer_state.json": "hf_trainer_state"}
    dicts = DICT_RE.findall(case.file("stdout.log").read_text(encoding="utf-8"))
    assert len(dicts) == frameworks.STEPS  # logging_steps=1, transformers 5.x quotes every value
    assert dicts[K - 1] == "{'loss': '0', 'grad_norm': 'nan', 'learning_rate': '0.001', 'epoch': '0.6'}"
    assert "'grad_norm': 'nan'" not in dicts[K - 2] and not dicts[K - 2].startswith("{'loss': '0',")
    history = json.loads(case.file("trainer_state.json").read_text(encoding="utf-8"))["log_history"]
    assert history[K - 1]["step"] == K and history[K - 1]["loss"] == 0.0 and math.isnan(history[K - 1]["grad_norm"])
    assert history[-1]["train_runtime"] > 0  # the end-of-training summary


def test_hf_trainer_lr_jump_and_healthy_labels(synth_runs: SynthRuns) -> None:
    jump = synth_runs.get("hf-trainer-lr-jump")
    facts = jump.label["facts"]
    assert facts["lr_before"] == pytest.approx(4e-3) and facts["lr_after"] == pytest.approx(0.2)
    assert facts["loss_after"] > 1.3 * facts["loss_before"] and jump.label["first_bad_step_window"] == [K, K + 5]
    dicts = DICT_RE.findall(jump.file("stdout.log").read_text(encoding="utf-8"))
    assert "'learning_rate': '0.004'" in dicts[K - 2] and "'learning_rate': '0.2'" in dicts[K - 1]
    healthy = synth_runs.get("hf-trainer-healthy")
    assert healthy.label["healthy"] and healthy.label["facts"]["loss_last"] < 0.8 * healthy.label["facts"]["loss_first"]


def test_lightning_nan_after_lr_jump_progress_bar_and_csv(synth_runs: SynthRuns) -> None:
    case = synth_runs.get("lightning-nan-after-lr-jump")
    first = case.label["facts"]["first_nan_step"]
    assert K < first <= K + 10 and case.label["first_bad_step_window"] == [K - 1, first]
    console = case.file("stdout.log").read_text(encoding="utf-8").replace("\r", "\n")
    bars = {int(m.group(1)): m.group(2) for m in re.finditer(r"Epoch 0: .*? (\d+)/200 \[.*?train_loss=([^\]\s]+)\]", console)}
    assert bars[first] == "nan.0" and bars[first - 1] != "nan.0"  # Lightning pads a NaN postfix to nan.0
    with case.file("metrics.csv").open(encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh))
    lr = {int(r["step"]): float(r["lr-SGD"]) for r in rows if r["lr-SGD"]}
    assert lr[K - 2] == pytest.approx(0.05) and lr[K - 1] == pytest.approx(50.0)  # CSV steps are 0-based
    loss = {int(r["step"]): float(r["train_loss"]) for r in rows if r["train_loss"]}
    assert math.isnan(loss[first - 1]) and math.isfinite(loss[first - 2])


def test_lightning_overfit_label(synth_runs: SynthRuns) -> None:
    case = synth_runs.get("lightning-overfit")
    f = case.label["facts"]
    assert case.label["category"] == "overfitting" and f["epochs"] == 50 and f["steps_per_epoch"] == 4
    assert f["rise"] >= 0.3 and f["loss_end"] < 0.7 * f["loss_at_val_min"]
    lo, hi = case.label["first_bad_step_window"]
    assert lo < case.label["first_bad_step"] < hi and case.label["first_bad_step"] > f["val_min_step_csv"]
