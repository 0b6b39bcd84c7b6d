"""TA1xx numerics: NaN/Inf, loss spikes, grad-norm spikes, fp16 loss-scale collapse."""

from __future__ import annotations

import itertools
import math
import re
from typing import ClassVar

import numpy as np
from numpy.typing import NDArray

from trainaudit.model import Event, EventKind, Series, unnamed
from trainaudit.answer.schema import Category, Severity
from trainaudit.rules.base import Context, Grid, Guidance, Hit, Role, Rule, Thresholds
from trainaudit.series.roles import adversarial, norm, validation
from trainaudit.series.stats import FloatArray, robust_z, sliding_max, trailing_median_mad_at, trailing_median_mad_upto

TRAINING_ROLES = ("loss", "grad_norm", "lr", "loss_scale", "val_loss")
_ERROR_RE = re.compile(r"loss|(?:^|_)(?:r?mse|mae|rmsle|nll|cost|err(?:or)?|train|training)(?:_|$)")


class NonFiniteMetric(Rule):
    """Detects NaN or Inf in a training metric (loss, grad norm, learning rate, validation loss),
    Megatron's *omitted* loss field (Megatron prints no ``lm loss`` when it is NaN/Inf), HF's
    hidden NaN (``grad_norm: nan`` while ``loss`` still prints a finite number, often 0.0), and
    framework NaN checks (Megatron's "found NaN in local grad norm", autograd anomaly mode,
    Keras TerminateOnNaN).

    Why: a NaN poisons the weights; every step after it is wasted, and with fp32/bf16 there is
    no automatic recovery.

    Fix: find what happened just before (grad-norm spike, lr jump, bad batch); lower the lr or
    lengthen warm-up, clip gradients (``max_grad_norm``/``clip_grad``), use bf16 instead of
    fp16, skip batches with non-finite loss, resume from the last checkpoint before the NaN.

    Example: ``iteration 3385/ 8000 | ... | loss scale: 1.0 | grad norm: nan |`` (no lm loss).

    Other losses are read too when they turn non-finite before the training loss does, or when
    there is none: a loss component, an error the loop prints as its objective (``RMSE: nan``), a
    GAN player's loss (CycleGAN's ``D_A: nan G_A: nan``); with no loss at all, a value without a name (a
    headerless table's column) that was finite three times and is non-finite at its last three points or more.

    A grad norm that is non-finite on single logged steps only, or on the first steps in a row (a
    tenth of them at most, a finite norm after them, the loss finite throughout) is fp16's dynamic loss scaler skipping an
    update, not a NaN in the weights.

    A validation loss at +Inf at every evaluation while a word or character error rate falls by a quarter
    or more is CTC's loss on utterances too short for their transcripts: the model improves.

    A best-so-far tracker (``best_valid_loss``) starts at +Inf by construction (icefall prints it so in
    its parameters before the first evaluation): its leading infinities are not values.

    Thresholds: ``min_nonfinite`` non-finite values needed (default 1).
    """

    id = "TA101"
    name = "non-finite-metric"
    category = Category.NAN_INF
    severity = Severity.CRITICAL
    also = (Severity.HIGH,)
    guidance = Guidance(
        fix="Find what happened just before (grad-norm spike, lr jump, bad batch); lower the peak learning rate or "
            "lengthen warm-up, clip gradients (e.g. max norm 1.0), prefer bf16 over fp16, and resume from the last "
            "checkpoint before the first bad step.",
        impact="No non-finite loss or grad norm; training continues past the first bad step.",
        verify="Re-run from the checkpoint before the first bad step and check that loss and grad norm stay finite "
               "beyond it.")

    class Params(Thresholds):
        min_nonfinite: int = 1

    def check(self, ctx: Context) -> list[Hit]:
        hits: list[Hit] = []
        seen: set[str] = set()
        checks = ctx.events(EventKind.NAN_CHECK)
        # a log without a step counter numbers its records; a NaN check naming its iteration
        # ("Loss became infinite or NaN at iteration=2137!") gives the real step
        named = min((e.step for e in checks if e.step is not None and e.data.get("known")), default=None) \
            if ctx.run.meta.get("steps_are_line_counts") else None
        for role in TRAINING_ROLES:
            s = ctx.series(role)
            if s is None or s.name in seen:
                continue
            seen.add(s.name)
            h = self._series_hit(ctx, role, s, named, checks)
            if h is not None:
                hits.append(h)
        # another loss (a GAN's other player, a loss component) non-finite before the training
        # roles were: the first bad step is its (it only moves the step of a finding already made)
        # (or the only one: a component's loss, "train_mel_loss_before = nan", while the loss the roles
        # picked is still finite)
        first = min((h.first_bad_step for h in hits if h.first_bad_step is not None), default=None)
        # (or an error the loop prints as its objective: DeepRecommender's "RMSE: nan", qlib's "train nan";
        # or a GAN player's loss: CycleGAN's "D_A: nan G_A: nan")
        # (or, with no loss at all, a value of unknown name that turns non-finite and stays so: a headerless
        # table's column, HTSL's Q values going from -1e19 to NaN)
        lossless = ctx.roles.get(ctx.run, "loss") is None
        others = [h for n, x in ctx.run.series.items() if n not in seen and "@rank" not in n
                  and (_ERROR_RE.search(norm(n)) or adversarial(n) or (lossless and _unnamed_turned_nonfinite(n, x)))
                  and "scale" not in norm(n) and not validation(n)
                  if (h := self._series_hit(ctx, "other", x, named, checks)) is not None and h.first_bad_step is not None
                  and (first is None or h.first_bad_step < first)]
        if others:
            hits.insert(0, min(others, key=lambda h: h.first_bad_step or 0))
        if checks:
            e = checks[0]
            first = min((h.first_bad_step for h in hits if h.first_bad_step is not None), default=None)
            if first is None or (e.step is not None and e.step < first):
                meaning = e.data.get("meaning")
                h = self.hit(f"a NaN/Inf check fired: {e.message}" + (f" ({meaning})" if meaning else ""), 0.9,
                             metric=None, first_bad_step=e.step, last_step=e.step)
                h.ev("check", e, "NaN check message")
                hits.append(h)
        stops = [e for e in checks if e.data.get("fatal")]
        if hits and stops:
            hits[0].fatal = True  # the framework stopped the run on it
        return hits

    def _series_hit(self, ctx: Context, role: str, s: Series, named: int | None, checks: list[Event]) -> Hit | None:
        """The finding on ``s`` (playing ``role``) when it holds non-finite values."""
        bad = np.flatnonzero(~np.isfinite(s.values))
        if role == "val_loss" and bool(np.all(np.isposinf(s.values))) and _error_rate_falls(ctx):
            return None  # CTC's loss on an evaluation set holding utterances too short for their transcripts
        if _BEST_SO_FAR.search(norm(s.name)):
            start = np.flatnonzero(~np.isinf(s.values))  # its leading infinities are the tracker's start, not values
            bad = bad[bad >= (int(start[0]) if start.size else len(s))]
        if bad.size < self.p.min_nonfinite:
            return None
        if role == "grad_norm" and (_skipped_updates(s, bad, ctx.series("loss")) or
                                    _scaler_said_skipped(s, bad, ctx.series("loss"), [
                                        e for e in ctx.events(EventKind.LOSS_SCALE)
                                        if e.source == ctx.run.source_path(s, int(bad[0]))])):
            return None
        i = int(bad[0])
        v = float(s.values[i])
        what = "NaN" if math.isnan(v) else ("+Inf" if v > 0 else "-Inf")
        dump = _dumped_by_check(ctx, s, i, checks) if named is None else None
        first_step = named if named is not None else int(dump.data["named_step"]) if dump is not None else int(s.steps[i])
        n, n_bad = ctx.run.read_counts(s.name) or (len(s), int(bad.size))  # a thinned series: what was read
        msg = f"{s.name} is {what} from step {first_step} ({n_bad} of {n} logged values non-finite)"
        if role == "grad_norm":
            loss = ctx.series("loss")
            lv = loss.value_at(int(s.steps[i])) if loss is not None else None
            if lv is not None and math.isfinite(lv):
                msg += f"; the loss still prints {lv:g} at that step, so the NaN is hidden from the loss curve"
        missing = [e for e in ctx.events(EventKind.MISSING_METRIC)
                   if e.step == int(s.steps[i]) and s.name in e.data.get("metrics", [s.name])] if role == "loss" else []
        if missing:
            msg += " (the loss field is absent from the log line: Megatron omits a NaN/Inf loss)"
        # (the log must show the start of training: a paste that begins after the NaN says nothing)
        from_start = role == "loss" and bad.size == len(s) and len(s) >= 2 and int(s.steps[0]) <= 1
        if from_start:
            # never a finite value, from the first step on: no update has diverged yet, the inputs,
            # labels or the loss itself are non-finite; the category stays nan_inf, the
            # symptom the user sees, and the message says where to look
            msg += "; it is non-finite from the very first logged step: the data or the loss, not the optimisation"
        h = self.hit(msg, 0.97 if role != "val_loss" else 0.9, metric=s.name, first_bad_step=first_step,
                     last_step=named if named is not None else max(first_step, int(s.steps[bad[-1]])),
                     severity="critical" if role != "val_loss" else "high")
        h.point("bad", s, i, f"first non-finite {s.name} ({what}) at step {int(s.steps[i])}")
        if named is not None:  # the step the message gives is the one this check names: quote it
            h.ev("named", next(e for e in checks if e.step == named and e.data.get("known")),
                 "the NaN check that names the iteration")
        elif dump is not None:
            h.ev("named", dump, "the NaN check that names the iteration; the non-finite value is printed with it")
        if i > 0:
            h.point("prev", s, i - 1, f"last value of {s.name} before it, step {int(s.steps[i - 1])}")
        lo = max(0, i - 5)
        hi = min(len(s), i + 5)
        h.point("excerpt", s, i, f"{s.name} around the first non-finite value", indices=np.arange(lo, hi))
        h.calc("n_bad", f"number of non-finite {s.name} values in the excerpt", "len({excerpt}) - sum(isfinite({excerpt}))",
               unit="count")
        if missing:
            h.ev("missing", missing[0], "log line without the loss field")
        return h


