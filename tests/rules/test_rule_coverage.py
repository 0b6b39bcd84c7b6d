"""Every rule of the registry has a test where it fires (category and first bad step) and is run on
every healthy run where it must stay silent. The tables below are checked against the registry:
a new rule without a firing test fails here."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from shared_data import sample_block, write_lines
from synth_fixture import synth_runs  # noqa: F401

from trainaudit.ingest import load_run
from trainaudit.rules import RULE_CLASSES, run_rules

TESTS = Path(__file__).resolve().parents[1]

# rule id -> tests (path under tests/ :: function) that make it fire and check category + first bad step
FIRING: dict[str, list[str]] = {
    "TA101": ["rules/test_rules_synth.py::test_rule_fires_at_the_fault", "rules/test_rules_events.py::test_keras_nan_epoch",
              "rules/test_rules_events.py::test_megatron_omitted_loss_is_nan"],
    "TA102": ["rules/test_rules_synth.py::test_rule_fires_at_the_fault"],
    "TA103": ["rules/test_rule_coverage.py::test_grad_norm_spike_at_the_corrupt_batch"],
    "TA104": ["rules/test_rule_coverage.py::test_loss_scale_collapse_from_the_overflow_step",
              "rules/test_rules_events.py::test_deepspeed_scale_at_one"],
    "TA201": ["rules/test_rules_synth.py::test_lr_jump_is_named_as_the_cause"],
    "TA202": ["rules/test_rules_synth.py::test_rule_fires_at_the_fault"],
    "TA203": ["rules/test_rules_tiny.py::test_frozen_model_zero_grad_and_flat_loss"],
    "TA204": ["rules/test_rules_synth.py::test_rule_fires_at_the_fault"],
    "TA205": ["rules/test_rule_coverage.py::test_vanishing_gradients_synth_case",
              "rules/test_rules_tiny.py::test_vanishing_gradients_from_layer_norms"],
    "TA206": ["rules/test_rules_synth.py::test_rule_fires_at_the_fault"],
    "TA207": ["rules/test_rules_tiny.py::test_lr_zero"],
    "TA301": ["rules/test_rules_tiny.py::test_overfitting_epoch_and_gap"],
    "TA401": ["rules/test_rules_events.py::test_oom_numbers_and_fragmentation"],
    "TA402": ["rules/test_rule_coverage.py::test_stderr_failure_after_the_last_logged_step",
              "rules/test_rules_events.py::test_segfault_is_a_crash_and_sigkill_a_host_oom"],
    "TA403": ["rules/test_rules_synth.py::test_rule_fires_at_the_fault", "rules/test_rules_tiny.py::test_memory_growth_from_a_real_leak"],
    "TA404": ["rules/test_rule_coverage.py::test_stderr_failure_after_the_last_logged_step",
              "rules/test_rules_events.py::test_nccl_timeout", "rules/test_rules_events.py::test_oom_is_the_root_not_the_nccl_aborts"],
    "TA405": ["rules/test_rule_coverage.py::test_incomplete_megatron_log"],
    "TA406": ["rules/test_rules_synth.py::test_rule_fires_at_the_fault"],
    "TA407": ["rules/test_straggler_ddp.py::test_straggler_named_from_the_slow_step"],
    "TA408": ["rules/test_rules_tiny.py::test_data_loader_stall_every_fourth_step"],
    "TA409": ["rules/test_rules_events.py::test_hardware_faults"],
    "TA208": ["rules/test_rules_short.py::test_short_log_signal"],
    "TA209": ["rules/test_rules_short.py::test_short_log_signal"],
    "TA411": ["rules/test_rules_short.py::test_short_log_signal"],
    "TA501": ["ingest/test_catalogue.py::test_a_known_warning_becomes_a_finding_with_its_category"],
    "TA805": ["ingest/test_catalogue.py::test_a_failed_reference_check_is_a_golden_mismatch"],
    "TA410": ["rules/test_rule_coverage.py::test_crash_after_the_last_logged_step",
              "rules/test_rules_events.py::test_segfault_is_a_crash_and_sigkill_a_host_oom"],
    # the monitor's rules, read back from its file by diagnose
    "MON101": ["monitor/test_monitor.py::test_diagnose_joins_the_monitors_findings_to_its_stories"],
    "MON201": ["monitor/test_monitor.py::test_diagnose_joins_the_monitors_findings_to_its_stories"],
    "MON202": ["monitor/test_monitor.py::test_diagnose_joins_the_monitors_findings_to_its_stories"],
    "MON203": ["monitor/test_monitor.py::test_diagnose_joins_the_monitors_findings_to_its_stories"],
}

# tests that run the whole registry (run_rules without a selection) on healthy runs and demand silence
SILENT_ON_HEALTHY = [
    "rules/test_rules_synth.py::test_every_healthy_run_is_healthy",  # every synth healthy case, every file
    "rules/test_rules_tiny.py::test_healthy_runs_are_silent",  # tiny torch runs: plain, cosine, restart
    "rules/test_rules_events.py::test_healthy_public_excerpts",  # public Megatron samples
    "rules/test_straggler_ddp.py::test_balanced_run_is_silent",  # real 2-rank DDP run
]


def _function(ref: str) -> ast.FunctionDef:
    path, name = ref.split("::")
    tree = ast.parse((TESTS / path).read_text(encoding="utf-8"))
    found = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name]
    assert found, f"{ref} does not exist"
    return found[0]


def test_every_rule_has_a_firing_test():
    ids = {c.id for c in RULE_CLASSES}
    assert not ids - set(FIRING), f"rules without a firing test: {sorted(ids - set(FIRING))}"
    assert not set(FIRING) - ids, f"table names unknown rules: {sorted(set(FIRING) - ids)}"
    checked: dict[str, bool] = {}
    for rule, refs in FIRING.items():
        for ref in refs:
            fn = _function(ref)
            src = ast.unparse(fn)
            if "parametrize" in ast.unparse(fn.decorator_list):  # the rule id is in the parameter table
                src = (TESTS / ref.split("::")[0]).read_text(encoding="utf-8")
            assert rule in src, f"{ref} never names {rule}"
            checked[rule] = checked.get(rule, False) or "first_bad_step" in src
    assert all(checked.values()), f"no test checks the first bad step of {[r for r, ok in checked.items() if not ok]}"


def test_silence_checks_run_every_rule():
    for ref in SILENT_ON_HEALTHY:
        src = ast.unparse(_function(ref))
        helper = "_diag(" in src and "run_rules(run)" in ast.unparse(_function(ref.split("::")[0] + "::_diag"))
        assert "run_rules(run)" in src or helper, f"{ref} does not run the whole registry"


def test_grad_norm_spike_at_the_corrupt_batch(synth_runs):  # noqa: F811
    c = synth_runs.get("corrupt-batch-spike")
    run, _ = load_run([str(c.file("metrics.jsonl"))])
    (h,) = [h for h in run_rules(run) if h.rule == "TA103"]
    assert h.category == "grad_explosion" and h.metric == "grad_norm"
    assert h.first_bad_step == c.label["fault_step"] == 120  # the x1e6 batch
    assert "the loss reacted at the same step" in h.message


def test_loss_scale_collapse_from_the_overflow_step(synth_runs):  # noqa: F811
    c = synth_runs.get("loss-scale-collapse")
    run, _ = load_run([str(c.dir)])
    hits = [h for h in run_rules(run) if h.rule == "TA104"]
    assert hits and hits[0].category == "loss_scale_collapse"
    lo, hi = c.label["first_bad_step_window"]
    assert lo <= hits[0].first_bad_step <= hi, (hits[0].first_bad_step, (lo, hi), hits[0].message)


def test_vanishing_gradients_synth_case(synth_runs):  # noqa: F811
    c = synth_runs.get("vanishing-gradients")
    for f in c.label["files"]:
        run, _ = load_run([str(c.dir.parent / f["path"])])
        hits = [h for h in run_rules(run) if h.rule == "TA205"]
        assert hits, f"TA205 silent on {f['path']}"
        h = hits[0]
        assert h.category == "grad_vanishing" and h.severity != "info"
        lo, hi = c.label["first_bad_step_window"]
        assert lo <= h.first_bad_step <= hi, (h.first_bad_step, (lo, hi), h.message)


def test_incomplete_megatron_log(synth_runs, tmp_path):  # noqa: F811
    c = synth_runs.get("healthy-warmup-cosine")
    lines = c.file("train.log").read_text(encoding="utf-8").splitlines()
    last = next(i for i, ln in enumerate(lines) if "iteration      144/" in ln)
    run, _ = load_run([str(write_lines(tmp_path / "cut.log", lines[:last + 1]))])  # the job vanished after 144
    (h,) = [h for h in run_rules(run) if h.rule == "TA405"]
    assert (h.category, h.severity, h.first_bad_step) == ("distributed_failure", "low", 144)
    assert h.data["train_iters"] == 300
    full, _ = load_run([str(c.file("train.log"))])
    assert not [h for h in run_rules(full) if h.rule == "TA405"]


@pytest.mark.parametrize("rule", sorted(FIRING))
def test_table_lists_real_rules(rule):
    assert any(c.id == rule for c in RULE_CLASSES)


def test_crash_after_the_last_logged_step(synth_runs):  # noqa: F811
    c = synth_runs.get("crash-shape-error")
    (h,) = [h for h in run_rules(load_run([str(c.dir)])[0]) if h.rule == "TA410"]
    lo, hi = c.label["first_bad_step_window"]
    assert h.category == "crash" and h.fatal and lo <= h.first_bad_step <= hi


@pytest.mark.parametrize("key,rule,category", [("CPPO/issues/6", "TA402", "oom"),
                                               ("LlamaFactory/issues/6269", "TA404", "distributed_failure")])
def test_stderr_failure_after_the_last_logged_step(synth_runs, tmp_path, key, rule, category):  # noqa: F811
    # a real run's metrics (the crash case stops logging after step 119) with the public stderr in place of its own
    c = synth_runs.get("crash-shape-error")
    (tmp_path / "metrics.jsonl").write_bytes(c.file("metrics.jsonl").read_bytes())
    write_lines(tmp_path / "stderr.log", sample_block("error_signatures.txt", key))
    (h,) = [h for h in run_rules(load_run([str(tmp_path)])[0]) if h.rule == rule]
    assert h.category == category and h.first_bad_step == 119  # the job died after its last logged step
