"""Every answer says what was checked, and a run is healthy only when that covers it: too little to
decide gives `inconclusive` with what would decide it, and exit 0."""

from __future__ import annotations

import json
from pathlib import Path

from shared_data import run_cli


def _diagnose(tmp_path: Path, text: str, name: str = "train.log") -> tuple[int, dict, str]:
    log = tmp_path / name
    log.write_text(text, encoding="utf-8")
    out = tmp_path / "out"
    res = run_cli("diagnose", str(log), "-o", str(out))
    answer = json.loads((out / "answer.json").read_text(encoding="utf-8"))
    return res.returncode, answer, (out / "answer.md").read_text(encoding="utf-8") + res.stdout


def test_a_two_line_paste_is_inconclusive(tmp_path: Path) -> None:
    code, answer, text = _diagnose(tmp_path, "step 1 loss 2.301\nstep 2 loss 2.297\n")
    fa = answer["final_answer"]
    assert code == 0
    assert fa["verdict"] == "inconclusive" and fa["first_bad_step"] is None
    assert any("training loss has 2 point" in n for n in fa["needs_more_data"])
    assert fa["coverage"]["metrics"]["loss"] == {"points": 2, "first_step": 1, "last_step": 2}
    assert "Checked: loss 2 points (steps 1-2)" in text


def test_no_loss_at_all_is_inconclusive(tmp_path: Path) -> None:
    lines = "".join(f"epoch {i} accuracy {0.5 + i / 100:.3f}\n" for i in range(1, 31))
    code, answer, _ = _diagnose(tmp_path, lines)
    fa = answer["final_answer"]
    assert code == 0 and fa["verdict"] == "inconclusive"
    assert any("training loss" in n for n in fa["needs_more_data"])


def test_a_long_healthy_log_is_healthy_with_its_coverage(tmp_path: Path) -> None:
    lines = "".join(f"step {i} loss {2.5 * 0.99 ** i + 0.01 * ((i * 7) % 5):.4f} lr 0.001\n" for i in range(1, 201))
    code, answer, text = _diagnose(tmp_path, lines)
    fa = answer["final_answer"]
    assert code == 0 and fa["verdict"] == "healthy", fa["summary"]
    cov = fa["coverage"]
    assert cov["metrics"]["loss"] == {"points": 200, "first_step": 1, "last_step": 200}
    assert cov["metrics"]["lr"]["points"] == 200
    assert cov["events"] == 0
    # the rules that need what this log lacks say so; the others ran
    assert cov["rules_skipped"]["TA301"] == "no val_loss metric; no val_ppl metric"
    assert "TA201" in cov["rules_run"] and "TA301" not in cov["rules_run"]
    assert "Checked: " in text and "rules ran" in text


def test_a_fault_names_its_decision(tmp_path: Path) -> None:
    lines = "".join(f"step {i} loss {2.0 - i * 0.01:.3f}\n" for i in range(1, 60)) + "step 60 loss nan\nstep 61 loss nan\n"
    code, answer, text = _diagnose(tmp_path, lines)
    fa = answer["final_answer"]
    assert code == 1 and fa["verdict"] == "unhealthy" and fa["category"] == "nan_inf"
    rc = fa["root_causes"][0]
    dec = fa["decision"]
    assert dec["category"] == "nan_inf" and dec["probability"] > dec["runner_up_probability"]
    assert dec["confidence"] == rc["confidence"] and dec["reasons"]
    assert f"Decided by the fitted model: nan_inf {dec['probability']:.2f} over {dec['runner_up']}" in text
    assert 0 < rc["confidence"] <= 1
