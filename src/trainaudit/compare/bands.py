"""What kind of quantity a metric of a run is, and how far two runs may differ on it before the
difference means the training changed (run vs run). Names are matched as frameworks log them (HF
``eval_runtime``, Lightning ``lr-AdamW``, Megatron ``elapsed time per iteration (ms)``).

Kinds and their bands, on relative differences ``|c - b| / |b|`` unless said otherwise:

- ``wall_clock`` (``*_runtime``, ``*_per_second``, ``time``, ``elapsed``, iteration/step time,
  throughput, MFU): measures the machine as much as the code. Never a correctness check: the medians
  are compared and a throughput note is written only when one is more than :data:`WALL_CLOCK_FACTOR`
  times the other.
  Megatron-LM's gate holds iteration time to 5 % only on a dedicated node over a steady-state
  window (tests/functional_tests/python_test_utils/common.py); two runs compared here may come
  from different machines, and a sub-second ``eval_runtime`` moves by tens of percent on one.
- ``progress`` (``epoch``, ``step``, ``total_flos``, tokens or samples seen): counters that follow
  the configuration (dataset size, batch size), reported as configuration, not compared.
- ``lr`` (``lr``, ``learning_rate``, ``lr-Adam``...): a hyper-parameter; compared as configuration
  (the factor between the runs and the step it first differs), not as a metric.
- ``memory``: compared like wall-clock, with :data:`MEMORY_BAND` (allocator and batch shape, not the
  numerics).
- ``loss``, ``grad_norm``, ``accuracy``, ``other``: correctness checks. With two or more baseline
  runs the band is measured (twice the 95th percentile of the baseline-to-baseline spread). With one
  baseline it is ``max(floor, NOISE_SIGMAS x the baseline's own step-to-step scatter)`` and both
  curves are compared on a trailing moving average of ``n // 20`` points (a single batch's loss is
  noisy; a different seed moves a per-step loss by tens of percent while its average over a few
  dozen steps agrees; trailing, so a value never depends on a later step). A loss logged too
  rarely to measure its own scatter (an eval loss every few hundred steps) takes the scatter of the
  run's training loss: a training whose batch loss scatters by s does not pin its loss down to
  better than s, and a different seed moves the eval loss of our CPU runs by 3-7 % where the
  batch loss scatters by 9 %:

  - loss: floor 5 %, Megatron-LM's approximate tolerance for losses of nondeterministic runs
    (common.py, ``rtol=0.05``);
  - grad_norm: floor 25 %: a gradient norm is a norm of a stochastic gradient and scatters more
    than the loss it comes from (our own CPU runs: 14 % step-to-step against 9 % for the loss);
    Megatron-LM holds its other noisy statistic, num-zeros, to 20 %;
  - accuracy-like (accuracy, f1, precision, recall, auc, bleu, rouge, exact match): an absolute band
    of 2 points (0.02 on a 0-1 scale), the seed-to-seed spread reported for fine-tuning and image
    classification (Dodge et al. 2020, https://arxiv.org/abs/2002.06305; Picard 2021,
    https://arxiv.org/abs/2109.08203);
  - other: floor 5 %.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from trainaudit.answer.formula import moving_average

WALL_CLOCK_FACTOR = 2.0  # medians may differ by this factor before a throughput note
MEMORY_BAND = 0.2
NOISE_SIGMAS = 2.5
MIN_SMOOTH_POINTS = 20  # fewer common points: compared step by step
SMOOTH_FRACTION = 20  # moving-average window: n // 20 points (at most MAX_WINDOW)
MAX_WINDOW = 25
ALLOWED_SHARE = 0.05  # single-baseline checks: steps beyond the band allowed (isolated ones)
FLOORS: dict[str, float] = {"loss": 0.05, "grad_norm": 0.25, "accuracy": 0.02, "other": 0.05}
CORRECTNESS = ("loss", "accuracy", "grad_norm", "other")  # in the order they are reported

WALL_CLOCK_RE = re.compile(r"runtime|per_second|per_sec|/s\b|_s$|\(ms\)|\btime\b|_time|time_|elapsed|throughput"
                           r"|it/s|samples/s|tokens/s|tflops|mfu|latency|duration|speed", re.IGNORECASE)
PROGRESS_NAMES = frozenset({"batch size", "batch_size", "global batch size", "global_batch_size", "epoch", "step", "global_step", "total_flos", "num_input_tokens_seen", "consumed_samples",
                            "consumed samples", "consumed_tokens", "iteration", "samples", "tokens", "v_num"})
LR_RE = re.compile(r"^(?:lr|learning[_ \-]rate)(?:$|[-_/ ])|(?:^|[-_/ ])(?:lr|learning[_ \-]rate)$", re.IGNORECASE)
MEMORY_RE = re.compile(r"mem|memory|allocated|reserved", re.IGNORECASE)
GRAD_NORM_RE = re.compile(r"grad(?:ient)?[_ \-.]?(?:\d\.\d_)?norm", re.IGNORECASE)
ACCURACY_RE = re.compile(r"acc|accuracy|(?:^|_)f1|precision|recall|auc|bleu|rouge|exact_match|top[15]\b",
                         re.IGNORECASE)


def metric_kind(name: str) -> str:
    """wall_clock | progress | lr | memory | loss | grad_norm | accuracy | other."""
    n = name.lower()
    if n in PROGRESS_NAMES:
        return "progress"
    if LR_RE.search(n):
        return "lr"
    if ("loss" in n and "scale" not in n) or "perplexity" in n or n.endswith("ppl"):
        return "loss"
    if WALL_CLOCK_RE.search(n):
        return "wall_clock"
    if MEMORY_RE.search(n):
        return "memory"
    if GRAD_NORM_RE.search(n):
        return "grad_norm"
    if ACCURACY_RE.search(n):
        return "accuracy"
    return "other"


@dataclass(slots=True)
class Band:
    """The band a metric is held to: ``rel`` (relative) or, for accuracy-like metrics, ``abs``."""

    kind: str
    tol: float
    absolute: bool
    how: str  # in words, for the calculation that counts the failing steps
    window: int = 1  # moving-average window the curves are compared on (1: step by step)


def self_scatter(values: np.ndarray, window: int) -> float:
    """Robust step-to-step scatter of a curve around its own moving average, relative
    (1.4826 x the median absolute deviation, the normal-consistent MAD)."""
    v = values[np.isfinite(values)]
    if v.size < MIN_SMOOTH_POINTS:
        return 0.0
    ref = moving_average(v, max(window, 5))
    ok = ref != 0
    res = (v[ok] - ref[ok]) / np.abs(ref[ok])
    return float(1.4826 * np.median(np.abs(res - np.median(res)))) if res.size else 0.0


def band_for(name: str, base: np.ndarray, noise: float | None, loss_scatter: float = 0.0) -> Band:
    """The band of a correctness metric: measured from baseline runs (``noise``), else from its
    kind's floor and the baseline's own scatter (a loss too short to measure it: ``loss_scatter``,
    the training loss's), on a moving average when there are enough points."""
    kind = metric_kind(name)
    kind = kind if kind in FLOORS else "other"
    floor = FLOORS[kind]
    absolute = kind == "accuracy"
    if absolute and np.nanmax(np.abs(base), initial=0.0) > 1.5:
        floor *= 100  # accuracy in percent
    if noise is not None:
        return Band(kind, float(f"{max(noise * 2, 1e-6):.3g}"), False,
                    "band = 2 x 95th percentile of the baseline-to-baseline spread")
    n = int(np.isfinite(base).sum())
    window = min(MAX_WINDOW, n // SMOOTH_FRACTION) if n >= MIN_SMOOTH_POINTS else 1
    window = max(window, 1)
    if absolute:
        return Band(kind, floor, True, f"{kind} band: {floor:g} absolute (seed-to-seed spread of accuracy-like "
                                        "metrics)", window)
    scatter = self_scatter(base, window)
    whose = "the baseline's step-to-step scatter"
    if n < MIN_SMOOTH_POINTS and kind == "loss" and loss_scatter > scatter:
        scatter, whose = loss_scatter, "the baseline training loss's step-to-step scatter"
    tol = float(f"{max(floor, NOISE_SIGMAS * scatter):.3g}")
    how = (f"{kind} band: max({floor:g}, {NOISE_SIGMAS:g} x {whose} {scatter:.3g})"
           + (f", on a {window}-step moving average" if window > 1 else ""))
    return Band(kind, tol, False, how, window)
