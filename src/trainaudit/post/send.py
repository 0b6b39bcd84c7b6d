"""Posting a report where teams work: a GitHub issue (opened, or updated when the same failure is
already open) and a Slack incoming-webhook message.

Planning and sending are separate: ``plan_*`` builds the requests (what a dry run shows; no
network), ``send_*`` performs them. GitHub REST calls used (docs.github.com/rest/issues):
``GET /repos/{o}/{r}/issues?state=open&labels=L`` (pages of 100; pull requests skipped),
``POST /repos/{o}/{r}/issues``, ``PATCH /repos/{o}/{r}/issues/{n}``,
``POST /repos/{o}/{r}/issues/{n}/comments``. An open issue whose body holds the hidden marker of
the same fingerprint is the one to update.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from trainaudit import __version__
from trainaudit.errors import InputError
from trainaudit.answer.verdicts import verdict_info
from trainaudit.answer.fingerprint import fingerprint, marker
from trainaudit.render.markdown import render_markdown
from trainaudit.redact import JSON_HEADERS, github_body, json_body, json_text, md_inline, mask_secrets, slack_link, slack_text
from trainaudit.answer.schema import Answer

GITHUB_API = "https://api.github.com"
ISSUE_BODY_LIMIT = 65_000  # GitHub's limit is 65,536 characters
MAX_PAGES = 10
_REPO = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")


class PostError(InputError):
    """A post that could not be made: one line, exit 2."""


@dataclass
class Request:
    method: str
    url: str
    body: dict[str, Any] | None = None
    note: str = ""

    def show(self, secret_url: bool = False) -> str:
        url = _mask_url(self.url) if secret_url else self.url
        head = f"{self.method} {url}" + (f"  ({self.note})" if self.note else "")
        if self.body is None:
            return head
        return head + "\n" + json_text(self.body, indent=2, ensure_ascii=False)


@dataclass
class IssuePlan:
    repo: str
    api: str
    fingerprint: str
    label: str
    title: str
    body: str
    comment: str
    results: list[str] = field(default_factory=list)


_URL_HEAD = re.compile(r"^(https?://[^/]+/[^/]+/)")


def _mask_url(url: str) -> str:
    """A webhook URL is a credential: keep scheme, host and the first path segment."""
    m = _URL_HEAD.match(url)
    return (m.group(1) + "***") if m else "***"


def default_link(env: Mapping[str, str] | None = None) -> str | None:
    """The CI run that produced the report, when running in GitHub Actions or GitLab CI."""
    env = os.environ if env is None else env
    if env.get("GITHUB_RUN_ID") and env.get("GITHUB_REPOSITORY"):
        server = env.get("GITHUB_SERVER_URL", "https://github.com")
        return f"{server}/{env['GITHUB_REPOSITORY']}/actions/runs/{env['GITHUB_RUN_ID']}"
    return env.get("CI_JOB_URL") or None


def issue_title(answer: Answer) -> str:
    fa = answer.final_answer
    step = f" from step {fa.first_bad_step}" if fa.first_bad_step is not None else ""
    where = answer.source_refs[0].path if answer.source_refs else ""
    return mask_secrets(f"[trainaudit] {fa.verdict.replace('_', ' ')}: {fa.category.replace('_', ' ')}{step}"
                        + (f" ({where})" if where else ""))[:250]


def issue_body(answer: Answer, fp: str, link: str | None) -> str:
    head = f"Report from [the CI run]({link}).\n\n" if link else ""
    tail = f"\n\n---\n_trainaudit {__version__}, failure fingerprint `{fp}`_\n{marker(fp)}\n"
    md = github_body(render_markdown(answer, None))
    room = ISSUE_BODY_LIMIT - len(head) - len(tail) - 80
    if len(md) > room:
        md = md[:room] + "\n\n(truncated: the full report is in the run's answer.md)"
    return head + md + tail


def plan_issue(answer: Answer, repo: str, *, api: str | None = None, label: str = "trainaudit",
               link: str | None = None) -> IssuePlan:
    if not _REPO.match(repo):
        raise PostError(f"--github-issue {repo}: expected OWNER/REPO")
    fp = fingerprint(answer)
    fa = answer.final_answer
    comment = github_body(f"Seen again{f' in [this run]({link})' if link else ''}: **{fa.verdict}** "
                          f"({md_inline(fa.category)}) {md_inline(fa.summary)}\n\n{marker(fp)}")
    return IssuePlan(repo=repo, api=(api or os.environ.get("GITHUB_API_URL") or GITHUB_API).rstrip("/"),
                     fingerprint=fp, label=label, title=issue_title(answer), body=issue_body(answer, fp, link),
                     comment=comment)


def describe_issue(plan: IssuePlan) -> list[Request]:
    base = f"{plan.api}/repos/{plan.repo}/issues"
    return [
        Request("GET", f"{base}?state=open&labels={plan.label}&per_page=100",
                note=f"look for an open issue whose body holds {marker(plan.fingerprint)}"),
        Request("POST", base, {"title": plan.title, "body": plan.body, "labels": [plan.label]},
                note="if none: open a new issue"),
        Request("PATCH", f"{base}/<number>", {"title": plan.title, "body": plan.body},
                note="if found: update it ..."),
        Request("POST", f"{base}/<number>/comments", {"body": plan.comment}, note="... and comment that it recurred"),
    ]


def _check(resp: httpx.Response, what: str, hint: str) -> Any:
    if resp.status_code < 300:
        try:
            return resp.json() if resp.content else None
        except ValueError:
            raise PostError(f"{what}: answered {resp.status_code} with a body that is not JSON") from None
    detail = ""
    try:
        data = resp.json()
        detail = str(data.get("message", "")) if isinstance(data, dict) else ""
    except ValueError:
        detail = resp.text[:200].strip()
    reason = resp.reason_phrase or ""
    extra = f" ({hint})" if resp.status_code in (401, 403, 404) and hint else ""
    raise PostError(mask_secrets(f"{what}: {resp.status_code} {reason}{': ' + detail if detail else ''}{extra}"))


def send_issue(plan: IssuePlan, token: str, client: httpx.Client | None = None) -> dict[str, Any]:
    """Open or update the issue; returns {"action": "created"|"updated", "number", "url"}."""
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/vnd.github+json", **JSON_HEADERS,
               "X-GitHub-Api-Version": "2022-11-28", "User-Agent": f"trainaudit/{__version__}"}
    own = client is None
    c = client or httpx.Client(timeout=30.0)
    base = f"{plan.api}/repos/{plan.repo}/issues"
    hint = "check the token in GITHUB_TOKEN and its issues permission on " + plan.repo
    try:
        found = None
        needle = marker(plan.fingerprint)
        for page in range(1, MAX_PAGES + 1):
            items = _check(c.get(base, params={"state": "open", "labels": plan.label, "per_page": 100, "page": page},
                                 headers=headers), f"GET {base}", hint)
            if not isinstance(items, list):
                raise PostError(f"GET {base}: expected a list of issues")
            found = next((i for i in items if "pull_request" not in i and needle in (i.get("body") or "")), None)
            if found is not None or len(items) < 100:
                break
        if found is None:
            made = _check(c.post(base, content=json_body({"title": plan.title, "body": plan.body, "labels": [plan.label]}),
                                 headers=headers), f"POST {base}", hint)
            return {"action": "created", "number": made.get("number"), "url": made.get("html_url")}
        n = found["number"]
        upd = _check(c.patch(f"{base}/{n}", content=json_body({"title": plan.title, "body": plan.body}), headers=headers),
                     f"PATCH {base}/{n}", hint)
        _check(c.post(f"{base}/{n}/comments", content=json_body({"body": plan.comment}), headers=headers),
               f"POST {base}/{n}/comments", hint)
        return {"action": "updated", "number": n, "url": (upd or {}).get("html_url") or found.get("html_url")}
    except httpx.HTTPError as exc:
        raise PostError(f"GitHub API at {plan.api}: {exc.__class__.__name__}: {exc}") from None
    finally:
        if own:
            c.close()


# -- Slack ---------------------------------------------------------------------------------
def slack_payload(answer: Answer, link: str | None) -> dict[str, Any]:
    """A short message: verdict, first bad step, summary, the top root cause's fix, a link."""
    fa = answer.final_answer
    icon = verdict_info(fa.verdict).icon
    step = f" from step {fa.first_bad_step}" if fa.first_bad_step is not None else ""
    head = (f"{icon} *trainaudit {slack_text(answer.task)}: {slack_text(fa.verdict.replace('_', ' '))}* "
            f"({slack_text(fa.category)}{step})")
    lines = [head, slack_text(fa.summary)]
    if fa.root_causes:
        rc = fa.root_causes[0]
        lines.append(f"*Root cause:* {slack_text(rc.issue)} (confidence {rc.confidence:.2f})\n*Fix:* {slack_text(rc.fix)}")
    if link:
        lines.append(slack_link(link, "Full report"))
    text = "\n".join(lines)
    return {"text": text[:3000], "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": text[:3000]}}]}


def send_slack(url: str, payload: dict[str, Any], client: httpx.Client | None = None) -> None:
    own = client is None
    c = client or httpx.Client(timeout=30.0)
    shown = _mask_url(url)
    try:
        resp = c.post(url, content=json_body(payload), headers=JSON_HEADERS)
    except httpx.HTTPError as exc:
        raise PostError(f"Slack webhook {shown}: {exc.__class__.__name__}") from None
    finally:
        if own:
            c.close()
    if resp.status_code >= 300:
        # Slack answers with a plain-text reason such as invalid_token, no_service, channel_not_found
        raise PostError(f"Slack webhook {shown}: {resp.status_code} {resp.text[:200].strip() or resp.reason_phrase}")
