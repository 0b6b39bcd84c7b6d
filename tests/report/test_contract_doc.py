"""docs/answer.md describes every value the answer contract allows: a verdict, category, role,
source kind or top-level field added to the schema without its line in the doc fails here."""

from __future__ import annotations

import typing
from pathlib import Path

from trainaudit.answer.schema import Answer, Category, CommitRole, Severity, SourceKindName, Verdict

DOC = (Path(__file__).resolve().parents[2] / "docs" / "answer.md").read_text(encoding="utf-8")


def test_every_value_of_the_contract_is_documented() -> None:
    values = [*typing.get_args(Verdict), *(c.value for c in Category), *typing.get_args(CommitRole),
              *typing.get_args(SourceKindName), *(s.value for s in Severity), *Answer.model_fields]
    assert [v for v in values if f"`{v}`" not in DOC] == []