# a best-so-far tracker ("best_valid_loss"): it starts at +-inf by construction (icefall's get_params():
# best_train_loss=float("inf"); Keras' ModelCheckpoint and EarlyStopping: best = np.inf), which its first
# logged values show before any evaluation has run
_BEST_SO_FAR = re.compile(r"(?:^|_)best(?:_|$)")


# a word or character error rate (HF's "Wer", "eval_cer", ESPnet's "cer_ctc"): evaluated, lower is better
_ERROR_RATE_NAME = re.compile(r"(?:^|_)(?:wer|cer)(?:_|$)")


def _error_rate_falls(ctx: Context) -> bool:
    """Whether a word or character error rate of 3 points or more ends a quarter or more below where it began:
    the evaluated model improves. A validation loss at +Inf at every evaluation beside it is CTC's loss on
    samples whose input is too short for their target (torch.nn.CTCLoss: "Infinite losses mainly occur when
    the inputs are too short to be aligned to the targets"), not a model gone non-finite."""
    for name, series in ctx.run.series.items():
        f = series.finite()
        if "@rank" not in name and _ERROR_RATE_NAME.search(norm(name)) and len(f) >= 3 and float(f.values[0]) > 0 \
                and float(f.values[-1]) <= 0.75 * float(f.values[0]):
            return True
    return False


def _dumped_by_check(ctx: Context, s: Series, i: int, checks: list[Event]) -> Event | None:
    """The NaN check naming a later iteration whose dump ``s``'s non-finite value at ``i`` is.
    Detectron2 raises "Loss became infinite or NaN at iteration=3803!" and prints ``loss_dict = {...}`` on
    the next line; that line has no counter of its own, so the reader gives it the last one printed
    (an earlier iteration)."""
    src, line, step = ctx.run.source_path(s, i), int(s.lines[i]), int(s.steps[i])
    return next((e for e in checks if e.data.get("known") and "named_step" in e.data
                 and e.source == src and 0 < line - e.line <= 2 and int(e.data["named_step"]) > step), None)


def _unnamed_turned_nonfinite(name: str, s: Series) -> bool:
    """A value without a name that was finite three times or more and is non-finite from some point to its
    last, three times or more: no such column of a healthy run stops being a number for good."""
    if not unnamed(name):
        return False
    ok = np.isfinite(s.values)
    tail = len(ok) - int(np.flatnonzero(ok)[-1]) - 1 if ok.any() else 0
    return tail >= 3 and int(ok.sum()) >= 3


