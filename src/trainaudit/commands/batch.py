"""``trainaudit batch``: audit several failures at once and group them by shared root cause."""

from __future__ import annotations

import json
from pathlib import Path

import click

from trainaudit.answer.paths import display_path
from trainaudit.batch import BatchOptions, discover_sets, run_batch
from trainaudit.post.delivery import HTML_NAME
from trainaudit.render.batch import write_batch
from trainaudit.render.page import write_html
from trainaudit.render.write import write_report


@click.command()
@click.argument("roots", nargs=-1, required=True, type=click.Path(path_type=Path), metavar="DIR...")
@click.option("--repo", metavar="PATH", help="Git repository for every set's history (never modified).")
@click.option("--good", metavar="REV", help="Last passing revision for every set (a set's trainaudit-set.json wins).")
@click.option("--bad", metavar="REV", help="Failing revision for every set (a set's trainaudit-set.json wins).")
@click.option("-o", "--out", "out", type=click.Path(file_okay=False, path_type=Path), default=Path("trainaudit-batch"),
              show_default=True, help="Output folder: batch.json, batch.md and one report folder per set.")
@click.option("--html", is_flag=True, help="Also write report.html in every set's report folder.")
@click.option("--json", "as_json", is_flag=True, help="Print batch.json to stdout instead of batch.md.")
@click.option("--format", "fmt", metavar="NAME", help="Force the format of the run files.")
def batch(roots: tuple[Path, ...], repo: str | None, good: str | None, bad: str | None, out: Path, html: bool,
          as_json: bool, fmt: str | None) -> int:
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
    jp, mp, cmp = write_batch(result, out)
    if html:
        for m in result.members:
            if m.out_dir is not None and out in m.out_dir.parents:  # never write into the input sets
                write_html(m.out_dir / "answer.json", m.out_dir / HTML_NAME)
    if as_json:
        click.echo(json.dumps(cmp, indent=2))
    else:
        click.echo(mp.read_text(encoding="utf-8"))
        click.echo(f"batch: {display_path(jp)}, {display_path(mp)}")
    return 0
