"""Diagnosis: run the rules on a run, combine the findings into root causes and a verdict, and
build the report.

    run, problems = load_run(paths)
    result = diagnose_run(run)            # Diagnosis (verdict, category, first bad step, stories)
    answer = build_answer(paths, run, result)
"""

from __future__ import annotations

from trainaudit.diagnosis.engine import Diagnosis, Story, diagnose
from trainaudit.diagnosis.build import build_answer, plot_specs
from trainaudit.model import Run
from trainaudit.rules import Config, Context, run_rules


def diagnose_run(run: Run, config: Config | None = None) -> Diagnosis:
    hits = run_rules(run, config)
    ctx = Context.of(run)
    loss = ctx.series("loss", finite=True)
    return diagnose(hits, n_loss_points=len(loss) if loss is not None else 0, has=set(ctx.roles.names))


__all__ = ["Diagnosis", "Story", "build_answer", "diagnose", "diagnose_run", "plot_specs"]
