"""``trainaudit audit``: the whole CI-failure audit (compare, diagnose, trace history, decide)."""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.console import Console
from rich.text import Text

from trainaudit.audit import AuditOptions, run_audit
from trainaudit.commands.batch import batch
from trainaudit.commands.common import no_plots_option, default_out, exit_code, fail_on_option, out_option, print_summary, \
    report_notes, verbosity_options
from trainaudit.errors import UsageError
from trainaudit.redact import mask_secrets
from trainaudit.ingest import format_names
from trainaudit.render.painter import take
from trainaudit.render.write import write_report
from trainaudit.llm.options import llm_options, narrate_if_requested
from trainaudit.post.delivery import delivery_options
from trainaudit.redact import json_model


@delivery_options  # --html, --github-summary, --gitlab-codequality
@click.command()
@click.argument("inputs", nargs=-1, metavar="INPUT...")
@click.option("--passing", "passing", multiple=True, metavar="PATH|URL",
              help="Artifacts of a passing run (repeatable): compared with the failing run when there are no "
                   "golden values, and checked against the same golden when there are.")
@click.option("--repo", metavar="PATH", help="Git work tree or bare repository (never modified).")
@click.option("--good", metavar="REV", help="Last passing revision.")
@click.option("--bad", metavar="REV", help="First failing (or audited) revision. Default: HEAD of --repo.")
@click.option("--golden", metavar="FILE", help="Golden values. Default: found in --repo at --bad from the test case "
                                                "named in the CI log or the artifact paths.")
@click.option("--model-config", "model_config", metavar="FILE",
              help="model_config.yaml (METRICS, nondeterministic mode). Default: beside the golden in --repo.")
@click.option("--github", "github", multiple=True, metavar="REF",
              help="GitHub Actions run or job of the failing run: owner/repo/actions/runs/ID[/job/ID] or its URL "
                   "(token from GITHUB_TOKEN / GH_TOKEN).")
@click.option("--gitlab", "gitlab", multiple=True, metavar="URL",
              help="GitLab job URL of the failing run (token from GITLAB_TOKEN or CI_JOB_TOKEN).")
@click.option("--github-api-url", metavar="URL", help="GitHub API base (default $GITHUB_API_URL or api.github.com).")
@click.option("--find-fix", is_flag=True, help="Also look after --bad for the commit that fixed or disabled the test.")
@click.option("--policy", default=None, metavar="megatron|megatron@YYYY-MM-DD",
              help="Golden-gate comparator version. Default: the comparator dated at --bad's commit (with --repo), "
                   "else the current one.")
@out_option("audit")
@click.option("--json", "as_json", is_flag=True, help="Print answer.json to stdout instead of the summary.")
@verbosity_options
@fail_on_option("the verdict is not pass")
@click.option("--format", "fmt", metavar="NAME", help="Force the format of the run files (see below).")
@click.option("--batch", "batch_mode", is_flag=True,
              help="Several failures at once: every INPUT is a folder of artifact sets (one failure per subfolder "
                   "or archive); writes one answer per failure plus batch.md / batch.json grouping shared root "
                   "causes, commits and environment changes (default -o trainaudit-out/batch). Same as "
                   "`trainaudit batch`.")