def _skipped_updates(gn: Series, bad: np.ndarray, loss: Series | None) -> bool:
    """Whether the non-finite grad norms are updates a dynamic loss scaler skipped: each one alone
    (a finite norm logged right after it), a tenth of the points at most, and the loss finite
    throughout. GradScaler skips the optimizer step whose gradients hold an Inf or NaN and lowers
    the scale (https://pytorch.org/docs/stable/amp.html#gradient-scaling), so the weights stay
    finite; a NaN that reached them would make every later value non-finite."""
    if loss is None or not len(loss) or not np.all(np.isfinite(loss.values)):
        return False
    lead = int(np.sum(bad == np.arange(bad.size)))  # indices 0, 1, 2, ...: ``bad`` rises, so only a prefix
    # (the first steps in a row are the scaler finding its scale: it starts at 2**16 and halves on each overflow)
    return bad.size <= 0.1 * len(gn) and int(bad[-1]) < len(gn) - 1 and bool(np.all(np.diff(bad[lead:]) > 1))


def _scaler_said_skipped(gn: Series, bad: np.ndarray, loss: Series | None, scale: list[Event]) -> bool:
    """Whether the loss scaler (``scale``: its events in the grad norm's file) said, on the lines right after each non-finite grad norm, that it
    skipped that update and lowered the scale (MLPerf GNMT's "Gradient norm: inf" then "Skipped
    batch, new scale: 2048.0"), the loss finite throughout: the weights never saw the Inf."""
    if loss is not None and not np.all(np.isfinite(loss.values)):
        return False
    lines = sorted(e.line for e in scale)
    if not lines:
        return False
    at = np.asarray(lines)
    after = gn.lines[bad]
    j = np.searchsorted(at, after, side="right")  # the first scaler line after each bad point
    return bool(np.all((j < at.size) & (at[np.minimum(j, at.size - 1)] - after <= 3)))


