"""Thresholds fitted on the labelled corpus, shipped as plain data (``fitted.json``).

A rule declares which of its thresholds are fitted and the values the fit may choose from
(``Rule.grid``); its ``Params`` default is the prior. ``tools/fit_thresholds.py`` chooses each
fitted threshold by the share of labelled cases the whole diagnosis gets right with it (the
fitted decision refitted for every candidate), on the training folds of a grouped k-fold for the
out-of-sample evaluation and on every case for what ships. The file keeps both: ``thresholds``
(what the rules run with) and ``folds`` (what each fold's model was evaluated with), with how
they were fitted. Configuration (``[tool.trainaudit.rules.ID]``) overrides a fitted value.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

FITTED_FILE = "fitted.json"


@cache
def fitted_file() -> dict[str, Any]:
    """The whole file: ``thresholds``, ``folds`` and ``fitted`` (how); empty when absent."""
    res = resources.files("trainaudit.rules").joinpath(FITTED_FILE)
    if not res.is_file():
        return {}
    data: dict[str, Any] = json.loads(res.read_text(encoding="utf-8"))
    return data


def fitted_thresholds() -> dict[str, dict[str, Any]]:
    """Rule id -> threshold name -> the fitted value the rules run with."""
    out: dict[str, dict[str, Any]] = fitted_file().get("thresholds", {})
    return out
