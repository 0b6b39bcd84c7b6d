"""trainaudit's golden-value gate against Megatron-LM's own comparator, case by case.

Every case of oracle/cases.jsonl holds a golden and an actual values file (real Megatron-LM golden
files, some edited by hand; oracle/SOURCES.md gives their commits and blobs), METRICS, the mode,
the pipeline and the policy date, and the outcome Megatron-LM's comparator of that date gave when
run on them (tests/functional_tests/python_test_utils: ``test_regular_pipeline`` or
``test_resume_checkpoint_pipeline`` on the files read by ``read_golden_values_from_json``, as its
conftest.py does):

- per check, in the order the comparator ran them: ``passed``; ``failed`` (it raised
  NotDeterminsticError / NotApproximateError); ``error`` (it raised anything else: the caught
  MissingTensorboardLogsError of an empty or non-finite golden metric, which fails the metric, or
  an uncaught exception such as ValueError, which stops the test);
- overall: ``passed``; ``failed`` with AssertionError (the gate's verdict) or
  MissingTensorboardLogsError (a METRICS metric absent from the actual values); ``error`` with
  the class of any other exception (the files or METRICS could not be used at all).

trainaudit must give the same outcome for every check and overall, and an ``error`` must be a
clean input error (exit 2 on the command line), never an internal one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.compare.oracle_cases import load_cases, materialize, sha256
from trainaudit.compare.pipeline import answer_golden, gate_golden
from trainaudit.errors import InputError

CASES = load_cases()


def _write(case: dict[str, Any], tmp: Path) -> tuple[str, str, str]:
    golden, actual = materialize(case["golden"]), materialize(case["actual"])
    assert sha256(golden) == case["golden_sha256"] and sha256(actual) == case["actual_sha256"], case["id"]
    g, a, cfg = tmp / "golden.json", tmp / "actual.json", tmp / "model_config.yaml"
    g.write_text(golden, encoding="utf-8")
    a.write_text(actual, encoding="utf-8")
    body: dict[str, Any] = {"TEST_TYPE": "regular"}
    if case["metrics"] is not None:
        body["METRICS"] = case["metrics"]
    cfg.write_text(json.dumps(body), encoding="utf-8")  # JSON is YAML
    return str(g), str(a), str(cfg)


def _options(case: dict[str, Any], cfg: str) -> dict[str, Any]:
    return {"model_config": cfg, "deterministic": not case["nondeterministic"], "pipeline": case["pipeline"],
            "train_iters": case["train_iters"], "policy": case["policy"]}


def trainaudit_outcome(case: dict[str, Any], tmp: Path) -> dict[str, Any]:
    """The case's outcome in the oracle's terms, from trainaudit's gate and end-to-end comparison."""
    g, a, cfg = _write(case, tmp)
    try:
        run = gate_golden(g, [a], **_options(case, cfg))
    except InputError as exc:
        return {"outcome": "error", "message": str(exc), "checks": None}
    gate = run.gate
    checks = [{"metric": c.metric, "check": c.check, "outcome": c.status, "message": c.error} for c in gate.checks]
    try:
        answer, _, passed = answer_golden(run, deterministic=not case["nondeterministic"])
    except InputError as exc:
        return {"outcome": "error", "message": str(exc), "checks": checks}
    # The answer's own numbers recompute (budget, medians) whatever the policy replayed.
    assert answer.validation.all_passed, [c.detail for c in answer.validation.checks if not c.passed]
    assertion = gate.assertion()
    assert passed == (assertion is None), case["id"]
    return {"outcome": "passed" if passed else "failed", "message": assertion, "checks": checks}


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_gate_agrees_with_megatron(case: dict[str, Any], tmp_path: Path) -> None:
    want, got = case["oracle"], trainaudit_outcome(case, tmp_path)
    assert got["outcome"] == want["outcome"], (case["id"], case["built"], want, got)
    if want["outcome"] == "failed":
        assert got["message"].startswith(want["exception"] + ":"), (want, got)
    if want["outcome"] == "error":
        # A clean input error that names what Megatron's comparator raised.
        assert "\n" not in got["message"] and want["exception"] in got["message"], (want, got)
    if got["checks"] is None:
        assert want["stage"] in ("load golden", "load actual") or not want["checks"], (want, got)
        return
    assert [(c["metric"], c["check"], c["outcome"]) for c in got["checks"]] == \
        [(c["metric"], c["check"], c["outcome"]) for c in want["checks"]], (case["id"], case["built"])
    for w, g in zip(want["checks"], got["checks"]):
        if w["outcome"] == "error" and w["exception"] == "MissingTensorboardLogsError":
            assert g["message"] == w["message"]


def test_the_oracle_covers_what_it_claims() -> None:
    kinds: dict[str, int] = {}
    for c in CASES:
        kinds[c["kind"]] = kinds.get(c["kind"], 0) + 1
    assert len(CASES) >= 456 and len({c["id"] for c in CASES}) == len(CASES)
    assert {"history", "platform", "resume", "edge", "edge-policy"} <= set(kinds)
    outcomes = {(c["oracle"]["outcome"], c["oracle"]["exception"]) for c in CASES}
    assert {("passed", None), ("failed", "AssertionError"), ("failed", "MissingTensorboardLogsError"),
            ("error", "ValidationError"), ("error", "KeyError"), ("error", "ValueError"), ("error", "TypeError")} <= outcomes
    # every real resume pair in both directions (the comparator's tolerance is relative to the first run)
    pairs = {(c["golden"]["file"], c["actual"]["file"], c["policy"]) for c in CASES if c["kind"] == "resume"}
    assert len(pairs) == kinds["resume"] and all((a, g, p) in pairs for g, a, p in pairs)
    # and edited pairs whose approximate checks pass in one direction only
    def approx(c: dict[str, Any]) -> dict[str, str]:
        return {x["metric"]: x["outcome"] for x in c["oracle"]["checks"] if x["check"] == "approximate"}
    resumed = [approx(c) for c in CASES if c["pipeline"] == "resume" and "reversed" in c["built"]]
    assert any(r.get("lm loss") == "passed" for r in resumed) and any(r.get("num-zeros") == "passed" for r in resumed)
    nulls = [c for c in CASES if "null at step" in c["built"] and c["oracle"]["stage"] == "load golden"]
    assert len({c["policy"] for c in nulls}) >= 3
