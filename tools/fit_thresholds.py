"""Fit the rules' fitted thresholds on the labelled corpus, inside the folds of the evaluation.

    python tools/fit_thresholds.py [--cases DIR] [--no-synth]   # writes src/trainaudit/rules/fitted.json

A rule names the thresholds it lets the data choose and the values they may take (``Rule.grid``);
its ``Params`` default is the prior. Each threshold is chosen on its own, the others held at their
priors: every value of its grid is tried by analysing every case with it, refitting the category
model (``fit_diagnosis``) on the training cases and counting the training cases it gets right
(category, and first bad step where the label has one; generated cases weighted as in the model's
fit). A value replaces the prior only when it is right on at least ``MARGIN`` more training cases:
a threshold does not move on a single case. A value is never chosen when the rule's own fixtures
(``tests/rules/fixtures/ID.json``: where it fires, where it stays silent) reject it, or when it
makes the rule fire on a healthy training log on which the prior is silent.

This is done once per evaluation fold, on the other folds only (the grouped k-fold of
``fit_diagnosis``; fixture inputs from the held-out fold's cases are left out too), and once on
every case: ``folds`` in the file is what each fold's model is evaluated with, ``thresholds`` is
what ships. Run ``tools/fit_diagnosis.py`` afterwards: the decision is fitted over the rules'
findings under the shipped thresholds.
"""

from __future__ import annotations

import datetime
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import accuracy
import fit_diagnosis as fd

from trainaudit.answer.schema import Severity
from trainaudit.errors import InputError
from trainaudit.ingest import load_run
from trainaudit.model import Run
from trainaudit.rules import RULE_CLASSES, Config, Context, Rule, configured
from trainaudit.rules.fitted import FITTED_FILE

FITTED_PATH = accuracy.REPO / "src" / "trainaudit" / "rules" / FITTED_FILE
TESTS = accuracy.REPO / "tests"
FIXTURES = TESTS / "rules" / "fixtures"
MARGIN = 2.0  # training cases a value must gain over the prior to replace it
# recorded healthy runs beside the rules' fixtures (their SOURCES.md): a tiny classifier, a Megatron log
# of warmup and cosine decay, a balanced 2-rank DDP run, the live monitor's file of a healthy run
HEALTHY_RECORDED = tuple(f"rules/fixtures/data/{p}" for p in (
    "tiny/healthy.jsonl", "synth/healthy-warmup-cosine.train.log", "ddp/balanced.log",
    "monitor/healthy/trainaudit-monitor.jsonl"))

Thresholds = dict[str, dict[str, Any]]


@dataclass(frozen=True)
class Knob:
    rule: type[Rule]
    name: str

    @property
    def key(self) -> str:
        return f"{self.rule.id}.{self.name}"

    @property
    def prior(self) -> Any:
        return self.rule.defaults()[self.name]


def knobs() -> list[Knob]:
    return [Knob(cls, name) for cls in RULE_CLASSES for name in cls.grid]


def priors() -> Thresholds:
    out: Thresholds = {}
    for k in knobs():
        out.setdefault(k.rule.id, {})[k.name] = k.prior
    return out


def with_value(base: Thresholds, knob: Knob, value: Any) -> Thresholds:
    out = {rid: dict(th) for rid, th in base.items()}
    out[knob.rule.id][knob.name] = value
    return out


# -- what a value must not break ---------------------------------------------------------------
@dataclass
class Check:
    """One input a value is checked on: a fixture entry of the rule, or a healthy log."""

    rule: str
    inputs: tuple[str, ...]  # relative to tests/
    kind: str  # "fires" | "silent" | "healthy"
    entry: dict[str, Any]
    group: str | None  # the corpus group of the input (held out with its fold), None: not a corpus case


def _group_of_input(rel: str, groups: dict[str, str]) -> str | None:
    parts = Path(rel).parts
    if len(parts) >= 3 and parts[0] == "corpus" and parts[1] in ("logs", "runs"):
        return groups.get(parts[2])
    return None


def checks(cases: list[fd.Case]) -> list[Check]:
    groups = {c.paths[0].parent.name: c.group for c in cases if c.kind in ("logs", "runs")}
    ids = {k.rule.id for k in knobs()}
    out = []
    for rid in sorted(ids):
        doc = json.loads((FIXTURES / f"{rid}.json").read_text(encoding="utf-8"))
        for kind in ("fires", "silent"):
            for e in doc[kind]:
                out.append(Check(rid, tuple(e["input"]), kind, e, _group_of_input(e["input"][0], groups)))
        for c in cases:
            if c.kind == "logs" and c.log.category == "healthy":
                out.append(Check(rid, (str(c.paths[0].relative_to(TESTS)),), "healthy", {}, c.group))
        out += [Check(rid, (rel,), "healthy", {}, None) for rel in HEALTHY_RECORDED]
    return out


def _found(rule: Rule, run: Run) -> list[tuple[str, int | None, str, str]]:
    return [(str(h.category), h.first_bad_step, h.message, str(h.severity)) for h in rule.check(Context.of(run))]


def passes(check: Check, found: list[tuple[str, int | None, str, str]],
           prior: list[tuple[str, int | None, str, str]]) -> bool:
    loud = [f for f in found if f[3] != Severity.INFO]
    if check.kind == "silent":
        return not found
    if check.kind == "healthy":
        return not loud or bool([f for f in prior if f[3] != Severity.INFO])
    e = check.entry
    return bool(found) and found[0][0] == e["category"] and any(
        f[0] == e["category"] and f[1] == e["first_bad_step"] and e["message"] in f[2] and f[3] != Severity.INFO
        for f in found)


