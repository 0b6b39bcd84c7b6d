"""``trainaudit compare``: Megatron-LM golden-value gate reproduced and explained, or run vs run."""

from __future__ import annotations

from pathlib import Path

import click

from trainaudit.commands.common import no_plots_option, exit_code, fail_on_option, out_option, print_summary, report_notes, \
    verbosity_options
from trainaudit.errors import UsageError
from trainaudit.ingest import format_names
from trainaudit.llm.options import llm_options, narrate_if_requested
from trainaudit.post.delivery import delivery_options
from trainaudit.render.painter import take
from trainaudit.render.write import write_report
from trainaudit.compare.runs import compare_runs
from trainaudit.compare.pipeline import run_golden
from trainaudit.redact import json_model


@delivery_options  # --html, --github-summary, --gitlab-codequality
@click.command()
@click.argument("inputs", nargs=-1, required=True, metavar="[BASELINE] CANDIDATE|ACTUAL...")
@click.option("--golden", "golden", metavar="GOLDEN",
              help="Golden-values JSON. All INPUTs are then the actual run (actual-values JSON, TensorBoard "
                   "event files or directory, or a Megatron log).")
@click.option("--baseline", "baselines", multiple=True, metavar="RUN",
              help="Run vs run: another baseline run of the same code (repeatable); the spread between "
                   "baselines sets the noise band.")
@click.option("--model-config", "model_config", metavar="FILE",
              help="model_config.yaml: METRICS, NVTE_ALLOW_NONDETERMINISTIC_ALGO / NON_DETERMINSTIC_RESULTS, "
                   "TEST_TYPE, --train-iters.")
@click.option("--deterministic/--nondeterministic", "deterministic", default=None,
              help="Force the mode (--nondeterministic: approximate checks only). Default: from --model-config.")
@click.option("--pipeline", type=click.Choice(["regular", "resume"]), default=None,
              help="resume: GOLDEN is the first run, ACTUAL the second, steps > train_iters/2 compared. "
                   "Default: resume when TEST_TYPE is ckpt-resume/frozen-resume, else regular.")
@click.option("--train-iters", "train_iters", type=int, default=None,
              help="Train iterations (resume split; steps kept from TB/logs). Default: --model-config, else the "
                   "golden's last step.")
@click.option("--policy", default="megatron", show_default=True, metavar="megatron|megatron@YYYY-MM-DD",
              help="Comparator version: megatron@2026-04-13 replays the pre-4e85d74ae9 budget, and so on "
                   "(docs/compare.md).")
@click.option("--ci-log", "ci_logs", multiple=True, metavar="FILE",
              help="CI job log with the gate's own output (Actual/Golden values, FAILED lines), read as evidence.")
@out_option("compare")
@click.option("--json", "as_json", is_flag=True, help="Print answer.json to stdout instead of the summary.")
@verbosity_options
@fail_on_option("the check fails")
@click.option("--format", "fmt", metavar="NAME", help="Force the input format (see below).")
@no_plots_option
@llm_options  # --llm, --llm-base-url, --llm-timeout
def compare(inputs: tuple[str, ...], golden: str | None, baselines: tuple[str, ...], model_config: str | None,
            deterministic: bool | None, pipeline: str | None, train_iters: int | None, policy: str,
            ci_logs: tuple[str, ...], out: Path, as_json: bool, quiet: bool, verbose: bool, fail_on: str | None,
            fmt: str | None, no_plots: bool = False) -> int:
    """Golden-value check (reproduces Megatron-LM's gate and explains each failing check) or run vs
    run. Exit 0: the check passes; 1: it fails (see --fail-on); 2: unreadable input.

    \b
    Example:
      trainaudit compare --golden golden_values_dev_dgx_h100.json actual.json \\
          --model-config model_config.yaml
      trainaudit compare --golden golden.json tb_logs/ --train-iters 100
      trainaudit compare --golden run1.json run2_2nd.json --pipeline resume --train-iters 100
      trainaudit compare --policy megatron@2026-04-13 --golden old_golden.json actual.json
      trainaudit compare passing_job.log failing_job.log --baseline passing_job_2.log
    """
    if golden is not None:
        if baselines:
            raise UsageError("--baseline is for run vs run; do not combine it with --golden")

        answer, plots, passed = run_golden(golden, list(inputs), model_config=model_config,
                                           deterministic=deterministic, pipeline=pipeline, train_iters=train_iters,
                                           policy=policy, ci_logs=list(ci_logs), fmt=fmt)
    else:
        if len(inputs) != 2:
            raise UsageError("run vs run needs BASELINE CANDIDATE (more baselines with --baseline), "
                             "or use --golden GOLDEN ACTUAL")

        answer, plots, passed = compare_runs([inputs[0], *baselines], inputs[1], fmt)
    answer = narrate_if_requested(answer)  # wording only, verified; never changes `passed`
    paths = write_report(answer, out, () if no_plots else plots, painter=None if no_plots else take())
    if as_json:
        click.echo(json_model(answer))
    else:
        print_summary(answer, paths, quiet=quiet, verbose=verbose, findings_first=golden is None)
    report_notes(paths, quiet)
    return exit_code(answer.findings, fail_on, not passed)


compare.epilog = "Formats: " + ", ".join(format_names())
