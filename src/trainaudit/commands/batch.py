"""``trainaudit batch``: audit several failures at once and group them by shared root cause."""

from __future__ import annotations

from pathlib import Path

import click

from trainaudit.answer.paths import display_path
from trainaudit.batch import BatchOptions, discover_sets, run_batch
from trainaudit.commands.common import exit_code, fail_on_option, out_option
from trainaudit.render.batch import write_batch
from trainaudit.render.page import HTML_NAME, write_html
from trainaudit.render.write import write_report
from trainaudit.redact import json_text


@click.command()
@click.argument("roots", nargs=-1, required=True, type=click.Path(path_type=Path), metavar="DIR...")
@click.option("--repo", metavar="PATH", help="Git repository for every set's history (never modified).")
@click.option("--good", metavar="REV", help="Last passing revision for every set (a set's trainaudit-set.json wins).")
@click.option("--bad", metavar="REV", help="Failing revision for every set (a set's trainaudit-set.json wins).")
@out_option("batch")
@click.option("--html", is_flag=True, help="Also write report.html in every set's report folder.")
@click.option("--json", "as_json", is_flag=True, help="Print batch.json to stdout instead of batch.md.")
@click.option("-q", "--quiet", "quiet", is_flag=True, help="Only the closing line (and errors).")
@fail_on_option("a set's verdict is not pass or a set could not be audited")
@click.option("--format", "fmt", metavar="NAME", help="Force the format of the run files.")
def batch(roots: tuple[Path, ...], repo: str | None, good: str | None, bad: str | None, out: Path, html: bool,
          as_json: bool, quiet: bool, fail_on: str | None, fmt: str | None) -> int:
    """Audit every artifact set (subfolder or archive) of DIR: one answer per failure, then a table of
    which failures share a root cause and which commits or environment changes they have in common.

    \b
    A set holds the failing run's files, or failing/ and passing/ folders, or an answer.json
    already produced by a CI job; trainaudit-set.json in a set may give {"good", "bad", "golden",
    "model_config"} for that set.
    \b
    Example:
      trainaudit batch nightly-failures/ --repo megatron-lm -o batch/
      trainaudit batch ci-artifacts/ --html
    """
    sets = discover_sets(list(roots))
    result = run_batch(sets, out, BatchOptions(repo=repo, good=good, bad=bad, fmt=fmt),
                       lambda answer, where, plots: write_report(answer, where, plots).out_dir)
    _, mp, cmp = write_batch(result, out)
    if html:
        for m in result.members:
            if m.out_dir is not None and out in m.out_dir.parents:  # never write into the input sets
                write_html(m.out_dir / "answer.json", m.out_dir / HTML_NAME)
    done = [m.answer for m in result.members if m.answer is not None]
    failing = len(result.members) - sum(1 for a in done if a.final_answer.verdict == "pass")
    if as_json:
        click.echo(json_text(cmp, indent=2))
    else:
        if not quiet:
            click.echo(mp.read_text(encoding="utf-8"))
        click.echo(f"{len(result.members)} sets, {failing} not passing in {display_path(out)}")
    return exit_code([d for a in done for d in a.findings], fail_on, failing > 0)
