"""``trainaudit diagnose``: what went wrong in one training run, from which step, why, and the fix."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import click

from trainaudit.commands.common import exit_code, fail_on_option, no_plots_option, out_option, print_summary, \
    reading_progress, report_notes, rule_selection_options, verbosity_options
from trainaudit.diagnosis import build_answer, diagnose_run, plot_specs
from trainaudit.diagnosis.build import SourceHashes
from trainaudit.errors import READABLE_HINT, InputError
from trainaudit.ingest import format_names, load_run
from trainaudit.ingest.sources import reading_stdin
from trainaudit.llm.options import llm_options, narrate_if_requested
from trainaudit.render.painter import take
from trainaudit.render.write import start_drawing, write_report
from trainaudit.rules import load_config
from trainaudit.post.delivery import delivery_options
from trainaudit.redact import json_model


@delivery_options  # --html, --github-summary, --gitlab-codequality
@click.command()
@click.argument("inputs", nargs=-1, required=True, metavar="INPUT...")
@out_option("diagnose")
@click.option("--format", "fmt", metavar="NAME", help="Force a format for every input.")
@click.option("--json", "as_json", is_flag=True, help="Print answer.json to stdout instead of the summary.")
@verbosity_options
@fail_on_option("the run is not healthy (a finding above info)")
@click.option("--config", "config", type=click.Path(dir_okay=False, path_type=Path),
              help="A pyproject.toml / trainaudit.toml with [tool.trainaudit] rule settings "
                   "(default: the nearest pyproject.toml).")
@rule_selection_options
@no_plots_option
@llm_options  # --llm, --llm-base-url, --llm-timeout
def diagnose(inputs: tuple[str, ...], out: Path, fmt: str | None, as_json: bool, quiet: bool, verbose: bool,
             fail_on: str | None, config: Path | None, select: list[str], ignore: list[str], no_plots: bool) -> int:
    """Diagnose one training run: logs, metric files, TensorBoard files, stderr, archives.
    ``-`` reads standard input. Exit 0: healthy; 1: a problem was found (see --fail-on); 2: unreadable input.

    \b
    Example:
      trainaudit diagnose train.log
      trainaudit diagnose run/ stderr.txt -o report/ --fail-on high
      trainaudit diagnose train.log --select TA1,TA2 --ignore TA206 --no-plots
    """
    cfg = load_config(config)
    cfg = replace(cfg, select=select or cfg.select, ignore=[*cfg.ignore, *ignore])
    # matplotlib is imported in a child process while the run is read (None: drawn in process);
    # the command line started it before this module's imports (cli.PAINTING)
    painter = None if no_plots else take()
    try:
        with reading_stdin():  # "-": the evidence lines are read again from the same copy
            hashes = SourceHashes(list(inputs))  # hashed beside the reading
            with reading_progress(quiet or as_json) as position:
                run, problems = load_run(list(inputs), fmt, position)
            if not run.series and not run.events:
                raise InputError(f"{', '.join(inputs)}: no metrics or events found: {READABLE_HINT}")
            result = diagnose_run(run, cfg)
            specs = [] if no_plots else plot_specs(run, result)
            start_drawing(specs, painter)  # the painter draws while the answer is built
            answer = build_answer(list(inputs), run, result, hashes=hashes)
        answer = narrate_if_requested(answer)  # wording only, verified; no-op without --llm
        paths = write_report(answer, out, specs, painter=painter)
    finally:
        if painter is not None:
            painter.close()
    if as_json:
        click.echo(json_model(answer))
    else:
        print_summary(answer, paths, quiet=quiet, verbose=verbose)
    report_notes(paths, quiet, problems)
    # inconclusive: nothing found and too little to call the run healthy; not a failure
    return exit_code(answer.findings, fail_on, answer.final_answer.verdict not in ("healthy", "inconclusive"))


diagnose.epilog = "Formats: " + ", ".join(format_names())
