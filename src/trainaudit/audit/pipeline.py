"""The audit end to end: fetch, stage, discover, compare, diagnose, trace, decide, one answer."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from trainaudit.audit.combine import Verdict, decide, explaining_commit, first_fix
from trainaudit.audit.discover import Discovered, discover
from trainaudit.audit.inputs import Item, Side, Staging
from trainaudit.audit.merge import absorb
from trainaudit.errors import InputError
from trainaudit.history.classify import Classified, Context
from trainaudit.answer.builder import AnswerBuilder, sha256_file
from trainaudit.answer.charts import PlotSpec
from trainaudit.answer.schema import Answer, FinalAnswer, RootCause
from trainaudit.answer.paths import display_path
from trainaudit.ingest.sources import expand_inputs
from trainaudit.ingest import load_run
from trainaudit.ingest import detect
from trainaudit.history.trace import trace
from trainaudit.history.git import Repo
from trainaudit.fetch import acquire
from trainaudit.diagnosis import build_answer, diagnose_run
from trainaudit.compare.runs import compare_runs
from trainaudit.compare.pipeline import run_golden
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
    policy: str = "megatron"
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


def _is_url(s: str) -> bool:
    return s.startswith(("http://", "https://"))


def run_audit(opts: AuditOptions, *, step: Step | None = None,
              fetch_progress: Callable[[str, int, int | None], None] | None = None
              ) -> tuple[Answer, list[PlotSpec], AuditInfo]:
    say = step or (lambda _msg: None)
    with tempfile.TemporaryDirectory(prefix="trainaudit-audit-") as tmp:
        return _run(opts, Path(tmp), say, fetch_progress)


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
    repo = bad_sha = None
    found = Discovered()
    if opts.repo:
        repo = Repo(opts.repo)
        bad_sha = repo.resolve(opts.bad, "--bad") if opts.bad else repo.resolve("HEAD", "--bad (HEAD)")
        if opts.good:
            repo.resolve(opts.good, "--good")
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
        staging._remember(found.golden_local, found.golden)  # noqa: SLF001 - our own staging
        info.reasoning.append(f"Golden values: {found.golden} at --bad {bad_sha[:10]} ({found.how}).")  # type: ignore[index]
    config_local = opts.model_config
    if config_local is None and found.model_config_local is not None:
        config_local = str(found.model_config_local)
        staging._remember(found.model_config_local, found.model_config)  # noqa: SLF001
    info.golden = golden_display

    # -- comparison -------------------------------------------------------------------------
    cmp_answer: Answer | None = None
    cmp_causes: list[RootCause] = []
    ci_items = failing.of("ci_log")
    actual = _actual_paths(failing, opts.fmt)
    if golden_local and actual:
        say("reproducing the golden-value gate")
        try:
            cmp_answer, cplots, _ = run_golden(golden_local, actual, model_config=config_local, policy=opts.policy,
                                               ci_logs=[str(i.local) for i in ci_items], fmt=opts.fmt)
            plots += cplots
        except InputError as exc:
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
        _fix_golden_source(b, golden_display, found, bad_sha)
    elif not golden_local and not passing.items:
        needs.append("golden values (--golden, or --repo with the test case named in the CI log) or the artifacts "
                     "of a passing run (--passing), to compare the failing run with")
    elif golden_local and not actual:
        needs.append("the failing run's values (actual-values JSON, TensorBoard event files or the training log)")

    # the passing run against the same gate: what did not change
    if cmp_answer is not None and golden_local and passing.items:
        pv = _actual_paths(passing, opts.fmt)
        if pv:
            try:
                pans, _, ppassed = run_golden(golden_local, pv, model_config=config_local, policy=opts.policy,
                                              fmt=opts.fmt)
                src = b.source(", ".join(staging.display(p) for p in pv), _kind(pans), description="passing run")
                if not ppassed and cmp_answer is not None:
                    same = {c.metric for c in pans.comparisons if not c.passed} & \
                        {c.metric for c in cmp_answer.comparisons if not c.passed}
                    if same:
                        info.reasoning.append(f"The passing run fails the same golden on {', '.join(sorted(same))} "
                                              "too: the golden values, not the run, changed.")
                npass = sum(c.passed for c in pans.comparisons)
                b.fact(src, f"the passing run {'passes' if ppassed else 'FAILS'} the same gate "
                            f"({npass}/{len(pans.comparisons)} checks pass, verdict {pans.final_answer.verdict})")
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
    cfa = cmp_answer.final_answer if cmp_answer is not None else None
    ci_failed = next((r.failed_metrics for r in _ci_reports(ci_items) if r.failed_metrics), None)
    verdict = decide(cfa.verdict if cfa else None, cfa.category if cfa else None,
                     max((r.confidence for r in cfa.root_causes), default=None) if cfa else None,
                     cfa.first_bad_step if cfa else None,
                     dv.verdict if dv else None, dv.category if dv else None,
                     max((s.confidence for s in dv.stories), default=None) if dv else None,
                     dv.first_bad_step if dv else None,
                     diag["passing"].verdict if "passing" in diag else None, ci_failed)
    info.reasoning += verdict.why

    # -- history ------------------------------------------------------------------------------
    commit_fact: str | None = None
    if repo is not None:
        say("tracing the git history")
        failed_metrics = [c.metric for c in (cmp_answer.comparisons if cmp_answer else []) if not c.passed]
        ctx = Context(kind=verdict.verdict, metrics=list(dict.fromkeys(failed_metrics or (ci_failed or []))),
                      test_case=found.test_case, golden_paths=[found.golden] if found.golden else [])
        tr = trace(opts.repo, opts.good, opts.bad, ctx, find_fix=opts.find_fix)  # type: ignore[arg-type]
        info.notes += tr.notes
        pick = explaining_commit(verdict.verdict, verdict.category, tr.commits)
        rs = b.source(opts.repo, "repo", commit=tr.bad, description=f"{tr.n_commits} commit(s) in "
                      + (f"{tr.good[:10]}..{tr.bad[:10]}" if tr.good else f"the last commits before {tr.bad[:10]}"))  # type: ignore[index]
        b.fact(rs, f"{tr.n_commits} commit(s) between --good and --bad; {len([c for c in tr.commits if not c.after_bad])} "
                   "touch code, environment, goldens or the gate" + (" (truncated)" if tr.truncated else ""))
        ordered = tr.commits
        if pick is not None:
            c, role = pick
            info.commit, info.commit_role = c, role
            ordered = [c] + [x for x in tr.commits if x is not c]
            cs = b.source(f"{opts.repo}@{c.commit.sha[:12]}", "commit", commit=c.commit.sha, description=c.commit.title)
            commit_fact = b.fact(cs, f"commit {c.commit.sha[:10]} ({c.commit.date[:10]}) \"{c.commit.title}\" "
                                     f"plays the role {role}: {c.reason}; files: {', '.join(c.commit.files[:6])}")
            info.reasoning.append(f"Commit {c.commit.sha[:10]} \"{c.commit.title}\" explains it as {role}: {c.reason}.")
        else:
            info.reasoning.append("No commit between --good and --bad plays a role that explains this verdict.")
        info.fix = first_fix(tr.commits)
        for c in ordered[:50]:
            role = info.commit_role if c is info.commit else c.role
            b.commit(sha=c.commit.sha, date=c.commit.date, title=c.commit.title, files=c.commit.files[:50],
                     role=role, relevance=round(c.relevance, 3), reason=c.reason)
    else:
        needs.append("the repository (--repo, with --good and --bad) to name the commit that explains the failure")
    if info.missing:
        needs.append("artifacts that did not arrive: " + "; ".join(info.missing))

    final = _final(verdict, cmp_answer, cmp_causes, dv, diag_causes, info, commit_fact, needs)
    return b.build(final), plots, info


def _final(v: Verdict, cmp_answer: Answer | None, cmp_causes: list[RootCause], dv, diag_causes: list[RootCause],  # type: ignore[no-untyped-def]
           info: AuditInfo, commit_fact: str | None, needs: list[str]) -> FinalAnswer:
    causes = list(diag_causes if v.source == "diagnosis" else cmp_causes)
    if not causes and v.source == "ci_log":
        causes = []
    failed = [c for c in (cmp_answer.comparisons if cmp_answer else []) if not c.passed]
    passed = [c for c in (cmp_answer.comparisons if cmp_answer else []) if c.passed]
    parts: list[str] = []
    first: list[str] = []  # the reasoning opens with what failed and what did not
    if failed:
        parts.append("Failed: " + "; ".join(_how_much(c) for c in failed[:4]) + ".")
        first.append("What failed: " + "; ".join(_how_much(c) for c in failed[:8]) + ".")
    if passed and v.verdict != "pass":
        unchanged = list(dict.fromkeys(c.metric for c in passed if c.metric not in {f.metric for f in failed}))
        if unchanged:
            parts.append("Unchanged (checks pass): " + ", ".join(unchanged[:6]) + ".")
            first.append("What did not change: " + ", ".join(unchanged[:8])
                         + (f" and {len(unchanged) - 8} more" if len(unchanged) > 8 else "") + " pass their checks.")
    info.reasoning[:0] = first
    if v.source == "diagnosis" and dv is not None:
        parts.append(dv.summary)
    c = info.commit
    if c is not None:
        parts.append(f"Explained by commit {c.commit.sha[:10]} ({info.commit_role}): \"{c.commit.title}\".")
    if info.fix is not None:
        parts.append(f"Later commit {info.fix.commit.sha[:10]} \"{info.fix.commit.title}\" {info.fix.reason}.")
    head = {"real_regression": "Real regression", "numerical_drift": "Numerical drift",
            "gating_policy_issue": "Gating-policy issue", "infrastructure_failure": "Infrastructure failure",
            "crash": "Crash", "pass": "Pass", "inconclusive": "Inconclusive"}.get(v.verdict, v.verdict)
    summary = f"{head} ({v.category}). " + " ".join(parts)
    conf = v.confidence
    if causes:
        rc = causes[0]
        extra_issue, extra_fix = "", ""
        if c is not None:
            extra_issue = f" Commit {c.commit.sha[:10]} \"{c.commit.title}\" ({info.commit_role}) explains it."
            extra_fix = _fix_for(v, info)
            if (v.verdict, info.commit_role) in {("real_regression", "suspect"), ("numerical_drift", "environment_change"),
                                                ("gating_policy_issue", "environment_change"),
                                                ("gating_policy_issue", "golden_update")}:
                conf = min(0.97, conf + 0.05)
        ev = rc.evidence + ([commit_fact] if commit_fact else [])
        causes[0] = rc.model_copy(update={"issue": rc.issue + extra_issue, "fix": (extra_fix + " " + rc.fix).strip(),
                                          "evidence": ev, "confidence": round(conf, 3)})
    elif commit_fact and c is not None:
        causes.append(RootCause(issue=f"commit {c.commit.sha[:10]} \"{c.commit.title}\" ({info.commit_role})",
                                category=v.category, severity="medium", evidence=[commit_fact],  # type: ignore[arg-type]
                                fix=_fix_for(v, info) or "inspect the commit", expected_impact="the check passes",
                                verify="rerun the failing job", confidence=round(min(conf, 0.6), 3)))
    quick = [x for x in ([_fix_for(v, info)] if c is not None else []) + [r.fix for r in causes[1:3]] if x]
    needs = list(dict.fromkeys(needs + (cmp_answer.final_answer.needs_more_data if cmp_answer else [])
                               + (dv.needs_more_data if dv is not None and v.source == "diagnosis" else [])))
    return FinalAnswer(verdict=v.verdict, category=v.category, first_bad_step=v.first_bad_step,  # type: ignore[arg-type]
                       summary=summary, root_causes=causes, quick_fixes=quick[:5], needs_more_data=needs)


def _fix_for(v: Verdict, info: AuditInfo) -> str:
    c = info.commit
    if c is None:
        return ""
    sha = c.commit.sha[:10]
    fix = info.fix
    later = f" (commit {fix.commit.sha[:10]} after --bad already {fix.reason})" if fix else ""
    if v.verdict == "real_regression":
        return f"Fix or revert {sha} \"{c.commit.title}\"{later}; keep the goldens until the loss is back in the band."
    if v.verdict == "numerical_drift":
        return (f"The values moved with {sha} ({info.commit_role}): refresh the golden values from runs on the new "
                f"environment (download_golden_values.py) after checking the approximate check still passes{later}.")
    if v.verdict == "gating_policy_issue" and v.category == "throughput_regression":
        return (f"Wall-clock changed with {sha} ({info.commit_role}): refresh iteration-time from several runs on the "
                f"new environment, or replace the 5 % band by a measured run-to-run spread, or take iteration-time "
                f"out of the gate; loss and memory stay gated{later}.")
    if v.verdict == "gating_policy_issue":
        return f"The gate, not the training, changed with {sha} ({info.commit_role}): repair or regenerate that " \
               f"golden/comparator change{later}."
    if v.verdict == "crash":
        return f"Fix the error the run died of; {sha} is the first candidate{later}."
    return f"Inspect {sha} \"{c.commit.title}\"{later}."


def _how_much(c) -> str:  # type: ignore[no-untyped-def]
    if c.window:
        ratio = (c.actual_median / c.golden_median - 1) if c.golden_median else float("nan")
        return (f"{c.metric} {c.check} (median over steps {c.window[0]}-{c.window[-1]} {c.actual_median:.5g} vs "
                f"golden {c.golden_median:.5g}, {ratio:+.1%}, band {c.rtol:.0%})")
    err = f", max rel err {c.max_rel_err:.3g}" if c.max_rel_err is not None else ""
    return (f"{c.metric} {c.check} ({c.n_failing}/{c.n_steps} steps outside rtol {c.rtol:g}, "
            f"{c.allowed_failing} allowed{err}, first at step {c.first_failing_step})")


def _fix_golden_source(b: AnswerBuilder, golden_display: str | None, found: Discovered, bad_sha: str | None) -> None:
    """A golden taken from the repository is pinned to the commit it was read at."""
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


def _ci_reports(items: list[Item]):  # type: ignore[no-untyped-def]

    return [read_ci_log(str(i.local)) for i in items]


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


__all__ = ["AuditInfo", "AuditOptions", "run_audit", "display_path", "sha256_file"]
