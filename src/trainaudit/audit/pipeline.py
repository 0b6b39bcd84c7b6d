"""The audit end to end: fetch, stage, discover, compare, diagnose, trace, decide, one answer."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import date, datetime
from pathlib import Path

from trainaudit.audit.combine import RepoEvidence, Verdict, decide, explaining_commit, first_fix, settle
from trainaudit.audit.discover import Discovered, discover
from trainaudit.audit.gates import record, replay_today
from trainaudit.audit.inputs import Item, Side, Staging
from trainaudit.audit.merge import absorb
from trainaudit.audit.testcase import TestProfile, profile
from trainaudit.errors import InputError
from trainaudit.history.classify import Classified, FailureShape
from trainaudit.history.features import is_code, path_features
from trainaudit.answer.verdicts import verdict_info
from trainaudit.answer.builder import AnswerBuilder
from trainaudit.answer.charts import PlotSpec
from trainaudit.answer.schema import Answer, Culprit, FinalAnswer, RootCause, RunnerUp
from trainaudit.ingest.golden import GoldenFile, load_golden
from trainaudit.ingest.sources import expand_inputs
from trainaudit.ingest import load_run
from trainaudit.ingest import detect
from trainaudit.history.trace import Trace, rank, trace
from trainaudit.history.git import Repo
from trainaudit.fetch import acquire
from trainaudit.diagnosis import build_answer, diagnose_run
from trainaudit.compare.megatron import BASE_METRICS, EARLIEST, GateResult, Policy, policy_for
from trainaudit.compare.runs import compare_runs
from trainaudit.compare.pipeline import GoldenGate, answer_golden, gate_golden, run_golden
from trainaudit.compare.build import check_in_words
from trainaudit.compare.cilog import read_ci_log

Step = Callable[[str], None]


@dataclass
class AuditOptions:
    inputs: list[str] = field(default_factory=list)
    passing: list[str] = field(default_factory=list)
    repo: str | None = None
    good: str | None = None
    bad: str | None = None
    golden: str | None = None
    model_config: str | None = None
    github: list[str] = field(default_factory=list)
    gitlab: list[str] = field(default_factory=list)
    github_api_url: str | None = None
    find_fix: bool = False
    fmt: str | None = None
    policy: str | None = None  # None: the comparator dated at --bad
    retries: int = 3
    backoff_s: float = 0.5


@dataclass
class AuditInfo:
    missing: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    commit: Classified | None = None
    commit_role: str | None = None
    fix: Classified | None = None
    test_case: str | None = None
    golden: str | None = None
    verdict: Verdict | None = None
    read: Verdict | None = None  # the verdict before the history was known (the comparison's reading)
    ranked: list[Classified] = field(default_factory=list)  # the range's commits, best first
    group: str = ""  # the kind of explanation the commits were ranked for (trainaudit.history.ranking.GROUPS)
    support: list[str] = field(default_factory=list)  # facts that back the verdict beside the deciding ones


def _is_url(s: str) -> bool:
    return s.startswith(("http://", "https://"))


def run_audit(opts: AuditOptions, *, step: Step | None = None,
              fetch_progress: Callable[[str, int, int | None], None] | None = None
              ) -> tuple[Answer, list[PlotSpec], AuditInfo]:
    say = step or (lambda _msg: None)
    with tempfile.TemporaryDirectory(prefix="trainaudit-audit-") as tmp:
        return _run(opts, Path(tmp), say, fetch_progress)


def dated_policy(day: date | None) -> tuple[Policy | str, str]:
    """The comparator of ``day`` (the date of --bad), and a note when it is not replayed exactly.

    Before the oldest replayed comparator (EARLIEST, adc69dba2d) Megatron-LM compared with
    ``np.allclose`` over every step (tests/functional_tests/python_test_utils/common.py until
    696f164de1, 2025-10-07) and checked iteration-time by default: today's every-step budget with
    the default METRICS of that time is the closest replay."""
    if day is None:
        return "megatron", ""
    if day >= EARLIEST.day:
        return f"megatron@{day.isoformat()}", ""
    era = policy_for(f"megatron@{EARLIEST.day.isoformat()}")
    pol = replace(policy_for("megatron"), name=f"megatron~{day.isoformat()}", default_metrics=era.default_metrics)
    return pol, (f"--bad is dated {day.isoformat()}, before the oldest comparator replayed ({EARLIEST.commit}, "
                 f"{EARLIEST.day.isoformat()}): checks replayed with today's every-step budget (as np.allclose "
                 f"required then) and the default METRICS of that time ({', '.join(era.default_metrics)})")


def _run(opts: AuditOptions, tmp: Path, say: Step, fetch_progress) -> tuple[Answer, list[PlotSpec], AuditInfo]:  # type: ignore[no-untyped-def]
    info = AuditInfo()
    staging = Staging(tmp / "stage")
    sides: dict[str, Side] = {}
    for name, given, gh, gl in (("failing", opts.inputs, opts.github, opts.gitlab), ("passing", opts.passing, [], [])):
        local = [p for p in given if not _is_url(p)]
        for p in local:
            if not Path(p).exists():
                raise InputError(f"{p}: no such file or directory")
        urls = [p for p in given if _is_url(p)]
        paths, names = list(local), {}
        if urls or gh or gl:
            say(f"downloading the {name} run's artifacts")
            got = acquire(urls, tmp / f"download-{name}", github=gh, gitlab=gl, github_api_url=opts.github_api_url,
                          progress=fetch_progress, retries=opts.retries, backoff_s=opts.backoff_s)
            info.missing += [f"{name} run: {m}" for m in got.missing]
            paths += got.paths
            names.update(got.names)
        say(f"reading the {name} run's artifacts")
        sides[name] = staging.stage(name, paths, names)
    failing, passing = sides["failing"], sides["passing"]
    if not failing.items and not opts.repo:
        what = "; ".join(info.missing) if info.missing else "no failing-run artifacts were given"
        raise InputError(f"nothing to audit: {what}")

    b = AnswerBuilder("audit")
    plots: list[PlotSpec] = []
    needs: list[str] = []

    # -- repository: revisions, test case, golden values, model config ------------------------
    repo: Repo | None = None
    bad_sha = good_sha = None
    found = Discovered()
    policy: Policy | str = opts.policy or "megatron"
    if opts.repo:
        repo = Repo(opts.repo)
        bad_sha = repo.resolve(opts.bad, "--bad") if opts.bad else repo.resolve("HEAD", "--bad (HEAD)")
        good_sha = repo.resolve(opts.good, "--good") if opts.good else None
        if opts.policy is None:
            head, _ = repo.commits([bad_sha], max_count=1, with_files=False)
            policy, note = dated_policy(datetime.fromisoformat(head[0].date).date() if head else None)
            info.notes += [note] if note else []
        if not opts.golden or not opts.model_config:
            say("finding the test case in the repository")
            texts = [i.display for s in sides.values() for i in s.items]
            texts += [_read_text(i.local) for i in failing.of("ci_log")]
            found = discover(repo, bad_sha, texts, tmp / "from-repo", want_golden=not opts.golden,
                             want_config=not opts.model_config)
            info.notes += found.notes
            info.test_case = found.test_case
    golden_local = opts.golden
    golden_display = opts.golden
    if golden_local is None and found.golden_local is not None:
        golden_local, golden_display = str(found.golden_local), found.golden
        staging.remember(found.golden_local, found.golden or str(found.golden_local))
        info.reasoning.append(f"Golden values: {found.golden} at --bad {bad_sha[:10]} ({found.how}).")  # type: ignore[index]
    config_local = opts.model_config
    if config_local is None and found.model_config_local is not None:
        config_local = str(found.model_config_local)
        staging.remember(found.model_config_local, found.model_config or str(found.model_config_local))
    info.golden = golden_display
    prof = profile(repo, good_sha, bad_sha, found.test_case,
                   Path(config_local).read_text(encoding="utf-8", errors="replace") if config_local else None,
                   found.model_config)

    # -- comparison -------------------------------------------------------------------------
    cmp_answer: Answer | None = None
    gg: GoldenGate | None = None
    cmp_causes: list[RootCause] = []
    ci_items = failing.of("ci_log")
    actual = _actual_paths(failing, opts.fmt)
    legacy = False
    golden_unreadable = ""
    golden_file: GoldenFile | None = None  # the golden, parsed once for every gate below
    gates_differ: tuple[GateResult, GateResult] | None = None
    if golden_local and actual:
        say("reproducing the golden-value gate")
        try:
            golden_file = load_golden(golden_local)
        except InputError as exc:
            golden_unreadable = staging.display(str(exc))
            info.notes.append(f"golden comparison not possible: {golden_unreadable}")
    if golden_file is not None:
        golden_file, actual, legacy, list_era = _readable(golden_file, actual, tmp / "layout", staging, info)
        today = policy_for("megatron")
        if list_era:
            # The comparator of the list layout (test_ci_pipeline.py, 2024) checked every metric of
            # the golden file; METRICS did not exist yet.
            pol = policy if isinstance(policy, Policy) else policy_for(policy)
            policy = replace(pol, default_metrics=tuple(m for m in golden_file.metrics if pol.thresholds(m)))
            today = replace(today, default_metrics=tuple(m for m in golden_file.metrics if today.thresholds(m)))
        try:
            # The golden check of every pretraining test is the regular pipeline (run_ci_test.sh runs
            # the resume pipeline only between the two runs of a checkpoint-resume test).
            gg = gate_golden(golden_file, actual, model_config=config_local, pipeline="regular", policy=policy,
                             fmt=opts.fmt, ci_logs=[str(i.local) for i in ci_items])
            if gg.gate.abort_kind == "comparator_error":
                raise InputError(f"{golden_display}: {gg.gate.abort}")
            cmp_answer, cplots, _ = answer_golden(gg, substance=True,
                                                  last_step=prof.last_step, last_step_from=prof.last_step_from)
            plots += cplots
            now = replay_today(gg, today)
            gates_differ = (gg.gate, now) if now is not None else None
        except InputError as exc:
            gg = None
            info.notes.append(f"golden comparison not possible: {staging.display(str(exc))}")
    elif passing.items and failing.items and not golden_local:
        base, cand = _actual_paths(passing, opts.fmt, whole=True), _actual_paths(failing, opts.fmt, whole=True)
        if base and cand:
            say("comparing the passing and the failing run")
            try:
                cmp_answer, cplots, _ = compare_runs(base[:1], cand[0], opts.fmt)
                plots += cplots
            except InputError as exc:
                info.notes.append(f"run vs run comparison not possible: {staging.display(str(exc))}")
    if cmp_answer is not None:
        _, cmp_causes = absorb(b, cmp_answer, staging.display)
        _pin_repo_sources(b, golden_display, found, bad_sha)
    elif not golden_local and not passing.items:
        needs.append("golden values (--golden, or --repo with the test case named in the CI log) or the artifacts "
                     "of a passing run (--passing), to compare the failing run with")
    elif golden_local and not actual:
        needs.append("the failing run's values (actual-values JSON, TensorBoard event files or the training log)")

    # the passing run against the same gate: what did not change
    if gg is not None and golden_file is not None and passing.items:
        pv = _actual_paths(passing, opts.fmt)
        if pv:
            try:
                pans, _, ppassed = run_golden(golden_file, pv, model_config=config_local, pipeline="regular",
                                              policy=policy, fmt=opts.fmt)
                src = b.source(", ".join(staging.display(p) for p in pv), _kind(pans), description="passing run")
                if not ppassed and cmp_answer is not None:
                    same = {c.metric for c in pans.comparisons if not c.passed} & \
                        {c.metric for c in cmp_answer.comparisons if not c.passed}
                    if same:
                        info.reasoning.append(f"The passing run fails the same golden on {', '.join(sorted(same))} "
                                              "too: the golden values, not the run, changed.")
                npass = sum(c.passed for c in pans.comparisons)
                info.support.append(b.fact(src, f"the passing run {'passes' if ppassed else 'FAILS'} the same gate "
                                                f"({npass}/{len(pans.comparisons)} checks pass, verdict "
                                                f"{pans.final_answer.verdict})"))
                info.reasoning.append(f"The passing run against the same golden: "
                                      f"{'passes' if ppassed else 'fails'} ({npass}/{len(pans.comparisons)} checks).")
            except InputError as exc:
                info.notes.append(f"passing run not comparable: {staging.display(str(exc))}")

    # -- diagnosis of each run ---------------------------------------------------------------
    diag = {}
    diag_causes: list[RootCause] = []
    for name, side in sides.items():
        if not (side.of("run") or side.of("ci_log")):
            continue
        say(f"diagnosing the {name} run")
        d = _diagnose(side, b, staging, name, keep=name == "failing")
        if d is not None:
            diag[name] = d[0]
            if name == "failing":
                diag_causes = d[1]
    dv = diag.get("failing")
    reports = gg.reports if gg is not None else [read_ci_log(str(i.local)) for i in ci_items]  # each log read once
    ci_failed = next((r.failed_metrics for r in reports if r.failed_metrics), None)

    # -- history: read once, ranked for the explanation the verdict implies -------------------
    tr: Trace | None = None
    ctx = FailureShape(test_case=found.test_case, golden_paths=[found.golden] if found.golden else [],
                  features=prof.features, config_path=found.model_config)
    if repo is not None:
        say("tracing the git history")
        tr = trace(opts.repo, good_sha, bad_sha, ctx, find_fix=opts.find_fix,  # type: ignore[arg-type]
                   golden_origin=bool(found.golden), ranked=False)  # ranked below, for the verdict
        info.notes += tr.notes
    evidence = _repo_evidence(gg, legacy, prof, tr)
    evidence.golden_unreadable = golden_unreadable
    verdict = decide(gg.decision if gg is not None else None, dv.verdict if dv else None,
                     dv.category if dv else None,
                     max((s.confidence for s in dv.stories), default=None) if dv else None,
                     dv.first_bad_step if dv else None, diag["passing"].verdict if "passing" in diag else None,
                     ci_failed, evidence)
    info.verdict = verdict
    commit_fact: str | None = None
    if tr is not None and repo is not None:
        failed = list(dict.fromkeys(verdict.metrics or [c.metric for c in (cmp_answer.comparisons if cmp_answer
                                                                              else []) if not c.passed]
                                    or (ci_failed or [])))
        ctx = replace(ctx, kind=verdict.verdict, category=verdict.category, explanation=verdict.explanation,
                      metrics=failed)
        ranked = rank(tr, ctx)
        info.group = ctx.group
        pick = explaining_commit(verdict, ranked)
        info.read, verdict = verdict, settle(verdict, pick)
        info.verdict = verdict
        name = repo.name
        rs = b.source(name, "repo", commit=tr.bad, description=f"{tr.n_commits} commit(s) in "
                      + (f"{tr.good[:10]}..{tr.bad[:10]}" if tr.good else f"the last commits before {tr.bad[:10]}"))  # type: ignore[index]
        b.fact(rs, f"{tr.n_commits} commit(s) between --good and --bad; {len([c for c in ranked if not c.after_bad])} "
                   "touch code, environment, goldens or the gate" + (" (truncated)" if tr.truncated else ""))
        ordered = [c for c in ranked if not c.after_bad]
        info.ranked = ordered
        if pick is not None:
            info.commit, info.commit_role = pick, pick.role
            cs = b.source(f"{name}@{pick.commit.sha[:12]}", "commit", commit=pick.commit.sha,
                          description=pick.commit.title)
            commit_fact = b.fact(cs, f"commit {pick.commit.sha[:10]} ({pick.commit.date[:10]}) \"{pick.commit.title}\" "
                                     f"explains it as {pick.role} (probability {pick.relevance:.2f}"
                                     + _against(ordered) + f"): {pick.reason}")
            info.reasoning.append(f"Commit {pick.commit.sha[:10]} \"{pick.commit.title}\" explains it as {pick.role}: "
                                  f"{pick.reason}.")
        elif verdict.verdict != "pass":
            info.reasoning.append("No commit between --good and --bad touches anything that explains this failure.")
        info.fix = first_fix(ranked)
        for c in ordered[:50] + [c for c in ranked if c.after_bad][:10]:
            b.commit(sha=c.commit.sha, date=c.commit.date, title=c.commit.title, files=c.commit.files[:50],
                     role=c.role, relevance=round(c.relevance, 3), reason=c.reason)
    else:
        needs.append("the repository (--repo, with --good and --bad) to name the commit that explains the failure")
    if info.missing:
        needs.append("artifacts that did not arrive: " + "; ".join(info.missing))

    where = next((s.id for s in b.sources if s.kind in ("golden_values", "repo")), None)
    for note in dict.fromkeys(info.notes):
        if where is not None:
            b.fact(where, f"note: {staging.display(note)}")
    final = _final(b, verdict, cmp_answer, cmp_causes, dv, diag_causes, info, commit_fact, needs, golden_display)
    if gates_differ is not None:
        gsrc = next((s.id for s in b.sources if s.kind == "golden_values"), None) or \
            b.source(golden_display or "golden values", "golden_values", description="golden values")
        final = final.model_copy(update={"gate_disagreement": record(b, gsrc, *gates_differ)})
    if info.commit is not None:
        runner = info.ranked[1] if len(info.ranked) > 1 else None
        final = final.model_copy(update={"culprit": Culprit(
            sha=info.commit.commit.sha, role=info.commit.role, confidence=round(info.commit.relevance, 4),  # type: ignore[arg-type]
            runner_up=RunnerUp(sha=runner.commit.sha, confidence=round(runner.relevance, 4)) if runner else None)})
    return b.build(final), plots, info


def _against(ordered: list[Classified]) -> str:
    """How sure the ranking is of the first commit against the second."""
    if len(ordered) < 2:
        return ", the only candidate"
    return f" against {ordered[1].relevance:.2f} for the next, {ordered[1].commit.sha[:10]}"


def _repo_evidence(gg: GoldenGate | None, legacy: bool, prof: TestProfile, tr: Trace | None) -> RepoEvidence:
    ev = RepoEvidence(legacy_golden=legacy, changes=prof.changes, redefined=prof.defining_changes)
    if gg is not None:
        checked = set(BASE_METRICS) | set(gg.gate.policy.known_metrics)
        ev.golden_lacks = sorted(m for m in gg.actual.values.metrics
                                 if m in checked and m not in gg.golden.metrics and m not in gg.gate.metrics)
    if ev.redefined and tr is not None and prof.config_path:
        movers = [c for c in tr.raw if prof.config_path in c.files]
        ev.redefined_by_code = any(is_code(f) and (path_features(f) & prof.features or not path_features(f))
                                   and f.startswith("megatron/") for c in movers for f in c.files)
    return ev


def _readable(g: GoldenFile, actual: list[str], dest: Path, staging: Staging,
              info: AuditInfo) -> tuple[GoldenFile, list[str], bool, bool]:
    """A golden in the 2024 list layout, as step -> value mappings the gate reads (with the run's
    values when they are in that layout too: the comparator of that time compared by position).
    Returns (golden, actual, the golden is in the list layout while the run's values are not,
    both are in the list layout)."""
    if not g.legacy_list:
        return g, actual, False, False
    # The same steps and values, as the mapping layout holds them (no top-level extras such as
    # 2024's "iteration_timing_avg": the comparator's model has no place for them).
    mapped = GoldenFile(g.path, {n: replace(m, legacy_list=False) for n, m in g.metrics.items()},
                        single_line=g.single_line)
    a_legacy = False
    if len(actual) == 1:
        try:
            a = load_golden(actual[0])
        except InputError:
            a = None
        if a is not None and a.legacy_list:
            dest.mkdir(parents=True, exist_ok=True)
            a_path = _as_mapping(a, dest / "actual.json")
            staging.remember(a_path, staging.display(actual[0]))
            actual, a_legacy = [str(a_path)], True
    info.notes.append("the golden is in the 2024 list layout (values by position from start_step, every "
                      "step_interval): read as step -> value mappings" + (", like the run's values" if a_legacy else ""))
    return mapped, actual, not a_legacy, a_legacy


def _as_mapping(g: GoldenFile, path: Path) -> Path:
    data = {m.name: {"start_step": m.start_step, "end_step": m.end_step, "step_interval": m.step_interval,
                     "values": {str(s): v for s, v in zip(m.steps, m.raw)}} for m in g.metrics.values()}
    path.write_text(json.dumps(data, indent=1), encoding="utf-8")
    return path


def _final(b: AnswerBuilder, v: Verdict, cmp_answer: Answer | None, cmp_causes: list[RootCause], dv,  # type: ignore[no-untyped-def]
           diag_causes: list[RootCause], info: AuditInfo, commit_fact: str | None, needs: list[str],
           golden_display: str | None) -> FinalAnswer:
    if v.source == "diagnosis":
        causes = list(diag_causes)
    elif v.source == "comparison":
        causes = list(cmp_causes)
    else:  # decided by the repository (golden layout, test redefined, a metric the golden lacks)
        src = next((s.id for s in b.sources if s.kind == "golden_values"), None) or \
            b.source(golden_display or "golden values", "golden_values", description="golden values")
        ev = [b.fact(src, f"decides the verdict: {why}") for why in v.why]
        causes = [RootCause(issue=v.why[0], category=v.category, severity="medium", evidence=ev,  # type: ignore[arg-type]
                            fix="regenerate the golden values from a run of the current test definition and "
                                "comparator (download_golden_values.py), after checking the change is intended",
                            expected_impact="the check compares the run with a golden of the same test",
                            verify="rerun the test: the gate passes against the regenerated golden",
                            confidence=v.confidence)] + list(cmp_causes)
    failed = [c for c in (cmp_answer.comparisons if cmp_answer else []) if not c.passed]
    passed = [c for c in (cmp_answer.comparisons if cmp_answer else []) if c.passed]
    parts: list[str] = []
    first: list[str] = []  # the reasoning opens with what failed and what did not
    if failed:
        parts.append("Failed: " + "; ".join(check_in_words(c) for c in failed[:4]) + ".")
        first.append("What failed: " + "; ".join(check_in_words(c) for c in failed[:8]) + ".")
    if passed and v.verdict != "pass":
        unchanged = list(dict.fromkeys(c.metric for c in passed if c.metric not in {f.metric for f in failed}))
        if unchanged:
            parts.append("Unchanged (checks pass): " + ", ".join(unchanged[:6]) + ".")
            first.append("What did not change: " + ", ".join(unchanged[:8])
                         + (f" and {len(unchanged) - 8} more" if len(unchanged) > 8 else "") + " pass their checks.")
    info.reasoning[:0] = first
    info.reasoning += [f"Why {v.verdict}: {w}" for w in v.why[:3]]
    if v.source == "diagnosis" and dv is not None:
        parts.append(dv.summary)
    c = info.commit
    if c is not None:
        parts.append(f"Explained by commit {c.commit.sha[:10]} ({info.commit_role}, probability {c.relevance:.2f}"
                     f"{_against(info.ranked)}): \"{c.commit.title}\".")
    if info.fix is not None:
        parts.append(f"Later commit {info.fix.commit.sha[:10]} \"{info.fix.commit.title}\" {info.fix.reason}.")
    summary = f"{verdict_info(v.verdict).label} ({v.category}). " + " ".join(parts)
    conf = v.confidence
    if causes:
        rc = causes[0]
        extra_issue, extra_fix = "", ""
        if c is not None:
            extra_issue = f" Commit {c.commit.sha[:10]} \"{c.commit.title}\" ({info.commit_role}) explains it."
            extra_fix = _fix_for(v, info, rc.fix)
            conf = min(0.97, conf + 0.1 * c.relevance)
        ev = rc.evidence + [f for f in [*info.support, commit_fact] if f and f not in rc.evidence]
        causes[0] = rc.model_copy(update={"issue": rc.issue + extra_issue, "fix": extra_fix or rc.fix,
                                          "evidence": ev, "confidence": round(conf, 3)})
    elif commit_fact and c is not None:
        causes.append(RootCause(issue=f"commit {c.commit.sha[:10]} \"{c.commit.title}\" ({info.commit_role})",
                                category=v.category, severity="medium", evidence=[commit_fact],  # type: ignore[arg-type]
                                fix=_fix_for(v, info) or "inspect the commit", expected_impact="the check passes",
                                verify="rerun the failing job", confidence=round(min(conf, 0.6), 3)))
    quick = [x for x in ([causes[0].fix if causes else _fix_for(v, info)] if c is not None else [])
             + [r.fix for r in causes[1:3]] if x]
    needs = list(dict.fromkeys(needs + (cmp_answer.final_answer.needs_more_data if cmp_answer else [])
                               + (dv.needs_more_data if dv is not None and v.source == "diagnosis" else [])))
    return FinalAnswer(verdict=v.verdict, category=v.category, first_bad_step=v.first_bad_step,  # type: ignore[arg-type]
                       summary=summary, root_causes=causes, quick_fixes=list(dict.fromkeys(quick))[:5],
                       needs_more_data=needs)




def _fix_for(v: Verdict, info: AuditInfo, run_fix: str | None = None) -> str:
    """What to do, with the commit the answer names. ``run_fix``: the fix ``diagnose`` gives for the
    failing run's own failure, kept word for word when the verdict comes from that diagnosis (a
    crash, an OOM: the same log gets the same advice from both commands)."""
    c = info.commit
    if c is None:
        return ""
    sha = c.commit.sha[:10]
    fix = info.fix
    later = f" (commit {fix.commit.sha[:10]} after --bad already {fix.reason})" if fix else ""
    if v.source == "diagnosis" and run_fix:
        return (f"{run_fix.rstrip('. ')}. The first commit to look at is {sha} \"{c.commit.title}\" "
                f"({info.commit_role}){later}.")
    if v.verdict == "real_regression":
        return (f"Confirm that {sha} \"{c.commit.title}\" is meant to change these numbers: if it is intended, "
                f"refresh the golden values from a run of it (download_golden_values.py); if not, fix or revert "
                f"it{later}.")
    if v.verdict == "numerical_drift":
        return (f"The values moved with {sha} ({info.commit_role}): refresh the golden values from runs on the new "
                f"code/environment (download_golden_values.py) after checking the approximate check still "
                f"passes{later}.")
    if v.verdict == "gating_policy_issue" and v.category == "throughput_regression":
        return (f"Wall-clock changed with {sha} ({info.commit_role}): refresh iteration-time from several runs on the "
                f"new environment, or replace the 5 % band by a measured run-to-run spread, or take iteration-time "
                f"out of the gate; loss and memory stay gated{later}.")
    if v.verdict == "gating_policy_issue":
        return (f"The gate, not the training, is at fault since {sha} ({info.commit_role}): regenerate the golden "
                f"for the current test and comparator{later}.")
    if v.verdict == "crash":
        return f"Fix the error the run died of; {sha} is the first candidate{later}."
    return f"Inspect {sha} \"{c.commit.title}\"{later}."


def _pin_repo_sources(b: AnswerBuilder, golden_display: str | None, found: Discovered, bad_sha: str | None) -> None:
    """A golden and config taken from the repository are pinned to the commit they were read at."""
    if found.golden and golden_display == found.golden and bad_sha:
        for s in b.sources:
            if s.path in (found.golden, found.model_config) and s.kind in ("golden_values", "config"):
                s.commit = bad_sha
                s.description = (s.description + f" (read from the repository at --bad {bad_sha[:10]})").strip()


def _kind(ans: Answer) -> str:
    """The kind of the actual-values source of a golden comparison (the second source it names)."""
    return ans.source_refs[1].kind if len(ans.source_refs) > 1 else "metrics"


def _read_text(p: Path, limit: int = 64 * 1024 * 1024) -> str:
    with open(p, "rb") as f:
        return f.read(limit).decode("utf-8", "replace")


def _reader_of(item: Item, fmt: str | None) -> str | None:
    try:
        det = detect(expand_inputs([str(item.local)]), fmt)
    except InputError:
        return None
    return det[0].reader.kind.value if det else None


def _actual_paths(side: Side, fmt: str | None, *, whole: bool = False) -> list[str]:
    """What stands for the run's values: its actual-values JSON, else its TensorBoard files, else its
    training logs (a CI job log holds the training output too)."""
    values = side.of("values")
    if values:
        return [str(values[0].local)]
    runs = side.of("run") + side.of("ci_log")
    kinds = {id(i): _reader_of(i, fmt) for i in runs}
    tb = [str(i.local) for i in runs if kinds[id(i)] == "tensorboard"]
    if tb:
        return tb if not whole else [str(side.run_dir)] if len(tb) > 1 else tb
    logs = [i for i in runs if kinds[id(i)] in ("log", "metrics", "ci_log")]
    plain = [i for i in logs if i.role == "run"] or logs
    return [str(plain[0].local)] if plain else []


def _diagnose(side: Side, b: AnswerBuilder, staging: Staging, name: str, keep: bool):  # type: ignore[no-untyped-def]
    try:
        run, _problems = load_run([str(side.run_dir)])
    except InputError:
        return None
    if not run.series and not run.events:
        return None
    d = diagnose_run(run)
    if keep:
        ans = build_answer([str(side.run_dir)], run, d)
        _, causes = absorb(b, ans, staging.display, label=f"{name} run")
        return d, causes
    src = b.source(", ".join(i.display for i in side.items if i.role != "values")[:300] or name, "log",
                   description=f"{name} run")
    b.fact(src, f"diagnosis of the {name} run: {d.verdict} ({d.category}); {d.summary[:200]}")
    return d, []


__all__ = ["AuditInfo", "AuditOptions", "dated_policy", "run_audit"]
