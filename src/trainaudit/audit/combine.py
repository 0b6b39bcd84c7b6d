"""Combine the comparison, the diagnosis of each run and the git history into one verdict.

Precedence: a run that died (diagnosis ``crash``) is ``infrastructure_failure`` when the platform
killed it (OOM, NCCL/collective timeout, hardware) and ``crash`` otherwise, whatever the gate said:
a run with no values is not a golden mismatch. Otherwise the golden gate (or run vs run) decides;
without either, the diagnosis and the gate's own CI output give a weaker verdict.

History then names the commit that explains the verdict, by the role that explains that kind of
failure (:data:`EXPLAINING_ROLES`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trainaudit.history.classify import Classified

INFRA_CATEGORIES = frozenset({"oom", "distributed_failure", "hardware_fault"})
TRAINING_CATEGORIES = frozenset({"nan_inf", "divergence", "loss_spike", "loss_scale_collapse", "plateau",
                                 "grad_explosion", "grad_vanishing", "mode_collapse", "overfitting"})

# verdict (and, for gating issues, the primary category) -> roles that explain it, best first
EXPLAINING_ROLES: dict[str, tuple[str, ...]] = {
    "real_regression": ("suspect", "environment_change", "policy_change", "golden_update"),
    "numerical_drift": ("environment_change", "suspect", "golden_update"),
    "gating_policy_issue:throughput_regression": ("environment_change", "policy_change", "golden_update", "suspect"),
    "gating_policy_issue:golden_mismatch": ("golden_update", "policy_change", "environment_change"),
    "gating_policy_issue": ("policy_change", "golden_update", "environment_change"),
    "crash": ("suspect", "environment_change", "policy_change"),
    "infrastructure_failure": ("environment_change",),
    "inconclusive": ("suspect", "environment_change", "policy_change", "golden_update"),
}


@dataclass
class Verdict:
    verdict: str
    category: str
    source: str  # "diagnosis" | "comparison" | "ci_log" | "none"
    confidence: float
    first_bad_step: int | None = None
    why: list[str] = field(default_factory=list)


def decide(cmp_verdict: str | None, cmp_category: str | None, cmp_conf: float | None, cmp_first: int | None,
           diag_verdict: str | None, diag_category: str | None, diag_conf: float | None, diag_first: int | None,
           passing_diag_verdict: str | None, ci_failed: list[str] | None) -> Verdict:
    if diag_verdict == "crash" and diag_category:
        infra = diag_category in INFRA_CATEGORIES
        why = [f"the failing run died ({diag_category.replace('_', ' ')}): "
               + ("the platform killed it, so this is infrastructure, not a golden mismatch" if infra
                  else "it produced no comparable values, so this is a crash, not a golden mismatch")]
        return Verdict("infrastructure_failure" if infra else "crash", diag_category, "diagnosis",
                       diag_conf or 0.8, diag_first, why)
    if cmp_verdict is not None:
        return Verdict(cmp_verdict, cmp_category or "golden_mismatch", "comparison", cmp_conf or 0.5, cmp_first,
                       ["the comparison of the failing run decides the verdict"])
    if diag_verdict == "unhealthy" and diag_category:
        if diag_category in TRAINING_CATEGORIES and passing_diag_verdict == "healthy":
            return Verdict("real_regression", diag_category, "diagnosis", min(diag_conf or 0.5, 0.6), diag_first,
                           ["no golden values or comparable passing run: the failing run trains badly "
                            f"({diag_category}) while the passing run is healthy"])
        return Verdict("inconclusive", diag_category, "diagnosis", 0.4, diag_first,
                       [f"the failing run shows {diag_category} but nothing to compare it with"])
    if ci_failed:
        if ci_failed == ["iteration-time"]:
            return Verdict("gating_policy_issue", "throughput_regression", "ci_log", 0.5, None,
                           ["the CI log says only iteration-time failed (no values to recompute it)"])
        return Verdict("inconclusive", "golden_mismatch", "ci_log", 0.35, None,
                       [f"the CI log says {', '.join(ci_failed)} failed, but no values were given to recompute it"])
    return Verdict("inconclusive", "healthy", "none", 0.2, None, ["nothing failed that the given artifacts show"])


def explaining_commit(verdict: str, category: str, commits: list[Classified]) -> tuple[Classified, str] | None:
    """The commit of the range that best explains the verdict, and the role it plays in it."""
    roles = EXPLAINING_ROLES.get(f"{verdict}:{category}") or EXPLAINING_ROLES.get(verdict, ())
    in_range = [c for c in commits if not c.after_bad]
    for role in roles:
        hits = [c for c in in_range if role in c.roles]
        if hits:
            return max(hits, key=lambda c: (c.relevance, c.commit.date)), role
    return None


def first_fix(commits: list[Classified]) -> Classified | None:
    fixes = [c for c in commits if c.after_bad]
    return min(fixes, key=lambda c: c.commit.date) if fixes else None
