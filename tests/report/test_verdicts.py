"""The verdict vocabulary has one home (trainaudit.answer.verdicts): every verdict has its entry,
and the outputs take their words, colours, classes and icons from it."""

from __future__ import annotations

import re
from pathlib import Path

from trainaudit.answer.schema import VERDICTS, SEVERITY_ORDER
from trainaudit.answer.verdicts import VERDICT_INFO

SRC = Path(__file__).resolve().parents[2] / "src" / "trainaudit"


def test_every_verdict_has_one_entry() -> None:
    assert set(VERDICT_INFO) == set(VERDICTS)
    for v, info in VERDICT_INFO.items():
        assert info.label and info.explanation and info.icon.startswith(":")
        assert info.severity in SEVERITY_ORDER
        assert (info.tone == "ok") == (v in ("healthy", "pass")), v


def test_no_output_keeps_a_table_of_its_own() -> None:
    """A verdict mapped to a short constant (a label, a style, a class, an icon) outside the
    vocabulary module is a second home of the vocabulary."""
    table = re.compile(r'[{,]\s*"(?:real_regression|numerical_drift|gating_policy_issue|infrastructure_failure|pass)"'
                       r'\s*:\s*"[^"{]{0,40}"')
    offenders = [p.relative_to(SRC).as_posix() for p in SRC.rglob("*.py")
                 if p.name != "verdicts.py" and table.search(p.read_text(encoding="utf-8"))]
    assert offenders == []
