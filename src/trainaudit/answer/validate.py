"""Validate an answer: schema, every id resolves, every calculation and comparison recomputes,
no absolute machine path and no secret in the output.

Used when writing a report (its result is stored in ``validation``) and on any answer.json read
back from disk (``validate_file``), so a report edited by hand or by an LLM is checked the same way.
"""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import ValidationError

from trainaudit.answer.formula import FormulaError, evaluate, names_in, results_match
from trainaudit.errors import InputError
from trainaudit.redact import mask_secrets
from trainaudit.safeio import load_json, read_text
from trainaudit.answer.schema import Answer, Validation, ValidationCheck



def machine_prefixes() -> list[str]:
    """Absolute paths of the machine running trainaudit that must not leak into a report: the
    working directory, the home directory and the Python installation. Paths quoted from the user's
    own logs (a traceback under /opt/megatron-lm, say) are evidence, not leaks, and are allowed."""
    out = set()
    for p in (os.getcwd(), os.path.expanduser("~"), sys.prefix, sys.base_prefix):
        for q in (p, os.path.realpath(p)):
            if q and q not in ("/", "/usr", "/usr/local") and len(q) > 4:
                out.add(q.rstrip("/") + "/")
    return sorted(out, key=len, reverse=True)


def _env(answer: Answer) -> dict[str, Any]:
    env: dict[str, Any] = {}
    for f in answer.extracted_facts:
        if f.values is not None:
            env[f.id] = np.array([_num(v) for v in f.values], dtype=float)
        else:
            env[f.id] = _num(f.value)
    return env


def _num(v: float | str | None) -> float:
    if v is None:
        return math.nan
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            return math.nan
    return float(v)


def validate(answer: Answer) -> Validation:
    checks: list[ValidationCheck] = [ValidationCheck(name="schema_valid", passed=True,
                                                     detail="pydantic model for schema_version 1")]
    ids = {s.id for s in answer.source_refs} | {f.id for f in answer.extracted_facts} | \
        {c.id for c in answer.calculations} | {d.id for d in answer.findings}
    dup = _duplicates([s.id for s in answer.source_refs] + [f.id for f in answer.extracted_facts]
                      + [c.id for c in answer.calculations] + [d.id for d in answer.findings])
    checks.append(ValidationCheck(name="ids_unique", passed=not dup, detail=f"duplicates: {dup}" if dup else ""))

    missing: list[str] = []
    for f in answer.extracted_facts:
        if f.source_ref not in {s.id for s in answer.source_refs}:
            missing.append(f"{f.id}.source_ref={f.source_ref}")
    for c in answer.calculations:
        missing += [f"{c.id}.inputs:{i}" for i in c.inputs if i not in ids]
    for d in answer.findings:
        missing += [f"{d.id}.evidence:{e}" for e in d.evidence if e not in ids]
    for k, cmp in enumerate(answer.comparisons):
        missing += [f"comparisons[{k}].evidence:{e}" for e in cmp.evidence if e not in ids]
    for k, rc in enumerate(answer.final_answer.root_causes):
        missing += [f"root_causes[{k}].evidence:{e}" for e in rc.evidence if e not in ids]
    gd = answer.final_answer.gate_disagreement
    if gd is not None:
        for side, g in (("at_run", gd.at_run), ("today", gd.today)):
            missing += [f"gate_disagreement.{side}.evidence:{e}" for e in g.evidence if e not in ids]
    checks.append(ValidationCheck(name="evidence_ids_resolve", passed=not missing,
                                  detail="; ".join(missing[:20]) if missing else f"{len(ids)} ids"))

    env = _env(answer)
    bad: list[str] = []
    for c in answer.calculations:
        try:
            undeclared = names_in(c.formula) - set(c.inputs)
            if undeclared:
                bad.append(f"{c.id}: formula uses {sorted(undeclared)} not listed in inputs")
                continue
            got = evaluate(c.formula, {k: env[k] for k in c.inputs if k in env})
        except (FormulaError, KeyError, TypeError, ValueError, IndexError) as exc:
            bad.append(f"{c.id}: {exc}")
            continue
        stored = c.result
        if not results_match(got if math.isfinite(got) else None, stored):
            bad.append(f"{c.id}: stored {stored} but recomputes to {got}")
        env[c.id] = got
    checks.append(ValidationCheck(name="calculations_recomputed", passed=not bad,
                                  detail="; ".join(bad[:20]) if bad else f"{len(answer.calculations)} recomputed"))

    cmp_bad = _check_comparisons(answer, env)
    checks.append(ValidationCheck(name="comparisons_recomputed", passed=not cmp_bad,
                                  detail="; ".join(cmp_bad[:20]) if cmp_bad else f"{len(answer.comparisons)} checked"))

    text = answer.model_dump_json(exclude={"validation"})
    abs_paths = sorted({p for p in machine_prefixes() if p in text})
    checks.append(ValidationCheck(name="no_absolute_paths", passed=not abs_paths,
                                  detail=", ".join(abs_paths[:5])))
    checks.append(ValidationCheck(name="secrets_masked", passed=mask_secrets(text) == text,
                                  detail="" if mask_secrets(text) == text else "unmasked secret-like text found"))
    cul = answer.final_answer.culprit
    cul_ok = cul is None or bool(answer.commits and answer.commits[0].sha == cul.sha
                                 and answer.commits[0].role == cul.role)
    checks.append(ValidationCheck(name="culprit_is_first_commit", passed=cul_ok,
                                  detail="" if cul_ok else "final_answer.culprit is not commits[0] (sha and role)"))
    checks.append(ValidationCheck(name="first_bad_step_consistent", passed=_first_bad_ok(answer),
                                  detail="healthy answers have first_bad_step null" if not _first_bad_ok(answer) else ""))
    return Validation(all_passed=all(c.passed for c in checks), checks=checks)


