"""Fold the answers of the stages (golden comparison, run vs run, diagnosis) into one audit answer.

Each stage builds its own answer with ids S1, F1, C1, D1...; here they are renumbered into one
:class:`AnswerBuilder`, every reference (evidence lists, calculation inputs and the ids inside
formulas) is rewritten, calculations are recomputed by the builder, and staged local paths are
replaced by the names the user gave.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from trainaudit.answer.builder import AnswerBuilder
from trainaudit.answer.schema import Answer, RootCause

_ID = re.compile(r"\b([SFCD]\d+)\b")


def absorb(b: AnswerBuilder, sub: Answer, display: Callable[[str], str], *, label: str = "",
           keep_findings: bool = True, keep_comparisons: bool = True) -> tuple[dict[str, str], list[RootCause]]:
    """Copy ``sub`` into ``b``; returns the id map and ``sub``'s root causes with mapped evidence."""
    ids: dict[str, str] = {}
    for s in sub.source_refs:
        desc = display(s.description)
        if label:
            desc = f"{label}: {desc}" if desc else label
        ids[s.id] = b.source(display(s.path), s.kind, sha256=s.sha256, commit=s.commit, description=desc)
    for f in sub.extracted_facts:
        ids[f.id] = b.fact(ids[f.source_ref], display(f.statement), metric=f.metric, step=f.step, value=f.value,
                           unit=f.unit, line=f.line, quote=f.quote, steps=f.steps, values=f.values)
    for c in sub.calculations:
        formula = _ID.sub(lambda m: ids.get(m.group(1), m.group(1)), c.formula)
        ids[c.id] = b.calc(c.description, formula, [ids[i] for i in c.inputs], unit=c.unit)
    if keep_findings:
        for d in sub.findings:
            ids[d.id] = b.finding(rule=d.rule, category=d.category, severity=d.severity, metric=d.metric,
                                  first_bad_step=d.first_bad_step, last_step=d.last_step,
                                  message=(f"{label}: " if label else "") + display(d.message),
                                  evidence=[ids[e] for e in d.evidence if e in ids], confidence=d.confidence)
    if keep_comparisons:
        for cmp in sub.comparisons:
            b.comparison(**{**cmp.model_dump(), "evidence": [ids[e] for e in cmp.evidence if e in ids]})
    causes = [rc.model_copy(update={"evidence": [ids[e] for e in rc.evidence if e in ids],
                                    "issue": display(rc.issue)})
              for rc in sub.final_answer.root_causes]
    return ids, causes
