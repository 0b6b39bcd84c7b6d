"""Trace the history between a good and a bad revision (and, optionally, after bad for the fix)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from trainaudit.errors import InputError
from trainaudit.history.classify import CONFIG_PATHSPECS, Classified, FailureShape, classify
from trainaudit.history.git import CommitInfo, Repo

MAX_COMMITS = 5000


@dataclass
class Trace:
    repo: str
    good: str | None
    bad: str | None
    commits: list[Classified] = field(default_factory=list)  # ranked for the context given to trace
    n_commits: int = 0
    truncated: bool = False
    notes: list[str] = field(default_factory=list)
    # what was read, to rank again for another context (:func:`rank`)
    raw: list[CommitInfo] = field(default_factory=list)
    diffs: dict[str, str] = field(default_factory=dict)
    after: list[CommitInfo] = field(default_factory=list)
    extra: list[tuple[CommitInfo, str]] = field(default_factory=list)
    _repo: Repo | None = None


def rank(tr: Trace, ctx: FailureShape) -> list[Classified]:
    """The commits of a trace ranked for ``ctx`` (no git call but for --find-fix scope diffs)."""
    assert tr._repo is not None
    return classify(tr._repo, tr.raw, ctx, after_bad=tr.after, suspects_for_fix=[c.sha for c in tr.raw],
                    diffs=tr.diffs, extra=tr.extra)


def trace(repo_path: str, good: str | None, bad: str | None, ctx: FailureShape, *, find_fix: bool = False,
          max_commits: int = MAX_COMMITS, golden_origin: bool = False, ranked: bool = True) -> Trace:
    """``golden_origin``: also offer the commit that wrote the failing golden when it lies at or
    before --good (for a golden that is itself at fault). ``ranked=False`` leaves ``commits``
    empty, for a caller that ranks the trace itself (:func:`rank`) once it knows the explanation."""
    repo = Repo(repo_path)
    bad_sha = repo.resolve(bad, "--bad") if bad else repo.resolve("HEAD", "--bad (HEAD)")
    good_sha = repo.resolve(good, "--good") if good else None
    out = Trace(repo_path, good_sha, bad_sha, _repo=repo)
    if good_sha:
        if good_sha == bad_sha:
            raise InputError(f"--good {good} and --bad {bad} are the same commit")
        if not repo.is_ancestor(good_sha, bad_sha):
            out.notes.append(f"--good {good} is not an ancestor of --bad; listing commits reachable from bad only")
        rng = [f"{good_sha}..{bad_sha}"]
    else:
        out.notes.append("no --good revision: looking at the last commits before --bad only")
        rng = [bad_sha]
        max_commits = min(max_commits, 50)
    # The commit list and the diffs of configuration-like files (and of the failing test's own
    # config) are two git processes: run them side by side.
    specs = CONFIG_PATHSPECS + ([f":(literal){ctx.config_path}"] if ctx.config_path else [])
    with ThreadPoolExecutor(max_workers=2) as pool:
        # three lines of context: a recipe hunk then shows which test it belongs to
        diffs_job = pool.submit(repo.diffs, rng, specs, max_count=max_commits, context=3)
        commits, truncated = repo.commits(rng, max_count=max_commits)
        diffs = diffs_job.result()
    out.n_commits, out.truncated = len(commits), truncated
    if truncated:
        out.notes.append(f"more than {max_commits} commits between good and bad; only the newest {max_commits} "
                         "were classified")
    after: list[CommitInfo] = []
    if find_fix:
        head = repo.resolve("HEAD", "HEAD")
        branches = repo._run(["for-each-ref", "--format=%(objectname)", "refs/heads"], what="git for-each-ref")
        tips = sorted(set(branches.split()) | {head})
        rng_after = [*tips, f"^{bad_sha}"]
        after, _ = repo.commits(rng_after, max_count=max_commits)
        after.reverse()  # oldest first: the first fix is the earliest one
    out.raw, out.diffs, out.after = commits, diffs, after
    out.extra = _golden_origin(repo, bad_sha, {c.sha for c in commits}, ctx) if golden_origin else []
    out.commits = rank(out, ctx) if ranked else []
    return out


def _golden_origin(repo: Repo, bad_sha: str, in_range: set[str], ctx: FailureShape) -> list[tuple[CommitInfo, str]]:
    """The commit that last wrote each failing golden, when it is not in the range (it wrote the
    golden at or before --good): the candidate when the golden itself is at fault."""
    out: list[tuple[CommitInfo, str]] = []
    for path in ctx.golden_paths:
        found, _ = repo.commits([bad_sha], max_count=1, paths=[path])
        if found and found[0].sha not in in_range:
            out.append((found[0], f"wrote the golden the run was compared against ({path}) at or before --good"))
    return out
