"""Read the golden-value gate's own output from a CI job log (as Megatron-LM's
``tests/functional_tests/python_test_utils/common.py`` logs it).

Lines recognised (anywhere in the line, so pytest live-log prefixes such as
``INFO     tests.functional_tests.python_test_utils.common:common.py:123`` and launcher
prefixes do not matter):

    Actual values: 0.91, 0.93, ...            (INFO, before a failure; one median for iteration-time)
    Golden values: 0.79, 0.80, ...
    Exact comparison of lm loss: FAILED | Approximate comparison of iteration-time: FAILED
    DETERMINISTIC test for metric lm loss: PASSED
    AssertionError: The following metrics failed: iteration-time
    Metric X not found in Tensorboard logs! ...
    The following metrics are required but not provided in golden values: ...
    Training failed. Aborting.
    ===== 1 failed, 2 passed in 3.2s =====    (pytest summary)

Value lists may be elided (``...`` or ``…``): elided entries are ``None`` and ``elided`` is set.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from trainaudit.errors import InputError
from trainaudit.ingest.signatures import CI_FAILED_RE, GATE_CHECK_RE, GATE_METRICS_RE
from trainaudit.ingest.text import parse_number

_VALUES = re.compile(r"\b(Actual|Golden) values:\s*(.*)$")
_FAILED = GATE_CHECK_RE
# Linear on any line (tests/hostile/test_hostile_regex.py): metric names are bounded like GATE_CHECK_RE's,
# the rest of a line is taken word by word, and the pytest summary is read between two runs of "="
# (its counts hold none), committing to the first count word so that a long line is scanned once.
_PASSED = re.compile(r"\b(DETERMINISTIC|APPROXIMATE) test for metric (.{1,200}?): PASSED")
_SUMMARY_FAIL = GATE_METRICS_RE
_MISSING_ACTUAL = re.compile(r"Metric (.{1,200}?) not found in Tensorboard logs!")
_MISSING_GOLDEN = re.compile(r"required but not provided in golden values: ((?:[^\S\n]*+\S++)*+)\s*+$")
_PYTEST = re.compile(r"(?<!=)=++ ((?>[^=]*?\b(?:passed|failed|error|errors)\b)[^=]*?) in [\d.]++s"
                     r"(?: \([^()=]*+\))? =+")
_TRAINING_FAILED = CI_FAILED_RE
_ELLIPSIS = ("...", "…")


@dataclass(slots=True)
class GateLine:
    line: int
    text: str


@dataclass(slots=True)
class CiCheck:
    metric: str
    check: str  # exact | approximate
    passed: bool
    line: int
    actual: list[float | None] | None = None
    golden: list[float | None] | None = None
    actual_line: int | None = None
    golden_line: int | None = None
    elided: bool = False


@dataclass(slots=True)
class CiGateReport:
    path: str
    checks: list[CiCheck] = field(default_factory=list)
    failed_metrics: list[str] | None = None
    failed_line: int | None = None
    missing_in_actual: list[str] = field(default_factory=list)
    missing_in_golden: list[str] = field(default_factory=list)
    training_failed_line: int | None = None
    pytest_summary: str | None = None
    pytest_line: int | None = None
    lines: list[GateLine] = field(default_factory=list)

    @property
    def found(self) -> bool:
        return bool(self.checks or self.failed_metrics is not None or self.missing_in_actual
                    or self.missing_in_golden or self.training_failed_line or self.pytest_summary)


def parse_values(text: str) -> tuple[list[float | None], bool]:
    out: list[float | None] = []
    elided = False
    body = text.strip().strip("[]")
    for tok in body.split(","):
        t = tok.strip().strip("'\"")
        if not t:
            continue
        if any(e in t for e in _ELLIPSIS):
            elided = True
            rest = t.replace("…", "").replace("...", "").strip()
            v = parse_number(rest) if rest else None
            out.append(None)
            if v is not None:
                out[-1] = v
            continue
        if t.lower() in ("nan", "inf", "+inf"):
            out.append(float("inf"))  # the gate printed inf for "nan"-mapped steps
            continue
        out.append(parse_number(t))
    return out, elided


def read_ci_log(path: str, text: str | None = None) -> CiGateReport:
    if text is None:
        try:
            text = Path(path).read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            raise InputError(f"{path}: cannot read ({exc})") from None
    rep = CiGateReport(path)
    pending: dict[str, tuple[list[float | None], bool, int]] = {}
    for no, line in enumerate(text.splitlines(), 1):
        m = _VALUES.search(line)
        if m:
            vals, elided = parse_values(m.group(2))
            pending[m.group(1).lower()] = (vals, elided, no)
            rep.lines.append(GateLine(no, line))
            continue
        m = _FAILED.search(line)
        if m:
            c = CiCheck(m.group(2).strip(), m.group(1).lower(), False, no)
            if "actual" in pending:
                c.actual, e1, c.actual_line = pending.pop("actual")
                c.elided |= e1
            if "golden" in pending:
                c.golden, e2, c.golden_line = pending.pop("golden")
                c.elided |= e2
            rep.checks.append(c)
            rep.lines.append(GateLine(no, line))
            continue
        m = _PASSED.search(line)
        if m:
            kind = "exact" if m.group(1) == "DETERMINISTIC" else "approximate"
            rep.checks.append(CiCheck(m.group(2).strip(), kind, True, no))
            pending.clear()
            rep.lines.append(GateLine(no, line))
            continue
        m = _SUMMARY_FAIL.search(line)
        if m:
            if rep.failed_metrics is None:  # pytest repeats it in the short summary
                rep.failed_metrics = [x.strip() for x in m.group(1).split(",") if x.strip()]
                rep.failed_line = no
            rep.lines.append(GateLine(no, line))
            continue
        m = _MISSING_ACTUAL.search(line)
        if m:
            if m.group(1) not in rep.missing_in_actual:
                rep.missing_in_actual.append(m.group(1))
            rep.lines.append(GateLine(no, line))
            continue
        m = _MISSING_GOLDEN.search(line)
        if m:
            rep.missing_in_golden = [x.strip() for x in m.group(1).split(",") if x.strip()]
            rep.lines.append(GateLine(no, line))
            continue
        if _TRAINING_FAILED.search(line):
            rep.training_failed_line = no
            rep.lines.append(GateLine(no, line))
            continue
        m = _PYTEST.search(line)
        if m:
            rep.pytest_summary, rep.pytest_line = m.group(1), no
            rep.lines.append(GateLine(no, line))
    return rep


def looks_like_ci_log(head: str) -> bool:
    return bool(_FAILED.search(head) or _PASSED.search(head) or _SUMMARY_FAIL.search(head)
                or _MISSING_ACTUAL.search(head) or "Running pytest checks against golden values" in head)
