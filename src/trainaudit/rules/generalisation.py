"""TA3xx generalisation: overfitting, a task too easy to be real, boxes that never reach the loss, and labels
that stop matching their inputs."""

from __future__ import annotations

import itertools
import re
from typing import ClassVar

import numpy as np

from trainaudit.answer.schema import Category, Severity
from trainaudit.model import EventKind, Run, Series
from trainaudit.rules.base import Context, Grid, Guidance, Hit, Rule, Thresholds
from trainaudit.rules.optimisation import accuracies, lr_moved
from trainaudit.series.roles import norm, same_quantity, score, validation
from trainaudit.series.stats import kendall_tau, monotone_tail, rolling_median, trailing_median_mad_upto


def _still_more_accurate(ctx: Context, v: Series, rise: float, cut: float) -> bool:
    """A validation accuracy that improved and is at its best at the last evaluation, while the validation
    loss ``v`` ends less than ``rise`` (relative) above its minimum or the error has fallen by ``cut``
    (relative) since that minimum: a validation loss that rises meanwhile is the model growing more
    confident on the examples it gets wrong, not yet worse on unseen data (the end is the best checkpoint
    by accuracy; keras.io's IMDB convnet example ends so,
    https://keras.io/examples/nlp/text_classification_from_scratch/). A loss that climbs further with an
    accuracy that only edges up (0.483 to 0.495 while the loss climbs by half) is overfitting."""
    a = ctx.series("val_acc", finite=True, min_points=2)
    if a is None or not float(a.values[-1]) >= float(np.max(a.values)) > float(a.values[0]):
        return False
    lo = float(np.min(v.values))
    if lo <= 0 or (float(v.values[-1]) - lo) / lo < rise:
        return True
    full = 100.0 if float(np.max(a.values)) > 1.5 else 1.0  # accuracies printed in percent
    at = int(min(np.searchsorted(a.steps, v.steps[int(np.argmin(v.values))]), len(a) - 1))
    before, end = full - float(a.values[at]), full - float(a.values[-1])
    return before > 0 and (before - end) / before >= cut


def _scores_best_at_end(run: Run, v: Series) -> bool:
    """A validation score (accuracy, ROUGE, BLEU, F1...) evaluated at the validation loss's steps that
    improved and is at its best at the last of them: the checkpoint at the end is the best by that score."""
    for name, s in run.series.items():
        if "@rank" in name or not validation(name) or not score(name):
            continue
        f = s.finite()
        a = f.values[np.isin(f.steps, v.steps)]
        if a.size >= 2 and float(a[-1]) >= float(np.max(a)) > float(a[0]):
            return True
    return False


def _log_of(p: Series | None) -> Series | None:
    """A validation loss from a validation perplexity (its exp): ln of it, under the name ``ln <name>``, where
    every value is positive."""
    if p is None or not len(p) or float(np.min(p.values)) <= 0:
        return None
    return Series(f"ln {p.name}", p.steps, np.log(p.values), p.lines, p.src)


def _stopped_early(ctx: Context) -> bool:
    """An early-stopping callback ended the run because the validation metric stopped improving: the climb
    after the minimum is what the callback waits out (its patience) before it stops, not a run left to
    overfit."""
    return any(e.data.get("stops_early") for e in ctx.events(EventKind.PHASE))


