"""``trainaudit report``: turn an answer.json into the HTML report and the CI outputs."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from trainaudit.answer.paths import display_path
from trainaudit.render.page import load_answer, write_html
from trainaudit.post.ci import write_gitlab_codequality
from trainaudit.post.ci import github_summary as gh_summary


@click.command()
@click.argument("answer", type=click.Path(dir_okay=False, path_type=Path), metavar="ANSWER_JSON")
@click.option("-o", "--out", "out", type=click.Path(dir_okay=False, path_type=Path),
              help="HTML file to write (default: report.html beside ANSWER_JSON).")
@click.option("--charts", "charts", type=click.Path(dir_okay=False, path_type=Path),
              help="Chart data (default: charts.json beside ANSWER_JSON, else the series quoted in answer.json).")
@click.option("--github-summary", is_flag=True,
              help="Append the report to $GITHUB_STEP_SUMMARY and print workflow annotations for the findings.")
@click.option("--gitlab", "gitlab", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write a GitLab Code Quality report here (e.g. gl-code-quality-report.json).")
@click.option("--no-html", is_flag=True, help="Only the CI outputs, no HTML file.")
def report(answer: Path, out: Path | None, charts: Path | None, github_summary: bool, gitlab: Path | None,
           no_html: bool) -> int:
    """Render ANSWER_JSON (from diagnose, compare or audit) as one self-contained HTML page:
    verdict and root causes, interactive charts (zoom, hover, golden band, first bad step), checks,
    findings, commits, and every evidence id linked to its quoted source line.

    \b
    Example:
      trainaudit report trainaudit-out/diagnose/answer.json -o report.html
      trainaudit report answer.json --no-html --github-summary --gitlab gl-code-quality-report.json
    """
    model = load_answer(answer)
    html_path = None
    if not no_html:
        html_path = write_html(answer, out or answer.with_name("report.html"), charts)
        click.echo(f"report: {display_path(html_path)}")
    if gitlab is not None:
        click.echo(f"gitlab code quality: {display_path(write_gitlab_codequality(model, gitlab))}")
    if github_summary:
        target, lines = gh_summary(model, html_name=html_path.name if html_path else None)
        for line in lines:
            click.echo(line)
        if target is None:
            click.echo("trainaudit: note: GITHUB_STEP_SUMMARY is not set (not in GitHub Actions); "
                       "annotations printed, no summary written", err=True)
    sys.stdout.flush()
    return 0
