"""``PYTHONPATH=tools python -m synth OUT_DIR [--case NAME ...] [--list]``."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from trainaudit.errors import InputError


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("out_dir", required=False, type=click.Path(file_okay=False, path_type=Path))
@click.option("--case", "cases", multiple=True, metavar="NAME", help="Only this case (repeatable).")
@click.option("--list", "list_only", is_flag=True, help="List the cases and their labels, then exit.")
def main(out_dir: Path | None, cases: tuple[str, ...], list_only: bool) -> None:
    """Train tiny real runs with injected faults and write them, labelled, to OUT_DIR.

    Example: PYTHONPATH=tools python -m synth /tmp/runs --case nan-after-lr-jump --case healthy-warmup-cosine
    """
    from synth.cases import GroundTruthError, catalogue
    from synth.generate import generate

    if list_only:
        from synth.frameworks import needs

        for case in catalogue().values():
            lib = needs(case)
            click.echo(f"{case.name:28s} {case.category:22s} {case.style:10s} "
                       f"{f'[needs {lib}] ' if lib else ''}{case.description}")
        return
    if out_dir is None:
        raise click.UsageError("OUT_DIR is required (or use --list)")
    try:
        manifest = generate(out_dir, list(cases) or None)
    except InputError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    except GroundTruthError as exc:  # a run did not show what its label claims: a generator bug
        click.echo(f"error: ground truth does not hold: {exc}", err=True)
        sys.exit(1)
    for entry in manifest["cases"]:
        click.echo(f"{entry['case']:28s} {entry['category']:22s} first bad step {entry['first_bad_step']!s:6s} "
                   f"{entry['seconds']:5.2f}s")
    click.echo(f"{len(manifest['cases'])} cases in {manifest['seconds_total']:.1f}s -> {out_dir / 'manifest.json'}")


if __name__ == "__main__":
    main()
