"""A fingerprint of a failure: the same failure seen again (a rerun, the next nightly) gets the same
one, so a GitHub issue is updated instead of duplicated and a batch groups the runs together.

What goes in is what names the failure, not what varies between its occurrences: task, verdict,
primary category, the (rule, metric) pairs of the findings a root cause cites (else of the findings
at medium or above), the failing checks, and the top suspect commit. Steps, values, paths and
timestamps stay out: a NaN at step 41 and the same NaN at step 43 are one failure.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from trainaudit.answer.schema import SEVERITY_ORDER, Answer, Finding

MARKER_PREFIX = "trainaudit-fingerprint:"


def _cited_findings(answer: Answer) -> list[Finding]:
    by_id = {d.id: d for d in answer.findings}
    cited: dict[str, Finding] = {}
    for rc in answer.final_answer.root_causes:
        for i in rc.evidence:
            if i in by_id:
                cited[i] = by_id[i]
    if cited:
        return list(cited.values())
    return [d for d in answer.findings if SEVERITY_ORDER[d.severity] >= SEVERITY_ORDER["medium"]]


def signature(answer: Answer) -> list[str]:
    """The readable parts the fingerprint hashes (also shown in a batch table)."""
    fa = answer.final_answer
    parts = [f"task={answer.task}", f"verdict={fa.verdict}", f"category={fa.category}"]
    parts += sorted({f"rule={d.rule}:{d.metric or '-'}" for d in _cited_findings(answer)})
    parts += sorted({f"check={c.metric}:{c.check}" for c in answer.comparisons if not c.passed})
    suspect = next((c for c in answer.commits if c.role == "suspect"), None)
    if suspect is not None:
        parts.append(f"suspect={suspect.sha[:12]}")
    return parts


def fingerprint(answer: Answer) -> str:
    return _digest(signature(answer))


def cause_key(answer: Answer) -> str:
    """Coarser than the fingerprint: the root cause alone (no suspect commit, no failing checks),
    so failures of different CI jobs with the same cause group together."""
    fa = answer.final_answer
    return _digest([f"category={fa.category}", *sorted({d.rule for d in _cited_findings(answer)})])


def marker(fp: str) -> str:
    """Hidden in an issue body (an HTML comment renders as nothing)."""
    return f"<!-- {MARKER_PREFIX} {fp} -->"


def _digest(parts: Iterable[str]) -> str:
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]
