"""Each rule on real tiny torch runs from synth: it fires where the fault is
(category and first bad step inside the label's window) and stays silent on every healthy run."""

from __future__ import annotations

import pytest

from trainaudit.diagnosis import diagnose_run
from trainaudit.ingest import load_run
from trainaudit.rules import run_rules

# case, file, rule that must fire, its category
FIRES = [
    ("nan-batch", "metrics.jsonl", "TA101", "nan_inf"),
    ("nan-batch", "stdout.log", "TA101", "nan_inf"),  # HF hidden NaN: loss 0.0, grad_norm nan
    ("nan-after-lr-jump", "train.log", "TA101", "nan_inf"),  # Megatron: lm loss omitted
    ("corrupt-batch-spike", "metrics.jsonl", "TA102", "loss_spike"),
    ("lr-jump", "metrics.jsonl", "TA206", "divergence"),
    ("shuffled-labels", "train.log", "TA202", "plateau"),
    ("rnn-exploding", "metrics.jsonl", "TA204", "grad_explosion"),
    ("slow-from-step-k", "metrics.jsonl", "TA406", "throughput_regression"),
    ("memory-growth", "metrics.jsonl", "TA403", "memory_growth"),
    ("memory-growth", "tb", "TA403", "memory_growth"),  # TensorBoard tag train/rss_mb
]


@pytest.mark.parametrize("case,file,rule,category", FIRES, ids=[f"{c}-{r}-{f}" for c, f, r, _ in FIRES])
def test_rule_fires_at_the_fault(synth_runs, case, file, rule, category):
    c = synth_runs.get(case)
    run, _ = load_run([str(c.file(file))])
    hits = [h for h in run_rules(run) if h.rule == rule]
    assert hits, f"{rule} silent on {case}/{file}"
    h = hits[0]
    assert h.category == category
    assert h.severity != "info"
    lo, hi = c.label["first_bad_step_window"]
    if rule == "TA206":  # the cause: exactly at the injected step
        assert h.first_bad_step == c.label["fault_step"]
    else:
        assert lo <= h.first_bad_step <= hi, (h.first_bad_step, (lo, hi), h.message)


DIAGNOSED = ["nan-batch", "nan-after-lr-jump", "corrupt-batch-spike", "lr-jump", "shuffled-labels", "rnn-exploding",
             "slow-from-step-k", "loss-scale-collapse"]


@pytest.mark.parametrize("case", DIAGNOSED)
def test_diagnosis_category_and_first_bad_step(synth_runs, case):
    c = synth_runs.get(case)
    run, _ = load_run([str(c.dir)])
    d = diagnose_run(run)
    assert d.category == c.label["category"] or d.category in c.label["also_acceptable"], d.summary
    lo, hi = c.label["first_bad_step_window"]
    assert d.first_bad_step is not None and lo <= d.first_bad_step <= hi, (d.first_bad_step, d.summary)
    assert d.verdict in ("unhealthy", "crash")
    root = d.stories[0]
    assert root.fix and root.verify and root.expected_impact and 0 < root.confidence <= 1


def test_lr_jump_is_named_as_the_cause(synth_runs):
    c = synth_runs.get("lr-jump")
    d = diagnose_run(load_run([str(c.file("metrics.jsonl"))])[0])
    assert d.category == "divergence"
    assert {"TA201", "TA206"} <= {h.rule for h in d.stories[0].hits}  # divergence, explained by the jump
    assert d.stories[0].issue.startswith("likely cause: the learning rate jumped from 0.002 to 0.2 at step ")
    assert d.first_bad_step == c.label["fault_step"]


def test_nan_after_loss_scale_collapse_is_the_collapse(synth_runs):
    c = synth_runs.get("loss-scale-collapse")
    d = diagnose_run(load_run([str(c.dir)])[0])
    assert d.category == "loss_scale_collapse" and d.verdict == "crash"
    assert {"TA104"} <= {h.rule for h in d.stories[0].hits}


def test_every_healthy_run_is_healthy(synth_runs):
    assert synth_runs.healthy, "the synth catalogue has no healthy case"
    for name in synth_runs.healthy:
        c = synth_runs.get(name)
        for f in c.label["files"]:
            run, _ = load_run([str(c.dir.parent / f["path"])])
            loud = [(h.rule, h.severity, h.message) for h in run_rules(run) if h.severity != "info"]
            assert not loud, f"{name}/{f['path']}: {loud}"
            d = diagnose_run(run)
            assert (d.verdict, d.category, d.first_bad_step) == ("healthy", "healthy", None)