def rejections(all_checks: list[Check], loaded: list[fd.Loaded]) -> dict[tuple[str, Any], list[Check]]:
    """(knob key, value) -> the checks that value fails."""
    runs: dict[tuple[str, ...], Run | None] = {tuple(str(p.relative_to(TESTS)) for p in d.case.paths): d.run
                                               for d in loaded if d.case.kind != "synth"}
    out: dict[tuple[str, Any], list[Check]] = {}
    by_rule: dict[str, list[Knob]] = {}
    for k in knobs():
        by_rule.setdefault(k.rule.id, []).append(k)
    base = priors()
    for c in all_checks:
        if c.inputs not in runs:
            try:
                runs[c.inputs] = load_run([str(TESTS / p) for p in c.inputs])[0]
            except InputError:
                runs[c.inputs] = None
        run = runs[c.inputs]
        if run is None:
            continue
        cls = by_rule[c.rule][0].rule
        prior = _found(configured(cls, Config(rules=base)), run)
        for k in by_rule[c.rule]:
            for v in k.rule.grid[k.name]:
                if v == k.prior:
                    continue
                found = _found(configured(cls, Config(rules=with_value(base, k, v))), run)
                if not passes(c, found, prior):
                    out.setdefault((k.key, v), []).append(c)
    return out


def held_out(check: Check, fold: int | None, k: int = fd.K) -> bool:
    """Whether ``check``'s input is a case of ``fold`` (None: every case is fitted on, none is held out)."""
    return fold is not None and check.group is not None and fd.fold_of(check.group, k) == fold


# -- the fit -------------------------------------------------------------------------------------
def score(items: list[fd.Analysed]) -> float:
    """Training cases right (weighted) under the category model fitted on them."""
    train = [a for a in items if a.analysis is not None and a.case.log.category in fd.CLASSES]
    model = fd._fit_categories(train, fd.L2)
    return sum(a.case.weight for a in train if fd._outcome(a, model).right)


def choose(knob: Knob, scores: dict[Any, float], rejected: set[Any]) -> Any:
    """The best-scoring admissible value; the prior unless another gains at least MARGIN, ties going
    to the value nearest the prior."""
    def distance(v: Any) -> float:
        return abs(math.log(v / knob.prior)) if v > 0 and knob.prior > 0 else abs(v - knob.prior)

    ok = [v for v in scores if v not in rejected]
    best = max(ok, key=lambda v: (scores[v], -distance(v)))
    return best if scores[best] >= scores[knob.prior] + MARGIN else knob.prior


def fit_thresholds(loaded: list[fd.Loaded], cases: list[fd.Case], k: int = fd.K) -> dict[str, Any]:
    base = priors()
    analysed = {None: fd.analyse_loaded(loaded, Config(rules=base))}
    tried: dict[str, dict[Any, list[fd.Analysed]]] = {}
    for knob in knobs():
        tried[knob.key] = {v: analysed[None] if v == knob.prior else
                           fd.analyse_loaded(loaded, Config(rules=with_value(base, knob, v)))
                           for v in knob.rule.grid[knob.name]}
    bad = rejections(checks(cases), loaded)
    folds_of = [fd.fold_of(d.case.group, k) for d in loaded]
    chosen: dict[int | None, Thresholds] = {}
    table: dict[str, dict[str, float]] = {}
    for f in [*range(k), None]:
        keep = [g != f for g in folds_of]
        th = priors()
        for knob in knobs():
            scores = {v: score([a for a, m in zip(items, keep) if m]) for v, items in tried[knob.key].items()}
            rejected = {v for v in scores if any(not held_out(c, f, k) for c in bad.get((knob.key, v), []))}
            th[knob.rule.id][knob.name] = choose(knob, scores, rejected)
            if f is None:
                table[knob.key] = {str(v): round(s, 2) for v, s in scores.items()}
                for v in rejected:
                    table[knob.key][str(v)] = -1.0
        chosen[f] = th
    cats = sum(1 for d in loaded if d.run is not None)
    return {"thresholds": chosen[None], "folds": [chosen[f] for f in range(k)], "fitted": {
        "date": datetime.date.today().isoformat(),
        "method": (f"each threshold alone (the others at their priors), over its grid: cases right (weighted) by the "
                   f"category model refitted on the training cases with that value; the prior kept unless a value "
                   f"gains {MARGIN:g} cases; values the rule's fixtures or a healthy training log reject are never "
                   f"chosen (-1 in scores)"),
        "evaluation": f"grouped {k}-fold, fold = sha256(group) % {k}; folds[i] is fitted without fold i",
        "cases": cats, "groups": len({c.group for c in cases}),
        "scores": table, "command": "python tools/fit_thresholds.py"}}


def main(argv: list[str] | None = None) -> int:
    with fd.corpus_from_args("python tools/fit_thresholds.py", __doc__, argv) as cases:
        data = fit_thresholds(fd.load_all(cases), cases)
    FITTED_PATH.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    moved = {f"{rid}.{n}": v for rid, th in data["thresholds"].items() for n, v in th.items()
             if v != priors()[rid][n]}
    print(f"fitted {len(knobs())} thresholds on {data['fitted']['cases']} cases; moved from the prior: "
          f"{moved or 'none'}; wrote {FITTED_PATH.relative_to(accuracy.REPO)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
