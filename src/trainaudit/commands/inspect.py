"""``trainaudit inspect MODEL``: parameters per module and kind, trainable vs frozen, dtypes, and
with ``--sample-batch`` one forward+backward pass to check gradient flow and memory."""

from __future__ import annotations


import click

from trainaudit.commands.common import exit_code, fail_on_option
from trainaudit.errors import InputError
from trainaudit.redact import json_text


def _n(x: int) -> str:
    return f"{x:,}"


@click.command(name="inspect")
@click.argument("model", metavar="MODEL")
@click.option("--sample-batch", metavar="FILE.py:FUNCTION",
              help="A function returning a batch: inputs, (inputs, target) or a dict of keyword inputs.")
@click.option("--json", "as_json", is_flag=True, help="Print the inspection as JSON.")
@click.option("--unsafe-load", is_flag=True, help="Allow unpickling a whole saved module (runs code from the file).")
@fail_on_option("a finding above info exists")
def inspect(model: str, sample_batch: str | None, as_json: bool, unsafe_load: bool, fail_on: str | None) -> int:
    """Inspect a model before blaming the optimiser: MODEL is FILE.py:FUNCTION (returns an
    nn.Module), a saved module (with --unsafe-load) or a state dict (.pt/.bin/.safetensors).

    \b
    Example:
      trainaudit inspect model.py:build_model
      trainaudit inspect model.py:build_model --sample-batch model.py:sample_batch
      trainaudit inspect checkpoint.pt
    """
    try:
        from trainaudit.inspect.model import inspect_target
    except ImportError:
        raise InputError("inspect needs torch: pip install 'trainaudit[torch]'") from None
    ins = inspect_target(model, sample_batch, unsafe_load=unsafe_load)
    if as_json:
        click.echo(json_text(ins.to_dict(), indent=2))
    else:
        total = ins.total_params or 1
        click.echo(f"{ins.target}: {_n(ins.total_params)} parameters, {_n(ins.trainable_params)} trainable "
                   f"({ins.trainable_params / total:.0%}), frozen {_n(ins.total_params - ins.trainable_params)}")
        click.echo("dtypes: " + ", ".join(f"{k} {_n(v)}" for k, v in ins.dtypes.items()))
        click.echo("by kind:")
        for k, v in sorted(ins.by_kind.items(), key=lambda kv: -kv[1]):
            click.echo(f"  {k:10s} {_n(v):>14s}  {v / total:6.1%}")
        click.echo("by module:")
        for k, v in sorted(ins.by_module.items(), key=lambda kv: -kv[1]):
            click.echo(f"  {k:20s} {_n(v):>14s}  {v / total:6.1%}")
        if ins.loss is not None:
            click.echo(f"sample batch: loss {ins.loss:.4g}; peak memory {ins.peak_mem_mb:.1f} MB ({ins.peak_mem_kind})")
        if ins.findings:
            click.echo("findings:")
            for f in ins.findings:
                named = (f.data or {}).get("where") or []
                where = f" [{', '.join(named[:5])}{', ...' if len(named) > 5 else ''}]" if named else ""
                click.echo(f"  {f.rule} [{f.severity}] {f.message}{where}")
        else:
            click.echo("findings: none")
    return exit_code(ins.findings, fail_on, any(f.severity != "info" for f in ins.findings))
