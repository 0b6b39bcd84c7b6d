"""Rules the synth catalogue does not label (or not per rule) on tiny real torch runs trained here
(tests/rules/tinyruns.py), read back through the generic JSONL reader."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import tinyruns as T

from trainaudit.diagnosis import diagnose_run
from trainaudit.ingest import load_run
from trainaudit.rules import run_rules


def _run(path: Path):
    run, problems = load_run([str(path)])
    assert not [p for p in problems if p.fatal]
    return run


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("tiny")
    return {
        "healthy": T.classifier_run(d / "healthy.jsonl"),
        "healthy_cosine": T.classifier_run(d / "cos.jsonl", seed=3, lr_at=lambda s: 3e-3 * min(1, s / 30) *
                                           (0.55 + 0.45 * math.cos(math.pi * s / 300))),
        "healthy_restart": T.classifier_run(d / "restart.jsonl", restart_at=(100, 160), seed=4),
        "frozen": T.classifier_run(d / "frozen.jsonl", freeze=True),
        "lr0": T.classifier_run(d / "lr0.jsonl", lr_at=lambda s: 0.0),
        "overfit": T.overfit_run(d / "overfit.jsonl"),
        "vanish": T.vanishing_run(d / "vanish.jsonl"),
        "leak": T.leaking_run(d / "leak.jsonl"),
        "stall": T.stalling_run(d / "stall.jsonl"),
    }


@pytest.mark.parametrize("name", ["healthy", "healthy_cosine", "healthy_restart"])
def test_healthy_runs_are_silent(runs, name):
    run = _run(runs[name])
    if name == "healthy_restart":
        assert 101 in run.meta["restarts"]  # the resumed run re-logged steps 101..159
    loud = [(h.rule, h.message) for h in run_rules(run) if h.severity != "info"]
    assert not loud
    d = diagnose_run(run)
    assert (d.verdict, d.category, d.first_bad_step) == ("healthy", "healthy", None)


def test_frozen_model_zero_grad_and_flat_loss(runs):
    hits = {h.rule: h for h in run_rules(_run(runs["frozen"]))}
    assert hits["TA203"].category == "plateau" and hits["TA203"].metric == "grad_norm"
    assert hits["TA203"].first_bad_step == 1
    d = diagnose_run(_run(runs["frozen"]))
    assert (d.category, d.first_bad_step) == ("plateau", 1)


def test_lr_zero(runs):
    hits = {h.rule: h for h in run_rules(_run(runs["lr0"]))}
    assert hits["TA207"].category == "plateau" and hits["TA207"].first_bad_step == 1
    assert "0 on 100%" in hits["TA207"].message
    d = diagnose_run(_run(runs["lr0"]))
    assert d.category == "plateau" and d.stories[0].fix.startswith("Fix the learning-rate schedule")


def test_overfitting_epoch_and_gap(runs):
    run = _run(runs["overfit"])
    (h,) = [h for h in run_rules(run) if h.rule == "TA301"]
    v = run.series["val_loss"]
    best = int(v.steps[int(v.values.argmin())])
    assert h.data["best_step"] == best
    assert h.first_bad_step == best + 1  # epochs: the first epoch after the validation minimum
    assert "final gap" in h.message
    assert diagnose_run(run).category == "overfitting"


def test_vanishing_gradients_from_layer_norms(runs):
    run = _run(runs["vanish"])
    (h,) = [h for h in run_rules(run) if h.rule == "TA205"]
    assert h.category == "grad_vanishing" and h.metric == "grad_norm/layer_first"
    assert h.first_bad_step == 1
    assert diagnose_run(run).category == "grad_vanishing"  # explains the flat loss (TA202)


def test_memory_growth_from_a_real_leak(runs):
    run = _run(runs["leak"])
    (h,) = [h for h in run_rules(run) if h.rule == "TA403"]
    assert h.category == "memory_growth" and h.metric == "mem_used_mb"
    assert h.data["slope_per_step"] > 0
    # it leaks from step 1 at a constant rate; the rule answers where the growth becomes clear
    # (a tenth of the way to the final level), which must be in the first quarter of the run
    assert 1 <= h.first_bad_step <= 30


def test_data_loader_stall_every_fourth_step(runs):
    run = _run(runs["stall"])
    (h,) = [h for h in run_rules(run) if h.rule == "TA408"]
    assert h.category == "data_pipeline" and h.data["period"] == 4
    assert h.first_bad_step % 4 == 0
    assert diagnose_run(run).category == "data_pipeline"
