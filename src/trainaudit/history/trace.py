"""Trace the history between a good and a bad revision (and, optionally, after bad for the fix)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from trainaudit.errors import InputError
from trainaudit.history.classify import CONFIG_PATHSPECS, Classified, Context, classify
from trainaudit.history.git import Repo

MAX_COMMITS = 5000


@dataclass
class Trace:
    repo: str
    good: str | None
    bad: str | None
    commits: list[Classified] = field(default_factory=list)
    n_commits: int = 0
    truncated: bool = False
    notes: list[str] = field(default_factory=list)


def trace(repo_path: str, good: str | None, bad: str | None, ctx: Context, *, find_fix: bool = False,
          max_commits: int = MAX_COMMITS) -> Trace:
    repo = Repo(repo_path)
    bad_sha = repo.resolve(bad, "--bad") if bad else repo.resolve("HEAD", "--bad (HEAD)")
    good_sha = repo.resolve(good, "--good") if good else None
    out = Trace(repo_path, good_sha, bad_sha)
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
    # The commit list and the CI/environment diffs are two git processes: run them side by side.
    with ThreadPoolExecutor(max_workers=2) as pool:
        diffs_job = pool.submit(repo.diffs, rng, CONFIG_PATHSPECS, max_count=max_commits)
        commits, truncated = repo.commits(rng, max_count=max_commits)
        diffs = diffs_job.result()
    out.n_commits, out.truncated = len(commits), truncated
    if truncated:
        out.notes.append(f"more than {max_commits} commits between good and bad; only the newest {max_commits} "
                         "were classified")
    after = []
    if find_fix:
        head = repo.resolve("HEAD", "HEAD")
        branches = repo._run(["for-each-ref", "--format=%(objectname)", "refs/heads"], what="git for-each-ref")
        tips = sorted(set(branches.split()) | {head})
        rng_after = [*tips, f"^{bad_sha}"]
        after, _ = repo.commits(rng_after, max_count=max_commits)
        after.reverse()  # oldest first: the first fix is the earliest one
    suspects = [c.sha for c in commits]
    out.commits = classify(repo, commits, ctx, after_bad=after, suspects_for_fix=suspects, diffs=diffs)
    return out