def spike_history(n: int, window: int, max_window: int) -> tuple[int, int]:
    """How many points of a series of ``n`` a spike is judged against: its trailing median's window
    and the window of earlier excursions (at most a third of the series each, at least 3)."""
    w = max(3, min(window, n // 3))
    return w, max(w, min(max_window, n // 3))


def _excursion_bounds(x: FloatArray, w: int) -> tuple[FloatArray, FloatArray]:
    """Bounds on each point's excursion above its own trailing median (``trailing_median_mad_upto``): above the highest
    and above the lowest of the points before it (the median lies between them); exact where fewer than
    ``w`` points come before, -inf before the third point."""
    lower = np.full(x.size, -np.inf)
    upper = np.full(x.size, -np.inf)
    head = np.arange(3, min(w, x.size), dtype=np.intp)
    if head.size:
        lower[head] = upper[head] = x[head] - trailing_median_mad_upto(x, w, head)[0]
    if x.size > w:
        lower[w:] = x[w:] - sliding_max(x[:-1], w)
        upper[w:] = x[w:] + sliding_max(-x[:-1], w)
    return lower, upper


def spike_mask(s: Series, window: int, z_thr: float, rel_thr: float, min_history: int, max_window: int = 100,
               min_excess: float = 0.1, over_max: float = 3.0, early: bool = False,
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Points far above what came before: robust z over the trailing median/MAD of ``window``
    points, ``rel_thr`` above that median, *and* an excursion above the median ``over_max`` times
    the largest excursion of the previous ``max_window`` points. The last condition keeps the heavy right tail of small-batch losses
    (a batch with one hard example) from counting: a spike must exceed the recent extremes too.
    Each earlier point's excursion is taken above its own trailing median where the quick bound
    (above the current median) fails: on a falling loss the earlier points stand high because the
    loss was higher then, not because it is noisy.
    With ``early``, points with ``min_history`` to ``max_window`` points before them are judged too,
    against what there is (the caller must judge them against the points after them as well).
    Only points above every one of the previous ``max_window`` are spikes (with ``over_max`` >= 1).
    Returns (spike indices, trailing median, robust z); the median and z are computed only at those
    points (NaN elsewhere): the median of the trailing window is at most their maximum, so
    ``x - med > over_max * (prev_max - med)`` holds nowhere else (rounding keeps that order: a difference
    and a product by a factor >= 1 round monotonically)."""
    x = s.values
    w, mw = spike_history(x.size, window, max_window)
    lo = max(3, min_history) if early else max(min_history, w)
    prev_max = np.full(x.size, np.inf)
    if early and x.size > lo:
        prev_max[lo:mw] = np.maximum.accumulate(x[:mw - 1])[lo - 1:]
    if x.size > mw:
        prev_max[mw:] = sliding_max(x[:-1], mw)
    at = np.arange(lo, x.size) if over_max < 1 else np.flatnonzero(x > prev_max)
    at = at[at >= lo]
    med = np.full(x.size, np.nan)
    dev = np.full(x.size, np.nan)
    med[at], dev[at] = trailing_median_mad_upto(x, w, at)
    z = robust_z(x, med, dev)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        rel = (x - med) / np.abs(med)
    # scale: a jump must also be a real fraction of how far the metric has come down, so the
    # relative noise of a loss converged near 0 is not a spike (same rule for loss 10 and 0.01);
    # from its highest of the first points: a fine-tune's loss may fall most of the way in them
    first = float(np.max(x[:min(5, x.size)]))
    came_down = np.maximum(first - med, 0.0)
    base = (z > z_thr) & (rel > rel_thr) & (x - med >= min_excess * came_down)
    mask = base & (x - med > over_max * (prev_max - med))
    recheck = np.flatnonzero(base & ~mask)
    if recheck.size:
        lower, upper = _excursion_bounds(x, w)
        exact: list[int] = []
        for i in recheck:
            lo_i = max(3, int(i) - mw)
            bar = float(x[i] - med[i]) / over_max
            if np.max(lower[lo_i:i], initial=0.0) >= bar:
                continue
            if np.max(upper[lo_i:i], initial=0.0) < bar:
                mask[i] = True
            else:
                exact.append(int(i))
        if exact:  # the bounds did not decide: the excursions themselves, all in one pass
            j = np.unique(np.concatenate([np.arange(max(3, k - mw), k, dtype=np.intp) for k in exact]))
            excursion = np.full(x.size, -np.inf)
            excursion[j] = x[j] - trailing_median_mad_upto(x, w, j)[0]
            for k in exact:
                mask[k] = float(np.max(excursion[max(3, k - mw):k], initial=0.0)) < float(x[k] - med[k]) / over_max
    return np.flatnonzero(mask), med, z


class LossSpike(Rule):
    """Detects loss spikes: a logged training loss far above the median of the points before it
    (robust z-score on the rolling median/MAD, and a relative jump), that comes back down. A
    rise that does *not* recover is divergence (TA201), not a spike.

    Why: spikes waste compute and often precede divergence or NaN; a spike at one step usually
    means a bad batch or an optimizer instability (grad-norm spike, lr too high for the batch).

    Fix: clip gradients, lower the peak lr or lengthen warm-up, skip/inspect the batch at that
    step, for LLMs consider z-loss / QK-norm; llm-foundry kills runs on a 2x spike.

    Example: loss 2.1, 2.0, 2.0, **9.7**, 2.3, 2.1 (spike at the 4th logged step).

    Thresholds: ``window`` points of history (10, as Lightning's SpikeDetection), ``z`` robust
    z-score (8), ``rel`` relative jump above the median (0.5 = 1.5x), ``over_max`` multiple of
    the largest excursion above the median in the previous ``max_window`` points (3.0 and 100;
    small-batch losses have heavy tails, an LLM loss barely moves, both are handled), ``min_excess`` fraction of how far the
    loss has come down that the jump must reach (0.1), ``recover`` points within which the loss
    must return below ``median*(1+rel/2)`` to count as a spike (20). With fewer than
    ``min_history`` + 3 points, a spike is one point ``short_jump`` + 1 times its larger neighbour
    (3x) whose neighbours agree within ``rel``; in so short a paste, one or two evaluations of the
    validation loss so far above the evaluations on both sides count too, when they stand above every
    training loss the paste shows. A jump with ``min_history`` points or more before it counts, against the
    points there are; with fewer than ``window`` (or ``max_window``) points before it, it must also stand
    ``over_max`` times as far above its median as any of the ``max_window`` points after it does above
    theirs: so short a history does not show the noise. Any jump must also stand ``over_max`` times as far
    above its median as every earlier point of the run did above its own: a small batch's loss that jumped
    as far before, further back than ``max_window``, has a heavy tail, not a spike.
    """

    id = "TA102"
    name = "loss-spike"
    category = Category.LOSS_SPIKE
    severity = Severity.MEDIUM
    also = (Severity.LOW,)
    guidance = Guidance(
        fix="Clip gradients, lower the peak lr, inspect or skip the batch at the spike step; for LLMs consider "
            "z-loss / QK-norm.",
        impact="No spike at that step; less wasted compute and lower risk of divergence.",
        verify="Re-run over the spike step (same data order) and check the loss stays within its rolling band.")

    class Params(Thresholds):
        window: int = 10
        z: float = 8.0
        rel: float = 0.5
        recover: int = 20
        min_history: int = 5
        over_max: float = 3.0
        max_window: int = 100
        min_excess: float = 0.1
        short_jump: float = 2.0

    grid: ClassVar[Grid] = {"z": (5.0, 6.0, 8.0, 10.0, 12.0), "short_jump": (1.5, 2.0, 3.0)}

    def check(self, ctx: Context) -> list[Hit]:
        s = ctx.series("loss", finite=True, min_points=3)
        if s is None:
            return []
        if len(s) < self.p.min_history + 3:
            return self._short(s) or self._short_validation(ctx)
        idx, med, z = spike_mask(s, self.p.window, self.p.z, self.p.rel, self.p.min_history, self.p.max_window,
                                 self.p.min_excess, self.p.over_max, early=True)
        if idx.size == 0:
            return []
        x = s.values
        w, mw = spike_history(x.size, self.p.window, self.p.max_window)
        bounds = _excursion_bounds(x, w)  # of each point's excursion above its own median (see _within_earlier_tail)
        spikes: list[int] = []
        for i in idx:
            if spikes and i - spikes[-1] <= 1:
                continue  # one spike spanning consecutive points
            after = x[i + 1: i + 1 + self.p.recover]
            back = med[i] + max(abs(med[i]) * self.p.rel / 2, 0.1 * (x[i] - med[i]))  # half the jump, or 90% of a huge one
            if after.size == 0 or not np.any(after <= back):
                continue  # did not recover (or the log ends on it): divergence/NaN rules own it
            if i < max(self.p.window, mw) and self._within_later_noise(x, med, int(i)):
                continue
            if self._within_earlier_tail(x, med, int(i), bounds):
                continue
            spikes.append(int(i))
        if not spikes:
            return []
        i = spikes[0]
        worst = max(spikes, key=lambda k: float(x[k]) / max(abs(float(med[k])), 1e-300))
        excess = float((x[worst] - med[worst]) / max(abs(med[worst]), 1e-300))
        sev = "medium" if len(spikes) >= 3 or excess >= 2 else "low"
        msg = (f"{s.name} spiked at step {int(s.steps[i])}: {x[i]:.4g} vs a median of {med[i]:.4g} over the previous "
               f"points ({x[i] / max(abs(med[i]), 1e-300):.2f}x), then recovered; {len(spikes)} spike(s) in total")
        h = self.hit(msg, min(0.95, 0.6 + 0.05 * len(spikes) + 0.02 * min(float(z[i]), 10)), metric=s.name,
                     first_bad_step=int(s.steps[i]), last_step=int(s.steps[spikes[-1]]), severity=sev,
                     data={"spike_steps": [int(s.steps[k]) for k in spikes]})
        lo = max(0, i - w)  # an early spike has fewer than w points before it
        h.point("base", s, i - 1, f"{s.name} over the {i - lo} points before the spike", indices=np.arange(lo, i))
        h.point("spike", s, i, f"{s.name} at the spike, step {int(s.steps[i])}")
        h.calc("jump", "relative jump of the loss over the median of the preceding points",
               "({spike} - median({base})) / abs(median({base}))", unit="ratio")
        return [h]

    def _within_later_noise(self, x: np.ndarray, med: np.ndarray, i: int) -> bool:
        """A jump with fewer than ``window`` points before it is judged against the ``max_window`` points after
        it too: so short a history does not show the noise, and a per-batch loss that later jumps a third as
        far above its median as this one was only noisy (a diffusion model's loss at a random timestep)."""
        js = np.arange(i + 2, min(x.size, i + 2 + self.p.max_window), dtype=np.intp)
        later = x[js] - trailing_median_mad_upto(x, self.p.window, js)[0]
        return bool(later.size) and float(x[i] - med[i]) <= self.p.over_max * float(np.max(later))

    def _within_earlier_tail(self, x: np.ndarray, med: np.ndarray, i: int, bounds: tuple[FloatArray, FloatArray]) -> bool:
        """A jump no more than ``over_max`` times as far above its median as some point before the last
        ``max_window`` was above its own: the recent window is only part of the run's history, and a
        small batch's loss that jumped as far earlier in the run has a heavy tail, not a spike (a
        classifier converged near 0 whose hard batches reach 0.3 every few hundred steps)."""
        w, mw = spike_history(x.size, self.p.window, self.p.max_window)
        end = i - mw
        start = max(self.p.min_history, w)
        if end <= start:
            return False
        excess = float(x[i] - med[i]) / self.p.over_max
        lower, upper = bounds
        if float(np.max(lower[start:end])) >= excess:
            return True
        # a point can stand that far above its trailing median only if it stands that far above the
        # lowest point before it: the medians are computed at those points alone
        at = start + np.flatnonzero(upper[start:end] >= excess)
        if at.size == 0:
            return False
        m, _ = trailing_median_mad_at(x, w, at)
        return bool(np.any(x[at] - m >= excess))

    def _short(self, s: Series, width: int = 1) -> list[Hit]:
        """Few points: a point (or up to ``width`` in a row) far above the points on both sides of it, which
        agree with each other: the loss comes back from it."""
        x = s.values
        for i in range(1, len(x) - 1):
            for w in range(1, width + 1):
                k = i + w  # the point after the spike
                if k >= len(x):
                    break
                level = max(abs(x[i - 1]), abs(x[k]), 1e-12)
                jump = (float(np.min(x[i:k])) - max(x[i - 1], x[k])) / level
                if jump >= self.p.short_jump and abs(x[k] - x[i - 1]) <= self.p.rel * level:
                    top = i + int(np.argmax(x[i:k]))
                    msg = (f"{s.name} spikes at step {int(s.steps[i])}: {x[top]:.4g} between {x[i - 1]:.4g} and "
                           f"{x[k]:.4g} ({(x[top] - max(x[i - 1], x[k])) / level + 1:.3g}x its neighbours), then "
                           "recovers (few points logged)")
                    h = self.hit(msg, 0.65, metric=s.name, first_bad_step=int(s.steps[i]), last_step=int(s.steps[k - 1]),
                                 data={"spike_steps": [int(t) for t in s.steps[i:k]]})
                    h.point("before", s, i - 1, f"{s.name} before the spike")
                    h.point("spike", s, top, f"{s.name} at the spike")
                    h.point("after", s, k, f"{s.name} after the spike")
                    h.calc("jump", "spike over the larger neighbour", "{spike} / max({before}, {after})", unit="x")
                    return [h]
        return []

    def _short_validation(self, ctx: Context) -> list[Hit]:
        """A short paste's validation loss: one or two evaluations far above the evaluations on both sides
        of them, which agree with each other (an evaluation averages a whole set: a jump there is the
        weights', not a batch's)."""
        v = ctx.series("val_loss", finite=True, min_points=3)
        if v is None or len(v) >= self.p.min_history + 3:
            return []
        hits = self._short(v, width=2)
        t = ctx.series("loss", finite=True)
        # and above any training loss of the paste: a validation loss near 0 moves by multiples on a small
        # set (0.005 -> 0.03), a model knocked off its minimum evaluates worse than it ever trained
        if hits and t is not None and float(np.max(v.values[np.isin(v.steps, hits[0].data["spike_steps"])])) <= \
                float(np.max(t.values)):
            return []
        return hits


class GradNormSpike(Rule):
    """Detects grad-norm spikes: a logged gradient norm far above its trailing median (robust
    z-score and a ratio), and how many steps it leads a loss spike, divergence or NaN.

    Why: in most loss blow-ups the gradient norm jumps first; the lead tells you the instability
    starts in the optimizer step, not in the data or the loss itself. Alone, a short grad-norm
    spike that the loss ignores is common and harmless (severity info).

    Fix: gradient clipping at a norm near the typical value; lower lr; for Adam, a larger eps or
    lower beta2 reduces update spikes after rare large gradients.

    Example: grad norm 1.4, 1.3, 1.6, **48.2**, then the loss jumps one step later.

    Thresholds: ``window`` (10), ``z`` (8), ``ratio`` minimum multiple of the median (3),
    ``lead_window`` logged points after the spike in which a loss spike / NaN counts as its
    consequence (10).
    """

    id = "TA103"
    name = "grad-norm-spike"
    category = Category.GRAD_EXPLOSION
    severity = Severity.LOW
    also = (Severity.INFO, Severity.MEDIUM)
    role = Role.PRECURSOR
    guidance = Guidance(
        fix="Clip the gradient norm near its typical value and lower the learning rate; for Adam, a larger eps or "
            "a lower beta2 damps update spikes after rare large gradients.",
        impact="No grad-norm spike ahead of the loss blow-up.",
        verify="Log the grad norm and check it stays within a few times its median.")

    class Params(Thresholds):
        window: int = 10
        z: float = 8.0
        ratio: float = 3.0
        lead_window: int = 10
        min_history: int = 5

    grid: ClassVar[Grid] = {"z": (5.0, 8.0, 12.0), "ratio": (2.0, 3.0, 5.0)}

    def check(self, ctx: Context) -> list[Hit]:
        g = ctx.series("grad_norm", finite=True, min_points=self.p.min_history + 3)
        if g is None:
            return []
        idx, med, _ = spike_mask(g, self.p.window, self.p.z, self.p.ratio - 1, self.p.min_history)
        if idx.size == 0:
            return []
        i = int(idx[0])
        step = int(g.steps[i])
        # did the loss react within lead_window logged points (a loss spike by TA102's test, or NaN)?
        loss = ctx.series("loss")
        consequence = None
        if loss is not None and len(loss) > 3:
            j0 = int(np.searchsorted(loss.steps, step))
            fin = loss.finite()
            lidx, _, _ = spike_mask(fin, 10, 8.0, 0.5, 5) if len(fin) > 8 else (np.array([], dtype=np.int64), None, None)
            spike_steps = set(fin.steps[lidx].tolist())
            for j in range(j0, min(len(loss), j0 + self.p.lead_window)):
                if not math.isfinite(float(loss.values[j])) or int(loss.steps[j]) in spike_steps:
                    consequence = j
                    break
        lead = None if consequence is None else int(loss.steps[consequence]) - step  # type: ignore[union-attr]
        sev = "medium" if consequence is not None else "info"
        msg = f"{g.name} spiked at step {step}: {g.values[i]:.4g} vs a median of {med[i]:.4g} ({g.values[i] / med[i]:.1f}x)"
        if lead is not None:
            msg += f"; the loss reacted {lead} step(s) later" if lead > 0 else "; the loss reacted at the same step"
        h = self.hit(msg, 0.8 if consequence is not None else 0.5, metric=g.name, first_bad_step=step,
                     last_step=int(g.steps[idx[-1]]), severity=sev,
                     cause=None if lead is None else f"the gradient norm spiked first ({msg})",
                     data={"lead_steps": lead, "n_spikes": int(idx.size)})
        w = max(3, min(self.p.window, len(g) // 3))
        h.point("base", g, i - 1, f"{g.name} over the {w} points before the spike", indices=np.arange(i - w, i))
        h.point("spike", g, i, f"{g.name} at the spike, step {step}")
        h.calc("ratio", "grad-norm spike as a multiple of the preceding median", "{spike} / median({base})", unit="x")
        if consequence is not None and loss is not None:
            h.point("loss_after", loss, consequence, f"{loss.name} when it reacted, step {int(loss.steps[consequence])}")
        return [h]


# an exception that is the fp16 scaler giving up (GradScaler / DeepSpeed / fairseq wordings)
MIN_SCALE_RE = re.compile(r"minimum loss scale reached|loss scale already at minimum|cannot decrease scale anymore"
                          r"|grad_scale is too small", re.I)
# a scale halved past the smallest double reaches 0, and the scaler's 1 / scale raises (apex.amp's
# "reducing loss scale to 4.3e-311" ... "ZeroDivisionError: float division by zero",
# https://github.com/facebookresearch/WSL-Images/issues/9)
ZERO_DIVISION_RE = re.compile(r"ZeroDivisionError: float division by zero")
# a number, not the full stop after it ("... reducing loss scale to 256.0.")
_SCALE_RE = re.compile(r"(?:reducing to|setting loss scale to:?|loss scale(?: to)?:?)\s*(\d+(?:\.\d*)?(?:[eE][+-]?\d+)?)", re.I)


# Two lines that differ only in their ASCII digits give _SCALE_RE's match at the same span: no part of
# the pattern but \d tells one ASCII digit from another (and \d takes them all), so its search runs
# once per line with the digits zeroed (a run of 75 000 overflow lines has a few hundred of those).
_ZERO_DIGITS = bytes.maketrans(b"123456789", b"000000000")
_SPAN_MEMO = 4096  # distinct zeroed lines remembered per call


def _scale_text(raw: str, memo: dict[bytes, tuple[int, int] | None]) -> str | None:
    """``_SCALE_RE.search(raw).group(1)``, or None."""
    key = raw.encode("utf-8", "surrogatepass").translate(_ZERO_DIGITS)
    if key in memo:
        span = memo[key]
    else:
        m = _SCALE_RE.search(raw)
        span = m.span(1) if m else None
        if len(memo) < _SPAN_MEMO:
            memo[key] = span
    return None if span is None else raw[span[0]:span[1]]


def _scale_from_events(events: list[Event]) -> list[tuple[Event, float]]:
    out = []
    memo: dict[bytes, tuple[int, int] | None] = {}
    for e in events:
        # the scale after the event (DeepSpeed's reader: "new", the scale it was reduced to, or kept by
        # hysteresis), not the attempted one the raw line names first
        v = e.data.get("new_scale", e.data.get("scale", e.data.get("new")))
        if v is None:
            v = _scale_text(e.raw, memo)
            if v is None:
                m = _SCALE_RE.search(e.message)
                v = m.group(1) if m else None
        if v is not None:
            try:
                out.append((e, float(v)))
            except (TypeError, ValueError):
                continue
    return out


def _in_a_row(a: int | None, b: int | None) -> bool:
    """Two overflows on consecutive steps, or steps unknown: no step between them that the scale got
    through."""
    return a is None or b is None or b - a <= 1


def skipped_per_interval(sk: Series) -> np.ndarray:
    """Skipped iterations in each logged interval (the first point's interval is unknown for a
    counter since the start: it counts nothing).
    DeepSpeed's ``skipped=N`` counts since the start (it never decreases); Megatron's "number of
    skipped iterations" counts per log interval
    (https://github.com/NVIDIA/Megatron-LM/blob/main/megatron/training/training.py, training_log)."""
    y = sk.values
    cumulative = bool(np.all(np.diff(y) >= 0)) and not sk.name.lower().startswith("number of")
    return np.diff(y, prepend=y[0]) if cumulative else y


def skip_rate(sk: Series, start: int = 1) -> float:
    """The share of optimizer steps skipped from logged point ``start`` on: skipped iterations over
    the steps those points cover (a counter logged every 10 steps that grows by one per interval is
    one step in ten, the dynamic scaler probing upwards as designed, not every step)."""
    start = max(1, start)
    if len(sk) <= start:
        return 0.0
    span = float(sk.steps[-1] - sk.steps[start - 1])
    if span <= 0:
        return 0.0
    return min(1.0, float(np.sum(skipped_per_interval(sk)[start:])) / span)


class LossScaleCollapse(Rule):
    """Detects fp16 dynamic loss-scale collapse: the loss scale halving again and again down to
    its floor, skipped-iteration counters climbing, or the "minimum loss scale reached" exit of
    DeepSpeed / fairseq / Megatron. The halvings in a row at the start of fp16 training, down to a
    scale above ``chain_scale``, are the scaler calibrating itself and are ignored.

    Why: every overflow skips an optimizer step; when the scale hits its minimum, gradients
    overflow even unscaled, so the model has numerically diverged in fp16, and the run dies or
    trains on nothing.

    Fix: use bf16; lower lr / add warm-up; clip gradients; raise ``min_loss_scale`` only as a
    diagnostic; check for a layer producing huge activations (attention logits, unnormalised
    residual stream).

    Example: ``OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 2, reducing to 1`` followed
    by ``Current loss scale already at minimum - cannot decrease scale anymore. Exiting run.``

    Thresholds: ``dead_scale`` a scale at or below this is collapsed however few points show it (0.01:
    icefall's warning level; dynamic scalers start at 2**15 or 2**16 and settle far above it),
    ``min_scale`` a scale at or below this counts as collapsed (1.0) when it got there
    in ``floor_reductions`` (3) reductions or more, or the run says it is at its minimum,
    ``late_halvings`` halvings after the first ``calibration_frac`` of the run that count as a
    collapse even above the floor, when the scale ends as many halvings below its highest value
    since (8: a scale that halves and grows back is the scaler at work), ``skip_frac`` share of the optimizer steps in the last
    quarter that were skipped (0.5), ``chain`` overflows in a row, each reducing the scale again, down to
    ``chain_scale`` or less (5, 128: far below where a healthy fp16 run's scale settles; a short
    paste shows nothing else). The collapse starts at the first reduction of those that lead to its end
    without a pause of more than ``onset_gap`` logged points (5).

    Overflow lines that print no step (DeepSpeed's ``OVERFLOW! Rank 0 Skipping step``) are placed by the
    skipped counter of the step line after them (``step=90, skipped=7``): the last steps up to it.
    """

    id = "TA104"
    name = "loss-scale-collapse"
    category = Category.LOSS_SCALE_COLLAPSE
    severity = Severity.CRITICAL
    guidance = Guidance(
        fix="Switch to bf16, or keep fp16 with a lower lr, gradient clipping and a larger loss-scale window; find "
            "the layer that overflows (activation statistics).",
        impact="Loss scale stays stable; no skipped steps and no NaN.",
        verify="Log the loss scale / skipped-step counter and check it stops halving.")

    class Params(Thresholds):
        dead_scale: float = 0.01
        min_scale: float = 1.0
        late_halvings: int = 8
        calibration_frac: float = 0.1
        skip_frac: float = 0.5
        chain: int = 5
        chain_scale: float = 128.0
        floor_reductions: int = 3
        onset_gap: int = 5

    grid: ClassVar[Grid] = {"late_halvings": (4, 6, 8, 12, 16), "floor_reductions": (1, 2, 3, 4)}

    def check(self, ctx: Context) -> list[Hit]:
        mins = ctx.events(EventKind.LOSS_SCALE_MIN) + [
            e for e in ctx.events(EventKind.TRACEBACK, EventKind.ERROR) if MIN_SCALE_RE.search(e.message + " " + e.raw)]
        s = ctx.series("loss_scale", finite=True)
        overflow = _scale_from_events(ctx.events(EventKind.LOSS_SCALE))
        if len(overflow) >= 2 and all(b < a for (_, a), (_, b) in itertools.pairwise(overflow)):
            # overflows that only ever reduced the scale, then the division by a scale of 0
            last = overflow[-1][0].line
            mins += [e for e in ctx.events(EventKind.TRACEBACK, EventKind.ERROR)
                     if e.line > last and ZERO_DIVISION_RE.search(e.message + " " + e.raw)][:1]
        hits: list[Hit] = []
        if s is not None and len(s) >= 3:
            x = s.values
            dec = np.flatnonzero(x[1:] < x[:-1]) + 1
            if dec.size:
                # the final non-increasing stretch that ends the run
                inc = np.flatnonzero(x[1:] > x[:-1]) + 1
                start = int(inc[-1]) if inc.size else 0
                tail_dec = dec[dec >= start]
                calib_end = max(int(len(s) * self.p.calibration_frac), self._calibration(x) - 1)
                late = dec[dec > calib_end]
                # halvings that the scale grew back from are a healthy scaler at work (grow every N clean
                # steps, halve on the next overflow): late halvings count when the scale ends that many
                # halvings below its highest value since the calibration
                peak = float(np.max(x[calib_end:])) if calib_end < len(x) else float(x[-1])
                sunk = x[-1] <= 0 or peak >= x[-1] * 2.0 ** self.p.late_halvings
                # two halvings from a small initial scale (fairseq's --fp16-init-scale 4 -> 1) are the
                # scaler settling, not a collapse, unless the run says it is at its minimum
                floor_hit = x[-1] <= self.p.min_scale < float(np.max(x)) and (
                    bool(mins) or tail_dec.size >= self.p.floor_reductions)
                if tail_dec.size and (floor_hit or (late.size >= self.p.late_halvings and sunk)):
                    i = self._collapse_start(tail_dec)
                    msg = (f"{s.name} fell from {x[i - 1]:g} to {x[-1]:g} over {tail_dec.size} reductions from step "
                           f"{int(s.steps[i])} without recovering")
                    h = self.hit(msg, 0.9 if floor_hit or mins else 0.75, metric=s.name, first_bad_step=int(s.steps[i]),
                                 last_step=int(s.steps[-1]))
                    h.point("before", s, i - 1, f"{s.name} before the collapse")
                    h.point("last", s, len(s) - 1, f"last logged {s.name}")
                    h.calc("halvings", "number of halvings between the two values", "log({before} / {last}) / log(2)",
                           unit="halvings")
                    hits.append(h)
        if not hits and overflow:
            vals = np.array([v for _, v in overflow])
            # the overflows read: those kept, the first and the last of a long run, and those counted between
            n = len(overflow) + ctx.run.left_out(EventKind.LOSS_SCALE)
            calib = self._calibration(vals, [e.step for e, _ in overflow])
            n_late = n - max(int(n * self.p.calibration_frac), calib)
            settled = vals[calib - 1] if calib else vals[0]
            at_floor = vals[-1] <= self.p.min_scale and (
                n >= self.p.floor_reductions or bool(mins) or any(e.data.get("at_minimum") for e, _ in overflow))
            if at_floor or (n_late >= self.p.late_halvings and vals[-1] < settled / 2 ** self.p.late_halvings):
                e0 = overflow[0][0]
                k = next((j for j in range(len(vals)) if vals[j] <= vals[0] / 2), 0) if len(vals) > 1 else 0
                msg = (f"{n} fp16 overflow{'s' if n > 1 else ''} reduced the loss scale to {vals[-1]:g}"
                       + (" (the minimum)" if vals[-1] <= self.p.min_scale else ""))
                h = self.hit(msg, 0.85, metric="loss scale", first_bad_step=overflow[k][0].step,
                             last_step=overflow[-1][0].step)
                h.ev("first", e0, "first overflow / loss-scale reduction", value=float(vals[0]))
                h.ev("last", overflow[-1][0], "last loss-scale reduction", value=float(vals[-1]))
                hits.append(h)
        if not hits and len(overflow) >= self.p.chain:
            hits += self._chain(overflow)
        if not hits:
            hits += self._dead(s, overflow)
        sk = ctx.series("skipped", finite=True)
        if not hits and sk is not None and len(sk) >= 8:
            per = skipped_per_interval(sk)
            q = len(per) * 3 // 4
            frac = skip_rate(sk, q)
            if frac >= self.p.skip_frac:
                i = q + int(np.flatnonzero(per[q:] > 0)[0])
                h = self.hit(f"{sk.name}: {frac:.0%} of the optimizer steps in the last quarter of the log "
                             f"(steps {int(sk.steps[q - 1])} to {int(sk.steps[-1])}) were skipped (fp16 overflow "
                             "step after step)", 0.7, metric=sk.name, first_bad_step=int(sk.steps[i]),
                             last_step=int(sk.steps[-1]))
                h.point("first", sk, i, f"{sk.name} when skipping starts")
                h.point("tail", sk, len(sk) - 1, f"{sk.name} over the last quarter", indices=np.arange(q, len(sk)))
                hits.append(h)
        if hits and s is None:
            hits[0].needs.append("the loss scale logged every step")
        if mins:
            e = mins[0]
            if hits:
                hits[0].ev("min", e, "minimum loss scale reached")
                hits[0].fatal = True
                hits[0].confidence = max(hits[0].confidence, 0.95)
            else:
                what = ("the loss scale, reduced by overflow after overflow, fell to 0 and the run exits"
                        if ZERO_DIVISION_RE.search(e.message + " " + e.raw) else
                        "loss scale at its minimum and the run exits")
                h = self.hit(f"{what}: {e.message}", 0.9, metric="loss scale",
                             first_bad_step=ctx.step_of(e), last_step=ctx.step_of(e), fatal=True)
                h.ev("min", e, "minimum loss scale reached")
                hits.append(h)
        if hits and any(e.data.get("step_estimated") for e in ctx.events(EventKind.LOSS_SCALE)):
            self._at_logged_step(hits[0], sk)
        return hits

    def _collapse_start(self, dec: NDArray[np.int64]) -> int:
        """The first of the reductions ``dec`` (indices, in order) that lead to the end without a pause of
        more than ``onset_gap`` logged points: a one-off halving long before (65536 -> 32768 at step 100,
        steady for 300 steps, then halving every step from 410) is the scaler at work, not the onset."""
        k = dec.shape[0] - 1
        while k > 0 and int(dec[k] - dec[k - 1]) <= self.p.onset_gap:
            k -= 1
        return int(dec[k])

    @staticmethod
    def _at_logged_step(h: Hit, sk: Series | None) -> None:
        """An overflow line names no step (DeepSpeed's ``OVERFLOW! Rank 0 Skipping step``): its step was
        estimated, counting on from the step line before it. The step line after the overflows counts them
        (``step=120, skipped=4``; a skipped step is a step: deepspeed/runtime/engine.py ``_take_model_step``
        adds to ``skipped_steps`` on overflow, then to ``global_steps`` either way): in a collapse every step
        overflows, so they are the last steps up to that line (117 to 120)."""
        if sk is None or h.first_bad_step is None or len(sk) < 2:
            return
        grew = np.flatnonzero(np.diff(sk.values) > 0) + 1
        at = grew[sk.steps[grew] >= h.first_bad_step]
        if not at.size:
            return
        i = int(at[0])
        k = int(sk.values[i] - sk.values[i - 1])
        start = max(int(sk.steps[i]) - k + 1, int(sk.steps[i - 1]) + 1)
        h.first_bad_step = start
        h.message += (f" (the overflow lines print no step; {sk.name} grows by {k} to step {int(sk.steps[i])}: "
                      f"overflowing at every step, from step {start})")
        h.point("skipped_before", sk, i - 1, f"{sk.name} at the step line before the overflows")
        h.point("skipped", sk, i, f"{sk.name} at the first step line that counts the skipped steps")
        h.calc("skips", "steps skipped between the two step lines", "{skipped} - {skipped_before}", unit="steps")

    def _dead(self, s: Series | None, overflow: list[tuple[Event, float]]) -> list[Hit]:
        """A loss scale at or below ``dead_scale``, from any number of points: no dynamic scaler starts
        or settles there (torch.amp.GradScaler starts at 2**16; icefall's recipes warn below 0.01 and
        stop below 1e-5, https://github.com/k2-fsa/icefall/blob/master/egs/librispeech/ASR/zipformer/train.py),
        so it got there by overflowing step after step."""
        dead = self.p.dead_scale
        if s is not None and (low := np.flatnonzero(s.values <= dead)).size:
            i = int(low[0])
            h = self.hit(f"{s.name} is {s.values[i]:g} at step {int(s.steps[i])}, at or below {dead:g}: the fp16 "
                         "loss scale has collapsed", 0.85, metric=s.name, first_bad_step=int(s.steps[i]),
                         last_step=int(s.steps[-1]))
            h.point("low", s, i, f"{s.name} when it is first at or below {dead:g}")
            return [h]
        low_ev = [(e, v) for e, v in overflow if v <= dead]
        if not low_ev:
            return []
        e, v = low_ev[0]
        h = self.hit(f"the fp16 loss scale is {v:g}, at or below {dead:g}: it has collapsed", 0.85, metric="loss scale",
                     first_bad_step=e.step, last_step=low_ev[-1][0].step)
        h.ev("low", e, f"loss scale at or below {dead:g}", value=v)
        return [h]

    def _calibration(self, x: np.ndarray, steps: list[int | None] | None = None) -> int:
        """How many values the scaler's calibration takes at the start of ``x`` (0: none): the first
        value and the reductions in a row after it (on consecutive steps, where the overflows' steps
        are known), when they stop above ``chain_scale``. Dynamic loss scaling starts high (2**16 in
        torch.amp.GradScaler,
        https://pytorch.org/docs/stable/amp.html#torch.amp.GradScaler; 2**initial_scale_power in
        DeepSpeed, https://www.deepspeed.ai/docs/config-json/#fp16-training-options) and halves on
        every overflow until a scale fits: a healthy run's first steps."""
        k = 1
        while k < len(x) and x[k] < x[k - 1] and (not steps or _in_a_row(steps[k - 1], steps[k])):
            k += 1
        return k if len(x) and x[k - 1] > self.p.chain_scale else 0

    def _chain(self, overflow: list[tuple[Event, float]]) -> list[Hit]:
        """Overflow after overflow, each reducing the scale, to far below a healthy fp16 scale."""
        run = 1
        for (ea, a), (eb, b) in itertools.pairwise(overflow):
            run = run + 1 if b < a and _in_a_row(ea.step, eb.step) else 1
        if run < self.p.chain or overflow[-1][1] > self.p.chain_scale:
            return []
        first, last = overflow[-run], overflow[-1]
        h = self.hit(f"{run} fp16 overflows in a row reduced the loss scale from {first[1]:g} to {last[1]:g}, with no "
                     "step in between that kept it", 0.6, metric="loss scale", first_bad_step=first[0].step,
                     last_step=last[0].step)
        h.ev("first", first[0], "first of the overflows in a row", value=float(first[1]))
        h.ev("last", last[0], "last of the overflows in a row", value=float(last[1]))
        return [h]
