"""``--html``, ``--github-summary`` and ``--gitlab-codequality`` for any command that writes a report folder.

    @delivery_options          # outermost, above @click.command()
    @click.command()
    ...
    def diagnose(..., out: Path, ...) -> int: ...

The wrapped command runs unchanged; afterwards its ``out`` folder's answer.json (and charts.json)
is turned into the requested outputs. The command's exit code is kept.
"""

from __future__ import annotations

import functools
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from trainaudit.errors import UsageError

from trainaudit.answer.load import load_answer
from trainaudit.post.ci import github_summary, write_gitlab_codequality
from trainaudit.render.page import HTML_NAME, write_html

GITLAB_NAME = "gl-code-quality-report.json"


@dataclass(frozen=True)
class Delivery:
    html: bool = False
    github_summary: bool = False
    gitlab: bool = False
    annotations_to_stderr: bool = False  # stdout is taken (e.g. --json)

    def __bool__(self) -> bool:
        return self.html or self.github_summary or self.gitlab


def deliver(out_dir: Path, d: Delivery, answer_name: str = "answer.json") -> list[Path]:
    """Write what ``d`` asks for from ``out_dir/answer.json``; returns the files written."""
    answer_path = out_dir / answer_name
    answer = load_answer(answer_path)
    written: list[Path] = []
    if d.html:
        written.append(write_html(answer_path, out_dir / HTML_NAME))
    if d.gitlab:
        written.append(write_gitlab_codequality(answer, out_dir / GITLAB_NAME))
    if d.github_summary:
        target, lines = github_summary(answer, html_name=HTML_NAME if d.html else None)
        stream = sys.stderr if d.annotations_to_stderr else sys.stdout
        for line in lines:
            click.echo(line, file=stream)
        if target is None:
            click.echo("trainaudit: note: GITHUB_STEP_SUMMARY is not set (not in GitHub Actions); "
                       "annotations printed, no summary written", err=True)
    return written


def delivery_options(cmd: click.Command) -> click.Command:
    cmd.params += [
        click.Option(["--html"], is_flag=True, help=f"Also write {HTML_NAME} (interactive, self-contained)."),
        click.Option(["--github-summary"], is_flag=True,
                     help="GitHub Actions: append answer.md to $GITHUB_STEP_SUMMARY and print ::error/::warning "
                          "annotations for findings."),
        click.Option(["--gitlab-codequality"], is_flag=True,
                     help=f"GitLab CI: also write {GITLAB_NAME} (artifacts:reports:codequality)."),
    ]
    inner = cmd.callback
    assert inner is not None

    @functools.wraps(inner)
    def callback(**kw: Any) -> Any:
        d = Delivery(kw.pop("html"), kw.pop("github_summary"), kw.pop("gitlab_codequality"),
                     annotations_to_stderr=bool(kw.get("as_json")))
        if kw.get("batch_mode"):  # `audit --batch`: one report per failure, HTML written per set
            kw["batch_html"] = d.html
            if d.github_summary or d.gitlab:
                raise UsageError("--github-summary / --gitlab-codequality apply to one audit, not to --batch")
            return inner(**kw)
        rv = inner(**kw)
        if d:
            out = kw.get("out")
            deliver(Path(out) if out is not None else Path("."), d)
        return rv

    cmd.callback = callback
    return cmd
