"""TA3xx generalisation: overfitting."""

from __future__ import annotations


import numpy as np

from trainaudit.answer.schema import Category, Severity
from trainaudit.rules.base import Guidance, Thresholds, Context, Hit, Rule
from trainaudit.series.stats import rolling_median


class Overfitting(Rule):
    """Detects overfitting: the validation loss turns up after its minimum and ends at least
    ``ratio`` above it, while the training loss keeps improving over the same steps. Reports the
    step (epoch) where the validation loss starts to rise and the final train/validation gap.

    Why: past that point more training makes the model worse on unseen data; the best
    checkpoint is the one at the validation minimum.

    Fix: early stopping at the validation minimum (keep that checkpoint), more data or
    augmentation, weight decay / dropout, a smaller model or fewer epochs.

    Example: val_loss 0.92, 0.71, 0.64, **0.66**, 0.73, 0.85 while loss 0.90 ... 0.12.

    Thresholds: ``ratio`` relative rise of validation loss over its minimum (0.1, as
    SageMaker Debugger's Overfit rule), ``min_points`` validation points (4), ``min_after``
    validation points after the minimum (2).
    """

    id = "TA301"
    name = "overfitting"
    category = Category.OVERFITTING
    severity = Severity.MEDIUM
    guidance = Guidance(
        fix="Stop at the validation minimum (early stopping, keep that checkpoint); add data or augmentation, weight "
            "decay or dropout, or train fewer epochs.",
        impact="Validation loss ends at (or below) its minimum; a smaller generalisation gap.",
        verify="Re-run with early stopping and compare the final validation loss to the minimum.")

    class Params(Thresholds):
        ratio: float = 0.1
        min_points: int = 4
        min_after: int = 2

    def check(self, ctx: Context) -> list[Hit]:
        v = ctx.series("val_loss", finite=True)
        t = ctx.series("loss", finite=True)
        if v is None or t is None or len(v) < self.p.min_points or len(t) < 3:
            return []
        x = v.values
        sm = rolling_median(x, 3) if len(v) >= 7 else x
        j = int(np.argmin(sm))
        if len(v) - 1 - j < self.p.min_after or x[j] <= 0:
            return []
        jmin = j - 1 + int(np.argmin(x[max(0, j - 1): j + 2])) if j > 0 else int(np.argmin(x[:2]))
        vmin = float(x[jmin])
        tail = x[-min(3, len(v) - 1 - jmin):]
        vend = float(np.median(tail))
        rise = (vend - vmin) / abs(vmin)
        if rise < self.p.ratio:
            return []
        step_min = int(v.steps[jmin])
        ti = int(np.searchsorted(t.steps, step_min, side="right")) - 1
        ti = max(ti, 0)
        k = max(1, min(3, len(t) // 10))
        t_at = float(np.median(t.values[max(0, ti - k + 1): ti + 1]))
        t_end = float(np.median(t.values[-k:]))
        if not t_end < t_at:
            return []  # training is not improving: not overfitting (divergence/plateau rules own it)
        first = jmin + 1
        gap = vend - t_end
        msg = (f"{v.name} reaches its minimum {vmin:.4g} at step {step_min} and then rises to {vend:.4g} "
               f"(+{rise:.0%}) while {t.name} keeps falling ({t_at:.4g} -> {t_end:.4g}); final gap {gap:.4g}")
        h = self.hit(msg, min(0.95, 0.6 + rise), metric=v.name, first_bad_step=int(v.steps[first]),
                     last_step=int(v.steps[-1]), severity="high" if rise >= 0.5 else "medium",
                     data={"best_step": step_min})
        h.point("vmin", v, jmin, f"minimum of {v.name}")
        h.point("vend", v, len(v) - 1, f"{v.name} at the end (median of the last points)",
                indices=np.arange(len(v) - tail.size, len(v)))
        h.point("t_at", t, ti, f"{t.name} at the step of the validation minimum")
        h.point("t_end", t, len(t) - 1, f"{t.name} at the end (median of the last points)",
                indices=np.arange(len(t) - k, len(t)))
        h.calc("rise", "relative rise of the validation loss above its minimum", "(median({vend}) - {vmin}) / abs({vmin})",
               unit="ratio")
        h.calc("gap", "final generalisation gap (validation minus training loss)", "median({vend}) - median({t_end})")
        return [h]


