"""Build an answer.json incrementally with stable ids, so every claim has evidence.

    b = AnswerBuilder("diagnose")
    s = b.source(run.sources[0], path_on_disk)            # S1 (sha256 computed here)
    f1 = b.fact(s, "lm loss at step 40", metric="lm loss", step=40, value=2.1, line=812, quote=raw)
    c1 = b.calc("relative jump", "(F2 - F1) / abs(F1)", [f1, f2], unit="ratio")  # result computed
    b.finding(...); b.final(...)
    answer = b.build()        # validated: ids resolve, calculations recompute, schema

Calculation results are never typed in by callers: the builder evaluates the formula on its inputs
(``report/formula.py``), which is the same code validation uses to recompute them.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from trainaudit import __version__
from trainaudit.answer.formula import evaluate
from trainaudit.redact import mask_secrets
from trainaudit.answer.schema import (
    Answer,
    Calculation,
    Commit,
    Comparison,
    ExtractedFact,
    FinalAnswer,
    Finding,
    SourceRef,
    Task,
    ToolInfo,
)
from trainaudit.answer.validate import validate

_HASH_CHUNK = 1 << 20


def sha256_of(opener: Any) -> str:
    h = hashlib.sha256()
    with opener() as f:
        while chunk := f.read(_HASH_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _num(v: Any) -> float | str | None:
    if v is None or isinstance(v, str):
        return v
    f = float(v)
    if math.isfinite(f):
        return f
    return "nan" if math.isnan(f) else ("inf" if f > 0 else "-inf")



# how much of a line a fact quotes
QUOTE_CHARS = 500

class AnswerBuilder:
    def __init__(self, task: Task) -> None:
        self.task: Task = task
        self.sources: list[SourceRef] = []
        self.facts: list[ExtractedFact] = []
        self.calcs: list[Calculation] = []
        self.findings: list[Finding] = []
        self.comparisons: list[Comparison] = []
        self.commits: list[Commit] = []
        self._env: dict[str, Any] = {}
        self._by_path: dict[tuple[str, str], str] = {}

    # -- sources --------------------------------------------------------------------------
    def source(self, path: str, kind: str, *, sha256: str | None = None, commit: str | None = None,
               description: str = "") -> str:
        key = (path, kind)
        if key in self._by_path:
            return self._by_path[key]
        sid = f"S{len(self.sources) + 1}"
        self.sources.append(SourceRef(id=sid, kind=kind, path=mask_secrets(path), sha256=sha256,  # type: ignore[arg-type]
                                      commit=commit, description=mask_secrets(description)))
        self._by_path[key] = sid
        return sid

    # -- facts and calculations -----------------------------------------------------------
    def fact(self, source_ref: str, statement: str, *, metric: str | None = None, step: int | None = None,
             value: Any = None, unit: str | None = None, line: int | None = None, quote: str | None = None,
             steps: Sequence[int] | None = None, values: Sequence[float | str | None] | np.ndarray | None = None) -> str:
        fid = f"F{len(self.facts) + 1}"
        vals = None if values is None else [_num(v) for v in values]
        self.facts.append(ExtractedFact(
            id=fid, source_ref=source_ref, statement=mask_secrets(statement), metric=metric,
            step=None if step is None else int(step), value=_num(value), unit=unit,
            line=None if not line else int(line), quote=None if quote is None else mask_secrets(quote[:QUOTE_CHARS]),
            steps=None if steps is None else [int(s) for s in steps], values=vals))
        self._env[fid] = _fact_env(self.facts[-1])
        return fid

    def calc(self, description: str, formula: str, inputs: Iterable[str], *, unit: str | None = None) -> str:
        cid = f"C{len(self.calcs) + 1}"
        ins = list(inputs)
        result = evaluate(formula, {k: self._env[k] for k in ins})
        self.calcs.append(Calculation(id=cid, description=description, formula=formula, inputs=ins,
                                      result=result if math.isfinite(result) else None, unit=unit))
        self._env[cid] = result
        return cid

    def result(self, cid: str) -> float:
        return float(self._env[cid])

    # -- conclusions ----------------------------------------------------------------------
    def finding(self, **kw: Any) -> str:
        fid = f"D{len(self.findings) + 1}"
        kw["message"] = mask_secrets(kw["message"])
        self.findings.append(Finding(id=fid, **kw))
        return fid

    def comparison(self, **kw: Any) -> None:
        self.comparisons.append(Comparison(**kw))

    def commit(self, **kw: Any) -> None:
        self.commits.append(Commit(**kw))

    def build(self, final: FinalAnswer) -> Answer:
        final.summary = mask_secrets(final.summary)
        # Root causes quote exception messages and log text: mask them like every other string.
        for rc in final.root_causes:
            rc.issue, rc.fix = mask_secrets(rc.issue), mask_secrets(rc.fix)
            rc.expected_impact, rc.verify = mask_secrets(rc.expected_impact), mask_secrets(rc.verify)
        final.quick_fixes = [mask_secrets(q) for q in final.quick_fixes]
        final.needs_more_data = [mask_secrets(n) for n in final.needs_more_data]
        answer = Answer(tool=ToolInfo(version=__version__), task=self.task, source_refs=self.sources,
                        extracted_facts=self.facts, calculations=self.calcs, findings=self.findings,
                        comparisons=self.comparisons, commits=self.commits, final_answer=final)
        answer.validation = validate(answer)
        return answer


def _fact_env(f: ExtractedFact) -> Any:
    """The number(s) a fact stands for in formulas; a non-numeric value is NaN."""
    if f.values is not None:
        return np.array([_as_float(v) for v in f.values], dtype=float)
    return _as_float(f.value)


def _as_float(v: float | str | None) -> float:
    if isinstance(v, str):
        try:
            return float(v)  # "nan", "inf", "-inf"
        except ValueError:
            return math.nan
    return math.nan if v is None else float(v)


def sha256_file(path: Path) -> str:
    return sha256_of(lambda: open(path, "rb"))