@no_plots_option
@llm_options  # --llm, --llm-base-url, --llm-timeout
@click.pass_context
def audit(ctx: click.Context, inputs: tuple[str, ...], passing: tuple[str, ...], repo: str | None, good: str | None,
          bad: str | None, golden: str | None, model_config: str | None, github: tuple[str, ...],
          gitlab: tuple[str, ...], github_api_url: str | None, find_fix: bool, policy: str | None, out: Path,
          as_json: bool,
          quiet: bool, verbose: bool, fail_on: str | None, fmt: str | None, batch_mode: bool = False,
          batch_html: bool = False, no_plots: bool = False) -> int:
    """The whole CI-failure audit: reproduce the gate, diagnose the runs, trace the git history
    between --good and --bad, and decide: real_regression, numerical_drift, gating_policy_issue,
    infrastructure_failure, crash, pass or inconclusive. INPUT: the failing run's artifacts (files,
    folders, archives, http(s) URLs). Exit 0: the verdict is pass; 1: any other verdict (see
    --fail-on); 2: unusable input.

    \b
    Example:
      trainaudit audit failing_job.log artifacts.zip --passing passing_artifacts.zip \\
          --repo ~/Megatron-LM --good v0.14.0 --bad HEAD --find-fix
      trainaudit audit --github NVIDIA/Megatron-LM/actions/runs/123 --repo . --good main~20
      trainaudit audit --golden golden_values_dev_dgx_h100.json actual.json -o report/
      trainaudit audit --batch nightly-failures/ --repo megatron-lm
    """
    if batch_mode:
        if passing or golden or model_config or github or gitlab or find_fix:
            raise UsageError("--batch takes folders of artifact sets; per-set golden/config go in trainaudit-set.json")
        if not inputs:
            raise UsageError("--batch needs at least one folder of artifact sets")
        given = ctx.get_parameter_source("out") is not click.core.ParameterSource.DEFAULT
        return ctx.invoke(batch, roots=tuple(Path(i) for i in inputs), repo=repo, good=good, bad=bad,
                          out=out if given else default_out("batch"), html=batch_html, as_json=as_json, quiet=quiet,
                          fail_on=fail_on, fmt=fmt)
    if not (inputs or github or gitlab or repo):
        raise UsageError("give the failing run's artifacts (INPUT..., --github or --gitlab) and/or --repo")
    opts = AuditOptions(inputs=list(inputs), passing=list(passing), repo=repo, good=good, bad=bad, golden=golden,
                        model_config=model_config, github=list(github), gitlab=list(gitlab),
                        github_api_url=github_api_url, find_fix=find_fix, fmt=fmt, policy=policy)
    show = not quiet and not as_json and sys.stderr.isatty()
    if show:
        # the interpreter's own stderr: the spinner redraws its line with "\r" and erase-line, which the
        # sanitising wrapper around sys.stderr (cli.main) rightly strips from text that may come from
        # input; the spinner's text is ours, and what it quotes from input is masked here
        console = Console(file=sys.__stderr__ or sys.stderr)
        with console.status("auditing") as status:
            def step(msg: str) -> None:
                status.update(mask_secrets(msg))

            def fetched(name: str, size: int, total: int | None) -> None:
                status.update(mask_secrets(f"downloading {name}: {size / 1e6:.1f}"
                                           + (f"/{total / 1e6:.1f}" if total else "") + " MB"))

            answer, plots, info = run_audit(opts, step=step, fetch_progress=fetched)
    else:
        answer, plots, info = run_audit(opts)
    answer = narrate_if_requested(answer)  # wording only, verified; never changes the verdict
    paths = write_report(answer, out, () if no_plots else plots, painter=None if no_plots else take())
    if as_json:
        click.echo(json_model(answer))
    else:
        head = []
        named = answer.final_answer.culprit
        if info.commit is not None and named is not None:
            runner = (f"; next {named.runner_up.sha[:10]} {named.runner_up.confidence:.2f}"
                      if named.runner_up else "")
            head.append(Text(f"{named.role}: {info.commit.commit.title} ({named.sha[:10]}, probability "
                             f"{named.confidence:.2f}{runner})"))
        gd = answer.final_answer.gate_disagreement
        if gd is not None:
            head.append(Text(f"two gates disagree: {gd.summary.split(': the comparator changed', 1)[0]}", style="yellow"))
        head += [Text(f"missing: {m}", style="yellow") for m in info.missing]
        print_summary(answer, paths, quiet=quiet, verbose=verbose, head=head)
    report_notes(paths, quiet)
    return exit_code(answer.findings, fail_on, answer.final_answer.verdict != "pass")


audit.epilog = "Formats: " + ", ".join(format_names())
