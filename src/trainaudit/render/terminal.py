"""A report on a terminal, in the style of Ruff and pytest: one line per finding
(``path:line: RULE [severity] message``, whole: the full path and the full message, so the
location can be clicked and the line grepped), the verdict with its summary and fix, and one
closing line that says what was found and where the report is.

Lines are :class:`rich.text.Text`; the caller prints them on a console that colours them only on
a terminal (rich's own detection; ``NO_COLOR`` is honoured). Finding lines are never cut nor
broken by us: the terminal wraps a long one, as it does Ruff's.
"""

from __future__ import annotations

from collections import Counter

from rich.text import Text

from trainaudit.answer.verdicts import verdict_info
from trainaudit.answer.locate import locate
from trainaudit.answer.schema import SEVERITY_ORDER, Answer, Comparison, Finding
from trainaudit.redact import mask_secrets
from trainaudit.render.numbers import number

SEVERITY_STYLE = {"critical": "bold red", "high": "red", "medium": "yellow", "low": "cyan", "info": "dim"}
TONE_STYLE = {"ok": "bold green", "warn": "bold yellow", "bad": "bold red"}
DEFAULT_FINDINGS = 15  # findings shown without -v


def ordered_findings(answer: Answer) -> list[Finding]:
    """Worst first, then by step (a finding without a step last)."""
    return sorted(answer.findings, key=lambda d: (-SEVERITY_ORDER[d.severity],
                                                   d.first_bad_step if d.first_bad_step is not None else 1 << 62,
                                                   d.id))


def rated(where: str, rule: str, severity: str, message: str) -> Text:
    """``where: RULE [severity] message``: a finding, an alert (secrets masked, terminal escapes
    from the input stripped)."""
    t = Text(f"{mask_secrets(where)}: ", style="bold")
    t.append(rule, style="bold")
    t.append(" ")
    t.append(f"[{severity}]", style=SEVERITY_STYLE[severity])
    t.append(f" {mask_secrets(message)}")
    return t


def finding_line(answer: Answer, d: Finding) -> Text:
    loc = locate(answer, d.evidence, d.first_bad_step)
    where = loc.path or "-"
    if loc.line:
        where += f":{loc.line}"
    return rated(where, d.rule, d.severity, d.message)


def comparison_line(c: Comparison) -> Text:
    """``FAIL iteration-time approximate: median +14.5% over steps 30-45 (...)``: what decided the
    check first, the detail after."""
    t = Text("PASS " if c.passed else "FAIL ", style="bold green" if c.passed else "bold red")
    if c.window and c.golden_median and c.actual_median is not None:
        what = (f"median {c.actual_median / c.golden_median - 1:+.1%} over steps {c.window[0]}-{c.window[-1]} "
                f"({number(c.actual_median, 5)} vs {number(c.golden_median, 5)}, rtol {c.rtol:g})")
    else:
        what = f"{c.n_failing}/{c.n_steps} steps outside rtol {c.rtol:g} ({c.allowed_failing} allowed)"
        if c.first_failing_step is not None and not c.passed:
            what += f", first at step {c.first_failing_step}"
    t.append(mask_secrets(f"{c.metric} {c.check}: {what}"))
    return t


def verdict_line(answer: Answer) -> Text:
    """``UNHEALTHY nan_inf from step 124 (confidence 0.97)``; the category only when it says more
    than the verdict (never ``HEALTHY healthy``)."""
    fa = answer.final_answer
    t = Text(fa.verdict.upper().replace("_", " "), style=TONE_STYLE[verdict_info(fa.verdict).tone])
    if fa.category not in (fa.verdict, "healthy"):
        t.append(f" {fa.category}")
    if fa.first_bad_step is not None:
        t.append(f" from step {fa.first_bad_step}")
    if fa.root_causes:
        t.append(f" (confidence {fa.root_causes[0].confidence:.2f})", style="dim")
    return t


def counts(answer: Answer) -> str:
    """``4 findings (2 critical, 1 medium, 1 low)``, ``2 high findings`` or ``no findings``."""
    n = len(answer.findings)
    if not n:
        return "no findings"
    by = Counter(d.severity for d in answer.findings)
    if len(by) == 1:  # one severity: said once, so a closing line with a folder still fits 80 columns
        return f"{n} {next(iter(by))} finding{'s' if n != 1 else ''}"
    parts = ", ".join(f"{by[s]} {s}" for s in sorted(by, key=lambda s: -SEVERITY_ORDER[s]))
    return f"{n} finding{'s' if n != 1 else ''} ({parts})"


def closing_line(answer: Answer, report: str) -> Text:
    """pytest's last line: the verdict, what was found, the report folder (never cut)."""
    fa = answer.final_answer
    t = Text(fa.verdict, style=TONE_STYLE[verdict_info(fa.verdict).tone])
    t.append(f": {counts(answer)}")
    failed = sum(1 for c in answer.comparisons if not c.passed)
    if answer.comparisons:
        t.append(f", {failed}/{len(answer.comparisons)} checks failed" if failed
                 else f", {len(answer.comparisons)} checks passed")
    t.append(f" in {report}")
    if not answer.validation.all_passed:
        t.append(" (INVALID)", style="bold red")
    return t
