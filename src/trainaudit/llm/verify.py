"""Check a narration against the report it narrates, keep what holds, drop the rest.

The narrator may rewrite ``final_answer.summary``, the ``issue``/``fix`` wording of existing root
causes, and add hypotheses (appended to ``needs_more_data``, marked unverified). It never touches
the verdict, category, first bad step, findings, calculations or evidence lists. Whatever it writes
is accepted only when
- every number in it matches a number of the report (fact value/step/line, calculation result,
  finding/comparison field, or a number the engine itself wrote), allowing for the rounding of the
  number as written;
- every evidence id it cites (``[F3]``, ``C2`` or an ``evidence`` list) exists in the report;
- it does not claim a verdict other than the engine's.
A summary is checked sentence by sentence; a root-cause field or a hypothesis as a whole. What is
dropped is listed in ``validation`` (checks named ``llm_*``) with the reason.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from trainaudit.redact import mask_secrets
from trainaudit.answer.schema import VERDICTS, Answer, ValidationCheck
from trainaudit.answer.validate import validate

MAX_HYPOTHESES = 3
MAX_TEXT = 1500
_ABS = re.compile(r"(?<![\w.:/])/(?:[^\s\"'/]+/)+[^\s\"']*")  # machine paths never go into a check detail


class _Loose(BaseModel):
    model_config = ConfigDict(extra="ignore")


class RootCauseText(_Loose):
    index: int
    issue: str | None = None
    fix: str | None = None
    evidence: list[str] = Field(default_factory=list)


class Hypothesis(_Loose):
    text: str
    evidence: list[str] = Field(default_factory=list)
    check: str | None = None


class Narration(_Loose):
    summary: str | None = None
    root_causes: list[RootCauseText] = Field(default_factory=list)
    hypotheses: list[Hypothesis] = Field(default_factory=list)


class NarrationError(ValueError):
    pass


def parse_narration(text: str) -> tuple[Narration, dict[str, Any]]:
    """The JSON object in a completion (a ```json fence or prose around it is tolerated)."""
    s = text.strip()
    start, end = s.find("{"), s.rfind("}")
    if start < 0:
        raise NarrationError("the answer contains no JSON object")
    try:
        raw = json.loads(s[start:end + 1] if end > start else s[start:])
    except json.JSONDecodeError as exc:
        raise NarrationError(f"the answer is not valid JSON ({exc.msg} at char {exc.pos})") from None
    except (ValueError, RecursionError) as exc:  # an integer of more than 4300 digits, nesting past the limit
        raise NarrationError(f"the answer is not valid JSON ({type(exc).__name__}: {str(exc)[:80]})") from None
    if not isinstance(raw, dict):
        raise NarrationError("the answer is not a JSON object")
    try:
        return Narration.model_validate(raw), raw
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"])
        raise NarrationError(f"the answer does not match the narration schema ({loc}: {first['msg']})") from None


# -- numbers ---------------------------------------------------------------------------------
_SKIP = re.compile(
    r"\b[SFCD]\d+\b"                              # evidence ids
    r"|\b[A-Z]{2,}\d+\b"                          # rule ids (TA101), error codes
    r"|\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}\b"  # commit shas
    r"|\b\d{4}-\d{2}-\d{2}(?:[T ][\d:.]+(?:Z|[+-]\d{2}:?\d{2})?)?"  # dates
)
_NUM = re.compile(r"(?<![\w.])[-+]?(?P<num>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+)"
                  r"(?P<exp>[eE][-+]?\d+)?(?P<pct>\s?%)?")


@dataclass(frozen=True)
class Written:
    text: str
    value: float
    tol: float
    percent: bool


def numbers_in(text: str) -> list[Written]:
    out: list[Written] = []
    for m in _NUM.finditer(_SKIP.sub(" ", text)):
        num = m.group("num").replace(",", "")
        decimals = len(num.split(".", 1)[1]) if "." in num else 0
        exp_s = m.group("exp")[1:] if m.group("exp") else "0"
        # float() reads any exponent (1e999 is inf, 1e-999 is 0) where 10.0 ** 999 raises
        value = abs(float(f"{num}e{exp_s}"))
        exp = int(exp_s) if len(exp_s) <= 6 else (-10**6 if exp_s.startswith("-") else 10**6)
        tol = float(f"5e{exp - decimals - 1}") * (1 + 1e-9) + 1e-12 * value
        if not math.isfinite(value):
            tol = 0.0  # an overflowing number matches nothing the engine wrote
        out.append(Written(m.group(0).strip(), value, tol, bool(m.group("pct"))))
    return out


def _engine_texts(answer: Answer) -> list[str]:
    fa = answer.final_answer
    texts = [fa.summary, *fa.quick_fixes, *fa.needs_more_data]
    for rc in fa.root_causes:
        texts += [rc.issue, rc.fix, rc.expected_impact, rc.verify]
    texts += [f.statement for f in answer.extracted_facts] + [f.quote or "" for f in answer.extracted_facts]
    texts += [c.description for c in answer.calculations] + [d.message for d in answer.findings]
    texts += [c.title + " " + c.reason for c in answer.commits]
    return texts


def known_numbers(answer: Answer) -> np.ndarray:
    vals: list[float] = [0.0, 1.0]
    for f in answer.extracted_facts:
        for v in (f.value, f.step, f.line, *(f.values or []), *(f.steps or [])):
            vals.append(_f(v))
    for c in answer.calculations:
        vals.append(_f(c.result))
    for d in answer.findings:
        vals += [_f(d.first_bad_step), _f(d.last_step), d.confidence]
    for cmp in answer.comparisons:
        for name in ("rtol", "atol", "n_steps", "n_failing", "allowed_failing", "first_failing_step", "max_rel_err",
                     "median_rel_err", "golden_median", "actual_median"):
            vals.append(_f(getattr(cmp, name)))
        vals += [_f(w) for w in cmp.window or []]
    fa = answer.final_answer
    vals += [_f(fa.first_bad_step), *(rc.confidence for rc in fa.root_causes), *(c.relevance for c in answer.commits)]
    vals += [float(len(x)) for x in (answer.extracted_facts, answer.findings, answer.calculations, answer.comparisons,
                                     answer.commits, answer.source_refs, fa.root_causes)]
    for t in _engine_texts(answer):
        vals += [w.value for w in numbers_in(t)]
    arr = np.abs(np.array(vals, dtype=float))
    return np.unique(arr[np.isfinite(arr)])


def _f(v: Any) -> float:
    if v is None or isinstance(v, str):
        try:
            return float(v) if v is not None else math.nan
        except ValueError:
            return math.nan
    return float(v)


def _matches(w: Written, known: np.ndarray) -> bool:
    if known.size == 0:
        return False
    targets = [w.value / 100.0, w.value] if w.percent else [w.value]
    for t in targets:
        tol = w.tol / 100.0 if (w.percent and t != w.value) else w.tol
        if float(np.min(np.abs(known - t))) <= tol:
            return True
    return False


# -- checking one piece of text ----------------------------------------------------------------
_IDS = re.compile(r"\b[SFCD]\d+\b")
_VERDICT_CLAIM = re.compile(r"\bverdict\W+(?:is\W+|was\W+|should\s+be\W+)?([a-z_]+)", re.I)
_VERDICT_WORD = {v: re.compile(r"\b" + v.replace("_", r"[ _-]") + r"\b", re.I) for v in VERDICTS}  # "real regression"


@dataclass
class Checker:
    answer: Answer
    known: np.ndarray
    ids: set[str]
    dropped_numbers: list[str] = field(default_factory=list)
    dropped_ids: list[str] = field(default_factory=list)
    dropped_verdict: list[str] = field(default_factory=list)
    dropped_secrets: list[str] = field(default_factory=list)
    n_numbers: int = 0

    @classmethod
    def of(cls, answer: Answer) -> Checker:
        ids = {s.id for s in answer.source_refs} | {f.id for f in answer.extracted_facts} | \
            {c.id for c in answer.calculations} | {d.id for d in answer.findings}
        return cls(answer, known_numbers(answer), ids)

    def ok(self, where: str, text: str, evidence: list[str] = ()) -> bool:  # type: ignore[assignment]
        short = _ABS.sub("<path>", mask_secrets(text if len(text) <= 120 else text[:117] + "..."))
        bad_nums = [w.text for w in numbers_in(text) if not _matches(w, self.known)]
        self.n_numbers += len(numbers_in(text))
        bad_ids = sorted({i for i in [*_IDS.findall(text), *evidence] if i not in self.ids})
        other = self._other_verdict(text)
        secret = mask_secrets(text) != text
        if secret:
            self.dropped_secrets.append(f"{where} {short!r}: contains secret-like text")
        if bad_nums:
            self.dropped_numbers.append(f"{where} {short!r}: {', '.join(bad_nums)} matches no fact or calculation")
        if bad_ids:
            self.dropped_ids.append(f"{where} {short!r}: cites {', '.join(bad_ids)}, not in the report")
        if other:
            self.dropped_verdict.append(f"{where} {short!r}: claims verdict {other!r}, the engine's is "
                                        f"{self.answer.final_answer.verdict!r}")
        return not (bad_nums or bad_ids or other or secret)

    def _other_verdict(self, text: str) -> str | None:
        mine = self.answer.final_answer.verdict
        for m in _VERDICT_CLAIM.finditer(text):
            word = m.group(1).lower()
            if word in VERDICTS and word != mine:
                return word
        for v in VERDICTS:
            if v in (mine, "pass", "crash"):  # common words; claims of these are caught by the pattern above
                continue
            if _VERDICT_WORD[v].search(text):
                return v
        return None


_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\[(\"'])")


@dataclass
class Applied:
    answer: Answer
    applied: list[str]
    checker: Checker
    verdict_note: str | None


def apply_narration(answer: Answer, narration: Narration, raw: dict[str, Any]) -> Applied:
    """A copy of ``answer`` with the verified parts of the narration; checks are added by the caller."""
    out = answer.model_copy(deep=True)
    fa = out.final_answer
    chk = Checker.of(answer)
    applied: list[str] = []

    if narration.summary:
        kept = [s for k, s in enumerate(_SENTENCE.split(narration.summary.strip()), 1)
                if s and chk.ok(f"summary sentence {k}", s)]
        text = mask_secrets(" ".join(kept))[:MAX_TEXT]
        if text:
            fa.summary = text
            applied.append("summary")

    for rc in narration.root_causes:
        if not 0 <= rc.index < len(fa.root_causes):
            chk.dropped_ids.append(f"root_causes[{rc.index}]: no such root cause in the report")
            continue
        target = fa.root_causes[rc.index]
        for name in ("issue", "fix"):
            text = getattr(rc, name)
            if text and chk.ok(f"root_causes[{rc.index}].{name}", text, rc.evidence):
                setattr(target, name, mask_secrets(text)[:MAX_TEXT])
                applied.append(f"root_causes[{rc.index}].{name}")

    n_hyp = 0
    for k, h in enumerate(narration.hypotheses):
        if n_hyp >= MAX_HYPOTHESES:
            break
        if not h.evidence:
            chk.dropped_ids.append(f"hypotheses[{k}] {h.text[:80]!r}: cites no evidence")
            continue
        body = " ".join(x for x in (h.text, h.check) if x)
        if chk.ok(f"hypotheses[{k}]", body, h.evidence):
            check = f" Check: {h.check.strip()}" if h.check else ""
            fa.needs_more_data.append(mask_secrets(
                f"Hypothesis from the LLM narrator (unverified; evidence {', '.join(h.evidence)}): "
                f"{h.text.strip()}{check}")[:MAX_TEXT])
            n_hyp += 1
    if n_hyp:
        applied.append(f"{n_hyp} hypothes{'is' if n_hyp == 1 else 'es'}")

    note = None
    proposed = {k: raw[k] for k in ("verdict", "category", "first_bad_step") if k in raw}
    engine = {"verdict": fa.verdict, "category": fa.category, "first_bad_step": fa.first_bad_step}
    changed = {k: v for k, v in proposed.items() if v != engine[k]}
    if changed:
        note = "narrator proposed " + ", ".join(f"{k}={v!r}" for k, v in changed.items()) + \
            "; ignored, the engine's " + ", ".join(f"{k}={engine[k]!r}" for k in changed) + " kept"
    return Applied(out, applied, chk, note)


def _masked_final(answer: Answer) -> Answer:
    """The same answer with every final-answer text masked: what goes to the LLM is masked, and so is
    what comes back into the report, whichever of the two the engine's own wording was."""
    out = answer.model_copy(deep=True)
    fa = out.final_answer
    fa.summary = mask_secrets(fa.summary)
    fa.quick_fixes = [mask_secrets(x) for x in fa.quick_fixes]
    fa.needs_more_data = [mask_secrets(x) for x in fa.needs_more_data]
    for rc in fa.root_causes:
        for name in ("issue", "fix", "expected_impact", "verify"):
            setattr(rc, name, mask_secrets(getattr(rc, name)))
    return out


def finish(original: Answer, result: Applied | None, label: str, error: str | None) -> Answer:
    """Validate the narrated answer like any report; add the ``llm_*`` checks. If the narrated
    answer fails a check the engine's answer passed, the engine's answer is kept."""
    original = _masked_final(original)
    if result is None:
        out = original.model_copy(deep=True)
        out.validation = validate(out)
        out.validation.checks.append(ValidationCheck(
            name="llm_narration", passed=True, detail=f"{label}: not applied ({error}); the engine's wording is kept"))
        out.validation.all_passed = all(c.passed for c in out.validation.checks)
        return out
    out = _masked_final(result.answer)
    out.validation = validate(out)
    before = {c.name for c in validate(original).checks if c.passed}
    regressed = [c.name for c in out.validation.checks if not c.passed and c.name in before]
    chk = result.checker
    if regressed:
        out = original.model_copy(deep=True)
        out.validation = validate(out)
        head = f"{label}: reverted, the narrated report failed {', '.join(regressed)}; the engine's wording is kept"
    else:
        head = f"{label}: applied " + (", ".join(result.applied) if result.applied else "nothing")
    checks = [
        ValidationCheck(name="llm_narration", passed=True, detail=head),
        ValidationCheck(name="llm_numbers_match", passed=True,
                        detail=("dropped " + "; ".join(chk.dropped_numbers)) if chk.dropped_numbers
                        else f"{chk.n_numbers} numbers, all match facts or calculations"),
        ValidationCheck(name="llm_evidence_ids_resolve", passed=True,
                        detail=("dropped " + "; ".join(chk.dropped_ids)) if chk.dropped_ids
                        else "every cited id resolves"),
        ValidationCheck(name="llm_verdict_kept", passed=True,
                        detail="; ".join(x for x in [result.verdict_note, *(["dropped " + "; ".join(chk.dropped_verdict)]
                                                                          if chk.dropped_verdict else [])] if x)
                        or f"verdict {original.final_answer.verdict!r} is the engine's"),
        ValidationCheck(name="llm_no_secrets", passed=True,
                        detail=("dropped " + "; ".join(chk.dropped_secrets)) if chk.dropped_secrets
                        else "no secret-like text in the narration"),
    ]
    for c in checks:
        c.detail = mask_secrets(c.detail)
    out.validation.checks.extend(checks)
    out.validation.all_passed = all(c.passed for c in out.validation.checks)
    return out
