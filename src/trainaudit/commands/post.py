"""``trainaudit post``: put a report where the team works (GitHub issue, Slack). Dry run by default."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import click

from trainaudit.errors import UsageError
from trainaudit.render.page import load_answer
from trainaudit.post.send import default_link, describe_issue, plan_issue, send_issue, send_slack, slack_payload
from trainaudit.post.send import Request

TOKEN_VARS = ("GITHUB_TOKEN", "GH_TOKEN")


@click.command()
@click.argument("answer", type=click.Path(dir_okay=False, path_type=Path), metavar="ANSWER_JSON")
@click.option("--github-issue", "repo", metavar="OWNER/REPO",
              help="Open an issue with the report, or update the open one for the same failure (matched by a "
                   "fingerprint hidden in the issue body). Token from $GITHUB_TOKEN or $GH_TOKEN.")
@click.option("--slack-webhook", "slack", metavar="URL", help="Post a short summary with a link to a Slack "
              "incoming webhook (or set $TRAINAUDIT_SLACK_WEBHOOK).", envvar="TRAINAUDIT_SLACK_WEBHOOK")
@click.option("--link", metavar="URL", help="Link to the full report (default: this CI run, from the GitHub "
              "Actions / GitLab CI environment; with --github-issue --send, the issue).")
@click.option("--label", default="trainaudit", show_default=True, help="Label of the issues trainaudit manages.")
@click.option("--api-url", metavar="URL", help="GitHub API base (default: $GITHUB_API_URL or https://api.github.com).")
@click.option("--send/--dry-run", "send", default=False, help="--send really sends. --dry-run (the default) "
              "sends nothing: the requests that would be made are printed, the issue body once as Markdown.")
def post(answer: Path, repo: str | None, slack: str | None, link: str | None, label: str, api_url: str | None,
         send: bool) -> int:
    """Post ANSWER_JSON as a GitHub issue and/or a Slack message (dry run unless --send).

    \b
    Example:
      trainaudit post trainaudit-out/diagnose/answer.json --github-issue acme/llm-train
      GITHUB_TOKEN=... trainaudit post answer.json --github-issue acme/llm-train --send
      trainaudit post answer.json --slack-webhook "$SLACK_WEBHOOK_URL" --send
    """
    if not repo and not slack:
        raise UsageError("nothing to post: give --github-issue OWNER/REPO and/or --slack-webhook URL")
    model = load_answer(answer)
    link = link or default_link()
    token = next((os.environ[v] for v in TOKEN_VARS if os.environ.get(v)), None)
    plan = plan_issue(model, repo, api=api_url, label=label, link=link) if repo else None
    if not send:
        click.echo("DRY RUN: nothing is sent (add --send).")
        if plan is not None:
            click.echo(f"\n# GitHub issue in {plan.repo} (fingerprint {plan.fingerprint}; token "
                       f"{'found in $' + next(v for v in TOKEN_VARS if os.environ.get(v)) if token else 'NOT SET'})")
            placeholder = f"<the issue body below: {len(plan.body)} characters>"
            for r in describe_issue(plan):  # the body once, readable, not JSON-escaped in every request
                if r.body is not None and r.body.get("body") == plan.body:
                    r = replace(r, body={**r.body, "body": placeholder})
                click.echo(r.show())
            click.echo(f"\n## the issue body ({len(plan.body)} characters, Markdown)\n{plan.body}")
        if slack:
            click.echo("\n# Slack webhook")
            click.echo(Request("POST", slack, slack_payload(model, link)).show(secret_url=True))
        return 0
    if plan is not None:
        if not token:
            raise UsageError("--github-issue --send needs a token in $GITHUB_TOKEN or $GH_TOKEN")
        res = send_issue(plan, token)
        click.echo(f"github: {res['action']} issue #{res['number']} {res['url'] or ''}".rstrip())
        link = link or res.get("url")
    if slack:
        send_slack(slack, slack_payload(model, link))
        click.echo("slack: posted")
    return 0
