"""The rules' fitted thresholds (``src/trainaudit/rules/fitted.json``, ``tools/fit_thresholds.py``):
fitted inside the evaluation's folds, shipped as plain data with how they were fitted, and what the
rules run with unless configuration says otherwise."""

from __future__ import annotations

from typing import Any

import fit_diagnosis as fd
import fit_thresholds as ft
import pytest

import trainaudit.rules as rules_pkg
from trainaudit.rules import RULE_CLASSES, Config, configured
from trainaudit.rules.fitted import fitted_file, fitted_thresholds
from trainaudit.rules.numerics import LossSpike


def test_the_file_holds_every_fitted_threshold_within_its_grid() -> None:
    data = fitted_file()
    grids = {cls.id: cls.grid for cls in RULE_CLASSES if cls.grid}
    assert len(grids) >= 10 and sum(len(g) for g in grids.values()) >= 25
    assert len(data["folds"]) == fd.K
    for chosen in [data["thresholds"], *data["folds"]]:
        assert {rid: set(th) for rid, th in chosen.items()} == {rid: set(g) for rid, g in grids.items()}
        for rid, th in chosen.items():
            assert all(v in grids[rid][name] for name, v in th.items()), (rid, th)
    info = data["fitted"]
    assert info["command"] == "python tools/fit_thresholds.py" and "fold" in info["evaluation"]
    assert info["cases"] >= 900 and "prior" in info["method"]
    for rid, g in grids.items():
        for name, values in g.items():
            assert set(info["scores"][f"{rid}.{name}"]) == {str(v) for v in values}


def test_every_prior_is_in_its_grid() -> None:
    for cls in RULE_CLASSES:
        for name, values in cls.grid.items():
            assert cls.defaults()[name] in values, (cls.id, name)
            assert list(values) == sorted(set(values)), (cls.id, name)


def test_rules_run_with_the_fitted_values_and_configuration_goes_over_them(monkeypatch: pytest.MonkeyPatch) -> None:
    assert configured(LossSpike).p.z == fitted_thresholds()["TA102"]["z"]
    monkeypatch.setattr(rules_pkg, "fitted_thresholds", lambda: {"TA102": {"z": 5.0}})
    assert configured(LossSpike).p.z == 5.0
    assert configured(LossSpike).p.rel == LossSpike.defaults()["rel"]  # an unfitted threshold keeps its default
    assert configured(LossSpike, Config(rules={"TA102": {"z": 7.0}})).p.z == 7.0
    assert next(r for r in rules_pkg.active_rules() if r.id == "TA102").p.z == 5.0


class _Rule:
    id = "TA999"

    @staticmethod
    def defaults() -> dict[str, Any]:
        return {"z": 8.0}


def test_a_value_replaces_the_prior_only_by_a_margin_and_never_when_rejected() -> None:
    knob = ft.Knob(_Rule, "z")  # type: ignore[arg-type]
    assert ft.choose(knob, {5.0: 100.0, 8.0: 100.0, 12.0: 100.0}, set()) == 8.0
    assert ft.choose(knob, {5.0: 100.0 + ft.MARGIN - 0.5, 8.0: 100.0, 12.0: 99.0}, set()) == 8.0
    assert ft.choose(knob, {5.0: 100.0 + ft.MARGIN, 8.0: 100.0, 12.0: 99.0}, set()) == 5.0
    assert ft.choose(knob, {5.0: 110.0, 8.0: 100.0, 12.0: 105.0}, {5.0}) == 12.0
    # equal gains: the value nearest the prior (by ratio)
    assert ft.choose(knob, {4.0: 110.0, 8.0: 100.0, 12.0: 110.0}, set()) == 12.0


def test_fixture_checks_say_what_the_rule_tests_say() -> None:
    fires = ft.Check("TA102", ("x",), "fires", {"category": "loss_spike", "first_bad_step": 5, "message": "spike"}, None)
    hit = ("loss_spike", 5, "loss spike at step 5", "high")
    assert ft.passes(fires, [hit], [])
    assert not ft.passes(fires, [("loss_spike", 6, "loss spike at step 6", "high")], [])
    assert not ft.passes(fires, [("loss_spike", 5, "loss spike at step 5", "info")], [])
    assert not ft.passes(fires, [("divergence", 5, "x", "high"), hit], [])  # its first finding is the one named
    silent = ft.Check("TA102", ("x",), "silent", {}, None)
    assert ft.passes(silent, [], []) and not ft.passes(silent, [("loss_spike", 5, "note", "info")], [])
    healthy = ft.Check("TA102", ("x",), "healthy", {}, "g")
    assert ft.passes(healthy, [("loss_spike", 5, "note", "info")], [])
    assert not ft.passes(healthy, [hit], [])
    assert ft.passes(healthy, [hit], [hit])  # loud already under the prior: the value adds no false alarm


def test_the_fit_never_looks_at_the_held_out_fold(monkeypatch: pytest.MonkeyPatch) -> None:
    cases = [c for c in fd.corpus(None) if c.kind == "logs"][:80]
    loaded = fd.load_all(cases)
    knob = next(k for k in ft.knobs() if k.key == "TA202.min_improvement")
    monkeypatch.setattr(ft, "knobs", lambda: [knob])
    seen: list[set[str]] = []
    real = ft.score

    def spy(items: list[fd.Analysed]) -> float:
        seen.append({a.case.group for a in items})
        return real(items)

    monkeypatch.setattr(ft, "score", spy)
    data = ft.fit_thresholds(loaded, cases)
    per_fit = len(knob.rule.grid[knob.name])
    assert len(seen) == (fd.K + 1) * per_fit
    groups = {c.group for c in cases}
    for f in range(fd.K):
        for used in seen[f * per_fit:(f + 1) * per_fit]:
            assert used and not {g for g in used if fd.fold_of(g) == f}
    assert all(used == groups for used in seen[fd.K * per_fit:])  # what ships: every case
    assert set(data["thresholds"]) == {"TA202"} and len(data["folds"]) == fd.K


def test_a_fixture_input_of_the_held_out_fold_does_not_reject_a_value() -> None:
    group = "github:o/r/1"
    f = fd.fold_of(group)
    c = ft.Check("TA102", ("corpus/logs/x/log.txt",), "healthy", {}, group)
    assert ft.held_out(c, f) and not ft.held_out(c, (f + 1) % fd.K) and not ft.held_out(c, None)
    assert not ft.held_out(ft.Check("TA102", ("rules/fixtures/data/a.log",), "silent", {}, None), f)
