"""Diagnosis: run the rules on a run, combine the findings into root causes and a verdict, and
build the report.

    run, problems = load_run(paths)
    result = diagnose_run(run)            # Diagnosis (verdict, category, first bad step, stories)
    answer = build_answer(paths, run, result)
"""

from __future__ import annotations

from trainaudit.diagnosis.engine import Diagnosis, Story, diagnose
from trainaudit.diagnosis.build import build_answer, plot_specs
from trainaudit.diagnosis.decide import Analysis, analyse, decide
from trainaudit.diagnosis.model import Model
from trainaudit.model import Run
from trainaudit.rules import Config


def diagnose_run(run: Run, config: Config | None = None, model: Model | None = None) -> Diagnosis:
    """The rules' findings, grouped into stories, decided by the fitted model (the shipped one
    unless ``model`` is given)."""
    return decide(analyse(run, config), model)


__all__ = ["Analysis", "Diagnosis", "Model", "Story", "analyse", "build_answer", "decide", "diagnose",
           "diagnose_run", "plot_specs"]
