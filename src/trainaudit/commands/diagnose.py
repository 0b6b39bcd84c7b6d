"""``trainaudit diagnose``: what went wrong in one training run, from which step, why, and the fix."""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from trainaudit.diagnosis import build_answer, diagnose_run, plot_specs
from trainaudit.errors import InputError
from trainaudit.ingest import format_names, load_run
from trainaudit.llm.options import llm_options, narrate_if_requested  # issue 7: optional LLM narrator
from trainaudit.answer.schema import SEVERITY_ORDER, Answer
from trainaudit.answer.paths import display_path
from trainaudit.render.write import write_report
from trainaudit.rules import load_config
from trainaudit.post.delivery import delivery_options  # issue 8

_STYLE = {"critical": "bold red", "high": "red", "medium": "yellow", "low": "cyan", "info": "dim"}


@delivery_options  # issue 8: --html, --github-summary, --gitlab
@click.command()
@click.argument("inputs", nargs=-1, required=True, metavar="INPUT...")
@click.option("-o", "--out", "out", type=click.Path(file_okay=False, path_type=Path), default=Path("trainaudit-out"),
              show_default=True, help="Report folder: answer.json, answer.md, plots/.")
@click.option("--format", "fmt", metavar="NAME", help="Force a format for every input.")
@click.option("--json", "as_json", is_flag=True, help="Print answer.json to stdout instead of the summary.")
@click.option("--quiet", is_flag=True, help="No summary on stdout.")
@click.option("--fail-on", type=click.Choice(["critical", "high", "medium", "low"]),
              help="Exit 1 if a finding at or above this severity exists.")
@click.option("--config", "config", type=click.Path(dir_okay=False, path_type=Path),
              help="A pyproject.toml / trainaudit.toml with [tool.trainaudit] rule settings "
                   "(default: the nearest pyproject.toml).")
@llm_options  # issue 7: --llm, --llm-base-url, --llm-timeout
def diagnose(inputs: tuple[str, ...], out: Path, fmt: str | None, as_json: bool, quiet: bool, fail_on: str | None,
             config: Path | None) -> int:
    """Diagnose one training run: logs, metric files, TensorBoard files, stderr, archives.

    \b
    Example:
      trainaudit diagnose train.log
      trainaudit diagnose run/ stderr.txt -o report/ --fail-on high
    """
    cfg = load_config(config)
    run, problems = load_run(list(inputs), fmt)
    if not run.series and not run.events:
        raise InputError(f"{', '.join(inputs)}: no metrics or events found")
    result = diagnose_run(run, cfg)
    answer = build_answer(list(inputs), run, result)
    answer = narrate_if_requested(answer)  # issue 7: wording only, verified; no-op without --llm
    paths = write_report(answer, out, plot_specs(run, result))
    if as_json:
        click.echo(answer.model_dump_json(indent=2))
    elif not quiet:
        _summary(answer, display_path(paths.out_dir))
    if not quiet:
        for p in problems:
            click.echo(f"trainaudit: note: {p}", err=True)
    if fail_on:
        limit = SEVERITY_ORDER[fail_on]
        if any(SEVERITY_ORDER[f.severity] >= limit for f in answer.findings):
            return 1
    return 0


def _summary(answer: Answer, out: str) -> None:
    console = Console(file=sys.stdout, soft_wrap=True)
    fa = answer.final_answer
    color = {"healthy": "green", "unhealthy": "yellow", "crash": "red"}.get(fa.verdict, "white")
    step = f" from step {fa.first_bad_step}" if fa.first_bad_step is not None else ""
    console.print(f"[bold {color}]{fa.verdict.upper()}[/] {fa.category}{step}")
    console.print(fa.summary, markup=False)
    if answer.findings:
        t = Table(show_lines=False)
        for col in ("id", "rule", "severity", "category", "step", "finding"):
            t.add_column(col, overflow="fold")
        order = sorted(answer.findings, key=lambda f: -SEVERITY_ORDER[f.severity])
        for f in order[:15]:
            t.add_row(f.id, f.rule, f"[{_STYLE[f.severity]}]{f.severity}[/]", f.category,
                      "-" if f.first_bad_step is None else str(f.first_bad_step), f.message[:160])
        console.print(t)
    for i, rc in enumerate(fa.root_causes[:3], 1):
        console.print(f"[bold]root cause {i}[/] ({rc.category}, confidence {rc.confidence:.2f}): fix: {rc.fix}",
                      markup=True, highlight=False)
    if fa.needs_more_data:
        console.print("needs more data: " + "; ".join(fa.needs_more_data), markup=False)
    ok = "valid" if answer.validation.all_passed else "INVALID"
    console.print(f"report ({ok}): {out}/answer.md, {out}/answer.json", markup=False)


diagnose.epilog = "Formats: " + ", ".join(format_names())
