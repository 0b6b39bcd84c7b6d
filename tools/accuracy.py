"""Accuracy of trainaudit on labelled cases -> docs/accuracy.md.

    python tools/accuracy.py [logs|megatron|synth ...] [-o docs/accuracy.md]

Three sets of labelled cases (all of them without arguments):

- ``logs``: the real-log corpus (``tests/corpus/logs``): logs as people pasted them in public
  threads, labelled from the thread; each diagnosed alone;
- ``megatron``: real Megatron-LM golden-value failures rebuilt from the repository's history
  (``tests/corpus/megatron``), each audited against a git history rebuilt from its commits;
- ``synth``: real tiny torch runs with an injected fault at a known step (``tools/synth``), each
  file diagnosed on its own and all together.

A log case is right on category when the primary category equals the label, and right on the
first bad step when the answer falls in the label's window. A false alarm is a healthy case with
any finding above ``info``. "Could not read" is a case for which no metric or event was found.
The tables are rewritten in place between their markers, so each set can be rescored alone.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from trainaudit.audit import AuditOptions, run_audit
from trainaudit.audit.combine import Verdict, explaining_commit, settle
from trainaudit.history.classify import Classified, rerank
from trainaudit.history.ranking import Model, Sample, fit, log_likelihood
from trainaudit.diagnosis import build_answer, diagnose_run
from trainaudit.diagnosis.decide import CONFIDENT
from trainaudit.errors import InputError
from trainaudit.ingest import load_run

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO / "tests" / "corpus"
sys.path.insert(0, str(CORPUS))  # the dev set's repository builder (a test helper)
import megatron_repo  # noqa: E402


# -- real logs -------------------------------------------------------------------------------
@dataclass
class LogCase:
    name: str
    path: Path
    label: dict

    @property
    def category(self) -> str:
        return str(self.label["category"])

    @property
    def window(self) -> tuple[float, float] | None:
        """As the log prints it: an epoch can be fractional (HF's 'epoch': 0.53)."""
        w = self.label.get("first_bad_step_window")
        if w:
            return float(w[0]), float(w[1])
        s = self.label.get("first_bad_step")
        return None if s is None else (float(s), float(s))


def log_cases(root: Path = CORPUS / "logs") -> list[LogCase]:
    out = []
    for d in sorted(p for p in root.iterdir() if p.is_dir()):
        files = [f for f in d.iterdir() if f.name != "label.json"]
        out.append(LogCase(d.name, files[0], json.loads((d / "label.json").read_text(encoding="utf-8"))))
    return out


@dataclass
class LogResult:
    case: LogCase
    category: str
    verdict: str
    first_bad: int | None
    seconds: float
    unread: bool = False
    detail: str = ""
    step_text: str = ""  # the first bad step as the log prints it, when that differs from the step
    broken: str = ""  # why the answer could not be built from the diagnosis (the command would fail)

    @property
    def healthy(self) -> bool:
        return self.case.category == "healthy"

    @property
    def cat_ok(self) -> bool:
        return self.category == self.case.category

    @property
    def step_ok(self) -> bool | None:
        """None when the label has no step (or the case is healthy)."""
        w = self.case.window
        if w is None or self.healthy:
            return None
        if self.first_bad is None:
            return False
        printed = [float(x) for x in re.findall(r"-?\d+(?:\.\d+)?", self.step_text)]
        return any(w[0] <= x <= w[1] for x in [self.first_bad, *printed])


def diagnose_log(case: LogCase) -> LogResult:
    t0 = time.perf_counter()
    try:
        run, _ = load_run([str(case.path)])
    except InputError as exc:
        return LogResult(case, "-", "-", None, time.perf_counter() - t0, unread=True, detail=str(exc))
    if not run.series and not run.events:
        return LogResult(case, "-", "-", None, time.perf_counter() - t0, unread=True, detail="no metrics or events")
    d = diagnose_run(run)
    text = run.meta.get("step_text", {}).get(d.first_bad_step, "") if d.first_bad_step is not None else ""
    broken = ""
    try:  # the whole answer, as `diagnose` writes it: its calculations evaluated, its references checked
        build_answer([str(case.path)], run, d, hash_sources=False)
    except Exception as exc:  # any failure is the finding
        broken = f"{type(exc).__name__}: {exc}"
    return LogResult(case, str(d.category), d.verdict, d.first_bad_step, time.perf_counter() - t0,
                     detail=d.summary[:160], step_text=text, broken=broken)


def score_logs(cases: Iterable[LogCase] | None = None) -> list[LogResult]:
    return [diagnose_log(c) for c in (cases if cases is not None else log_cases())]


@dataclass
class Score:
    n: int = 0
    cat_ok: int = 0
    stepped: int = 0
    step_ok: int = 0
    healthy: int = 0
    false_alarms: int = 0
    unread: int = 0
    slowest: float = 0.0

    def add(self, r: LogResult) -> None:
        self.n += 1
        self.cat_ok += r.cat_ok
        self.unread += r.unread
        self.slowest = max(self.slowest, r.seconds)
        if r.healthy:
            self.healthy += 1
            self.false_alarms += not r.cat_ok
        if r.step_ok is not None:
            self.stepped += 1
            self.step_ok += r.step_ok

    def as_dict(self) -> dict[str, float]:
        return {"top1": self.cat_ok / self.n if self.n else 0.0,
                "first_bad_step": self.step_ok / self.stepped if self.stepped else 0.0,
                "false_alarms": self.false_alarms, "healthy": self.healthy, "could_not_read": self.unread,
                "cases": self.n}


def log_summary(results: list[LogResult]) -> Score:
    s = Score()
    for r in results:
        s.add(r)
    return s


def _pct(a: int, b: int) -> str:
    return f"{a}/{b} ({100 * a / b:.0f}%)" if b else "-"


def group_tables(results: list[LogResult], level: str = "###") -> list[str]:
    """The scores by category and by framework."""
    out: list[str] = []
    for key, title in ((lambda r: r.case.category, "category"), (lambda r: r.case.label["framework"], "framework")):
        groups: dict[str, Score] = defaultdict(Score)
        for r in results:
            groups[key(r)].add(r)
        out += [f"{level} By {title}", "", f"| {title} | cases | top-1 | first bad step | false alarms | could not read |",
                "|---|---|---|---|---|---|"]
        for name in sorted(groups):
            g = groups[name]
            fa = f"{g.false_alarms}/{g.healthy}" if g.healthy else "-"
            out.append(f"| {name} | {g.n} | {_pct(g.cat_ok, g.n)} | {_pct(g.step_ok, g.stepped)} | {fa} | {g.unread} |")
        out.append("")
    return out


def render_logs(results: list[LogResult]) -> str:
    total = log_summary(results)
    out = ["## Real logs (`tests/corpus/logs`)", "",
           f"{total.n} logs as people posted them (issue threads, forums, released reference logs), "
           "labelled from their sources (`label.json` in each folder). Each log is diagnosed alone.", "",
           "| metric | value |", "|---|---|",
           f"| top-1 category | {_pct(total.cat_ok, total.n)} |",
           f"| first bad step (cases whose label has one) | {_pct(total.step_ok, total.stepped)} |",
           f"| false alarms (healthy logs with a finding above info) | {total.false_alarms} of {total.healthy} |",
           f"| could not read (no metric or event found) | {total.unread} |",
           f"| slowest case (read + diagnose, in process) | {total.slowest:.2f} s |", ""]
    out += group_tables(results)
    out += ["### Cases", "", "| case | label | first bad (label) | answer | first bad | ok |", "|---|---|---|---|---|---|"]
    for r in results:
        w = r.case.window
        win = "-" if w is None else (f"{w[0]:g}" if w[0] == w[1] else f"{w[0]:g}..{w[1]:g}")
        ok = "unread" if r.unread else ("yes" if r.cat_ok and r.step_ok is not False else
                                        "category" if not r.cat_ok else "step")
        out.append(f"| {r.case.name} | {r.case.category} | {win} | {r.category} | "
                   f"{'-' if r.first_bad is None else r.first_bad} | {ok} |")
    return "\n".join(out) + "\n"


# -- Megatron-LM golden-value failures ---------------------------------------------------------
# A case counts for the verdict unless its label says it is not decided (confidence "low"); it counts
# for the culprit when its label names one (a null culprit means the history explains nothing).
TOP = 3


@dataclass
class MegatronRow:
    case: megatron_repo.Case
    verdict: str
    culprit_rank: int | None  # 1-based rank of the labelled culprit in answer.json commits[], None if absent
    named: str  # the first commit's original sha (10) and role
    seconds: float
    error: str = ""
    # what the audit ranked, to rank again with another model (out-of-sample scores)
    ranked: list[Classified] = field(default_factory=list)
    originals: dict[str, str] = field(default_factory=dict)  # rebuilt sha -> original sha
    group: str = ""
    read: Verdict | None = None  # the verdict before the history was known

    @property
    def label(self) -> dict:
        return self.case.label

    @property
    def scored_verdict(self) -> bool:
        return self.label.get("confidence") != "low"

    @property
    def scored_culprit(self) -> bool:
        return self.scored_verdict and bool(self.label.get("culprit"))

    @property
    def verdict_ok(self) -> bool:
        return self.verdict == self.label["verdict"]

    @property
    def month(self) -> str:
        """The month of the failing revision (its commit date), the unit of the time-grouped protocols."""
        bad = self.case.case["bad"]
        dates = [c["date"] for c in self.case.commits if c["sha"] == bad] or \
            [c["date"] for c in self.case.after_bad if c["sha"] == bad] or [c["date"] for c in self.case.commits[-1:]]
        return dates[0][:7] if dates else "unknown"

    def culprit_index(self) -> int | None:
        culprit = self.label.get("culprit")
        shas = [self.originals.get(c.commit.sha, c.commit.sha) for c in self.ranked]
        return shas.index(culprit) if culprit in shas else None


def audit_megatron(case: megatron_repo.Case, root: Path) -> MegatronRow:
    """Rebuild the case's history, lay out the failing job's artifacts, audit them in-process."""
    repo = megatron_repo.rebuild(case, root / "repo")
    art = megatron_repo.failing_artifacts(case, root / "artifacts")
    t0 = time.perf_counter()
    try:
        answer, _, info = run_audit(AuditOptions(inputs=[str(art)], repo=str(repo.path), good=repo.good, bad=repo.bad))
    except InputError as exc:
        return MegatronRow(case, "-", None, "-", time.perf_counter() - t0, str(exc))
    seconds = time.perf_counter() - t0
    originals = {r: o for o, r in repo.shas.items()}
    shas = [originals.get(c.sha, c.sha) for c in answer.commits if c.role != "fix"]
    culprit = case.label.get("culprit")
    rank = shas.index(culprit) + 1 if culprit in shas else None
    first = answer.commits[0] if answer.commits else None
    named = f"{originals.get(first.sha, first.sha)[:10]} {first.role}" if first else "-"
    return MegatronRow(case, answer.final_answer.verdict, rank, named, seconds, ranked=info.ranked,
                       originals=originals, group=info.group, read=info.read)


def score_megatron(root: Path, cases: list[megatron_repo.Case] | None = None) -> list[MegatronRow]:
    return [audit_megatron(c, root / c.id) for c in (cases if cases is not None else megatron_repo.cases())]


def megatron_summary(rows: list[MegatronRow]) -> dict[str, float]:
    v = [r for r in rows if r.scored_verdict]
    c = [r for r in rows if r.scored_culprit]
    return {"cases": len(rows), "verdict_cases": len(v), "culprit_cases": len(c),
            "verdict": sum(r.verdict_ok for r in v) / len(v) if v else 0.0,
            "culprit_first": sum(r.culprit_rank == 1 for r in c) / len(c) if c else 0.0,
            f"culprit_top{TOP}": sum(r.culprit_rank is not None and r.culprit_rank <= TOP for r in c) / len(c)
            if c else 0.0,
            "slowest_s": max((r.seconds for r in rows), default=0.0)}


# -- the ranking model: fitted on the labelled cases, scored on others ---------------------------
L2 = 1.0  # the penalty of the fit (trainaudit.history.ranking.fit); fixed, not tuned on the held-out scores


def samples(rows: list[MegatronRow]) -> list[Sample]:
    """The cases a ranking can learn from: a scored culprit that the audit found among the candidates."""
    out = []
    for r in rows:
        i = r.culprit_index() if r.scored_culprit and r.ranked else None
        if i is not None:
            out.append(Sample([c.features for c in r.ranked], r.group, i, r.case.id))
    return out


def fit_model(rows: list[MegatronRow]) -> Model:
    sm = samples(rows)
    w = fit(sm, L2)
    months = sorted({r.month for r in rows})
    return Model(w, {"how": "trainaudit.history.ranking.fit (Newton's method on the L2-penalised conditional "
                            "log-likelihood, numpy) by tools/fit_ranking.py",
                     "corpus": "tests/corpus/megatron", "cases": len(rows), "samples": len(sm), "l2": L2,
                     "months": f"{months[0]}..{months[-1]}" if months else "",
                     "log_likelihood": round(log_likelihood(w, sm), 4)})


@dataclass
class Replay:
    verdict: str
    culprit_rank: int | None


def replay(r: MegatronRow, model: Model) -> Replay:
    """The case's answer had the audit used ``model``: the same candidates ranked again, the same
    settling of the verdict (trainaudit.audit.combine.settle)."""
    if r.error or r.read is None or not r.ranked:
        return Replay(r.verdict, r.culprit_rank)
    ranked = rerank(r.ranked, r.group, model)
    pick = explaining_commit(r.read, ranked)
    verdict = settle(r.read, pick).verdict
    shas = [r.originals.get(c.commit.sha, c.commit.sha) for c in ranked]
    culprit = r.label.get("culprit")
    return Replay(verdict, shas.index(culprit) + 1 if culprit in shas else None)


def _tally(pairs: list[tuple[MegatronRow, Replay]]) -> tuple[str, str, str, int]:
    v = [(r, p) for r, p in pairs if r.scored_verdict]
    c = [(r, p) for r, p in pairs if r.scored_culprit]
    return (_pct(sum(p.verdict == r.label["verdict"] for r, p in v), len(v)),
            _pct(sum(p.culprit_rank == 1 for _, p in c), len(c)),
            _pct(sum(p.culprit_rank is not None and p.culprit_rank <= TOP for _, p in c), len(c)), len(pairs))


def later_months(rows: list[MegatronRow], share: float = 0.6) -> tuple[str, list[tuple[MegatronRow, Replay]]]:
    """Fit on the earliest months (about ``share`` of the cases), score the later months."""
    months = sorted({r.month for r in rows})
    cut, n = months[-1], 0
    for m in months:
        n += sum(r.month == m for r in rows)
        if n >= share * len(rows):
            cut = m
            break
    train = [r for r in rows if r.month <= cut]
    test = [r for r in rows if r.month > cut]
    model = fit_model(train)
    return cut, [(r, replay(r, model)) for r in test]


def by_month(rows: list[MegatronRow]) -> list[tuple[MegatronRow, Replay]]:
    """Grouped k-fold by month (k = the number of months): each month scored by a model fitted on the others."""
    out = []
    for m in sorted({r.month for r in rows}):
        model = fit_model([r for r in rows if r.month != m])
        out += [(r, replay(r, model)) for r in rows if r.month == m]
    return out


def render_megatron(rows: list[MegatronRow]) -> str:
    s = megatron_summary(rows)
    v = [r for r in rows if r.scored_verdict]
    c = [r for r in rows if r.scored_culprit]
    cut, later = later_months(rows)
    months = sorted({r.month for r in rows})
    lv, lf, lt, ln = _tally(later)
    kv, kf, kt, kn = _tally(by_month(rows))
    out = ["## Megatron-LM golden-value failures (`tests/corpus/megatron`)", "",
           f"{len(rows)} real golden-value failures of Megatron-LM's CI rebuilt from the repository's history "
           f"({months[0]} to {months[-1]}; labels from the commit diffs and PR threads, `case.json`). Each history is "
           "rebuilt as a real git repository (`tests/corpus/megatron_repo.py`) and the failing job's artifact (the "
           "actual values under the golden file's name) is audited with `--repo --good --bad`, as a user would.", "",
           "Scored: the verdict on every case whose label confidence is not `low`; the culprit on those whose "
           "label names one (a null culprit: nothing in the history explains the failure).", "",
           "The commit ranking is a conditional-logit model (`src/trainaudit/history/ranking.py`, weights in "
           "`ranking.json`) fitted on these cases by `python tools/fit_ranking.py`. Out of sample, each case is "
           "answered by a model fitted without it: on later months (a model fitted on the earlier ones), and "
           "month by month (each month left out in turn). In sample is the shipped model, fitted on every case.", "",
           "| protocol | cases | verdict | culprit first | culprit in the top 3 |", "|---|---|---|---|---|",
           f"| out of sample: fitted up to {cut}, scored on the later months | {ln} | {lv} | {lf} | {lt} |",
           f"| out of sample: grouped by month, each month left out ({len(months)} folds) | {kn} | {kv} | {kf} | {kt} |",
           f"| in sample: the shipped model | {len(rows)} | {_pct(sum(r.verdict_ok for r in v), len(v))} | "
           f"{_pct(sum(r.culprit_rank == 1 for r in c), len(c))} | "
           f"{_pct(sum(r.culprit_rank is not None and r.culprit_rank <= TOP for r in c), len(c))} |", "",
           "In sample, with the audit's own numbers:", "",
           "| metric | value |", "|---|---|",
           f"| verdict | {_pct(sum(r.verdict_ok for r in v), len(v))} |",
           f"| culprit first | {_pct(sum(r.culprit_rank == 1 for r in c), len(c))} |",
           f"| culprit in the top {TOP} | "
           f"{_pct(sum(r.culprit_rank is not None and r.culprit_rank <= TOP for r in c), len(c))} |",
           f"| slowest audit | {s['slowest_s']:.2f} s |", "",
           "| case | month | label | answer | culprit (label) | rank | first commit named | s |",
           "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lab = r.label
        cul = (lab.get("culprit") or "-")[:10] + (f" {lab.get('culprit_role')}" if lab.get("culprit") else "")
        ans = r.verdict + ("" if r.verdict_ok else " ✗") if not r.error else f"error: {r.error[:80]}"
        rank = "-" if not r.scored_culprit else (str(r.culprit_rank) if r.culprit_rank else "absent")
        out.append(f"| {r.case.id} | {r.month} | {lab['verdict']} | {ans} | {cul} | {rank} | {r.named} | "
                   f"{r.seconds:.2f} |")
    return "\n".join(out) + "\n"


# -- generated runs --------------------------------------------------------------------------
@dataclass
class SynthRow:
    case: str
    source: str
    label: str
    window: tuple[int, int] | None
    got: str
    first_bad: int | None
    error: str = ""

    @property
    def cat_ok(self) -> bool:
        return self.got == self.label

    @property
    def step_ok(self) -> bool | None:
        if self.label == "healthy":
            return self.first_bad is None
        if self.window is None:
            return None
        return self.first_bad is not None and self.window[0] <= self.first_bad <= self.window[1]


@dataclass
class SynthInput:
    """One way of reading a generated run: one of its files alone, or all of them together."""

    case: str
    source: str
    label: str
    window: tuple[int, int] | None
    paths: list[Path]
    error: str = ""


def synth_inputs(root: Path, names: list[str] | None = None) -> list[SynthInput]:
    """Generate the synth runs under ``root`` (reused when already there) and list their inputs."""
    from synth import catalogue, generate  # tools/synth: imported only for this set (it needs torch)

    out_rows: list[SynthInput] = []
    for name in names or list(catalogue()):
        out = root / name
        manifest_path = out / "manifest.json"
        try:
            manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else generate(out, [name])
        except AssertionError as exc:  # the run did not show its fault this time
            out_rows.append(SynthInput(name, "-", catalogue()[name].category, None, [], f"not generated: {exc}"))
            continue
        (lab,) = manifest["cases"]
        window = tuple(lab["first_bad_step_window"]) if lab.get("first_bad_step_window") else None
        files = [f["path"] for f in lab["files"]]
        # a crash shows only in its traceback: a file of the run without it (the metrics up to the last step
        # logged) holds nothing of the fault, so it is no input to score the fault on
        shown = {f["path"] for f in lab["files"] if lab["category"] != "crash" or f["format"] == "traceback"}
        for group in [[f] for f in files if f in shown] + ([files] if len(files) > 1 else []):
            src = "all files" if len(group) > 1 else "tensorboard" if "tfevents" in group[0] else Path(group[0]).name
            out_rows.append(SynthInput(name, src, lab["category"], window, [out / f for f in group]))  # type: ignore[arg-type]
    return out_rows


def score_synth(root: Path, names: list[str] | None = None) -> list[SynthRow]:
    rows: list[SynthRow] = []
    for inp in synth_inputs(root, names):
        if inp.error:
            rows.append(SynthRow(inp.case, inp.source, inp.label, None, "-", None, inp.error))
            continue
        try:
            run, _ = load_run([str(p) for p in inp.paths])
            d = diagnose_run(run)
            rows.append(SynthRow(inp.case, inp.source, inp.label, inp.window, str(d.category), d.first_bad_step))
        except InputError as exc:
            rows.append(SynthRow(inp.case, inp.source, inp.label, inp.window, "-", None, str(exc)))
    return rows


def render_synth(rows: list[SynthRow], seconds: float) -> str:
    faulty = [r for r in rows if r.label != "healthy" and not r.error.startswith("not generated")]
    healthy = [r for r in rows if r.label == "healthy"]
    stepped = [r for r in faulty if r.step_ok is not None]
    out = ["## Generated runs (`tools/synth`)", "",
           "Real tiny torch runs with a fault injected at a known step; each file diagnosed alone and all together (a "
           "crash's files without its traceback are not scored alone: nothing in them shows the crash).",
           "", "| metric | value |", "|---|---|",
           f"| category accuracy (faulty runs) | {_pct(sum(r.cat_ok for r in faulty), len(faulty))} |",
           f"| first bad step (faulty runs with a window) | {_pct(sum(bool(r.step_ok) for r in stepped), len(stepped))} |",
           f"| false alarms (healthy runs) | {sum(not r.cat_ok for r in healthy)} of {len(healthy)} |",
           f"| time, training included | {seconds:.0f} s |", "",
           "| case | input | label | first bad (window) | answer | first bad | ok |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        win = "-" if r.window is None else (f"{r.window[0]}" if r.window[0] == r.window[1] else f"{r.window[0]}..{r.window[1]}")
        ok = "error: " + r.error if r.error else ("yes" if r.cat_ok and r.step_ok is not False else
                                                  "category" if not r.cat_ok else "step")
        out.append(f"| {r.case} | {r.source} | {r.label} | {win} | {r.got} | "
                   f"{'-' if r.first_bad is None else r.first_bad} | {ok} |")
    return "\n".join(out) + "\n"


# -- answers recorded before the cases joined the corpus ------------------------------------------
PROSPECTIVE = CORPUS / "prospective.json"


# pasted logs; framework runs of an independent generator; a batch answered and recorded that joins the
# fitted corpus (logs/ or runs/) at the next refit: until then no threshold or model has been fitted on it
PENDING = CORPUS / "pending"
PROSPECTIVE_ROOTS = (CORPUS / "logs", CORPUS / "runs", PENDING)


def corpus_case(name: str, roots: tuple[Path, ...] = PROSPECTIVE_ROOTS) -> Path:
    """The folder of the corpus case ``name`` (the first of ``roots`` that holds it)."""
    return next((r / name for r in roots if (r / name / "label.json").is_file()), roots[0] / name)


def render_prospective(record: dict, roots: tuple[Path, ...] = PROSPECTIVE_ROOTS) -> str:
    """The recorded answers of each batch (``tools/score_unseen.py --record``) against today's labels."""
    out = ["## Logs answered before anyone tuned on them (prospective)", "",
           "Each batch of new real logs was answered once, by the code and model of the commit named, before it joined "
           "the corpus and before any change was made because of it (`python tools/score_unseen.py DIR --record NAME`, "
           "into `tests/corpus/prospective.json`); here those recorded answers are scored against today's labels "
           "(`python tools/accuracy.py prospective`). It is the nearest measure here to logs nobody has seen: the "
           "corpus's own out-of-sample score is higher because the rules were written while reading the corpus. An "
           "`inconclusive` answer counts as `healthy`, as above.", "",
           "| batch | answered at | date | logs | top-1 | first bad step | false alarms | inconclusive | "
           "confidence >= 0.8 right |", "|---|---|---|---|---|---|---|---|---|"]
    total: list[tuple[dict, str]] = []
    for b in record["batches"]:
        rows = [(c, json.loads((corpus_case(c["case"], roots) / "label.json").read_text(encoding="utf-8"))["category"])
                for c in b["cases"]]
        total += rows
        name = b["batch"] + (f": {b['what']}" if b.get("what") else "")
        out.append(f"| {name} | {b['commit']} | {b['date']} | " + _prospective_cells(rows))
    out.append("| all | | | " + _prospective_cells(total))
    return "\n".join(out) + "\n"


def _prospective_cells(rows: list[tuple[dict, str]]) -> str:
    right = [c["category"] == label for c, label in rows]
    stepped = [c["step_ok"] for c, _ in rows if c["step_ok"] is not None]
    healthy = [ok for (_, label), ok in zip(rows, right) if label == "healthy"]
    sure = [ok for (c, _), ok in zip(rows, right) if c["confidence"] >= CONFIDENT]
    inconclusive = sum(c["verdict"] == "inconclusive" for c, _ in rows)
    return (f"{len(rows)} | {_pct(sum(right), len(rows))} | {_pct(sum(stepped), len(stepped))} | "
            f"{len(healthy) - sum(healthy)} of {len(healthy)} | {inconclusive} | {_pct(sum(sure), len(sure))} |")


# -- the document ----------------------------------------------------------------------------
HEADER = ("# Accuracy\n\nProduced by `python tools/accuracy.py` (`make accuracy`); each section can be rescored "
          "alone (`python tools/accuracy.py logs`). `tests/corpus/test_scores.py` keeps the scores from dropping.\n")


def replace_section(doc: str, name: str, body: str) -> str:
    start, end = f"<!-- {name} -->", f"<!-- /{name} -->"
    block = f"{start}\n{body.rstrip()}\n{end}"
    if start in doc and end in doc:
        return re.sub(re.escape(start) + r".*?" + re.escape(end), lambda _m: block, doc, flags=re.S)
    if name == "model" and "<!-- " in doc:  # the headline leads the document
        at = doc.index("<!-- ")
        return doc[:at] + block + "\n\n" + doc[at:]
    order = list(SECTIONS)
    before = [f"<!-- /{s} -->" for s in order[:order.index(name)] if f"<!-- /{s} -->" in doc] if name in order else []
    if before:  # a new section goes after the one it follows in SECTIONS
        at = doc.index(before[-1]) + len(before[-1])
        return doc[:at] + "\n\n" + block + doc[at:]
    return doc.rstrip() + "\n\n" + block + "\n"


SECTIONS: dict[str, Callable[[argparse.Namespace], str]] = {}


def _logs(_args: argparse.Namespace) -> str:
    return render_logs(score_logs())


def _synth(args: argparse.Namespace) -> str:
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        rows = score_synth(args.cases or Path(tmp) / "synth")
    return render_synth(rows, time.perf_counter() - t0)


def _megatron(_args: argparse.Namespace) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        return render_megatron(score_megatron(Path(tmp)))


def _model(args: argparse.Namespace) -> str:
    import fit_diagnosis  # the fit and its grouped k-fold (imports this module)

    with tempfile.TemporaryDirectory() as tmp:
        items = fit_diagnosis.analyse_all(fit_diagnosis.corpus(args.cases or Path(tmp) / "synth"))
    return fit_diagnosis.render(items)


def _prospective(_args: argparse.Namespace) -> str:
    return render_prospective(json.loads(PROSPECTIVE.read_text(encoding="utf-8")))


SECTIONS["model"] = _model
SECTIONS["prospective"] = _prospective
SECTIONS["logs"] = _logs
SECTIONS["megatron"] = _megatron
SECTIONS["synth"] = _synth


@dataclass
class Args:
    sections: list[str] = field(default_factory=list)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python tools/accuracy.py", description=__doc__.split("\n")[0])
    ap.add_argument("sections", nargs="*", choices=[*SECTIONS, []], help="sets to score (default: all)")
    ap.add_argument("-o", "--out", type=Path, default=REPO / "docs" / "accuracy.md")
    ap.add_argument("--cases", type=Path, help="folder to generate (or reuse) the synth runs in")
    args = ap.parse_args(argv)
    doc = args.out.read_text(encoding="utf-8") if args.out.exists() else ""
    if not doc.startswith("# Accuracy"):
        doc = HEADER
    for name in args.sections or list(SECTIONS):
        body = SECTIONS[name](args)
        doc = replace_section(doc, name, body)
        print(body.split("### ")[0], file=sys.stderr)
    args.out.write_text(doc, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