def _check_comparisons(answer: Answer, env: dict[str, Any]) -> list[str]:
    """Each comparison's numbers must equal the calculations it cites (when it cites them by a
    matching description) and be internally consistent (passed vs failing count and budget)."""
    out: list[str] = []
    for k, c in enumerate(answer.comparisons):
        if c.n_failing < 0 or c.n_failing > c.n_steps:
            out.append(f"comparisons[{k}] {c.metric}: n_failing {c.n_failing} outside 0..{c.n_steps}")
        for e in c.evidence:
            calc = next((x for x in answer.calculations if x.id == e), None)
            if calc is None:
                continue
            field = _calc_field(calc.description)
            if field is None:
                continue
            stored = getattr(c, field)
            if stored is not None and not results_match(float(stored), calc.result):
                out.append(f"comparisons[{k}] {c.metric}.{field}={stored} but {calc.id} recomputes to {calc.result}")
    return out


_FIELDS = ("n_failing", "allowed_failing", "max_rel_err", "median_rel_err", "golden_median", "actual_median",
           "n_steps")


def _calc_field(description: str) -> str | None:
    """Calculations that back a comparison field say so: description starts with ``<field>:``."""
    head = description.split(":", 1)[0].strip()
    return head if head in _FIELDS else None


def _first_bad_ok(answer: Answer) -> bool:
    fa = answer.final_answer
    if fa.verdict in ("healthy", "pass"):
        return fa.first_bad_step is None
    return True


def _duplicates(items: list[str]) -> list[str]:
    seen: set[str] = set()
    return sorted({i for i in items if i in seen or seen.add(i)})  # type: ignore[func-returns-value]


def validate_file(path: Path) -> tuple[Answer | None, Validation]:
    """Validate an answer.json on disk (schema errors become a failed ``schema_valid`` check)."""
    try:
        answer = Answer.model_validate(load_json(read_text(path), str(path)))
    except (InputError, ValidationError, OSError) as exc:
        detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return None, Validation(all_passed=False, checks=[ValidationCheck(name="schema_valid", passed=False,
                                                                          detail=detail)])
    return answer, validate(answer)
