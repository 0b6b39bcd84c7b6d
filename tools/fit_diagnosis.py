"""Fit the diagnosis decision on the labelled corpus, and measure it out of sample.

    python tools/fit_diagnosis.py [--cases DIR] [--no-synth]     # refit the shipped model.json

The corpus: real pasted logs (``tests/corpus/logs``), real tiny runs rendered through framework
loggers (``tests/corpus/runs``, when there) and the generated runs of ``tools/synth``. Each case
belongs to a group: the source thread (or repository, for a file in a repository) of a pasted
log, the ``family`` of a run, the case of a generated run (its files read alone and together are
one group). The out-of-sample evaluation is a grouped k-fold: a group's fold is fixed by a hash of
its name, the model is refitted on the other folds and decides the cases of the fold it never saw.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import hashlib
import json
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np


sys.path.insert(0, str(Path(__file__).resolve().parent))
import accuracy

from trainaudit.diagnosis import Analysis, Model, analyse, decide
from trainaudit.diagnosis.decide import CONFIDENT
from trainaudit.diagnosis.features import CLASSES, CONFIDENCE_FEATURES, FEATURES, confidence_vector
from trainaudit.diagnosis.model import MODEL_FILE, fit, fit_binary
from trainaudit.errors import InputError
from trainaudit.ingest import load_run
from trainaudit.model import Run
from trainaudit.rules import Config, rule_class
from trainaudit.rules.fitted import fitted_file, fitted_thresholds

K = 5
L2 = 1.0
RUNS = accuracy.CORPUS / "runs"
MODEL_PATH = accuracy.REPO / "src" / "trainaudit" / "diagnosis" / MODEL_FILE


@dataclass
class Case:
    log: accuracy.LogCase  # name, label (category, window, framework)
    kind: str  # "logs" | "runs" | "synth"
    group: str
    paths: list[Path]
    weight: float = 1.0


def group_of(source: str) -> str:
    """The thread a pasted log comes from (a GitHub issue, pull request or discussion), the
    repository for a file in a repository, else the page."""
    u = urlsplit(source)
    parts = [p for p in u.path.split("/") if p]
    if u.netloc.endswith("github.com") and len(parts) >= 2:
        if len(parts) >= 4 and parts[2] in ("issues", "pull", "discussions"):
            return f"github:{parts[0]}/{parts[1]}/{parts[3]}".lower()
        return f"github:{parts[0]}/{parts[1]}".lower()
    if u.netloc == "raw.githubusercontent.com" and len(parts) >= 2:
        return f"github:{parts[0]}/{parts[1]}".lower()
    return f"{u.netloc}{u.path}".rstrip("/").lower()


def fold_of(group: str, k: int = K) -> int:
    return int(hashlib.sha256(group.encode()).hexdigest(), 16) % k


def _entries(d: Path) -> list[Path]:
    return sorted(p for p in d.iterdir() if p.name != "label.json")


def corpus(synth_root: Path | None, runs: Path = RUNS) -> list[Case]:
    cases = [Case(c, "logs", group_of(str(c.label["source"])), [c.path]) for c in accuracy.log_cases()]
    if runs.is_dir():
        for d in sorted(p for p in runs.iterdir() if (p / "label.json").is_file()):
            label = json.loads((d / "label.json").read_text(encoding="utf-8"))
            paths = _entries(d)
            cases.append(Case(accuracy.LogCase(d.name, paths[0], label), "runs",
                              f"family:{label.get('family') or d.name}", paths))
    if synth_root is not None:
        inputs = [i for i in accuracy.synth_inputs(synth_root) if not i.error]
        per_case = Counter(i.case for i in inputs)
        for i in inputs:
            label = {"category": i.label, "framework": "synth",
                     "first_bad_step_window": list(i.window) if i.window else None}
            cases.append(Case(accuracy.LogCase(f"{i.case} ({i.source})", i.paths[0], label), "synth",
                              f"synth:{i.case}", i.paths, 1.0 / per_case[i.case]))
    return cases


@dataclass
class Loaded:
    """A case read once (the threshold fit analyses it under many thresholds)."""

    case: Case
    run: Run | None  # None: nothing could be read
    step_text: dict[int, str] = field(default_factory=dict)
    seconds: float = 0.0
    detail: str = ""


@dataclass
class Analysed:
    case: Case
    analysis: Analysis | None  # None: nothing could be read
    step_text: dict[int, str] = field(default_factory=dict)
    seconds: float = 0.0
    detail: str = ""
    # the analysis under each evaluation fold's fitted thresholds, where they differ from what ships
    folds: dict[int, Analysis] = field(default_factory=dict)

    def at(self, fold: int) -> Analysed:
        """This case as the model of ``fold`` sees it (analysed with that fold's thresholds)."""
        a = self.folds.get(fold)
        return self if a is None else replace(self, analysis=a, folds={})


def load_all(cases: list[Case]) -> list[Loaded]:
    out = []
    for c in cases:
        t0 = time.perf_counter()
        try:
            run, _ = load_run([str(p) for p in c.paths])
        except InputError as exc:
            out.append(Loaded(c, None, seconds=time.perf_counter() - t0, detail=str(exc)))
            continue
        if not run.series and not run.events:
            out.append(Loaded(c, None, seconds=time.perf_counter() - t0, detail="no metrics or events"))
            continue
        out.append(Loaded(c, run, dict(run.meta.get("step_text", {})), time.perf_counter() - t0))
    return out


def analyse_loaded(loaded: list[Loaded], config: Config | None = None) -> list[Analysed]:
    """Each case analysed with the shipped thresholds, or ``config``'s over them."""
    out = []
    for d in loaded:
        t0 = time.perf_counter()
        a = None if d.run is None else analyse(d.run, config)
        out.append(Analysed(d.case, a, d.step_text, d.seconds + time.perf_counter() - t0, d.detail))
    return out


def fold_configs() -> dict[int, Config]:
    """The thresholds each evaluation fold was fitted with (``fitted.json``), where they differ
    from the shipped ones."""
    shipped_th = fitted_thresholds()
    folds = fitted_file().get("folds", [])
    return {f: Config(rules=th) for f, th in enumerate(folds) if th != shipped_th}


def analyse_all(cases: list[Case]) -> list[Analysed]:
    """Each case analysed with the shipped thresholds, and with each fold's where they differ."""
    loaded = load_all(cases)
    items = analyse_loaded(loaded)
    for f, config in fold_configs().items():
        for a, d in zip(items, loaded):
            if d.run is not None:
                a.folds[f] = analyse(d.run, config)
    return items


def _fit_categories(train: list[Analysed], l2: float) -> Model:
    w = fit([a.analysis.x for a in train], [CLASSES.index(a.case.log.category) for a in train],  # type: ignore[union-attr]
            l2=l2, weights=[a.case.weight for a in train])
    return Model(FEATURES, w)


def fit_on(items: list[Analysed], l2: float = L2, k: int = K) -> Model:
    """The category model fitted on ``items``, and the confidence model fitted on the decisions
    that category models made on the cases they were not fitted on (a grouped k-fold inside
    ``items``, its folds salted apart from the evaluation's)."""
    train = [a for a in items if a.analysis is not None and a.case.log.category in CLASSES]
    model = _fit_categories(train, l2)
    folds = [fold_of("inner:" + a.case.group, k) for a in train]
    zs: list[np.ndarray] = []
    right: list[bool] = []
    for f in range(k):
        held = [a for a, g in zip(train, folds) if g == f]
        if not held:
            continue
        inner = _fit_categories([a for a, g in zip(train, folds) if g != f], l2)
        for a in held:
            d = decide(a.analysis, inner)  # type: ignore[arg-type]
            p = np.array([d.probabilities[c] for c in CLASSES])
            best = CLASSES.index(d.category)
            runner = max((i for i in range(len(CLASSES)) if i != best), key=lambda i: p[i])
            zs.append(confidence_vector(a.analysis.x, p, best, runner))  # type: ignore[union-attr]
            right.append(d.category == a.case.log.category)
    conf = fit_binary(zs, right, l2=l2)
    shift = confidence_shift(np.stack(zs) @ conf, np.array(right))
    conf[CONFIDENCE_FEATURES.index("bias")] += shift
    return Model(FEATURES, model.weights, {"confidence_shift": round(shift, 2)}, conf)


SURE_TARGET = 0.96  # of the held-out decisions the shifted model puts at >= CONFIDENT, at least this share right
SHIFTS = tuple(-0.1 * i for i in range(31))  # 0 .. -3 on the log-odds: the smallest that reaches the target


def confidence_shift(logits: np.ndarray, right: np.ndarray) -> float:
    """How far to lower every decision's log-odds of being right so that, among the held-out decisions
    the fit learned from, those at confidence >= CONFIDENT are SURE_TARGET right: an answer shown as sure
    must be right 95 % of the time (the logistic fit is right on average over all confidences, not at the
    top), and the margin over 95 % allows for the fit's own optimism on the decisions it was fitted on."""
    for b in SHIFTS:
        sure = 1.0 / (1.0 + np.exp(-(logits + b))) >= CONFIDENT
        if not sure.any() or float(np.mean(right[sure])) >= SURE_TARGET:
            return b
    return SHIFTS[-1]


@dataclass
class Outcome:
    """One case decided by one model, scored as the logs are (:class:`accuracy.LogResult`)."""

    result: accuracy.LogResult
    kind: str
    confidence: float
    weight: float

    @property
    def right(self) -> bool:
        return self.result.cat_ok and self.result.step_ok is not False


def _outcome(a: Analysed, model: Model) -> Outcome:
    c = a.case
    if a.analysis is None:
        r = accuracy.LogResult(c.log, "-", "-", None, a.seconds, unread=True, detail=a.detail)
        return Outcome(r, c.kind, 0.0, c.weight)
    t0 = time.perf_counter()
    d = decide(a.analysis, model)
    text = a.step_text.get(d.first_bad_step, "") if d.first_bad_step is not None else ""
    r = accuracy.LogResult(c.log, str(d.category), d.verdict, d.first_bad_step,
                           a.seconds + time.perf_counter() - t0, detail=d.summary[:160], step_text=text)
    return Outcome(r, c.kind, d.confidence, c.weight)


def in_sample(items: list[Analysed], l2: float = L2) -> list[Outcome]:
    model = fit_on(items, l2)
    return [_outcome(a, model) for a in items]


def out_of_sample(items: list[Analysed], k: int = K, l2: float = L2) -> list[Outcome]:
    """Each case decided by the model fitted on the folds its group is not in, every case analysed
    with the thresholds fitted on those folds; in corpus order."""
    folds = [fold_of(a.case.group, k) for a in items]
    out: list[Outcome | None] = [None] * len(items)
    for f in range(k):
        model = fit_on([a.at(f) for a, g in zip(items, folds) if g != f], l2)
        for i, (a, g) in enumerate(zip(items, folds)):
            if g == f:
                out[i] = _outcome(a.at(f), model)
    return [o for o in out if o is not None]


def write_model(items: list[Analysed], path: Path = MODEL_PATH, l2: float = L2) -> Model:
    model = fit_on(items, l2)
    counts = Counter(a.case.kind for a in items if a.analysis is not None)
    cats = Counter(a.case.log.category for a in items if a.analysis is not None)
    info = {"date": datetime.date.today().isoformat(),
            "method": "conditional logit (softmax over categories), L2-penalised, Newton's method",
            "l2": l2, "cases": dict(sorted(counts.items())), "categories": dict(sorted(cats.items())),
            "groups": len({a.case.group for a in items}), "evaluation": f"grouped {K}-fold, fold = sha256(group) % {K}",
            "command": "python tools/fit_diagnosis.py",
            "confidence": f"logistic on the decisions of inner-fold models, its log-odds then lowered by "
                          f"{-model.info['confidence_shift']:.1f} so that {SURE_TARGET:.0%} of those at >= {CONFIDENT} "
                          f"are right"}
    model = Model(model.features, model.weights, info, model.confidence)
    path.write_text(model.to_json(), encoding="utf-8")
    return model


# -- the report ----------------------------------------------------------------------------------
BINS = ((0.0, 0.5), (0.5, 0.8), (0.8, 0.9), (0.9, 0.95), (0.95, 1.01))


@dataclass
class Summary:
    cases: int
    right: int  # category right
    stepped: int
    step_ok: int
    healthy: int
    false_alarms: int
    inconclusive: int
    confident: int  # answers with confidence >= 0.8
    confident_right: int

    @property
    def top1(self) -> float:
        return self.right / self.cases if self.cases else 0.0


def summarise(outcomes: list[Outcome]) -> Summary:
    rs = [o.result for o in outcomes]
    conf = [o for o in outcomes if o.confidence >= CONFIDENT]
    return Summary(len(rs), sum(r.cat_ok for r in rs), sum(r.step_ok is not None for r in rs),
                   sum(bool(r.step_ok) for r in rs), sum(r.healthy for r in rs),
                   sum(r.healthy and not r.cat_ok for r in rs), sum(r.verdict == "inconclusive" for r in rs),
                   len(conf), sum(o.result.cat_ok for o in conf))


def reliability(outcomes: list[Outcome]) -> list[tuple[str, int, int]]:
    rows = []
    for lo, hi in BINS:
        b = [o for o in outcomes if lo <= o.confidence < hi]
        rows.append((f"{lo:.2f} to {min(hi, 1.0):.2f}", len(b), sum(o.result.cat_ok for o in b)))
    return rows


def thresholds_section() -> list[str]:
    """The fitted rule thresholds: the prior, what ships and what each evaluation fold chose."""
    data = fitted_file()
    if not data:
        return []
    info = data["fitted"]
    out = ["### Fitted rule thresholds", "",
           f"{sum(len(v) for v in data['thresholds'].values())} rule thresholds are fitted "
           f"(`src/trainaudit/rules/fitted.json`, `{info['command']}`): {info['method']}. Each fold's model above is "
           f"evaluated with the thresholds fitted without that fold ({info['evaluation']}).", "",
           "| threshold | prior | shipped | folds 0-4 | training cases right, every case (by value) |", "|---|---|---|---|---|"]
    for rid, th in data["thresholds"].items():
        cls = rule_class(rid)
        for name, value in th.items():
            prior = cls.defaults()[name] if cls is not None else "-"
            folds = ", ".join(str(f[rid][name]) for f in data["folds"])
            scores = ", ".join(f"{v}: {'rejected' if s < 0 else f'{s:g}'}"
                               for v, s in info["scores"][f"{rid}.{name}"].items())
            out.append(f"| {rid}.{name} | {prior} | {value} | {folds} | {scores} |")
    return out


def render(items: list[Analysed], k: int = K, l2: float = L2) -> str:
    model = fit_on(items, l2)
    ins, oos = [_outcome(a, model) for a in items], out_of_sample(items, k, l2)
    kinds = [kd for kd in ("logs", "runs", "synth") if any(o.kind == kd for o in ins)]
    names = {"logs": "real pasted logs (`tests/corpus/logs`)", "runs": "real framework runs (`tests/corpus/runs`)",
             "synth": "generated runs (`tools/synth`, each file alone and all together)"}
    groups = len({a.case.group for a in items})
    out = ["## Out of sample: the headline", "",
           f"The decision (which category is primary, healthy or not, the confidence) is a model fitted on the "
           f"labelled cases (`src/trainaudit/diagnosis/model.json`, `python tools/fit_diagnosis.py`). Out of sample: "
           f"grouped {k}-fold over {groups} groups (a pasted log's source thread, or repository for a file in one; "
           f"a run's family; a generated case), a group's fold fixed by sha256 of its name; each case is decided by the "
           f"model fitted on the other folds only. In sample: the model fitted on every case. Gap = in sample minus "
           f"out of sample. An `inconclusive` answer names no problem: it counts as category `healthy` (right for a "
           f"healthy log, no false alarm) and is counted on its own.", "",
           "| set | cases | top-1 out of sample | top-1 in sample | gap | first bad step out / in | "
           "false alarms out / in | inconclusive (out) |", "|---|---|---|---|---|---|---|---|"]
    for kd in [*kinds, "all"]:
        o = summarise([x for x in oos if kd in ("all", x.kind)])
        i = summarise([x for x in ins if kd in ("all", x.kind)])
        out.append(f"| {names.get(kd, 'all sets')} | {o.cases} | {accuracy._pct(o.right, o.cases)} | "
                   f"{accuracy._pct(i.right, i.cases)} | {i.top1 - o.top1:+.3f} | "
                   f"{accuracy._pct(o.step_ok, o.stepped)} / {accuracy._pct(i.step_ok, i.stepped)} | "
                   f"{o.false_alarms} of {o.healthy} / {i.false_alarms} of {i.healthy} | {o.inconclusive} |")
    out += ["", *thresholds_section()]
    a = summarise(oos)
    out += ["", "### Calibration (out of sample, all sets)", "",
            f"Answers with confidence >= {CONFIDENT}: {a.confident_right}/{a.confident} "
            f"({100 * a.confident_right / max(a.confident, 1):.1f}%) right "
            f"(the aim is at least 95 %). Below {CONFIDENT} the answer says what would decide it (`needs_more_data`). "
            f"The confidence is a logistic model of whether the decision is right, fitted on the decisions that "
            f"category models made on cases they were not fitted on (an inner grouped fold), its log-odds then "
            f"lowered, in steps of 0.1, until {SURE_TARGET:.0%} of those decisions at >= {CONFIDENT} are right "
            f"(each fold's model fits its own shift; the shipped one: {-model.info['confidence_shift']:.1f}).",
            "", "| confidence | answers | right | share right |", "|---|---|---|---|"]
    for name, n, r in reliability(oos):
        out.append(f"| {name} | {n} | {r} | {f'{r / n:.2f}' if n else '-'} |")
    out += ["", "### Out of sample by category and framework (all sets)", ""]
    out += accuracy.group_tables([o.result for o in oos], level="####")
    return "\n".join(out) + "\n"


@contextlib.contextmanager
def corpus_from_args(prog: str, doc: str, argv: list[str] | None) -> Iterator[list[Case]]:
    """The labelled cases a fitting tool's command line asks for (the generated runs in ``--cases``,
    or in a temporary folder while the block runs)."""
    ap = argparse.ArgumentParser(prog=prog, description=doc.split("\n")[0])
    ap.add_argument("--cases", type=Path, help="folder to generate (or reuse) the synth runs in")
    ap.add_argument("--no-synth", action="store_true", help="leave the generated runs out (no torch needed)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        yield corpus(None if args.no_synth else (args.cases or Path(tmp) / "synth"))


def main(argv: list[str] | None = None) -> int:
    with corpus_from_args("python tools/fit_diagnosis.py", __doc__, argv) as cases:
        items = analyse_all(cases)
    model = write_model(items)
    ok = sum(o.right for o in in_sample(items))
    print(f"fitted on {sum(model.info['cases'].values())} cases; in sample {ok}/{len(items)} right; "
          f"wrote {MODEL_PATH.relative_to(accuracy.REPO)}", file=sys.stderr)
    return 0



if __name__ == "__main__":
    raise SystemExit(main())
