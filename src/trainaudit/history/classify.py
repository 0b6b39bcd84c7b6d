"""Classify commits by what they touched, and rank them by relevance to a failing check.

Roles (SPEC.md ``commits[].role``):
- ``golden_update``: golden-value files changed;
- ``environment_change``: container image, Dockerfile, requirements/lock files, CUDA/TE/NCCL/PyTorch
  versions in CI config;
- ``policy_change``: the comparator, tolerances, METRICS, or the test's scope (moved to a
  broken/flaky list);
- ``suspect``: training or model code, more so on the failing test's path;
- ``fix``: after the bad revision, a commit that changes the same goldens, reverts a suspect or
  disables the test.

Only commits touching CI/config files have their diff read (to see version bumps and scope
changes), so classifying thousands of commits costs one ``git log`` plus a handful of ``git show``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from trainaudit.history.git import CommitInfo, Repo

# Linear on any path: "golden_values" anywhere in the last path segment, tried once per segment (where the
# segment starts, after checking that it ends the path in ".json") instead of from every "golden" of it.
GOLDEN_RE = re.compile(r"(?:^|/)(?=[^/]*\.json$)[^/]*?golden[_-]?values?|(^|/)golden[^/]*\.(json|ya?ml)$", re.I)
ENV_FILE_RE = re.compile(r"(^|/)(Dockerfile[^/]*|[^/]*\.dockerfile|requirements[^/]*\.(txt|in)|constraints[^/]*\.txt|"
                         r"[^/]*\.lock|environment\.ya?ml|conda[^/]*\.ya?ml|setup\.py|pyproject\.toml|"
                         r"docker/[^/]+)$", re.I)
# Paths come from the repository under audit (anyone's). Where a folder may be followed by any path
# (".+" to the end), only its first occurrence is tried (an atomic group): a later one has a shorter
# rest with the same ending, so it cannot match where the first did not.
CI_FILE_RE = re.compile(r"(?:^|/)(?:\.gitlab-ci\.ya?ml|\.github/workflows/[^/]++|\.gitlab/[^/]++|jet[^/]*\.ya?ml|"
                        r"\.ci/.+)$|^(?>(?:.*?/)??tests/test_utils/recipes/).+\.ya?ml$"
                        r"|^(?>(?:.*?/)??ci/).+\.(?:ya?ml|sh)$", re.I)
ENV_DIFF_RE = re.compile(r"^[+-].*(image|container|FROM |cuda|cudnn|nccl|transformer[-_]engine|\bte\b|pytorch|"
                         r"torch==|nvcr\.io|py3|cublas)", re.I | re.M)
SCOPE_DIFF_RE = re.compile(r"^\+.*(-broken|broken|flaky|scope\s*:|skip|disabled?)", re.I | re.M)
COMPARATOR_RE = re.compile(r"(python_test_utils/|conftest\.py$|compar|tolerance|threshold|"
                           r"(?<![^/])(?>[^/]*?golden)[^/]*\.py$|check_golden)", re.I)  # first "golden" of a name
TEST_CONFIG_RE = re.compile(r"model_config\.ya?ml$", re.I)
CODE_RE = re.compile(r"\.(py|cu|cuh|cpp|cc|c|h|hpp|pyx)$")
NON_CODE_DIRS = ("tests/", "test/", "docs/", "doc/", ".github/", "examples/tests/")
# "Bump the base image", "update CUDA": an environment word and an update word, in either order. Each
# alternative commits to the first word it finds (an atomic group): if that one has no partner after
# it, no later one has, so a long title is scanned once instead of once per word.
ENV_TITLE_RE = re.compile(r"^(?>.*?\b(?:docker|container|image|base image)\b).*\b(?:bump|update|upgrade)|"
                          r"^(?>.*?\b(?:bump|update|upgrade)\b).*\b(?:docker|container|image|cuda|nccl|pytorch|"
                          r"transformer.engine)", re.I)
REVERT_RE = re.compile(r'^Revert\b|This reverts commit ([0-9a-f]{7,40})', re.I | re.M)


@dataclass
class Context:
    """What the failure looks like, to weigh roles: ``kind`` is a verdict of SPEC.md (or None)."""

    kind: str | None = None
    metrics: list[str] = field(default_factory=list)
    test_case: str | None = None
    golden_paths: list[str] = field(default_factory=list)


@dataclass
class Classified:
    commit: CommitInfo
    roles: list[str]
    role: str
    relevance: float
    reason: str
    after_bad: bool = False


# How much each role explains each kind of failure (rows: verdict; cols: role).
_WEIGHTS: dict[str | None, dict[str, float]] = {
    "gating_policy_issue": {"environment_change": 0.85, "policy_change": 0.8, "golden_update": 0.55, "suspect": 0.2},
    "numerical_drift": {"environment_change": 0.9, "golden_update": 0.5, "policy_change": 0.45, "suspect": 0.35},
    "real_regression": {"suspect": 0.75, "environment_change": 0.45, "golden_update": 0.4, "policy_change": 0.3},
    "crash": {"suspect": 0.6, "environment_change": 0.55, "policy_change": 0.3, "golden_update": 0.1},
    "infrastructure_failure": {"environment_change": 0.6, "suspect": 0.3, "policy_change": 0.2, "golden_update": 0.1},
    None: {"suspect": 0.5, "environment_change": 0.5, "policy_change": 0.45, "golden_update": 0.4},
}


def _is_code(path: str) -> bool:
    return bool(CODE_RE.search(path)) and not path.startswith(NON_CODE_DIRS) and "/tests/" not in path


# git pathspecs covering ENV_FILE_RE and CI_FILE_RE, so their diffs can be read in one call that
# runs while the commit list is still being read.
CONFIG_PATHSPECS = [
    ":(glob,icase)**/Dockerfile*", ":(glob)**/*.dockerfile", ":(glob)**/requirements*.txt", ":(glob)**/requirements*.in",
    ":(glob)**/constraints*.txt", ":(glob)**/*.lock", ":(glob)**/environment.y*ml", ":(glob)**/conda*.y*ml",
    ":(glob)**/setup.py", ":(glob)**/pyproject.toml", ":(glob)**/docker/*", ":(glob)**/.gitlab-ci.y*ml",
    ":(glob)**/.github/workflows/*", ":(glob)**/.gitlab/*", ":(glob)**/jet*.y*ml", ":(glob)**/tests/test_utils/recipes/**",
    ":(glob)**/ci/**", ":(glob)**/.ci/**",
]


class _PathKinds:
    """Per-path classification, cached: a history has far fewer distinct paths than commits."""

    def __init__(self) -> None:
        self._cache: dict[str, tuple[bool, bool, bool, bool, bool, bool]] = {}

    def __call__(self, f: str) -> tuple[bool, bool, bool, bool, bool, bool]:
        k = self._cache.get(f)
        if k is None:
            k = self._cache[f] = (bool(GOLDEN_RE.search(f)), bool(ENV_FILE_RE.search(f)), bool(CI_FILE_RE.search(f)),
                                  bool(COMPARATOR_RE.search(f)) and f.endswith(".py"), bool(TEST_CONFIG_RE.search(f)),
                                  _is_code(f))
        return k


def roles_of(repo: Repo, c: CommitInfo, diffs: dict[str, str] | None = None,
             kinds: _PathKinds | None = None) -> tuple[list[str], list[str]]:
    """Roles a commit plays, with a short reason per role. ``diffs`` holds pre-read patches of
    CI/environment files by sha; without it they are read per commit."""
    kinds = kinds or _PathKinds()
    roles: list[str] = []
    why: list[str] = []
    fk = [(f, kinds(f)) for f in c.files]
    golden = [f for f, k in fk if k[0]]
    if golden:
        roles.append("golden_update")
        why.append(f"changes {len(golden)} golden-value file(s)")
    env = [f for f, k in fk if k[1]]
    ci = [f for f, k in fk if k[2]]
    if not (ci or env):
        diff = ""
    elif diffs is not None:
        diff = diffs.get(c.sha, "")
    else:
        diff = repo.diff_text(c.sha, ci + env)
    env_lines = ENV_DIFF_RE.findall(diff)
    if env or (ci and env_lines) or ENV_TITLE_RE.search(c.title):
        roles.append("environment_change")
        why.append("changes the environment (" + ", ".join((env + ci)[:3] or ["title"]) + ")")
    comparator = [f for f, k in fk if k[3]]
    scope = bool(ci and SCOPE_DIFF_RE.search(diff))
    configs = [f for f, k in fk if k[4]]
    if comparator or scope:
        roles.append("policy_change")
        why.append("changes the comparator" if comparator else "changes the test scope (broken/flaky)")
    elif configs and not golden:
        roles.append("policy_change")
        why.append("changes test config " + configs[0])
    code = [f for f, k in fk if k[5] and not k[3]]
    if code:
        roles.append("suspect")
        why.append(f"changes {len(code)} code file(s), e.g. {code[0]}")
    return roles, why


def classify(repo: Repo, commits: list[CommitInfo], ctx: Context, *, after_bad: list[CommitInfo] | None = None,
             suspects_for_fix: list[str] | None = None, diffs: dict[str, str] | None = None) -> list[Classified]:
    out: list[Classified] = []
    weights = _WEIGHTS.get(ctx.kind, _WEIGHTS[None])
    case_parts = _case_parts(ctx.test_case)
    kinds = _PathKinds()
    for c in commits:
        roles, why = roles_of(repo, c, diffs, kinds)
        if not roles:
            continue
        best = max(roles, key=lambda r: weights.get(r, 0.1))
        rel = weights.get(best, 0.1)
        on_path = [f for f in c.files if case_parts and any(p in f for p in case_parts)]
        if on_path:
            rel += 0.1
            why.append(f"touches the failing test's files ({on_path[0]})")
        if ctx.metrics and any(m.lower() in (c.title + " " + c.body).lower() for m in ctx.metrics):
            rel += 0.05
            why.append("its message names the failing metric")
        out.append(Classified(c, roles, best, min(rel, 1.0), "; ".join(why)))
    golden_set = set(ctx.golden_paths) | {f for cl in out if "golden_update" in cl.roles for f in cl.commit.files
                                          if GOLDEN_RE.search(f)}
    for c in after_bad or []:
        reason = _fix_reason(repo, c, golden_set, suspects_for_fix or [], case_parts)
        if reason:
            out.append(Classified(c, ["fix"], "fix", 0.7, reason, after_bad=True))
    out.sort(key=lambda x: (-x.relevance, x.commit.date), reverse=False)
    return out


def _fix_reason(repo: Repo, c: CommitInfo, goldens: set[str], suspects: list[str], case_parts: list[str]) -> str:
    reverted = REVERT_RE.findall(c.body + "\n" + c.title)
    for sha in reverted:
        if sha and any(s.startswith(sha) or sha.startswith(s[:len(sha)]) for s in suspects):
            return f"reverts suspect {sha[:10]}"
    if c.title.lower().startswith("revert") and suspects:
        return "reverts an earlier commit: " + c.title
    same = [f for f in c.files if f in goldens]
    if same:
        return f"changes the same golden values ({same[0]})"
    ci = [f for f in c.files if CI_FILE_RE.search(f)]
    if ci and case_parts:
        diff = repo.diff_text(c.sha, ci, context=5)  # context lines name the test case
        if SCOPE_DIFF_RE.search(diff) and any(p in diff for p in case_parts):
            return "disables or re-scopes the failing test"
    return ""


def _case_parts(test_case: str | None) -> list[str]:
    if not test_case:
        return []
    name = PurePosixPath(test_case).name
    return [name] if name else []
