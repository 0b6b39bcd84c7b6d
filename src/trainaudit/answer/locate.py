"""Where a claim of a report comes from: the first quoted source line behind its evidence ids
(a CI annotation's file and line, a terminal line's ``path:line``)."""

from __future__ import annotations

from dataclasses import dataclass

from trainaudit.answer.schema import Answer, Commit


@dataclass(frozen=True)
class Location:
    path: str | None
    line: int | None


def locate(answer: Answer, evidence: list[str], step: int | None = None) -> Location:
    """The quoted source line behind a list of evidence ids (through calculations and findings):
    the line of ``step`` when one of them quotes it (a finding "at step 121" points at step 121's
    line, not at the value before it that its evidence also quotes), else the first quoted line,
    else the first source file they rest on."""
    facts = {f.id: f for f in answer.extracted_facts}
    calcs = {c.id: c.inputs for c in answer.calculations}
    finds = {d.id: d.evidence for d in answer.findings}
    src = {s.id: s for s in answer.source_refs}
    order: list[str] = []
    seen: set[str] = set()
    stack = list(reversed(evidence))
    while stack:
        i = stack.pop()
        if i in seen:
            continue
        seen.add(i)
        if i in facts:
            order.append(i)
        stack.extend(reversed(calcs.get(i, []) + finds.get(i, [])))
    if step is not None:
        for i in order:
            f = facts[i]
            s = src.get(f.source_ref)
            if f.step == step and f.line and s is not None and s.kind not in ("commit", "repo"):
                return Location(s.path, f.line)
    fallback: Location | None = None
    for i in order:
        f = facts[i]
        s = src.get(f.source_ref)
        if s is None or s.kind in ("commit", "repo"):
            continue
        if f.line:
            return Location(s.path, f.line)
        fallback = fallback or Location(s.path, None)
    return fallback or Location(None, None)


def culprit(answer: Answer) -> Commit | None:
    """The commit the answer names (``final_answer.culprit``, else the one the first root cause
    cites): the one answer.md names and the batch table shows."""
    named = answer.final_answer.culprit
    if named is not None:
        return next((c for c in answer.commits if c.sha == named.sha and c.role != "fix"), None)
    if not answer.final_answer.root_causes:
        return None
    cited = set(answer.final_answer.root_causes[0].evidence)
    src = {s.id: s for s in answer.source_refs}
    shas = {src[f.source_ref].commit for f in answer.extracted_facts
            if f.id in cited and f.source_ref in src and src[f.source_ref].kind == "commit"}
    return next((c for c in answer.commits if c.sha in shas and c.role != "fix"), None)


def nothing_failed(answer: Answer) -> bool:
    """The verdict is pass, or nothing failed that the artifacts show (category healthy)."""
    return answer.final_answer.verdict in ("pass", "healthy") or answer.final_answer.category == "healthy"
