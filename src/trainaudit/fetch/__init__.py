"""Bring remote artifacts (URLs, GitHub Actions runs, GitLab jobs) to a local folder."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from trainaudit.fetch.http import Fetched, FetchError, Fetcher, Progress
from trainaudit.fetch.providers import Plan, github_plan, gitlab_plan, url_plan

__all__ = ["Acquired", "acquire", "is_url"]


def is_url(s: str) -> bool:
    return s.startswith(("http://", "https://"))


@dataclass
class Acquired:
    paths: list[str] = field(default_factory=list)  # local files to analyse
    names: dict[str, str] = field(default_factory=dict)  # local path -> display name for reports
    missing: list[str] = field(default_factory=list)  # "<name>: <why>" for what did not arrive
    fetched: list[Fetched] = field(default_factory=list)


def acquire(urls: list[str], dest: Path, *, github: list[str] = (), gitlab: list[str] = (),  # type: ignore[assignment]
            github_api_url: str | None = None, progress: Progress | None = None, retries: int = 3,
            backoff_s: float = 0.5, max_bytes: int | None = None) -> Acquired:
    out = Acquired()
    kw = {"retries": retries, "backoff_s": backoff_s, "progress": progress}
    if max_bytes:
        kw["max_bytes"] = max_bytes
    with Fetcher(**kw) as fetcher:  # type: ignore[arg-type]
        plans: list[Plan] = [url_plan(u) for u in urls]
        for ref in github:
            try:
                plans.append(github_plan(ref, fetcher, api_url=github_api_url))
            except FetchError as exc:
                out.missing.append(f"github {ref}: {exc}")
        for ref in gitlab:
            plans.append(gitlab_plan(ref))
        downloads = [d for p in plans for d in p.downloads]
        for p in plans:
            out.missing.extend(p.missing)
        for f in fetcher.fetch_all(downloads, dest):
            out.fetched.append(f)
            if f.path is not None:
                out.paths.append(str(f.path))
                out.names[str(f.path)] = f.download.name
            elif not (f.download.name.endswith("artifacts.zip") and f.error and "HTTP 404" in f.error):
                # a GitLab job without artifacts answers 404: that is not a missing input
                out.missing.append(f"{f.download.name}: {f.error}")
    return out
