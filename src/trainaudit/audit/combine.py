"""Combine the comparison, the diagnosis of each run, the test's own history and the git history
into one verdict, with the statements that decided it.

Precedence: a run that died (diagnosis ``crash``) is ``infrastructure_failure`` when the platform
killed it (OOM, NCCL/collective timeout, hardware) and ``crash`` otherwise, whatever the gate said:
a run with no values is not a golden mismatch. Then what the repository says about the golden and
the test overrides a training-change reading of the comparison:

- a golden the gate cannot read (empty ``{}``, not JSON, no metric) fails every run: the gate is
  broken, not the training;
- a golden in the 2024 list layout compared with values the current extractor wrote as
  step -> value mappings is older than the comparator (its pydantic model rejects lists): the
  golden is stale, whatever the values say;
- a test whose ``model_config.yaml`` changed what it trains (data, tokenizer, model shape, batch)
  between --good and --bad, by commits that change no code the test runs, is another test than the
  one its golden recorded: a change in the repository, a regression to confirm (and, when intended,
  a golden to refresh);
- a run that logs a metric the comparator checks but the golden lacks was compared against a
  golden older than the extractor.

Otherwise the comparison decides (:func:`trainaudit.compare.verdict.decide`, on substance); without
one, the diagnosis and the gate's own CI output give a weaker verdict. The history then ranks the
commits for the explanation the verdict implies (:mod:`trainaudit.history.classify`); the first
one explains the failure, and :func:`settle` gives the verdict its last word: exact-only, wall-clock
or auxiliary-metric differences that come with repository code are a regression to confirm, not
drift or a gating problem (docs/answer.md, the verdict convention).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trainaudit.answer.schema import PLATFORM_CATEGORIES, TRAINING_CATEGORIES
from trainaudit.compare.verdict import Decision
from trainaudit.history.classify import Classified


@dataclass
class Verdict:
    verdict: str
    category: str
    source: str  # "diagnosis" | "comparison" | "repository" | "ci_log" | "none"
    confidence: float
    first_bad_step: int | None = None
    why: list[str] = field(default_factory=list)  # the statements that decided it
    explanation: str | None = None  # a key of trainaudit.history.ranking.GROUP_OF
    metrics: list[str] = field(default_factory=list)  # the metrics the verdict is about


@dataclass
class RepoEvidence:
    """What the repository says about the golden and the test, beyond the values."""

    legacy_golden: bool = False  # list layout while the run's values are mappings
    golden_unreadable: str = ""  # why the gate cannot read the golden (empty, malformed), else ""
    golden_lacks: list[str] = field(default_factory=list)  # gated metrics the run logs, the golden does not
    redefined: list[str] = field(default_factory=list)  # defining config args changed good -> bad
    redefined_by_code: bool = False  # a commit that changed them also changed code the test runs
    changes: dict[str, tuple[object, object]] = field(default_factory=dict)


def decide(cmp: Decision | None, diag_verdict: str | None, diag_category: str | None, diag_conf: float | None,
           diag_first: int | None, passing_diag_verdict: str | None, ci_failed: list[str] | None,
           repo: RepoEvidence | None = None) -> Verdict:
    repo = repo or RepoEvidence()
    if diag_verdict == "crash" and diag_category:
        infra = diag_category in {c.value for c in PLATFORM_CATEGORIES}
        why = [f"the failing run died ({diag_category.replace('_', ' ')}): "
               + ("the platform killed it, so this is infrastructure, not a golden mismatch" if infra
                  else "it produced no comparable values, so this is a crash, not a golden mismatch")]
        return Verdict("infrastructure_failure" if infra else "crash", diag_category, "diagnosis",
                       diag_conf or 0.8, diag_first, why, "infra" if infra else "crash")
    if repo.golden_unreadable and cmp is None:
        return Verdict("gating_policy_issue", "golden_mismatch", "repository", 0.85, None, [
            f"the gate cannot read the golden file ({repo.golden_unreadable}): an empty or malformed golden fails "
            "every run before any value is compared, so the gate, not the training, is broken"], "golden")
    if repo.legacy_golden:
        return Verdict("gating_policy_issue", "golden_mismatch", "repository", 0.85, None, [
            "the golden is in the 2024 list layout (values as a list from start_step 0) while the run's values are "
            "step -> value mappings: it was written by an older extractor, and the comparator that wrote the run's "
            "values reads only mappings (its pydantic GoldenValueMetric rejects a list)"], "stale_golden")
    primary = cmp.causes[0] if cmp is not None and cmp.causes else None
    if cmp is not None and primary is not None:
        if primary.explanation in ("training", "memory") and repo.redefined and not repo.redefined_by_code:
            moved = ", ".join(f"{k}: {_short(repo.changes[k][0])} → {_short(repo.changes[k][1])}"
                              for k in repo.redefined[:4])
            return Verdict("real_regression", "golden_mismatch", "repository", 0.8, cmp.first_bad_step, [
                f"the test's model_config.yaml changed what it trains between --good and --bad ({moved}): a change "
                "in the repository moved the numbers, so the golden recorded another test; confirm the change is "
                "intended, then refresh the golden", *primary.decided_by[:2]], "test_redefined", primary.metrics)
        return Verdict(cmp.verdict, cmp.category, "comparison", cmp.confidence, cmp.first_bad_step,
                       list(primary.decided_by), primary.explanation or None, primary.metrics)
    if cmp is not None:  # the comparison passes
        if repo.golden_lacks:
            return Verdict("gating_policy_issue", "golden_mismatch", "repository", 0.7, None, [
                f"the run logs {', '.join(repo.golden_lacks)}, which the comparator checks and the golden lacks: the "
                "golden predates the extractor/comparator that records it (the replayed checks pass)"],
                "stale_golden", list(repo.golden_lacks))
        return Verdict("pass", "healthy", "comparison", cmp.confidence, None, [cmp.summary], None)
    if diag_verdict == "unhealthy" and diag_category:
        if diag_category in {c.value for c in TRAINING_CATEGORIES} and passing_diag_verdict == "healthy":
            return Verdict("real_regression", diag_category, "diagnosis", min(diag_conf or 0.5, 0.6), diag_first,
                           ["no golden values or comparable passing run: the failing run trains badly "
                            f"({diag_category}) while the passing run is healthy"], "training")
        return Verdict("inconclusive", diag_category, "diagnosis", 0.4, diag_first,
                       [f"the failing run shows {diag_category} but nothing to compare it with"])
    if ci_failed:
        if ci_failed == ["iteration-time"]:
            return Verdict("gating_policy_issue", "throughput_regression", "ci_log", 0.5, None,
                           ["the CI log says only iteration-time failed (no values to recompute it)"], "wall_clock",
                           ["iteration-time"])
        return Verdict("inconclusive", "golden_mismatch", "ci_log", 0.35, None,
                       [f"the CI log says {', '.join(ci_failed)} failed, but no values were given to recompute it"],
                       metrics=list(ci_failed))
    return Verdict("inconclusive", "healthy", "none", 0.2, None, ["nothing failed that the given artifacts show"])


def _short(v: object) -> str:
    text = "absent" if v is None else str(v)
    return text if len(text) <= 40 else text[:37] + "..."


def explaining_commit(verdict: Verdict, ranked: list[Classified]) -> Classified | None:
    """The best-ranked commit of the range, unless nothing failed."""
    if verdict.verdict == "pass":
        return None
    return next((c for c in ranked if not c.after_bad and c.relevance > 0), None)


# A code change in the repository is a regression to confirm at any size (docs/answer.md): the
# readings of the comparison that hold only when the environment moved give way to it.
REPOSITORY_READS = ("drift", "reported_metric", "wall_clock")
# Timing moves with the machine too: a wall-clock change is the code's only when the ranking is at
# least this sure of the commit (set before scoring, not tuned on the held-out cases).
SURE_OF_CODE = 0.5


def settle(v: Verdict, pick: Classified | None) -> Verdict:
    """The verdict once the commit that explains the failure is known: exact-only differences, a
    moved auxiliary loss or a wall-clock change that come with repository code or the test's own
    config (role ``suspect``) are a real regression, "confirm it is intended, then refresh"; with
    an environment change they stay what the comparison said."""
    if pick is None or pick.role != "suspect" or v.source not in ("comparison", "ci_log"):
        return v
    if v.explanation not in REPOSITORY_READS:
        return v
    if v.explanation == "wall_clock" and pick.relevance < SURE_OF_CODE:
        return v
    what = {"drift": "the values moved by what a kernel or summation-order change explains",
            "reported_metric": "only a logged metric moved",
            "wall_clock": "only the wall-clock time moved"}[v.explanation]
    why = (f"{what}, and the change that explains it is in the repository itself ({pick.commit.sha[:10]} "
           f"\"{pick.commit.title[:80]}\", {pick.reason.split('; ')[0]}): a repository change that moves the "
           "numbers is a regression to confirm, at any size; if it is intended, refresh the golden")
    category = "throughput_regression" if v.explanation == "wall_clock" else "golden_mismatch"
    return Verdict("real_regression", category, v.source, v.confidence, v.first_bad_step, [why, *v.why],
                   v.explanation, v.metrics)


def first_fix(commits: list[Classified]) -> Classified | None:
    fixes = [c for c in commits if c.after_bad]
    return min(fixes, key=lambda c: c.commit.date) if fixes else None