class Overfitting(Rule):
    """Detects overfitting: the validation loss turns up after its minimum and ends at least
    ``ratio`` above it, while the training loss keeps improving over the same steps. Reports the
    step (epoch) where the validation loss starts to rise and the final train/validation gap.

    Why: past that point more training makes the model worse on unseen data; the best
    checkpoint is the one at the validation minimum.

    Fix: early stopping at the validation minimum (keep that checkpoint), more data or
    augmentation, weight decay / dropout, a smaller model or fewer epochs.

    Example: val_loss 0.92, 0.71, 0.64, **0.66**, 0.73, 0.85 while loss 0.90 ... 0.12.

    Few validation points (an epoch-level paste) count when the signal is unambiguous: the
    validation loss rises ``short_rise`` or more over every one of its last points while the
    training loss falls ``train_drop`` or more (without a training loss, ``min_after`` + 1
    consecutive rises); or the training set is memorised (training accuracy at least
    ``memorised_acc``, validation loss ``gap_ratio`` times the training loss), which counts at any
    length when the validation loss's last three points stand ``short_rise`` above its minimum before them.

    A validation loss up at every evaluation since its minimum, more than ``min_after`` times and by
    ``short_rise`` or more, counts too (with a lower confidence) when it has not yet reached ``ratio``.

    So does a validation loss that trends up over 10 evaluations or more since its minimum (Kendall's
    tau at least 0.7) to ``short_rise`` above it while the training loss trends down as strongly.

    So does a validation loss that never falls after its minimum and rises at ``min_after`` + 1 of its
    evaluations, however little (at 2, ending ``ratio`` above), while the same loss on the training set
    falls at every one of them, unless a validation score (accuracy, ROUGE, BLEU) still improves to its
    best at the end: the two curves part at every evaluation.

    So does a validation loss up at each of its last ``min_after`` + 2 evaluations, ending
    ``short_rise`` above where that climb began, while the training loss falls ``train_drop`` over
    the same steps (a later, shallower minimum than the global one); or up at each of its last
    ``long_climb`` evaluations or more, by any amount, while the training loss falls at all.

    The end level must also stand 3 robust standard deviations above the validation loss's level
    between its early descent and its minimum: a noisy curve is not overfitting for one high
    stretch (when that stretch still descends, Kendall's tau at most -0.7, its minimum and the robust
    spread of its steps instead: a trend is no noise; a jump up on the way down that the loss came back
    from shows noise of a third of its size at least). A climb at every evaluation since the minimum,
    ``min_after`` + 2 times or more, needs no such margin. A validation loss that rises while the validation accuracy improves to its best at
    the last evaluation is not overfitting yet (the model grows more confident; the end is the best
    checkpoint by accuracy), while the loss ends less than ``confident_rise`` above its minimum or the error
    has fallen by ``error_cut`` (relative) since that minimum: a loss that climbs further while the accuracy
    only edges up is overfitting.

    A run that an early-stopping callback ended (Lightning's, Keras's, fastai's or Ultralytics' message in
    the log) is not reported: the climb after the minimum is the patience the callback waits out before it
    stops the run, which is what it is for.

    Thresholds: ``ratio`` relative rise of validation loss over its minimum (0.1, as
    SageMaker Debugger's Overfit rule), ``min_points`` validation points (4), ``min_after``
    validation points after the minimum (2), ``short_rise`` (0.03), ``train_drop`` (0.2),
    ``memorised_acc`` (0.99), ``gap_ratio`` (10), ``long_climb`` (6), ``confident_rise`` (0.3), ``error_cut`` (0.5).
    """

    id = "TA301"
    name = "overfitting"
    category = Category.OVERFITTING
    severity = Severity.MEDIUM
    also = (Severity.HIGH,)
    guidance = Guidance(
        fix="Stop at the validation minimum (early stopping, keep that checkpoint); add data or augmentation, weight "
            "decay or dropout, or train fewer epochs.",
        impact="Validation loss ends at (or below) its minimum; a smaller generalisation gap.",
        verify="Re-run with early stopping and compare the final validation loss to the minimum.")

    class Params(Thresholds):
        ratio: float = 0.1
        min_points: int = 4
        min_after: int = 2
        short_rise: float = 0.03
        train_drop: float = 0.2
        memorised_acc: float = 0.99
        gap_ratio: float = 10.0
        long_climb: int = 6
        confident_rise: float = 0.3
        error_cut: float = 0.5

    grid: ClassVar[Grid] = {"ratio": (0.05, 0.1, 0.2, 0.3), "short_rise": (0.01, 0.03, 0.1), "min_points": (3, 4, 5, 6),
                              "train_drop": (0.05, 0.1, 0.2), "confident_rise": (0.2, 0.3, 0.5)}

    def check(self, ctx: Context) -> list[Hit]:
        v = ctx.series("val_loss", finite=True)
        if v is None:
            v = _log_of(ctx.series("val_ppl", finite=True))
        t = ctx.series("loss", finite=True)
        if v is None or len(v) < 2 or _stopped_early(ctx):
            return []
        short = t is None or len(v) < self.p.min_points or len(t) < 3
        rising = self._short(ctx.run, v, t) if t is None or short else self._after_minimum(ctx.run, v, t)
        if rising and not _still_more_accurate(ctx, v, self.p.confident_rise, self.p.error_cut):
            return rising
        # a training set memorised while the validation loss ends above its best before the last three
        # evaluations: overfitting however the validation curve moves
        worse = short or len(v) <= 3 or \
            float(np.median(v.values[-3:])) >= (1 + self.p.short_rise) * float(np.min(v.values[:-3]))
        return self._memorised(ctx, v, t) if worse else []

    def _after_minimum(self, run: Run, v: Series, t: Series) -> list[Hit]:
        x = v.values
        sm = rolling_median(x, 3) if len(v) >= 7 else x
        # the raw minimum next to the smoothed one; where the smoothed curve ties (its edges copy the
        # nearest full window) every tied index is a candidate, not only the first
        tied = np.flatnonzero(sm == sm.min())
        lo, hi = max(0, int(tied[0]) - 1), int(tied[-1]) + 2
        jmin = lo + int(np.argmin(x[lo:hi]))
        if len(v) - 1 - jmin < self.p.min_after or x[jmin] <= 0:
            return []
        vmin = float(x[jmin])
        if vmin <= 0:  # a loss of zero (or -0.0) has no relative rise
            return []
        tail = x[-min(3, len(v) - 1 - jmin):]
        vend = float(np.median(tail))
        rise = (vend - vmin) / abs(vmin)
        after = x[jmin:]
        # up at every evaluation since the minimum (ties allowed), ``min_after`` + 1 times or more: a steady
        # climb, plain even when it is still small
        steady = bool(np.all(np.diff(after) >= 0)) and int(np.sum(np.diff(after) > 0)) > self.p.min_after \
            and (float(after[-1]) - vmin) / abs(vmin) >= self.p.short_rise
        if rise < self.p.ratio and not steady:
            return self._climbing_tail(v, t) or self._trending_apart(v, t, jmin) or self._opposed(run, v, t, jmin)
        # and out of the validation loss's own noise: 3 robust standard deviations above its level
        # between the end of the early descent and the minimum (a noisy curve that dips once is
        # not overfitting when it comes back to where it was)
        # (a climb at every evaluation since the minimum, ``min_after`` + 2 or more, is plain as it is)
        settled = x[len(x) // 5: jmin + 1]
        if settled.size >= 5 and not (steady and after.size > self.p.min_after + 2):
            level = float(np.median(settled))
            sigma = 1.4826 * float(np.median(np.abs(settled - level)))
            # a stretch still descending to the minimum spreads about its median by its trend, not its noise:
            # the noise is that of its steps (their robust spread, over sqrt 2), measured from the minimum
            d = np.diff(settled)
            step_sigma = 1.4826 * float(np.median(np.abs(d - np.median(d)))) / np.sqrt(2)
            if kendall_tau(settled) <= -0.7 and step_sigma < sigma:
                # (a jump up on the way down, come back from, is noise of that size: a third of it at least)
                level, sigma = vmin, max(step_sigma, float(np.max(d, initial=0.0)) / 3)
            if vend - level < 3 * sigma:
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
        h = self.hit(msg, min(0.95, 0.6 + rise) if rise >= self.p.ratio else 0.6, metric=v.name, first_bad_step=int(v.steps[first]),
                     last_step=int(v.steps[-1]), severity="high" if rise >= 0.5 else "medium",
                     data={"best_step": step_min})
        h.point("vmin", v, jmin, f"minimum of {v.name}")
        h.point("vend", v, len(v) - 1, f"{v.name} at the end (median of the last points)",
                indices=np.arange(len(v) - tail.size, len(v)))
        h.point("t_at", t, ti, f"{t.name} at the step of the validation minimum (median of the points up to it)",
                indices=np.arange(max(0, ti - k + 1), ti + 1))
        h.point("t_end", t, len(t) - 1, f"{t.name} at the end (median of the last points)",
                indices=np.arange(len(t) - k, len(t)))
        h.calc("rise", "relative rise of the validation loss above its minimum", "(median({vend}) - {vmin}) / abs({vmin})",
               unit="ratio")
        h.calc("gap", "final generalisation gap (validation minus training loss)", "median({vend}) - median({t_end})")
        return [h]



    def _climbing_tail(self, v: Series, t: Series) -> list[Hit]:
        """The validation loss up at each of its last ``min_after`` + 2 evaluations or more, ending
        ``short_rise`` above where that climb began, while the training loss falls ``train_drop``
        or more over the same steps: overfitting past a later, shallower minimum than the global one."""
        x = v.values
        n_up = monotone_tail(x, +1)
        j = len(x) - 1 - n_up
        if n_up < self.p.min_after + 2 or x[j] <= 0:
            return []
        rise = (float(x[-1]) - float(x[j])) / float(x[j])
        ti = max(int(np.searchsorted(t.steps, v.steps[j], side="right")) - 1, 0)
        t0, t1 = float(t.values[ti]), float(t.values[-1])
        drop = (t0 - t1) / abs(t0) if t0 else 0.0
        # a climb at every one of ``long_climb`` evaluations or more is no noise however small (an
        # exchangeable series rises ``k`` times in a row with probability 1/(k+1)!), nor is a training loss
        # that goes on falling over it
        long = n_up >= self.p.long_climb and drop > 0 and rise > 0
        if not long and (rise < self.p.short_rise or drop < self.p.train_drop):
            return []
        msg = (f"{v.name} rises at each of its last {n_up} evaluations, from {x[j]:.4g} at step {int(v.steps[j])} to "
               f"{x[-1]:.4g} (+{rise:.0%}), while {t.name} falls from {t0:.4g} to {t1:.4g}")
        return self._apart(msg, v, j, rise, t, ti, "at the step the validation loss starts to rise")

    def _trending_apart(self, v: Series, t: Series, jmin: int) -> list[Hit]:
        """From the validation minimum on, 10 evaluations or more: the validation loss trends up
        (Kendall's tau at least 0.7) to ``short_rise`` above the minimum while the training loss trends
        down as strongly over the same steps. Trends of that strength over 10 points do not come from
        noise (a tau of 0.7 over 10 points has a one-sided p of about 0.003), however small the rise."""
        after = v.values[jmin:]
        if after.size < 10:
            return []
        rise = (float(np.median(after[-3:])) - float(after[0])) / abs(float(after[0]))
        ti = max(int(np.searchsorted(t.steps, v.steps[jmin], side="left")), 0)
        train = t.values[ti:]
        paced = _between_evaluations(t, v.steps[jmin:])
        if rise < self.p.short_rise or train.size < 10 or paced.size < 5 or kendall_tau(after) < 0.7 or \
                kendall_tau(paced) > -0.7:
            return []
        msg = (f"{v.name} trends up over its {after.size} evaluations since its minimum {after[0]:.4g} at step "
               f"{int(v.steps[jmin])}, to {after[-1]:.4g} (+{rise:.0%}), while {t.name} trends down "
               f"({train[0]:.4g} -> {train[-1]:.4g})")
        return self._apart(msg, v, jmin, rise, t, ti, "at the validation minimum")

    def _opposed(self, run: Run, v: Series, t: Series, j: int) -> list[Hit]:
        """From index ``j`` on, the validation loss never falls and rises at ``min_after`` + 1 evaluations or
        more, however little, while the training loss, at the validation's pace, falls at every one: the two
        curves move apart at every evaluation, the plain form of overfitting in an epoch-level paste. Both
        monotone in opposite directions over ``k`` evaluations happens by chance about once in (k!)^2 for
        unrelated noise. Two rises count when they end ``ratio`` above where they began. A rise that small is
        the model growing more confident on the examples it gets wrong while a validation score (ROUGE, BLEU,
        accuracy) still improves to its best at the end: no overfitting yet. Nor is a component of the loss
        (YOLO's validation box loss) rising against the training total."""
        after = v.values[j:]
        ups = int(np.sum(np.diff(after) > 0))
        paced = _between_evaluations(t, v.steps[j:])
        rise = (float(after[-1]) - float(after[0])) / abs(float(after[0])) if after[0] else 0.0
        least = 0.0 if ups >= self.p.min_after + 1 else self.p.ratio
        if ups < 2 or bool(np.any(np.diff(after) < 0)) or paced.size < 3 or rise <= 0 or rise < least or \
                not bool(np.all(np.diff(paced) < 0)) or not same_quantity(v.name, t.name) or _scores_best_at_end(run, v):
            return []
        ti = max(int(np.searchsorted(t.steps, v.steps[j], side="right")) - 1, 0)
        t0, t1 = float(t.values[ti]), float(t.values[-1])
        msg = (f"{v.name} rises at each of its {after.size - 1} evaluations since {after[0]:.4g} at step "
               f"{int(v.steps[j])}, to {after[-1]:.4g} (+{rise:.1%}), while {t.name} falls at each of them "
               f"({t0:.4g} -> {t1:.4g})")
        return self._apart(msg, v, j, rise, t, ti, "at the step the validation loss starts to rise")

    def _short(self, run: Run, v: Series, t: Series | None) -> list[Hit]:
        x = v.values
        # the last run of the validation loss that never falls (a tie, the same value printed twice,
        # does not end it: the loss has not come back down)
        j = len(x) - 1
        while j > 0 and x[j] >= x[j - 1]:
            j -= 1
        rises = int(np.sum(np.diff(x[j:]) > 0))
        rise = (x[-1] - x[j]) / abs(x[j]) if x[j] else 0.0
        if rises >= 1 and rise >= self.p.short_rise:
            if t is not None:
                ti = int(np.searchsorted(t.steps, v.steps[j], side="right")) - 1
                t0, t1 = float(t.values[max(ti, 0)]), float(t.values[-1])
                drop = (t0 - t1) / abs(t0) if t0 else 0.0
                if drop >= self.p.train_drop:
                    msg = (f"{v.name} rises from {x[j]:.4g} at step {int(v.steps[j])} to {x[-1]:.4g} (+{rise:.0%}) "
                           f"while {t.name} falls from {t0:.4g} to {t1:.4g} (few evaluation points)")
                    return self._apart(msg, v, j, rise, t, max(ti, 0), "at the step the validation loss starts to rise")
                return self._opposed(run, v, t, j)
            elif rises >= self.p.min_after + 1:
                msg = (f"{v.name} rises for {rises} evaluations in a row after its minimum {x[j]:.4g} at step "
                       f"{int(v.steps[j])}, to {x[-1]:.4g} (+{rise:.0%}); the training loss is not logged")
                return [self._hit(msg, 0.6, v, j, rise)]
        return []

    def _memorised(self, ctx: Context, v: Series, t: Series | None) -> list[Hit]:
        """The training set memorised: training accuracy at least ``memorised_acc`` and the validation
        loss ``gap_ratio`` times the training loss, with a lower validation accuracy."""
        x = v.values
        ta, va = ctx.series("train_acc", finite=True), ctx.series("val_acc", finite=True)
        if t is not None and ta is not None and va is not None and len(t) and len(ta) and len(va):
            tl, vl, tacc, vacc = float(t.values[-1]), float(x[-1]), float(ta.values[-1]), float(va.values[-1])
            scale = 100.0 if max(tacc, vacc) > 1.5 else 1.0  # accuracies printed in percent
            if tl > 0 and vl / tl >= self.p.gap_ratio and tacc / scale >= self.p.memorised_acc and vacc < tacc:
                msg = (f"the training set is memorised: {ta.name} {tacc:.4g} with {t.name} {tl:.3g}, while {v.name} is "
                       f"{vl:.3g} ({vl / tl:.0f}x) and {va.name} {vacc:.4g}")
                h = self._hit(msg, 0.65, v, 0, vl / tl - 1)
                h.point("tl", t, len(t) - 1, f"last {t.name}")
                h.point("tacc", ta, len(ta) - 1, f"last {ta.name}")
                h.point("vacc", va, len(va) - 1, f"last {va.name}")
                return [h]
        return []

    def _apart(self, msg: str, v: Series, j: int, rise: float, t: Series, ti: int, where: str) -> list[Hit]:
        """A hit on the validation loss rising from index ``j``, with the training loss at ``ti`` and at its end."""
        h = self._hit(msg, 0.6, v, j, rise)
        h.point("t0", t, ti, f"{t.name} {where}")
        h.point("t1", t, len(t) - 1, f"last {t.name}")
        return [h]

    def _hit(self, msg: str, conf: float, v: Series, j: int, rise: float) -> Hit:
        first = min(j + 1, len(v) - 1)
        h = self.hit(msg, conf, metric=v.name, first_bad_step=int(v.steps[first]), last_step=int(v.steps[-1]),
                     data={"best_step": int(v.steps[j])})
        h.point("vmin", v, j, f"{v.name} before the rise")
        h.point("vend", v, len(v) - 1, f"last {v.name}")
        h.calc("rise", "relative rise of the validation loss", "({vend} - {vmin}) / abs({vmin})", unit="ratio")
        return h


class TrivialTask(Rule):
    """Detects a task with nothing to learn: the loss (training or validation) is at or below
    ``floor`` (1e-5), yet above 0, within its first ``early`` logged points, and stays below
    ``floor`` * 10 from there, while the training loss started at ``start`` (1e-3) or more.

    Why: no real task is solved to a loss of 1e-5 within a few updates. The targets
    are predictable without learning: every label is the same class (a label parsed from the
    wrong part of a path), the label is inside the input (leakage), or the loss is computed over
    nothing (all tokens masked). Accuracy reads 1.0; the model is worthless.

    Fix: inspect a batch: the label distribution (``np.unique(labels, return_counts=True)``),
    that inputs do not contain the target, and that the loss mask keeps real tokens.

    Example: ``loss: 0.0116 - accuracy: 0.9904 - val_loss: 1.2626e-09 - val_accuracy: 1.0000``
    at epoch 1, then ``loss: 5.7853e-09`` (every cifar2 label read as 0 on Windows).

    A loss printed as exactly 0 is not counted (HF's Trainer prints 0.0 for a NaN loss: TA101's), unless
    an accuracy printed at the same step is 100 %. A log that starts with the run (step or epoch 0 or 1)
    needs no training loss above ``start`` there: no real task is solved to ``floor`` within its first
    epoch.

    Thresholds: ``floor`` (1e-5), ``early`` points (3), ``start`` (1e-3).
    """

    id = "TA302"
    name = "trivial-task"
    category = Category.DATA_PIPELINE
    severity = Severity.HIGH
    guidance = Guidance(
        fix="Inspect a batch: the label distribution, that no input carries its target, and that the loss mask keeps "
            "real tokens; fix the labelling or the split.",
        impact="A loss that falls the way a real task's does, and a validation accuracy below 1.0.",
        verify="Print np.unique(labels, return_counts=True) over a few batches: more than one class, in the expected "
               "proportions.")

    class Params(Thresholds):
        floor: float = 1e-5
        early: int = 3
        start: float = 1e-3

    def check(self, ctx: Context) -> list[Hit]:
        t = ctx.series("loss", finite=True, min_points=2)
        if t is None:
            return []
        # a log that starts with the run (its first step or epoch) needs no start of the loss above ``start``:
        # no real task is solved to 1e-5 in its first epoch, whatever the epoch's mean loss was
        first = int(t.steps[0]) <= 1 and float(t.values[0]) < self.p.start
        if float(t.values[0]) < self.p.start and not first:
            return []
        found: list[tuple[int, Series, int]] = []
        for role in ("loss", "val_loss"):
            s = ctx.series(role, finite=True, min_points=1)
            if s is None:
                continue
            x = s.values
            # an exact 0 counts where an accuracy printed at the same step is 100 %: NaN logits score no such
            # accuracy, so that 0 is a real one
            real = (x[:self.p.early] > 0) | ((x[:self.p.early] == 0) & _perfect(ctx, s.steps[:self.p.early]))
            low = np.flatnonzero(real & (x[:self.p.early] <= self.p.floor))
            if low.size and np.all((x[low[0]:] >= 0) & (x[low[0]:] <= 10 * self.p.floor)):
                found.append((int(s.steps[low[0]]), s, int(low[0])))
        if not found:
            return []
        step, s, i = min(found, key=lambda f: f[0])
        since = ("from the run's first step or epoch on" if first
                 else f"while {t.name} started at {float(t.values[0]):.4g}")
        h = self.hit(f"{s.name} is {float(s.values[i]):.3g} at step {step}, within its first {i + 1} logged point(s), "
                     f"{since}: the targets are predictable without learning (one class, or the label inside the input)",
                     0.8, metric=s.name, first_bad_step=step, last_step=int(s.steps[-1]))
        h.point("low", s, i, f"{s.name} at step {step}")
        h.point("start", t, 0, f"first {t.name}")
        return [h]


# a detector's box-regression losses: mmdetection's loss_bbox / loss_rpn_bbox, detectron2's loss_box_reg /
# loss_rpn_loc, torchvision's loss_box_reg / loss_rpn_box_reg, YOLO's box_loss, YOLOX's and YOLOv6's iou_loss
# (YOLOX's l1_loss is no such loss: it is 0 until the last epochs turn it on)
_BOX_LOSS = re.compile(r"(?:^|[._/ ])(?:loss_(?:rpn_)?(?:bbox|box_reg|loc|iou)|loss_rpn_box_reg|box_loss|iou_loss)$")
_CLS_LOSS = re.compile(r"(?:^|[._/ ])(?:loss_(?:rpn_)?cls|loss_classifier|loss_objectness|cls_loss|obj_loss)$")


class NoBoxes(Rule):
    """Detects a detector that never sees a ground-truth box: every box-regression loss the log
    prints (``loss_bbox``, ``loss_rpn_bbox``, ``loss_box_reg``, ``box_loss``...) is exactly 0 at
    every logged step (``min_points`` or more), while a classification or objectness loss at the same steps
    is not.

    Why: a detector's box loss is averaged over the proposals matched to a ground-truth box
    (mmdetection's bbox head returns ``loss_bbox`` beside ``loss_cls``,
    https://github.com/open-mmlab/mmdetection/blob/v2.22.0/docs/en/conventions.md); with no box in
    any image, nothing is matched, every proposal is background, the box loss is 0 and the
    classifier learns to say "background" (its accuracy climbs to 100 %). The annotations were
    dropped: class names in the config that match none of the dataset's, empty or misplaced label
    files, boxes filtered out as invalid.

    Fix: check that the dataset's class names (mmdetection's ``metainfo``/``classes``) match the
    annotation file's categories, that label files are found, and count the boxes of one batch.

    Example: ``loss_rpn_cls: 0.2651, loss_rpn_bbox: 0.0000, loss_cls: 0.4077, acc: 91.1543,
    loss_bbox: 0.0000`` at iteration 50, and the same zeros at every iteration after it.

    Thresholds: ``min_points`` logged points of each box loss (2).
    """

    id = "TA303"
    name = "no-ground-truth-boxes"
    category = Category.DATA_PIPELINE
    severity = Severity.HIGH
    guidance = Guidance(
        fix="Check that the dataset's class names match the annotation file's categories, that the label files are "
            "found, and that no box is filtered out as invalid; count the boxes of one batch.",
        impact="Non-zero box-regression losses that fall as training goes on.",
        verify="Print the number of ground-truth boxes in a few batches, and check loss_bbox is above 0 from the "
               "first iteration.")

    class Params(Thresholds):
        min_points: int = 2

    def check(self, ctx: Context) -> list[Hit]:
        boxes = [s.finite() for n, s in ctx.run.series.items() if "@rank" not in n and _BOX_LOSS.search(norm(n))]
        if not boxes or any(len(b) < self.p.min_points or np.any(b.values != 0.0) for b in boxes):
            return []
        steps = np.unique(np.concatenate([b.steps for b in boxes]))
        for n, s in ctx.run.series.items():
            if "@rank" in n or not _CLS_LOSS.search(norm(n)):
                continue
            at = np.flatnonzero(np.isin(s.steps, steps) & np.isfinite(s.values) & (s.values > 0))
            if at.size:
                first = min(boxes, key=lambda b: int(b.steps[0]))
                i = int(at[0])
                names = ", ".join(b.name for b in boxes)
                h = self.hit(f"{names} {'is' if len(boxes) == 1 else 'are'} exactly 0 at every logged step from step "
                             f"{int(first.steps[0])}, while {s.name} is {float(s.values[i]):.4g} at step {int(s.steps[i])}: "
                             "no ground-truth box reaches the box losses (the annotations were dropped)", 0.75,
                             metric=first.name, first_bad_step=int(first.steps[0]), last_step=int(first.steps[-1]))
                h.point("box", first, 0, f"{first.name} at its first logged step", indices=np.arange(len(first)))
                h.point("cls", s, i, f"{s.name} at step {int(s.steps[i])}")
                return [h]
        return []


class LabelsUnmatched(Rule):
    """Detects labels that stop matching their inputs mid-run: the training loss jumps ``jump`` (2) times
    or more above its level (the median of the ``level`` points before), or above where it started, in one
    logged interval, overshoots
    where it started, then comes back down to where it started (the highest of its first 3 points: a log's
    first point may come after some learning; within ``home``) and settles there, flat (the relative median
    absolute deviation of the last half after the jump at most ``flat``), with the learning rate unchanged
    (within ``lr_factor``, 1.25, of what it was ``level`` points before: a warm-up that doubles the rate can
    blow the loss up to the same level).

    Why: a model that had learnt its task is suddenly fed targets unrelated to its inputs (labels
    shuffled across a batch, a loader that pairs the wrong files, an index that went out of step). It
    is confidently wrong on every example, so the loss overshoots the untrained level; with nothing in
    the inputs to predict the targets from, the best it can then do is the prior over the labels, which
    is what an untrained model starts at (ln C for C balanced classes, the unigram entropy of a language
    model), and no batch moves it from there. A learning rate too high does not settle so: the loss it
    drives up stays noisy or keeps climbing; units that die at once (TA205) fall to that level without
    overshooting it.

    Fix: check the data pipeline at the step of the jump: print a few (input, label) pairs of a batch
    from there and compare them with the source; look for a shuffle of labels or targets apart from
    their inputs, a dataset re-indexed or re-sorted mid-epoch, or a second data source that starts
    there.

    Example: loss 2.33 at the start, 0.53 at step 271, 6.81 at step 286, then 2.30 to 2.31 at every
    step to the end (ln 10 = 2.303 for ten classes).

    Thresholds: ``jump`` (2.0), ``level`` points (10), ``home`` (0.3: the settled level is within
    -15 % and +30 % of the start), ``flat`` (0.01), ``min_after`` points from the jump (8). The jump must be
    the first time the loss stands above where it started: a loss already thrown about before it (a warm-up
    that blew it up and down) is no model that had learnt its task.
    """

    id = "TA304"
    name = "labels-unmatched"
    category = Category.DATA_PIPELINE
    severity = Severity.HIGH
    explains = frozenset({Category.DIVERGENCE, Category.LOSS_SPIKE, Category.PLATEAU})
    guidance = Guidance(
        fix="Print a few (input, label) pairs of a batch from the step of the jump and compare them with the source: "
            "labels shuffled apart from their inputs, a re-indexed dataset, or a new data source starting there.",
        impact="The loss keeps falling past the step of the jump; no settling at the untrained level.",
        verify="Rerun from the last checkpoint before the jump with the batches checked: the loss continues from "
               "where it was.")

    class Params(Thresholds):
        jump: float = 2.0
        level: int = 10
        home: float = 0.3
        flat: float = 0.01
        min_after: int = 8
        lr_factor: float = 1.25

    def check(self, ctx: Context) -> list[Hit]:
        s = ctx.series("loss", finite=True, min_points=self.p.level + self.p.min_after)
        if s is None:
            return []
        x = s.values
        n = len(x)
        start = float(np.max(x[:3]))  # where it started: a log's first points may come after some learning
        if start <= 0:
            return []
        # the loss first stands above where it started at ``over``: the jump is there or in the two points before
        above = np.flatnonzero(x[3:] > start)
        if above.size == 0:
            return []
        over = 3 + int(above[0])
        js = np.arange(max(over - 2, max(5, self.p.level // 2)), min(over, n - self.p.min_after) + 1, dtype=np.intp)
        for j, pre in zip(js.tolist(), trailing_median_mad_upto(x, self.p.level, js)[0].tolist()):
            # (or less, when it lands above where it started: a language model's loss starts at its unigram
            # entropy, less than twice where it had got to)
            if pre <= 0 or float(x[j]) < min(self.p.jump * pre, start):
                continue
            tail = x[j + (n - j) // 2:]
            late = float(np.median(tail))
            peak = float(np.max(x[j:j + 3]))
            if late < 1.5 * pre or peak < 1.15 * late \
                    or not (1 - self.p.home / 2) * start <= late <= (1 + self.p.home) * start \
                    or float(np.median(np.abs(tail - late))) > self.p.flat * late \
                    or lr_moved(ctx, s, j, self.p.level, self.p.lr_factor):
                continue
            at = int(s.steps[j])
            h = self.hit(f"{s.name} jumped from {pre:.4g} to {float(x[j]):.4g} at step {at}, overshooting where it "
                         f"started ({start:.4g}), then came back to {late:.4g} and stayed there, flat, with the "
                         "learning rate unchanged: the labels stopped matching the inputs and the model fell back "
                         "to predicting the labels' prior", 0.75, metric=s.name, first_bad_step=at,
                         last_step=int(s.steps[-1]))
            h.point("start", s, 2, f"{s.name} over its first 3 points", indices=np.arange(3))
            h.point("before", s, j - 1, f"{s.name} before the jump", indices=np.arange(max(0, j - self.p.level), j))
            h.point("jump", s, j, f"{s.name} at the jump")
            h.point("late", s, len(x) - 1, f"{s.name} settled", indices=np.arange(len(x) - len(tail), len(x)))
            h.calc("back", "settled level over the starting level", "median({late}) / max({start})", unit="ratio")
            return [h]
        return []


def _perfect(ctx: Context, steps: np.ndarray) -> np.ndarray:
    """Which of ``steps`` an accuracy the log prints is 100 % at."""
    out = np.zeros(steps.size, dtype=bool)
    for acc, frac in accuracies(ctx):
        out |= np.isin(steps, acc.steps[frac >= 1.0])
    return out


def _between_evaluations(t: Series, evals: np.ndarray) -> np.ndarray:
    """The training loss seen at the validation's pace: its median between consecutive evaluations
    (from each evaluation step to the next, the last to the end). A per-iteration loss is noisy batch
    to batch; its trend over the evaluations is the trend of these medians. A training loss logged
    no more often than the evaluations is returned as it is."""
    cut = np.searchsorted(t.steps, evals, side="left")
    if len(t) - int(cut[0]) <= len(evals):
        return t.values[int(cut[0]):]
    bounds = [*cut.tolist(), len(t)]
    return np.array([float(np.median(t.values[a:b])) for a, b in itertools.pairwise(bounds) if b > a])
