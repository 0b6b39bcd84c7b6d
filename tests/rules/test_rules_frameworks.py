"""The rules on what the real HF Trainer and Lightning printed and wrote (synth/frameworks.py):
each fires with the right category and first bad step, and the healthy framework runs stay silent."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from trainaudit.diagnosis import diagnose_run
from trainaudit.ingest import load_run
from trainaudit.model import Run
from trainaudit.rules import run_rules
from trainaudit.series.roles import elapsed_clock, find_roles, norm

# case, file, rule, category, exact first bad step (None: inside the label's window)
FIRES = [
    ("hf-trainer-nan-batch", "stdout.log", "TA101", "nan_inf", 120),  # hidden NaN: loss '0', grad_norm 'nan'
    ("hf-trainer-nan-batch", "trainer_state.json", "TA101", "nan_inf", 120),
    ("hf-trainer-lr-jump", "stdout.log", "TA206", "divergence", 120),  # the cause, at the injected step
    ("hf-trainer-lr-jump", "trainer_state.json", "TA206", "divergence", 120),
    ("hf-trainer-lr-jump", "stdout.log", "TA201", "divergence", None),
    ("lightning-nan-after-lr-jump", "stdout.log", "TA101", "nan_inf", None),  # train_loss=nan.0 in the bar
    ("lightning-nan-after-lr-jump", "metrics.csv", "TA101", "nan_inf", None),
    ("lightning-nan-after-lr-jump", "metrics.csv", "TA206", "divergence", 119),  # lr-SGD x1000 (CSV step 119 = K)
    ("lightning-overfit", "metrics.csv", "TA301", "overfitting", None),
    ("lightning-overfit", "stdout.log", "TA301", "overfitting", None),  # val_loss from the epoch bar's postfix
]


@pytest.mark.parametrize("case,file,rule,category,exact", FIRES, ids=[f"{c}-{r}-{f}" for c, f, r, _, _ in FIRES])
def test_rule_fires_on_framework_output(synth_runs, case, file, rule, category, exact):
    c = synth_runs.get(case)
    run, problems = load_run([str(c.file(file))])
    assert not problems
    hits = [h for h in run_rules(run) if h.rule == rule]
    assert hits, f"{rule} silent on {case}/{file}"
    h = min(hits, key=lambda x: x.first_bad_step)
    assert h.category == category and h.severity != "info"
    lo, hi = c.label["first_bad_step_window"]
    if exact is not None:
        assert h.first_bad_step == exact, h.message
    else:
        assert lo <= h.first_bad_step <= hi, (h.first_bad_step, (lo, hi), h.message)


DIAGNOSED = [("hf-trainer-nan-batch", None), ("hf-trainer-lr-jump", None), ("lightning-nan-after-lr-jump", None),
             ("lightning-overfit", "metrics.csv")]


@pytest.mark.parametrize("case,file", DIAGNOSED)
def test_diagnosis_on_framework_runs(synth_runs, case, file):
    c = synth_runs.get(case)
    run, _ = load_run([str(c.file(file) if file else c.dir)])
    d = diagnose_run(run)
    assert d.category == c.label["category"] or d.category in c.label["also_acceptable"], d.summary
    lo, hi = c.label["first_bad_step_window"]
    assert d.first_bad_step is not None and lo <= d.first_bad_step <= hi, (d.first_bad_step, d.summary)
    assert d.verdict == "unhealthy"


def _without_wall_clock(run: Run) -> Run:
    """The run without what the machine's clock wrote (step times, rates, a clock since the start): on a
    shared CPU those follow the other processes' load, not the run, so a test cannot expect them steady.
    The throughput rules' silence on healthy runs is held by the corpus's healthy fixtures instead."""
    while True:
        roles = find_roles(run)
        timed = {roles.names[r] for r in ("step_time", "throughput") if r in roles.names}
        timed |= {n for n, s in run.series.items() if ("time" in norm(n) or "elapsed" in norm(n)) and elapsed_clock(s)}
        if not timed:
            return run
        for name in timed:
            del run.series[name]


@pytest.mark.parametrize("case", ["hf-trainer-healthy", "lightning-healthy"])
def test_healthy_framework_runs_are_silent(synth_runs, case):
    c = synth_runs.get(case)
    for f in c.label["files"]:
        run, _ = load_run([str(c.dir.parent / f["path"])])
        assert run.meta.get("framework") in ("hf", "lightning")
        loud = [(h.rule, h.severity, h.message) for h in run_rules(_without_wall_clock(run)) if h.severity != "info"]
        assert not loud, f"{f['path']}: {loud}"
    d = diagnose_run(_without_wall_clock(load_run([str(c.dir)])[0]))  # every file of the run together
    assert (d.verdict, d.category, d.first_bad_step) == ("healthy", "healthy", None)
