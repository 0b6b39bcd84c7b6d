"""Findings of single rules checked beyond their fixture (tests/rules/test_rule_fixtures.py runs
every rule of the registry on its fixture and on the healthy runs): the details of a finding (its
data, what it says about the loss) on real runs from synth and public stderr."""

from __future__ import annotations

import pytest
from shared_data import sample_block, write_lines

from trainaudit.ingest import load_run
from trainaudit.rules import run_rules


def test_grad_norm_spike_at_the_corrupt_batch(synth_runs):
    c = synth_runs.get("corrupt-batch-spike")
    run, _ = load_run([str(c.file("metrics.jsonl"))])
    (h,) = [h for h in run_rules(run) if h.rule == "TA103"]
    assert h.category == "grad_explosion" and h.metric == "grad_norm"
    assert h.first_bad_step == c.label["fault_step"] == 120  # the x1e6 batch
    assert "the loss reacted at the same step" in h.message


def test_loss_scale_collapse_from_the_overflow_step(synth_runs):
    c = synth_runs.get("loss-scale-collapse")
    run, _ = load_run([str(c.dir)])
    hits = [h for h in run_rules(run) if h.rule == "TA104"]
    assert hits and hits[0].category == "loss_scale_collapse"
    lo, hi = c.label["first_bad_step_window"]
    assert lo <= hits[0].first_bad_step <= hi, (hits[0].first_bad_step, (lo, hi), hits[0].message)


def test_vanishing_gradients_synth_case(synth_runs):
    c = synth_runs.get("vanishing-gradients")
    for f in c.label["files"]:
        run, _ = load_run([str(c.dir.parent / f["path"])])
        hits = [h for h in run_rules(run) if h.rule == "TA205"]
        assert hits, f"TA205 silent on {f['path']}"
        h = hits[0]
        assert h.category == "grad_vanishing" and h.severity != "info"
        lo, hi = c.label["first_bad_step_window"]
        assert lo <= h.first_bad_step <= hi, (h.first_bad_step, (lo, hi), h.message)


def test_incomplete_megatron_log(synth_runs, tmp_path):
    c = synth_runs.get("healthy-warmup-cosine")
    lines = c.file("train.log").read_text(encoding="utf-8").splitlines()
    last = next(i for i, ln in enumerate(lines) if "iteration      144/" in ln)
    run, _ = load_run([str(write_lines(tmp_path / "cut.log", lines[:last + 1]))])  # the job vanished after 144
    (h,) = [h for h in run_rules(run) if h.rule == "TA405"]
    assert (h.category, h.severity, h.first_bad_step) == ("distributed_failure", "low", 144)
    assert h.data["train_iters"] == 300
    full, _ = load_run([str(c.file("train.log"))])
    assert not [h for h in run_rules(full) if h.rule == "TA405"]


def test_crash_after_the_last_logged_step(synth_runs):
    c = synth_runs.get("crash-shape-error")
    (h,) = [h for h in run_rules(load_run([str(c.dir)])[0]) if h.rule == "TA410"]
    lo, hi = c.label["first_bad_step_window"]
    assert h.category == "crash" and h.fatal and lo <= h.first_bad_step <= hi


@pytest.mark.parametrize("key,rule,category", [("CPPO/issues/6", "TA402", "oom"),
                                               ("LlamaFactory/issues/6269", "TA404", "distributed_failure")])
def test_stderr_failure_after_the_last_logged_step(synth_runs, tmp_path, key, rule, category):
    # a real run's metrics (the crash case stops logging after step 119) with the public stderr in place of its own
    c = synth_runs.get("crash-shape-error")
    (tmp_path / "metrics.jsonl").write_bytes(c.file("metrics.jsonl").read_bytes())
    write_lines(tmp_path / "stderr.log", sample_block("error_signatures.txt", key))
    (h,) = [h for h in run_rules(load_run([str(tmp_path)])[0]) if h.rule == rule]
    assert h.category == category and h.first_bad_step == 119  # the job died after its last logged step
