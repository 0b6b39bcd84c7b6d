"""What a report plots, as data: curves, a tolerance band, the first bad step and markers.

Stages that build an answer (diagnosis, compare, audit) describe their plots with these; the
rendering layer draws them (PNG, the HTML report's charts).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np


@dataclass
class Curve:
    label: str
    steps: Sequence[int] | np.ndarray
    values: Sequence[float] | np.ndarray
    style: str = "line"  # "line" | "dashed" | "points"


@dataclass
class Band:
    """A tolerance band (e.g. golden * (1 +- rtol))."""

    label: str
    steps: Sequence[int] | np.ndarray
    low: Sequence[float] | np.ndarray
    high: Sequence[float] | np.ndarray


@dataclass
class PlotSpec:
    metric: str
    title: str
    curves: list[Curve]
    first_bad_step: int | None = None
    markers: list[tuple[int, str]] = field(default_factory=list)  # (step, label), e.g. restarts, lr jump
    band: Band | None = None
    logy: bool = False
    stem: str | None = None
    xlabel: str = "step"

    def filename(self) -> str:
        base = self.stem or self.metric
        return re.sub(r"[^A-Za-z0-9_.-]+", "_", base).strip("_")[:80] + ".png"
