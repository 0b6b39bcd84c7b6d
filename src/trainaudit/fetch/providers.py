"""CI providers by reference: a GitHub Actions run or job, a GitLab job, or a plain URL.

GitHub (REST API v3, https://docs.github.com/en/rest/actions):
  GET {api}/repos/{owner}/{repo}/actions/runs/{run_id}/jobs     -> {"jobs": [{id, name, conclusion}]}
  GET {api}/repos/{owner}/{repo}/actions/jobs/{job_id}/logs     -> 302 to the plain-text log
  GET {api}/repos/{owner}/{repo}/actions/runs/{run_id}/artifacts -> {"artifacts": [{name, archive_download_url, expired, size_in_bytes}]}
GitLab (REST API v4, https://docs.gitlab.com/ee/api/jobs.html):
  GET {base}/api/v4/projects/{url-encoded path}/jobs/{job_id}/trace      -> the job log
  GET {base}/api/v4/projects/{url-encoded path}/jobs/{job_id}/artifacts  -> the artifacts zip (404 if none)

Tokens come from the environment (GITHUB_TOKEN / GH_TOKEN; GITLAB_TOKEN, or CI_JOB_TOKEN inside a
GitLab job), the API base from ``--github-api-url`` / ``GITHUB_API_URL`` (default api.github.com).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import quote, urlsplit

from trainaudit.errors import InputError
from trainaudit.fetch.http import Download, Fetcher, safe_url

GITHUB_RUN_RE = re.compile(
    r"^(?:https?://[^/]+/)?(?P<owner>[\w.-]+)/(?P<repo>[\w.-]+)/actions/runs/(?P<run>\d+)(?:/(?:job|jobs)/(?P<job>\d+))?/?$")
GITLAB_JOB_RE = re.compile(r"^(?P<base>https?://[^/]+)/(?P<project>.+?)/-/jobs/(?P<job>\d+)/?$")
MAX_JOBS = 50


@dataclass
class Plan:
    """What to download for one reference, and any artifacts that are known to be missing."""

    reference: str
    downloads: list[Download]
    missing: list[str]


def github_plan(ref: str, fetcher: Fetcher, env: Mapping[str, str] | None = None, api_url: str | None = None) -> Plan:
    env = os.environ if env is None else env
    m = GITHUB_RUN_RE.match(ref.strip())
    if not m:
        raise InputError(f"--github {ref}: expected owner/repo/actions/runs/ID[/job/ID] or its URL")
    api = (api_url or env.get("GITHUB_API_URL") or "https://api.github.com").rstrip("/")
    headers = {"Accept": "application/vnd.github+json", "X-GitHub-Api-Version": "2022-11-28"}
    token = env.get("GITHUB_TOKEN") or env.get("GH_TOKEN")
    if token:
        headers["Authorization"] = f"Bearer {token}"
    owner, repo, run, job = m["owner"], m["repo"], m["run"], m["job"]
    base = f"{api}/repos/{owner}/{repo}/actions"
    label = f"github:{owner}/{repo}/runs/{run}"
    downloads: list[Download] = []
    missing: list[str] = []
    if job:
        jobs = [{"id": int(job), "name": f"job-{job}"}]
    else:
        data = fetcher.get_json(f"{base}/runs/{run}/jobs?per_page=100", headers)
        jobs = list(data.get("jobs", [])) if isinstance(data, dict) else []
        # Failed jobs first: they carry the evidence; keep the list bounded.
        jobs.sort(key=lambda j: 0 if j.get("conclusion") == "failure" else 1)
        jobs = jobs[:MAX_JOBS]
    for j in jobs:
        name = str(j.get("name", j["id"]))
        downloads.append(Download(f"{label}/job/{name}.log", f"{base}/jobs/{j['id']}/logs",
                                  f"job-{j['id']}-{name}.log", headers))
    if not job:
        data = fetcher.get_json(f"{base}/runs/{run}/artifacts?per_page=100", headers)
        for a in (data.get("artifacts", []) if isinstance(data, dict) else []):
            if a.get("expired"):
                missing.append(f"{label}/artifact/{a.get('name')}: expired")
                continue
            downloads.append(Download(f"{label}/artifact/{a['name']}.zip", a["archive_download_url"],
                                      f"artifact-{a['name']}.zip", headers))
    return Plan(label, downloads, missing)


def gitlab_plan(ref: str, env: Mapping[str, str] | None = None) -> Plan:
    env = os.environ if env is None else env
    m = GITLAB_JOB_RE.match(ref.strip())
    if not m:
        raise InputError(f"--gitlab {ref}: expected a job URL like https://gitlab.example.com/group/project/-/jobs/123")
    headers: dict[str, str] = {}
    if env.get("GITLAB_TOKEN"):
        headers["PRIVATE-TOKEN"] = env["GITLAB_TOKEN"]
    elif env.get("CI_JOB_TOKEN"):
        headers["JOB-TOKEN"] = env["CI_JOB_TOKEN"]
    project = quote(m["project"], safe="")
    api = f"{m['base']}/api/v4/projects/{project}/jobs/{m['job']}"
    label = f"gitlab:{m['project']}/jobs/{m['job']}"
    return Plan(label, [Download(f"{label}/trace.log", f"{api}/trace", f"gitlab-job-{m['job']}.log", headers),
                        Download(f"{label}/artifacts.zip", f"{api}/artifacts", f"gitlab-job-{m['job']}-artifacts.zip",
                                 headers)], [])


def url_plan(url: str) -> Plan:
    parts = urlsplit(url)
    name = os.path.basename(parts.path) or "download"
    return Plan(safe_url(url), [Download(safe_url(url), url, name)], [])
