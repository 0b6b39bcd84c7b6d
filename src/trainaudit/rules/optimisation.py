"""TA2xx optimisation: divergence, not learning, exact-zero loss, exploding/vanishing gradients,
learning-rate schedule problems."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from trainaudit.answer.schema import Category, Severity
from trainaudit.model import STEP_TOTAL, EventKind, Series
from trainaudit.rules.base import Context, Grid, Guidance, Hit, Role, Rule, Thresholds
from trainaudit.series.roles import adversarial, norm, score, validation
from trainaudit.series.stats import downsample, first_equal_row, first_sustained, kendall_tau, mad, monotone_tail, \
    rolling_median

NOT_LEARNING = Guidance(
    fix="Check that parameters require grad and are in the optimizer, that the lr is > 0 after warm-up, and that "
        "labels match the inputs (inspect one batch).",
    impact="The loss falls below its initial value within the first few hundred steps.",
    verify="Overfit a single small batch: the loss must go near 0; then re-run.")


def _growing_tail(a: np.ndarray, factor: float) -> int:
    """How many of the last points of ``a`` are each ``factor`` times the one before it or more."""
    grows = (a[1:] >= factor * a[:-1]) & (a[:-1] > 0)
    return len(grows) - int(np.flatnonzero(~grows)[-1]) - 1 if not bool(np.all(grows)) else len(grows)


def _smooth(s: Series, max_points: int = 4000) -> tuple[np.ndarray, np.ndarray, int]:
    st, x = downsample(s.steps, s.values, max_points)
    # at least 3 points from 6 on: one lucky batch is not "the best loss so far"
    w = max(3 if x.size >= 6 else 1, min(51, x.size // 20))
    w += (w + 1) % 2  # odd
    return st, rolling_median(x, w), w


def _first_sustained_raw(x: np.ndarray, start: int, thr: float, ahead: int = 5) -> int:
    """First index >= start where x > thr and at least 80% of the next ``ahead`` points are too."""
    seg = x[start:]
    if seg.size == 0:
        return -1
    k = min(ahead, seg.size)
    above = seg > thr
    share = sliding_window_view(np.append(above, np.repeat(above[-1], k - 1)), k).mean(axis=1)
    idx = np.flatnonzero(above & (share >= 0.8))
    return start + int(idx[0]) if idx.size else -1


_NUMBER_RUN = re.compile(r"\d+")  # layer indices in a gradient's name: "layers.3.mlp" -> "layers.#.mlp"

# Caffe's SoftmaxWithLoss clamps the probability at FLT_MIN: -ln(FLT_MIN) = 87.3365 is the loss of a
# diverged network (caffe/src/caffe/layers/softmax_loss_layer.cpp)
CAFFE_CLAMP = 87.3365
# OpenNMT-py prints its perplexity as exp(min(loss per word, 100)) (onmt/utils/statistics.py, Statistics.ppl):
# exp(100) = 2.688e43 is a loss of 100 nats a word or more, a diverged network
ONMT_PPL_CLAMP = math.exp(100)

# Sizes whose ln is the loss of a uniform guess: class counts of common datasets (2..20, CIFAR-100,
# ImageNet-1k, the 3000 SwAV prototypes) and common tokenizer vocabularies (BERT 30522, LLaMA
# 32000, GPT-2 50257 and its padded 50304, LLaMA-3 128256, Qwen 151936).
COMMON_SIZES = (*range(2, 21), 100, 200, 1000, 3000, 30522, 32000, 32768, 50257, 50304, 65536, 128256, 151936)
# A self-supervised loss at ln(K) of its prototypes is a collapsed representation, not a classifier
# that does not learn: SwAV's default is 3000 prototypes (facebookresearch/swav, --nmb_prototypes).
SSL_SIZES = {3000: "SwAV's default number of prototypes"}


# the update by which the loss of a classifier that learns has left ln(C), the loss of a uniform guess
_LEAVES_UNIFORM_BY = 1000


# the mean return of a reinforcement-learning run's episodes: Stable-Baselines3's rollout/ep_rew_mean, RLlib's
# episode_reward_mean, a loop's "reward" or "return"
_RETURN = re.compile(r"(?:^|_)(?:ep_rew_mean|episode_reward(?:_mean)?|mean_reward|reward|return|ep_ret(?:urn)?)(?:_|$)")


def _return_grows(ctx: Context, at: int | None) -> bool:
    """Whether the run's episode return trends up (Kendall's tau 0.5 or more, 3 points or more) from step
    ``at`` on and ends above where it was there: a value or TD loss is the error on returns, and grows with
    them while the policy improves (Stable-Baselines3's PPO train/loss as ep_rew_mean climbs)."""
    if at is None:
        return False
    for name, series in ctx.run.series.items():
        if "@rank" in name or validation(name) or not _RETURN.search(norm(name)):
            continue
        f = series.finite()
        r = f.values[f.steps >= at]
        before = f.values[f.steps <= at]
        if r.size >= 3 and kendall_tau(r) >= 0.5 and before.size and float(r[-1]) > float(before[-1]):
            return True
    return False


def uniform_size(x: np.ndarray, tol: float) -> int | None:
    """The common size C whose ln(C) every value of ``x`` sits at (relative ``tol``), or None."""
    if x.size == 0 or not np.all(np.isfinite(x)):
        return None
    for c in COMMON_SIZES:
        u = math.log(c)
        if np.all(np.abs(x - u) <= tol * u):
            return c
    return None


def _head_tail(x: np.ndarray, frac: float = 0.1) -> tuple[float, float]:
    k = max(3, int(x.size * frac))
    return float(np.median(x[:k])), float(np.median(x[-k:]))


class Divergence(Rule):
    """Detects divergence: the training loss rises well above its own best so far and stays up
    (rolling median vs running minimum), as opposed to a spike that recovers (TA102).

    Why: the run is no longer learning; every further step is wasted compute and the weights
    may be unrecoverable without a restart from an earlier checkpoint.

    Fix: lower the learning rate (or undo an lr jump), lengthen warm-up, clip gradients, restart
    from the last checkpoint before the first bad step.

    Example: loss 4.1 -> 2.3 (best) -> 2.9 -> 3.8 -> 4.4 and never comes back.

    A short paste (3 to ``min_points`` points) counts when the loss ends ``short_rise`` times
    above its lowest point and every point after the rise stays there (at least 2, twice as high
    when there are only 2 unless they climb to three times the lowest; a paste that starts at its
    lowest point must triple), when it rises at every one of 5 or more points to
    ``short_rise`` times where it started, or when it is
    pinned at 87.3365, Caffe's clamp of a softmax loss whose probabilities underflowed
    (-ln(FLT_MIN), caffe/src/caffe/layers/softmax_loss_layer.cpp). So does a training perplexity
    pinned at exp(100) = 2.688e43, OpenNMT-py's clamp of a loss of 100 nats a word or more
    (onmt/utils/statistics.py, ``Statistics.ppl``), at any length.

    A short paste whose loss triples and stays there, ``jump_floor`` (1.0) or more above its lowest,
    counts from its second point: a loss near 0 jumps by multiples in healthy runs (0.02 -> 0.08), a
    jump of whole nats is no noise.

    A coarse log (epoch means) whose loss came down and then climbs from its lowest point, ending
    ``steady_rel`` (0.1) above it, diverged too: up at each of its ``steady_rises`` (5) or more
    later points in a paste of at most ``steady_max_points`` (30), or trending up over twice as
    many (Kendall's tau at least ``steady_tau``, 0.7) in a log of at most ``trend_max_points``
    (200). Noise does not trend. Not when the learning rate dropped just before the lowest point:
    on a step schedule the loss falls at the drop and creeps back up with weight decay.

    A loss whose magnitude grows tenfold or more at each of its last 2 points or more, or
    ``runaway_growth`` (5) times or more at each of its last 3 or more, to a thousand times where that
    began, has blown up at any length and whatever its sign (3.49, -3.1e4, -3.3e12, -5.8e28). So has
    any other training loss of the run that does so (an RL agent's critic loss going 6.5 -> 236 ->
    10,693 -> 251,870 -> 3.3e6 -> 2.6e7 while its actor loss only drifts): a part of the objective
    that runs away takes the model with it.

    A short-paste finding is not made when the loss's last logged value is NaN/Inf: a loss that
    climbs and then turns NaN is a NaN run (TA101), the climb its lead-up.

    One player's loss in a GAN (``d_loss``, ``g_loss``, ``Loss_D``) is not looked at: it trades
    against the other player's, so a rise is no divergence.

    A rise short of doubling that stays within ``noise_z`` (3) robust standard deviations of the loss's
    point-to-point noise is not one: a small batch's noise lifts a short log's tail that much. Nor is a
    larger one within that noise when the loss ends no higher than its first points: the lowest points of a
    per-batch loss near 0 are its noise (0.02 among 0.3s).

    When the validation loss left its best (``rel`` above it, at every evaluation from there) before
    the training loss did, the first bad step is that evaluation's.

    Thresholds: ``rel`` rise above the best smoothed loss (0.3 = 30%), ``range_frac`` the rise
    must also be this fraction of the improvement made so far (0.25; avoids flagging relative
    noise of a loss near 0), ``sustain`` fraction of later points that stay up (0.8),
    ``short_rise`` (1.5).
    In a reinforcement-learning run, a loss that rises while the episode return climbs from the same step
    on is a value or TD loss growing with the returns it fits, not a divergence.
    """

    id = "TA201"
    name = "divergence"
    category = Category.DIVERGENCE
    severity = Severity.HIGH
    also = (Severity.CRITICAL,)
    guidance = Guidance(
        fix="Lower the learning rate (or undo the lr change that preceded the rise), lengthen warm-up, clip "
            "gradients; restart from the checkpoint at the loss minimum.",
        impact="The loss keeps decreasing past the step where it diverged.",
        verify="Re-run and compare the loss curve over the same steps: no divergence finding, final loss below the "
               "previous best.")

    class Params(Thresholds):
        rel: float = 0.3
        range_frac: float = 0.25
        sustain: float = 0.8
        min_points: int = 8
        short_rise: float = 1.5
        steady_rises: int = 5
        steady_rel: float = 0.1
        steady_tau: float = 0.7
        steady_max_points: int = 30
        trend_max_points: int = 200
        jump_floor: float = 1.0
        noise_z: float = 3.0
        runaway_growth: float = 5.0

    grid: ClassVar[Grid] = {"rel": (0.15, 0.2, 0.3, 0.5), "short_rise": (1.2, 1.5, 2.0, 3.0), "min_points": (6, 8, 10, 12),
                              "steady_rises": (4, 5, 6), "steady_rel": (0.05, 0.1, 0.2), "steady_tau": (0.6, 0.7, 0.8),
                              "jump_floor": (0.5, 1.0, 2.0), "noise_z": (2.0, 3.0, 4.0), "runaway_growth": (3.0, 5.0, 10.0)}

    def check(self, ctx: Context) -> list[Hit]:
        pinned = self._perplexity_clamp(ctx)
        if pinned:
            return pinned
        s = ctx.series("loss", finite=True, min_points=2)
        if s is None or adversarial(s.name):
            return []
        clamp = np.flatnonzero(np.abs(s.values - CAFFE_CLAMP) < 1e-3)
        if clamp.size >= 2 and clamp[-1] == len(s) - 1:
            i = int(clamp[0])
            h = self.hit(f"{s.name} is pinned at {CAFFE_CLAMP} from step {int(s.steps[i])}: Caffe's clamp of a softmax "
                         f"loss whose probabilities underflowed, the network has diverged", 0.9, metric=s.name,
                         first_bad_step=int(s.steps[i]), last_step=int(s.steps[-1]), severity="critical")
            h.point("clamp", s, len(s) - 1, f"{s.name} at the clamp", indices=clamp)
            h.calc("value", f"median {s.name} on the clamped points", "median({clamp})")
            return [h]
        # a loss that climbs and then turns NaN/Inf is a NaN run (TA101) in a short paste: the climb is
        # its lead-up, not a divergence of its own
        raw = ctx.run.series[s.name].values
        to_nan = not np.isfinite(raw[-1])
        runaway = [] if to_nan else self._runaway(s)
        if runaway:
            return self._validation_first(ctx, runaway)
        if len(s) < self.p.min_points:
            hits = [] if to_nan else self._short(s, jumps=True) or self._steady(s, ctx)
        else:
            # a jump in the last few points is too short for the smoothed test: only a clear one (3x) counts
            hits = self._long(s) or ([] if to_nan else self._short(s, rise=2 * self.p.short_rise) or self._steady(s, ctx))
        if hits and _return_grows(ctx, hits[0].first_bad_step):
            return []
        return self._validation_first(ctx, hits) or self._other_runaway(ctx, s.name)

    def _other_runaway(self, ctx: Context, primary: str) -> list[Hit]:
        """The first other training loss of the run that blows up (not a GAN player's: see the class)."""
        for name, series in ctx.run.series.items():
            if name == primary or "@rank" in name or "loss" not in norm(name) or validation(name) or adversarial(name) \
                    or not len(series) or not np.isfinite(series.values[-1]):
                continue
            hits = self._runaway(series.finite())
            if hits:
                return hits
        return []

    def _validation_first(self, ctx: Context, hits: list[Hit]) -> list[Hit]:
        """A divergence of the training loss that the validation loss showed earlier: the first evaluation
        from which the validation loss stays ``rel`` or more above its best before it (every later one too)
        is the first bad step when it comes before the training loss's. An evaluation averages a whole
        set: it shows a network pushed off its minimum by a too-high learning rate at once, where the
        epoch's mean training loss still carries the good batches before the push."""
        v = ctx.series("val_loss", finite=True, min_points=3)
        if not hits or v is None or hits[0].first_bad_step is None:
            return hits
        x = v.values
        best = np.minimum.accumulate(x)
        up = x[1:] >= (1 + self.p.rel) * best[:-1]
        stays = np.flip(np.logical_and.accumulate(np.flip(up)))  # up there and at every evaluation after it
        if not stays.any():
            return hits
        i = 1 + int(np.argmax(stays))
        if int(v.steps[i]) < hits[0].first_bad_step and x[i - 1] > 0:
            h = hits[0]
            h.first_bad_step = int(v.steps[i])
            h.message += (f"; {v.name} showed it first, {float(x[i]):.4g} at step {int(v.steps[i])} against its best "
                          f"{float(best[i - 1]):.4g} before it")
            h.point("val_first", v, i, f"{v.name} at the first evaluation that stays above its best")
            h.point("val_best", v, int(np.argmin(x[:i])), f"best {v.name} before it")
        return hits

    def _perplexity_clamp(self, ctx: Context) -> list[Hit]:
        """A training perplexity pinned at OpenNMT-py's clamp, exp(100), up to its last point."""
        for name, series in ctx.run.series.items():
            if "@rank" in name or validation(name) or not _PERPLEXITY.search(name.lower()):
                continue
            f = series.finite()
            clamp = np.flatnonzero(np.abs(f.values / ONMT_PPL_CLAMP - 1.0) < 1e-6)
            # (one point is enough: a run starts near ln(vocabulary), some 10 nats, never at 100)
            if clamp.size and clamp[-1] == len(f) - 1:
                i = int(clamp[0])
                h = self.hit(f"{f.name} is pinned at {ONMT_PPL_CLAMP:.4g} from step {int(f.steps[i])}: OpenNMT-py's clamp of "
                             "the perplexity, reached when the loss is a hundred nats a word or more: the network has diverged",
                             0.9, metric=f.name,
                             first_bad_step=int(f.steps[i]), last_step=int(f.steps[-1]), severity="critical")
                h.point("clamp", f, len(f) - 1, f"{f.name} at the clamp", indices=clamp)
                return [h]
        return []

    def _long(self, s: Series) -> list[Hit]:
        st, sm, w = _smooth(s)
        best = np.minimum.accumulate(sm)
        progress = np.maximum(sm[0] - best, 0.0)
        rise = sm - best
        mask = (sm > best * (1 + self.p.rel)) & (rise >= self.p.range_frac * progress) & (best > 0)
        k = first_sustained(mask, self.p.sustain, min_len=max(2, min(5, sm.size // 10)))
        if k < 0:
            return []
        jb = int(np.argmin(sm[:k + 1]))
        best_v = float(sm[jb])
        start = int(np.searchsorted(s.steps, st[jb]))
        i = _first_sustained_raw(s.values, start, best_v * (1 + self.p.rel / 2))
        if i < 0:
            i = int(np.searchsorted(s.steps, st[k]))
        else:
            # a jump inside the smoothing window lifts the smoothed best itself: the rise starts at
            # the first of the points before i that all stand above the raw best near it, and after the
            # smoothed best (a noisy loss stands above its lowest point most of the time)
            jr = max(0, start - w) + int(np.argmin(s.values[max(0, start - w):start + 1]))
            above = float(s.values[jr]) * (1 + self.p.rel / 2)
            while i - 1 > max(jr, start) and float(s.values[i - 1]) > above:
                i -= 1
        end = float(np.median(s.values[-max(3, len(s) // 20):]))
        ratio = end / best_v
        # a rise short of doubling, against the loss's own point-to-point noise (robust, per point): the noise
        # of a small batch lifts a short log's tail by 1.4x as easily as a divergence does, never by
        # ``noise_z`` sigmas
        d = np.diff(s.values)
        sigma = 1.4826 * float(np.median(np.abs(d - np.median(d)))) / np.sqrt(2.0)
        # (at any ratio when the loss ends no higher than it started: a noisy per-batch loss near 0 whose
        # lowest points are its noise, 0.02 among 0.3s)
        if end - best_v < self.p.noise_z * sigma and (ratio < 2 or end <= float(np.max(s.values[:3]))):
            return []
        sev = "critical" if ratio >= 2 else "high"
        msg = (f"{s.name} diverged from step {int(s.steps[i])}: best (smoothed) {best_v:.4g} at step {int(st[jb])}, "
               f"ends at {end:.4g} ({ratio:.2f}x) and does not come back")
        h = self.hit(msg, min(0.95, 0.6 + 0.15 * min(ratio - 1, 2)), metric=s.name, first_bad_step=int(s.steps[i]),
                     last_step=int(s.steps[-1]), severity=sev)
        jraw = int(np.searchsorted(s.steps, st[jb]))
        lo = max(0, jraw - w // 2)
        h.point("best", s, min(jraw, len(s) - 1), f"{s.name} around its best (window median)",
                indices=np.arange(lo, min(len(s), lo + max(w, 1))))
        h.point("first", s, i, f"{s.name} at the first step of the sustained rise")
        t = max(3, len(s) // 20)
        h.point("tail", s, len(s) - 1, f"{s.name} over the last {t} logged points", indices=np.arange(len(s) - t, len(s)))
        h.calc("ratio", "final loss (median of the last points) over the best loss", "median({tail}) / median({best})",
               unit="x")
        return [h]

    def _runaway(self, s: Series) -> list[Hit]:
        """The loss's magnitude grows tenfold or more at each of its last 2 points or more, to a thousand times
        where that began, whatever its sign: the update feeds on itself (a learning rate far too high for
        the curvature), and a loss that should not go below 0 going to -1e12 is the same blow-up."""
        a = np.abs(s.values)
        factor, k = 10.0, _growing_tail(a, 10.0)
        if k < 2:
            factor, k = self.p.runaway_growth, _growing_tail(a, self.p.runaway_growth)
            k = k if k >= 3 else 0
        i = len(a) - 1 - k
        if k < 2 or float(a[-1]) < 1000 * float(a[i]):
            return []
        x = s.values
        h = self.hit(f"{s.name} grows by {factor:g} times or more at each of its last {k} points, from {float(x[i]):.4g} at step "
                     f"{int(s.steps[i])} to {float(x[-1]):.4g}: the run has blown up", 0.8, metric=s.name,
                     first_bad_step=int(s.steps[i + 1]), last_step=int(s.steps[-1]), severity="critical")
        h.point("base", s, i, f"{s.name} before the blow-up")
        h.point("end", s, len(s) - 1, f"{s.name} as it blows up", indices=np.arange(i + 1, len(s)))
        h.point("last", s, len(s) - 1, f"last {s.name}")
        h.calc("growth", "growth of the loss's magnitude", "abs({last}) / abs({base})", unit="x")
        return [h]

    def _short(self, s: Series, rise: float | None = None, jumps: bool = False) -> list[Hit]:
        rise = rise or self.p.short_rise
        x = s.values
        j = int(np.argmin(x))
        lo = float(x[j])
        after = x[j + 1:]
        if j == 0 and lo > 0 and len(x) >= 5 and monotone_tail(x, +1) == len(x) - 1 and float(x[-1]) >= rise * lo:
            return [self._climb(s, rise)]
        # a loss that triples and stays there, ``jump_floor`` or more above its lowest, is no noise at any
        # number of points (a loss near 0 jumps by multiples in healthy runs: 0.02 -> 0.08)
        jump = jumps and after.size >= 1 and float(np.min(after)) >= max(3 * lo, lo + self.p.jump_floor)
        # the loss came down to its lowest point first (a paste that starts at its lowest value and
        # only rises is noise as often as divergence, unless it triples), and stays up over 3 points
        # (2 if tripled)
        if lo <= 0 or (after.size < 2 and not jump) or float(np.min(after)) < rise * lo:
            return []
        if j == 0 and not jump and (after.size < 3 or float(np.min(after)) < 3 * lo):
            return []
        # two points may show it too when the loss climbs at each of them to three times its lowest
        # (4.7 -> 8.4 -> 21.5 as the warm-up raises the learning rate)
        climbing = after.size == 2 and float(after[0]) > lo and float(after[1]) > float(after[0]) \
            and float(after[1]) >= 3 * lo
        if after.size < 3 and float(np.min(after)) < 2 * rise * lo and not climbing:
            return []
        if len(x) >= self.p.min_points and float(np.min(after)) < float(np.max(x[:j + 1])):
            return []  # in a long log, a jump that stays below where the loss started is noise
        i = j + 1
        ratio = float(x[-1]) / lo
        msg = (f"{s.name} rises from its lowest {lo:.4g} (step {int(s.steps[j])}) and stays up: every later point is "
               f"{float(np.min(after)) / lo:.2f}x it or more, ending at {float(x[-1]):.4g} (few points logged)")
        if after.size == 1:
            msg = (f"{s.name} jumps from {lo:.4g} (step {int(s.steps[j])}) to {float(x[-1]):.4g} ({ratio:.2f}x) at its "
                   "last point (few points logged)")
        h = self.hit(msg, 0.6, metric=s.name, first_bad_step=int(s.steps[i]), last_step=int(s.steps[-1]),
                     severity="critical" if ratio >= 2 else "high")
        h.point("best", s, j, f"lowest {s.name}")
        h.point("after", s, len(s) - 1, f"{s.name} after it", indices=np.arange(i, len(s)))
        h.calc("ratio", "smallest later loss over the lowest one", "min({after}) / {best}", unit="x")
        return [h]


    def _steady(self, s: Series, ctx: Context) -> list[Hit]:
        """A coarse log whose loss came down to its lowest point and then climbs steadily, ending
        ``steady_rel`` above it (see the class). An epoch's mean loss does not trend up by chance;
        after a learning-rate drop it may (weight decay catching up on a step schedule), so a minimum
        right after one does not count."""
        x = s.values
        j = int(np.argmin(x))
        after = x[j:]
        if len(x) > self.p.trend_max_points or after.size < self.p.steady_rises + 1 or j < 1 or not 0 < x[j] < x[0]:
            return []
        end = float(np.median(after[-3:]))
        tau = kendall_tau(after)
        # up at every point (few points, a paste of epochs), or a trend over twice as many: by chance,
        # 6 noisy points rise in a row once in 720 tries, 10 trend with tau >= 0.7 about once in 1000
        steady = tau == 1.0 and len(x) <= self.p.steady_max_points
        trend = tau >= self.p.steady_tau and after.size >= 2 * self.p.steady_rises
        if not (steady or trend) or end < (1 + self.p.steady_rel) * float(x[j]) or _lr_dropped_before(ctx, s, j):
            return []
        ratio = end / float(x[j])
        msg = (f"{s.name} came down to {float(x[j]):.4g} (step {int(s.steps[j])}), then climbs steadily over its last "
               f"{after.size - 1} points (up at every one of them, or a rank trend), to {end:.4g} ({ratio:.2f}x; median of "
               "the last 3)")
        h = self.hit(msg, 0.6, metric=s.name, first_bad_step=int(s.steps[j + 1]), last_step=int(s.steps[-1]),
                     severity="critical" if ratio >= 2 else "high")
        h.point("best", s, j, f"lowest {s.name}")
        h.point("climb", s, j + 1, f"{s.name} from the lowest on", indices=np.arange(j + 1, len(x)))
        h.point("last", s, len(x) - 1, f"{s.name} over its last 3 points", indices=np.arange(len(x) - 3, len(x)))
        h.calc("ratio", "last loss (median of the last 3) over the lowest one", "median({last}) / {best}", unit="x")
        return [h]

    def _climb(self, s: Series, rise: float) -> Hit:
        """A short paste whose loss goes up at every point, ``rise`` times or more in all: noise
        does not climb that steadily."""
        x = s.values
        ratio = float(x[-1]) / float(x[0])
        msg = (f"{s.name} rises at every one of its {len(x)} points, from {float(x[0]):.4g} (step {int(s.steps[0])}) "
               f"to {float(x[-1]):.4g} ({ratio:.2f}x; few points logged)")
        h = self.hit(msg, 0.6, metric=s.name, first_bad_step=int(s.steps[1]), last_step=int(s.steps[-1]),
                     severity="critical" if ratio >= 2 else "high")
        h.point("best", s, 0, f"first {s.name}")
        h.point("climb", s, 1, f"{s.name} at each later point", indices=np.arange(1, len(x)))
        h.point("last", s, len(x) - 1, f"last {s.name}")
        h.calc("ratio", "last loss over the first one", "{last} / {best}", unit="x")
        return h


def _lr_ratio(ctx: Context, s: Series, j: int, within: int) -> float | None:
    """The learning rate at the point ``j`` of ``s`` over what it was ``within`` points before; None when no
    positive rate is logged by then."""
    lr = ctx.series("lr", finite=True)
    if lr is None or len(lr) < 2:
        return None
    before = lr.values[lr.steps <= int(s.steps[max(0, j - within)])]
    at = lr.values[lr.steps <= int(s.steps[j])]
    if before.size == 0 or at.size == 0 or float(before[-1]) <= 0:
        return None
    return float(at[-1]) / float(before[-1])


def _lr_dropped_before(ctx: Context, s: Series, j: int, within: int = 10) -> bool:
    """Whether the learning rate fell by half or more over the ``within`` points of ``s`` up to its
    point ``j`` (a step schedule's decay)."""
    r = _lr_ratio(ctx, s, j, within)
    return r is not None and 0 < r <= 0.5


def lr_moved(ctx: Context, s: Series, j: int, within: int = 10, factor: float = 2.0) -> bool:
    """Whether the learning rate at the point ``j`` of ``s`` is more than ``factor`` times, or less than its
    inverse, what it was ``within`` points before (a schedule's step, a warm-up, a ramp)."""
    r = _lr_ratio(ctx, s, j, within)
    return r is not None and not 1 / factor <= r <= factor


def _gradient_cut(ctx: Context, drop: float) -> tuple[Series, int, float] | None:
    """The first logged point at which the total gradient norm falls ``drop`` times or more below its level
    and stays down, with the learning rate unchanged, and the level it held (the median of the ten points
    before, three at least, each within a factor of 2 of it: a level, not the fall of the first steps).
    This point, the median of the next five and the median of all later points are ``drop`` times below
    that level; at most a tenth of the later points are even half way back, and every point of the ten
    before stands more than twice the later median (the two levels do not overlap: a noisy norm that
    visits both is one level); the learning rate within a factor of 2 of what it was ten points before (a
    rate that climbs or steps changes the norm for its own reasons). Parameters taken out of training all at once
    (their ``requires_grad`` turned off, a module left out of the optimizer's graph) or units that all die
    at once do this; a healthy run's gradient norm moves by degrees. The point before may stand between the
    two levels (a logged mean over an interval that holds the cut): then the cut is there, the level before it."""
    g = ctx.series("grad_norm", finite=True, min_points=8)
    if g is None:
        return None
    x = g.values
    for j in range(3, len(x) - 2):
        rest = x[j:]
        later = float(np.median(rest))
        for k in (j, j - 1):  # k = j - 1: the logged interval that holds the cut averages both levels
            before = x[max(0, k - 10):k]
            if len(before) < 3:
                continue
            level = float(np.median(before))
            low = level / drop
            if level <= 0 or float(np.min(before)) < level / 2 or float(np.max(before)) > 2 * level \
                    or (k < j and not low < float(x[k]) < level / 2) \
                    or float(x[j]) > low or float(np.median(rest[:5])) > low or later > low \
                    or float(np.mean(rest > 2 * low)) > 0.1 or float(np.min(before)) <= 2 * later \
                    or lr_moved(ctx, g, k):
                continue
            return g, k, level
    return None


@dataclass(frozen=True)
class _Cut:
    """A gradient cut (:func:`_gradient_cut`) seen from the loss: ``i`` is the loss's first point at or after
    the cut; ``before``, ``after`` and ``end`` the loss's medians over the 3 points before it, the 3 from it
    and the last 3."""

    g: Series
    j: int
    level: float
    s: Series
    i: int
    before: float
    after: float
    end: float

    def points(self, h: Hit) -> None:
        h.point("before", self.g, self.j - 1, f"{self.g.name} over the points before the drop",
                indices=np.arange(max(0, self.j - 10), self.j))
        h.point("cut", self.g, self.j, f"{self.g.name} at the drop")
        h.calc("drop", "gradient norm's level before the drop over the one at it", "median({before}) / {cut}", unit="x")


def _cut_on_loss(ctx: Context, drop: float, s: Series | None) -> _Cut | None:
    """The gradient cut with the loss ``s`` around it, when the loss has 3 points or more on each side."""
    cut = _gradient_cut(ctx, drop)
    if cut is None or s is None:
        return None
    g, j, level = cut
    i = int(np.searchsorted(s.steps, int(g.steps[j])))
    x = s.values
    if i < 3 or len(x) - i < 3:
        return None
    return _Cut(g, j, level, s, i, float(np.median(x[i - 3:i])), float(np.median(x[i:i + 3])),
                float(np.median(x[-3:])))

_EPOCH_TEXT = re.compile(r"epoch (\d{1,9})\b")


def _late_excerpt(ctx: Context, s: Series) -> bool:
    """Whether ``s`` starts late in its run: more steps (or epochs, as the log prints them beside each point)
    came before its first point than it holds, or the step as printed there is in epoch 2 or later (a
    step counter that restarts each epoch says nothing of the epochs before)."""
    first, last = int(s.steps[0]), int(s.steps[-1])
    if first > last - first:
        return True
    # or past its first two logged intervals and a tenth of the run: a paste from epoch 14 of 50 starts
    # after any flat start the run had
    if len(s) >= 2 and first > max(2 * float(np.median(np.diff(s.steps))), 0.1 * last):
        return True
    # the same on the epoch the log prints beside each point (the HF Trainer's fractional "epoch": 0.38
    # at a paste's first line, 0.44 at its last, says six times as many lines came before it)
    e = ctx.run.series.get("epoch")
    if e is not None and len(e) >= 2:
        at = e.finite().values[np.isin(e.finite().steps, s.steps)]
        if at.size >= 2 and float(at[0]) > float(at[-1]) - float(at[0]) > 0:
            return True
    texts = ctx.run.meta.get("step_text", {})
    m = _EPOCH_TEXT.match(str(texts.get(int(s.steps[min(1, len(s) - 1)]), "")))
    return m is not None and int(m.group(1)) >= 2


class NotLearning(Rule):
    """Detects a run that does not learn: the training loss is flat from the start (the median
    of the last 10% of points is within ``min_improvement`` of the first 10%), with extra
    confidence when it sits at ln(vocab size) or ln(number of classes), the loss of a uniform
    guess, when the log or config says those sizes.

    Why: the model outputs a constant distribution: frozen parameters, lr 0, labels that carry
    no signal (shuffled / misaligned), a detached graph or a broken loss.

    Fix: check that parameters require grad and are in the optimizer, that lr > 0 after warm-up,
    that labels match inputs (inspect a batch), that ``loss.backward()`` reaches the weights.

    Example: 10 classes, loss 2.303, 2.302, 2.304, ... for 2000 steps (ln 10 = 2.303).

    The log must show the start of the run: when more steps came before its first line than it
    holds, or than two logged intervals and a tenth of its last step, or its steps are printed in
    epoch 2 or later, a flat loss is where a run settles late in training, unless it sits at ln(C).

    A loss that did learn (some 10% stretch of the run sits ``learned`` below the start) and then
    climbed back is not "flat from the start": that is divergence (TA201), not this rule. One
    player's loss in a GAN is not looked at either: a flat discriminator loss is the game in balance.

    A short paste (``short_points`` to ``min_points`` points) counts only when the signal is
    unambiguous: the loss pinned at ln(C) of a common class count or vocabulary size (within
    ``pinned_tol``) on its last ``short_points`` points, or flat (``flat_tol``) while the accuracy
    sits at chance, or within ``near_tol`` of ln(C) on its last ``short_points`` points while every
    accuracy the log prints stays at the 1/C of a uniform guess (two signs that agree).

    A loss lower at every one of its ``min_points`` or more points is learning, however little it falls,
    unless it settles onto ln(C) from above (within ``near_tol``): the constant guess is what it learns; where
    the log prints an accuracy, the accuracy decides.
    A loss that moves from one logged point to the next by more than ``max_noise`` (0.03) of its
    level (median absolute step) is not flat, whatever its first and last tenths say; nor is a run
    whose validation loss falls ``min_improvement`` or more while trending down, or whose accuracy
    trends up while its error falls by a quarter (or, over 6 points or more, while it doubles: near
    chance on many classes the error barely moves): it learns.

    A loss that was falling and stops at once where the gradient norm falls ``cut_drop`` (5) times or more
    in one logged interval and stays down, with the learning rate unchanged, has stopped learning there,
    however much it learnt before: from that point it gains less than ``stall_gain`` (0.1) of its level, at a
    tenth of its earlier pace or less. Most parameters no longer receive updates (their ``requires_grad``
    turned off, a module missing from the optimizer); a run that converges slows by degrees, its gradient
    norm with it.

    Thresholds: ``min_improvement`` relative (0.02), ``uniform_tol`` relative distance to ln(C)
    (0.05), ``learned`` relative drop of the best 10% stretch (0.1), ``min_points`` (10),
    ``short_points`` (3), ``pinned_tol`` (0.003), ``pinned_spread`` relative spread of the last points
    that counts as not moving at all (1e-4), ``flat_tol`` relative spread (0.01),
    ``chance_acc`` accuracy at or below which a flat loss is not learning (0.01). In a short paste,
    a loss equal to every printed digit (or within ``pinned_spread``) on its last ``short_points``
    points or more counts too (frozen weights), unless it is below ``frozen_floor`` (1e-3: a loss
    printed as 0.0000), and so, at any length, does a validation loss equal to every printed digit at its last ``short_points`` + 1
    evaluations or more, half of them at least, printed with 3 significant digits or more (the evaluated weights do not change;
    with no validation loss, a validation score does, spaCy's "CATS_SCORE 44.27", unless it ends perfect or at 0), when they are
    more than a step apart or the training loss is flat too (a progress line repeats the last
    evaluation at every step while the per-step loss moves), and a paste of ``short_points`` evaluations
    all within ``pinned_spread`` of one value does when the training loss is flat over them, or when they are
    the same to every printed digit and so is another metric of the same evaluations (an accuracy); so does a
    loss (or validation loss) within ``near_tol`` (0.005) of ln(C) on all of its 6 or more points (3 or more
    when they run from the first tenth of the logged steps to update 1000 or later), C a
    class count up to ``max_classes`` (1000; a language model's first steps sit near ln(vocabulary)
    while warming up). A validation loss the same at all its evaluations (2 or more) at ln(C) within
    ``pinned_tol`` counts too when every accuracy the log prints sits at 1/C. With no loss in the log, an
    accuracy below 0.99 the same to every printed digit at ``short_points`` + 2 or more points from the
    run's first step does: the model's answers do not change.
    """

    id = "TA202"
    name = "not-learning"
    category = Category.PLATEAU
    severity = Severity.HIGH
    also = (Severity.MEDIUM,)
    guidance = NOT_LEARNING

    class Params(Thresholds):
        min_improvement: float = 0.02
        uniform_tol: float = 0.05
        learned: float = 0.1
        min_points: int = 10
        short_points: int = 3
        pinned_tol: float = 0.003
        pinned_spread: float = 1e-4
        flat_tol: float = 0.01
        chance_acc: float = 0.01
        frozen_floor: float = 1e-3
        near_tol: float = 0.005
        max_classes: int = 1000
        max_noise: float = 0.03
        cut_drop: float = 5.0
        stall_gain: float = 0.1

    grid: ClassVar[Grid] = {"min_improvement": (0.005, 0.01, 0.02, 0.04, 0.08), "flat_tol": (0.005, 0.01, 0.02),
                              "near_tol": (0.0025, 0.005, 0.01), "min_points": (6, 8, 10, 15, 20), "short_points": (3, 4, 5),
                              "max_noise": (0.02, 0.03, 0.05, 0.1)}

    def check(self, ctx: Context) -> list[Hit]:
        return self._training(ctx) or self._stalled(ctx) or self._frozen_validation(ctx) or self._validation_at_chance(ctx) or \
            self._no_output(ctx) or self._frozen_accuracy(ctx)

    def _stalled(self, ctx: Context) -> list[Hit]:
        """A loss that was falling and stops where the gradient norm is cut ``cut_drop`` times at once
        (:func:`_gradient_cut`): from there it gains less than ``stall_gain`` of its level to the end, at a
        tenth of the pace it fell before or less, without jumping up (a jump is dead units: TA205)."""
        s = ctx.series("loss", finite=True, min_points=self.p.min_points)
        c = _cut_on_loss(ctx, self.p.cut_drop, None if s is None or adversarial(s.name) else s)
        if c is None or s is None:
            return []
        x, t, i = s.values, s.steps.astype(float), c.i
        fell = float(x[0]) - float(x[i - 1])
        if c.before <= 0 or fell < self.p.learned * abs(float(x[0])) or c.after > c.before + 0.5 * fell / i \
                or (c.after - c.end) > self.p.stall_gain * abs(c.after):
            return []
        pace_before = fell / max(float(t[i - 1] - t[0]), 1.0)
        pace_after = max(c.after - c.end, 0.0) / max(float(t[-1] - t[i]), 1.0)
        if pace_after > 0.1 * pace_before:
            return []
        at = int(c.g.steps[c.j])
        h = self.hit(f"{s.name} fell from {float(x[0]):.4g} to {float(x[i - 1]):.4g} by step {int(s.steps[i - 1])}, then "
                     f"{c.g.name} dropped {c.level / float(c.g.values[c.j]):.3g}x at step {at} (from {c.level:.4g}) and "
                     f"stayed down while {s.name} stopped falling ({c.after:.4g} -> {c.end:.4g} over the remaining "
                     f"{int(t[-1] - t[i])} steps): most parameters stopped receiving updates (frozen layers, "
                     "parameters missing from the optimizer)", 0.75, metric=s.name, first_bad_step=at,
                     last_step=int(s.steps[-1]), severity="high")
        c.points(h)
        h.point("flat", s, len(s) - 1, f"{s.name} from the drop on", indices=np.arange(i, len(s)))
        return [h]

    def _frozen_accuracy(self, ctx: Context) -> list[Hit]:
        """With no loss in the log, an accuracy the same to every printed digit at each of its ``short_points``
        + 2 or more points from the run's first epoch or step on, below 0.99: the weights evaluated do not
        change, or the model answers one class whatever the input (MLX's MNIST example at a learning rate
        of 0.1 prints "Test accuracy 0.113" ten epochs running: the share of the most common digit). A
        model that learns moves its accuracy on a fixed set at its first evaluations."""
        if ctx.series("loss") is not None or ctx.series("val_loss") is not None:
            return []
        for f, frac in accuracies(ctx):
            if len(f) < self.p.short_points + 2 or int(f.steps[0]) > 1 or _still_tail(f.values) < len(f) \
                    or not 0.0 < float(frac[0]) < 0.99:
                continue
            h = self.hit(f"{f.name} is {float(f.values[0]):g} at all {len(f)} of its points from step {int(f.steps[0])}: "
                         "the model's answers do not change (frozen weights, or one class for every input)", 0.7,
                         metric=f.name, first_bad_step=int(f.steps[0]), last_step=int(f.steps[-1]), severity="high")
            h.point("flat", f, len(f) - 1, f"{f.name} at every point", indices=np.arange(len(f)))
            return [h]
        return []

    def _validation_at_chance(self, ctx: Context) -> list[Hit]:
        """The validation loss the same to every printed digit at all its evaluations (2 or more), at ln(C)
        within ``pinned_tol``, while every accuracy the log prints sits at the 1/C of a uniform guess: two
        signs that agree, however few evaluations (a network driven to a constant output by a learning
        rate far too high, fastai's "learning rate too high" example: valid_loss 0.693147 = ln 2 with
        accuracy 0.4956 on two classes)."""
        v = ctx.series("val_loss", finite=True, min_points=2)
        if v is None or _still_tail(v.values) < len(v):
            return []
        c = uniform_size(v.values, self.p.pinned_tol)
        acc = _accuracy_at_chance(ctx, c) if c is not None and c <= self.p.max_classes else None
        if acc is None or c is None:
            return []
        h = self.hit(f"{v.name} is {float(v.values[-1]):.6g} = ln({c}) at all {len(v)} evaluations while {acc.name} "
                     f"stays at the 1/{c} of a uniform guess ({float(np.max(acc.values)):.3g} at best): the model "
                     "outputs a constant guess", 0.75, metric=v.name, first_bad_step=int(v.steps[0]),
                     last_step=int(v.steps[-1]), data={"uniform": math.log(c)})
        h.point("flat", v, len(v) - 1, f"{v.name} at every evaluation", indices=np.arange(len(v)))
        h.point("acc", acc, int(np.argmax(acc.values)), f"highest {acc.name}")
        return [h]

    def _no_output(self, ctx: Context) -> list[Hit]:
        """A word or character error rate at its worst, 1.0 (100 %) or above, at every one of ``short_points``
        + 1 evaluations or more: the model transcribes nothing right. An empty hypothesis scores exactly
        1.0, which is where a CTC model stuck on the blank token stays (the wav2vec2 fine-tuning guide:
        https://huggingface.co/blog/fine-tune-wav2vec2-english); a healthy fine-tune leaves it within
        its first evaluations."""
        for name, series in ctx.run.series.items():
            if "@rank" in name or not _ERROR_RATE.search(norm(name)):
                continue
            f = series.finite()
            if len(f) < self.p.short_points + 1:
                continue
            worst = 100.0 if float(np.max(f.values)) > 5.0 else 1.0  # in % or as a fraction
            if float(np.min(f.values)) < worst:
                continue
            h = self.hit(f"{f.name} is {worst:g} or above at all {len(f)} evaluations: the model's transcripts are no "
                         "better than empty ones (a CTC model that only emits the blank token)", 0.8, metric=f.name,
                         first_bad_step=int(f.steps[0]), last_step=int(f.steps[-1]), severity="high")
            h.point("flat", f, len(f) - 1, f"{f.name} at every evaluation", indices=np.arange(len(f)))
            return [h]
        return []

    def _frozen_validation(self, ctx: Context) -> list[Hit]:
        """The validation loss the same to every printed digit at its last ``short_points`` + 1
        evaluations or more (at least half of them): the evaluated weights do not change, whatever
        the training loss does (a fixed evaluation set gives a changed model another loss)."""
        v = ctx.series("val_loss", finite=True, min_points=self.p.short_points) or \
            _validation_score(ctx, self.p.short_points)
        if v is None:
            return []
        x = v.values
        same = _still_tail(x)
        # every evaluation of the paste within ``pinned_spread`` of one value while the training loss stays
        # flat over them too: two signs that agree, at ``short_points`` evaluations
        still = len(x) == self.p.short_points and _still_tail(x, self.p.pinned_spread) == len(x) and \
            self._flat_training(ctx, v.steps)
        # or the same to every printed digit at ``short_points`` evaluations, and so is another metric of
        # the same evaluations (its accuracy): two quantities that a changed model moves
        still = still or (same == len(x) == self.p.short_points and _another_still(ctx, v))
        if (same < max(self.p.short_points + 1, len(x) // 2) and not still) or abs(float(x[-1])) < self.p.frozen_floor \
                or _printed_digits(float(x[-1])) < 3:
            # (a loss printed with two significant digits, 0.0023, repeats once a healthy run settles)
            return []
        same = len(x) if still else same
        start = len(x) - same
        if np.any(np.diff(v.steps[start:]) <= 1) and not self._flat_training(ctx, v.steps[start + 1:]):
            # on consecutive steps under a training loss that moves, it is the last evaluation carried
            # along on every step's line (NeMo's progress lines, Lightning's bars), not an evaluation each;
            # the training loss is looked at from the second of them, where the finding starts (an epoch's
            # mean loss still holds the descent of the first epoch)
            return []
        exact = bool(np.all(x[start:] == x[-1]))
        onset = self._freeze_onset(ctx, v, start)
        h = self.hit(f"{v.name} is {float(x[-1]):.6g} " + ("to every printed digit" if exact else
                     "moving only in its last printed digits, with a flat training loss,") + f" at its last {same} "
                     "evaluations: the evaluated weights do not change", 0.75, metric=v.name,
                     first_bad_step=int(v.steps[start + 1]) if onset is None else int(onset[0].steps[onset[1]]),
                     last_step=int(v.steps[-1]))
        h.point("flat", v, len(v) - 1, f"{v.name} over the identical evaluations", indices=np.arange(start, len(v)))
        h.calc("median", f"median {v.name} over the identical evaluations", "median({flat})")
        if onset is not None:
            t, i = onset
            h.point("onset", t, i, f"{t.name} at 0 from here" if t.name == ctx.roles.names.get("lr") else
                    f"{t.name} first at the level it keeps over the identical evaluations")
        return [h]

    @staticmethod
    def _freeze_onset(ctx: Context, v: Series, start: int) -> tuple[Series, int] | None:
        """Where the weights stopped changing: the evaluation at ``start`` already saw the final weights, so
        they froze after the evaluation before it. The training loss places it: its first point after that
        evaluation, and up to the next identical one, within 3 robust standard deviations above the level it
        keeps over the identical evaluations (an epoch's mean loss reaches that level an epoch after the
        evaluation that closed the last moving epoch), step 0 being the loss before any update. ``None``:
        no such training loss, or one that still trends down over the identical evaluations (it does not
        show where anything stopped); the finding is at the second identical evaluation, where the
        evaluations first repeat. A learning rate at 0 from a step after that evaluation to the end places it
        first."""
        lo = v.steps[start - 1] if start > 0 else 0
        # a learning rate that is 0 from a step in that span to the end says where, exactly
        lr = ctx.series("lr", finite=True)
        if lr is not None and len(lr) and float(lr.values[-1]) == 0.0:
            moving = np.flatnonzero(lr.values != 0.0)
            k = int(moving[-1]) + 1 if moving.size else 0
            if lo < int(lr.steps[k]) <= int(v.steps[start]):
                return lr, k
        t = ctx.series("loss", finite=True)
        if t is None:
            return None
        later = t.values[t.steps >= v.steps[start]]
        if later.size < 3 or kendall_tau(later) <= -0.5:
            return None
        level = float(np.median(later))
        cut = level + 3 * 1.4826 * mad(later)
        at = np.flatnonzero((t.steps > lo) & (t.steps <= v.steps[start + 1]) & (t.values <= cut))
        return (t, int(at[0])) if at.size else None

    def _flat_training(self, ctx: Context, steps: np.ndarray) -> bool:
        """The training loss over ``steps`` (the span of them) within twice ``flat_tol`` of its median."""
        t = ctx.series("loss", finite=True)
        if t is None:
            return False
        x = t.values[(t.steps >= steps[0]) & (t.steps <= steps[-1])]
        return x.size >= 2 and float(np.ptp(x)) <= 2 * self.p.flat_tol * abs(float(np.median(x)))

    def _training(self, ctx: Context) -> list[Hit]:
        s = ctx.series("loss", finite=True, min_points=self.p.short_points)
        if s is None or adversarial(s.name):
            return []
        if len(s) < self.p.min_points:
            return self._short(ctx, s)
        pinned = self._pinned_at_uniform(s)
        if pinned:
            return pinned
        c = uniform_size(s.values[-self.p.short_points:], self.p.near_tol)
        if bool(np.all(np.diff(s.values) < 0)) and (c is None or float(s.values[-1]) < math.log(c)) and \
                not accuracies(ctx):
            # lower at every one of its points, and not settling onto ln(C) from above (a constant guess
            # learnt): it learns, however little (a CI golden of 10 steps); a printed accuracy says more
            return []
        head, tail = _head_tail(s.values)
        if head == 0:
            return []
        improvement = (head - tail) / abs(head)
        if improvement >= self.p.min_improvement or improvement < -0.3:  # a big rise is divergence's
            return []
        # a loss that moves by more than ``max_noise`` of its level from one logged point to the next is
        # not flat: its head and tail differ by less than its noise, which decides nothing
        if float(np.median(np.abs(np.diff(s.values)))) > self.p.max_noise * abs(float(np.median(s.values))):
            return []
        k = max(1, len(s) // 10)
        stretches = np.median(s.values[: len(s) // k * k].reshape(-1, k), axis=1)
        if (head - float(stretches.min())) / abs(head) >= self.p.learned:
            return []  # it learned, then came back up: divergence, not a flat start
        if self._validation_learns(ctx) or _accuracy_learns(ctx):
            return []
        n_cls = None
        for key in ("num_classes", "config.num_classes", "vocab_size", "config.vocab_size", "padded_vocab_size"):
            v = ctx.run.meta.get(key)
            if isinstance(v, (int, float)) and v >= 2:
                n_cls = (key, int(v))
                break
        if n_cls is None:
            c = uniform_size(s.values[-max(3, len(s) // 10):], self.p.pinned_tol)
            n_cls = ("classes or tokens", c) if c else None
        uniform = math.log(n_cls[1]) if n_cls else None
        near = uniform is not None and abs(tail - uniform) <= self.p.uniform_tol * uniform
        if not near and _late_excerpt(ctx, s):
            return []  # a flat loss late in a run is where the run settles, not a flat start
        msg = f"{s.name} does not decrease: {head:.4g} over the first tenth of the logged steps, {tail:.4g} over the last tenth"
        if near and n_cls is not None:
            msg += (f", which is ln({n_cls[1]}) = {uniform:.4g}: the loss of a uniform guess over {n_cls[1]} "
                    f"{n_cls[0].split('.')[-1]}")
        conf = 0.9 if near else 0.65
        # step 0 is the loss before the first update: not learning shows from the next logged step
        first = int(s.steps[1]) if int(s.steps[0]) == 0 and len(s) > 1 else int(s.steps[0])
        flat = _flat_from(s.values)
        if flat is not None:
            first = max(first, int(s.steps[flat]))
        h = self.hit(msg, conf, metric=s.name, first_bad_step=first, last_step=int(s.steps[-1]),
                     severity="high" if near or len(s) >= 50 else "medium", data={"uniform": uniform})
        k = max(3, int(len(s) * 0.1))
        h.point("head", s, k - 1, f"{s.name} over the first {k} logged points", indices=np.arange(0, k))
        h.point("tail", s, len(s) - 1, f"{s.name} over the last {k} logged points", indices=np.arange(len(s) - k, len(s)))
        h.calc("improvement", "relative improvement of the loss, first 10% vs last 10%",
               "(median({head}) - median({tail})) / abs(median({head}))", unit="ratio")
        return [h]

    def _pinned_at_uniform(self, s: Series) -> list[Hit]:
        """The loss equal to every printed digit over the last half of its points or more
        (``min_points`` at least), at ln(C) of a common class count (within ``pinned_tol``): the
        network outputs the same uniform guess for every input, whatever it did before it (a loss
        that swings for a few steps and then locks at ln 2 = 0.6931 has died, not converged)."""
        x = s.values
        same = _still_tail(x)
        if same < max(self.p.min_points, len(x) // 2):
            return []
        c = uniform_size(x[-same:], self.p.pinned_tol)
        if c is None or c > self.p.max_classes:
            return []
        start = len(x) - same
        h = self.hit(f"{s.name} is {float(x[-1]):.6g} to every printed digit over its last {same} logged points, "
                     f"which is ln({c}) = {math.log(c):.4g}: the loss of a uniform guess over {c} classes",
                     0.85, metric=s.name, first_bad_step=int(s.steps[start]), last_step=int(s.steps[-1]),
                     severity="high", data={"uniform": math.log(c)})
        h.point("flat", s, len(x) - 1, f"{s.name} over the identical points", indices=np.arange(start, len(x)))
        h.calc("median", f"median {s.name} over the identical points", "median({flat})")
        return [h]

    def _at_chance(self, ctx: Context, x: np.ndarray) -> tuple[int, Series] | None:
        """The class count C when the last ``short_points`` losses sit within ``near_tol`` of ln(C) and
        the accuracies the log prints stay at 1/C (within half of it), with the accuracy: two signs of a
        uniform guess that agree, each common at the start of training alone, however few points."""
        c = uniform_size(x[-self.p.short_points:], self.p.near_tol)
        if c is None or c > self.p.max_classes:
            return None
        acc = _accuracy_at_chance(ctx, c)
        return None if acc is None else (c, acc)

    def _validation_learns(self, ctx: Context) -> bool:
        """A validation loss that falls ``min_improvement`` or more from its first evaluation to its last
        tenth, trending down (Kendall's tau at most -0.5): the model learns what generalises, however
        flat the training loss is (an adapter fine-tune whose training loss settles after its first
        points). An evaluation is a mean over a whole set: its first value is no noisy batch."""
        v = ctx.series("val_loss", finite=True, min_points=self.p.short_points)
        if v is None:
            return False
        first, tail = float(v.values[0]), _head_tail(v.values)[1]
        return first > 0 and (first - tail) / first >= self.p.min_improvement and kendall_tau(v.values) <= -0.5

    def _short(self, ctx: Context, s: Series) -> list[Hit]:
        k = self.p.short_points
        x = s.values
        # at the start of training every classifier's loss is near ln(C): only a loss that does not
        # move at all (to the printed digits) is pinned there
        spread = float(np.ptp(x[-k:])) / max(abs(float(np.median(x[-k:]))), 1e-12)
        c = uniform_size(x[-k:], self.p.pinned_tol) if spread <= self.p.pinned_spread else None
        c = None if c is not None and _accuracy_above_chance(ctx, c) else c
        start = 0
        if c is not None:
            while start < len(x) - k and abs(x[start] - math.log(c)) > self.p.pinned_tol * math.log(c):
                start += 1
            msg = (f"{s.name} sits at {float(np.median(x[start:])):.5g} = ln({c}) from step {int(s.steps[start])}: "
                   f"the loss of a uniform guess over {c} classes or tokens (few points logged)")
            conf = 0.8
            if c in SSL_SIZES:
                msg = (f"{s.name} sits at {float(np.median(x[start:])):.5g} = ln({c}) from step {int(s.steps[start])}, "
                       f"{c} being {SSL_SIZES[c]}: a uniform assignment over the prototypes, the self-supervised "
                       f"representation has collapsed")
        else:
            body = x[1:] if len(x) > k and abs(x[0] - np.median(x[1:])) > 0.5 * abs(np.median(x[1:])) else x
            start = len(x) - len(body)
            spread = (float(body.max()) - float(body.min())) / max(abs(float(np.median(body))), 1e-12)
            # any accuracy the log prints (MLM_acc, top1, val_acc) stuck at chance
            acc = next((a for a, _ in accuracies(ctx) if float(np.max(a.values)) <= self.p.chance_acc), None)
            chance = acc is not None
            # the same value to every printed digit (or within ``pinned_spread`` of it: 1535.6199,
            # 1535.6196, 1535.6337), again and again: the weights do not change
            same = _still_tail(x, self.p.pinned_spread)
            # a classifier's loss at ln(C), moving only in its last digits, epoch after epoch; the
            # validation loss shows it as well when the training loss still drifts down to ln(C)
            # (fewer points do, when they run from the first tenth of the steps to past the first thousand
            # updates: a classifier that learns leaves ln(C) within its first few hundred)
            spans = int(s.steps[0]) <= 0.1 * int(s.steps[-1]) and int(s.steps[-1]) >= _LEAVES_UNIFORM_BY
            near = uniform_size(x, self.p.near_tol) if len(x) >= 2 * k or spans else None
            if near is None and (v := ctx.series("val_loss", finite=True, min_points=2 * k)) is not None:
                near = uniform_size(v.values, self.p.near_tol)
                s, x = (v, v.values) if near is not None else (s, x)
            if near is not None and near <= self.p.max_classes and not _accuracy_above_chance(ctx, near):
                start = 0
                msg = (f"{s.name} sits at {float(np.median(x)):.4g}, next to ln({near}) = {math.log(near):.4g}, on all its "
                       f"{len(x)} logged points: the loss of a uniform guess over {near} classes, the model does not learn")
                conf = 0.7
            elif (at := self._at_chance(ctx, x)) is not None:
                near, acc = at
                start = len(x) - k
                msg = (f"{s.name} sits at {float(np.median(x[start:])):.4g}, next to ln({near}) = {math.log(near):.4g}, on "
                       f"its last {k} logged points while {acc.name} stays at the 1/{near} of a uniform guess "
                       f"({float(np.max(acc.values)):.3g} at best): the model does not learn")
                conf = 0.75
            elif same >= (_COARSE_REPEATS if _coarse_every_step(s, same) else k) \
                    and abs(float(x[-1])) >= self.p.frozen_floor:
                start = len(x) - same
                exact = bool(np.all(x[-same:] == x[-1]))
                msg = (f"{s.name} is {float(x[-1]):.6g} " + ("to every printed digit" if exact else
                       "moving only in its last printed digits") + f" on the last {same} logged points: "
                       "the weights do not change (nothing is updated, or the output saturated)")
                conf = 0.75
            elif len(body) < k + 1 or spread > self.p.flat_tol or not chance:
                return []
            else:
                msg = (f"{s.name} stays flat at {float(np.median(body)):.4g} (spread {spread:.1%} over {len(body)} points) "
                       f"while {acc.name} stays at {float(np.max(acc.values)):.2g}: the model does not learn")  # type: ignore[union-attr]
                conf = 0.7
        h = self.hit(msg, conf, metric=s.name, first_bad_step=int(s.steps[start]), last_step=int(s.steps[-1]),
                     data={"uniform": math.log(c) if c else None},
                     category=Category.MODE_COLLAPSE if c in SSL_SIZES else self.category)
        h.point("flat", s, len(s) - 1, f"{s.name} over the flat points", indices=np.arange(start, len(s)))
        h.calc("median", f"median {s.name} over the flat points", "median({flat})")
        if not c and acc is not None:  # the accuracy the message quotes, at its highest
            h.point("acc", acc, int(np.argmax(acc.values)), f"highest {acc.name}")
        return [h]


# a value printed with 3 significant digits or fewer at every step ("loss=0.223" in Lightning's bar, a
# smoothed mean redrawn each step) repeats for a few steps in a healthy run; weights that do not change
# repeat it for many. Once an epoch ("train loss: 1.06e+02" three epochs running), a few repeats tell.
_COARSE_REPEATS = 50


def _coarse_every_step(s: Series, n: int) -> bool:
    """The last ``n`` points of ``s`` are one value of 3 significant digits or fewer, on consecutive steps."""
    return _printed_digits(float(s.values[-1])) <= 3 and bool(np.all(np.diff(s.steps[-n:]) <= 1))


def _validation_score(ctx: Context, min_points: int) -> Series | None:
    """With no validation loss, the first validation score (spaCy's "CATS_SCORE", an accuracy) of
    ``min_points`` or more, printed with 3 significant digits or more at its end, neither perfect nor 0 there
    (a score at its ceiling or floor repeats in a healthy run: a small development set fitted)."""
    for name in sorted(ctx.run.series):
        if "@rank" in name or not validation(name) or not score(name):
            continue
        f = ctx.run.series[name].finite()
        if len(f) < min_points:
            continue
        last, top = float(f.values[-1]), (100.0 if float(np.max(f.values)) > 1.0 else 1.0)
        if 0.0 < last < 0.999 * top and _printed_digits(last) >= 3:
            return f
    return None


def _printed_digits(v: float) -> int:
    """Significant digits of ``v`` as printed (the shortest repr of the float read: 0.223 -> 3)."""
    mantissa = repr(abs(v)).split("e")[0].replace(".", "").lstrip("0")
    return len(mantissa.rstrip("0")) or 1


# word and character error rates (HF's "wer", "eval_cer", ESPnet's "cer_ctc", MLPerf RNN-T's "WER")
_ERROR_RATE = re.compile(r"(?:^|_)(?:wer|cer)(?:_|$)")


def accuracies(ctx: Context) -> list[tuple[Series, np.ndarray]]:
    """Every accuracy the log prints (a name with "acc", not a per-rank copy) with points: its finite
    points, and their values as fractions (a value above 1 says the series is in %)."""
    out = []
    for name, series in ctx.run.series.items():
        if "acc" in name.lower() and "@rank" not in name:
            f = series.finite()
            if len(f):
                out.append((f, f.values / 100.0 if float(np.max(f.values)) > 1.0 else f.values))
    return out


def _accuracy_above_chance(ctx: Context, classes: int) -> bool:
    """Whether an accuracy the log prints (``test_acc1``, ``val_accuracy``, in % or as a fraction) is
    well above the 1/C of a uniform guess over ``classes``: then a loss that happens to sit near ln(C)
    is no uniform guess (training with mixup and label smoothing ends near 2.5 = ln(12) on ImageNet)."""
    chance = 1.0 / classes
    return any(float(np.max(v)) >= chance + 0.25 * (1.0 - chance) for _, v in accuracies(ctx))


def _accuracy_learns(ctx: Context, cut: float = 0.25) -> bool:
    """Whether an accuracy the log prints (in % or as a fraction) trends up (Kendall's tau at least 0.5)
    while its error, 1 - accuracy, falls by ``cut`` or more from its first point to the median of its
    last three: the model learns, however flat the loss is (a loss dominated by a term that barely
    moves, such as the KL term of Bayes by backprop)."""
    for _, v in accuracies(ctx):
        first, last = 1.0 - float(v[0]), 1.0 - float(np.median(v[-3:]))
        if v.size >= 4 and first > 0 and (first - last) / first >= cut and kendall_tau(v) >= 0.5:
            return True
        # (or doubles, over 6 points or more: near chance on many classes the error barely moves)
        if v.size >= 6 and float(v[0]) > 0 and 1.0 - last >= 2 * float(v[0]) and kendall_tau(v) >= 0.6:
            return True
    return False


def _accuracy_at_chance(ctx: Context, classes: int) -> Series | None:
    """The first accuracy the log prints when every one of them sits within half of 1/C of the 1/C of a
    uniform guess over ``classes`` on all its points (2 at least), else None."""
    chance = 1.0 / classes
    accs = accuracies(ctx)
    if not accs or any(v.size < 2 or float(np.max(np.abs(v - chance))) > 0.5 * chance for _, v in accs):
        return None
    return accs[0][0]


def _another_still(ctx: Context, v: Series) -> bool:
    """Whether another evaluation metric than ``v``, logged at each of ``v``'s steps, has one value there to
    every printed digit (not an error rate at its worst, which ``_no_output`` reads)."""
    for name, series in ctx.run.series.items():
        if name == v.name or "@rank" in name or not validation(name) or _ERROR_RATE.search(norm(name)):
            continue
        f = series.finite()
        at = np.isin(f.steps, v.steps)
        if int(np.count_nonzero(at)) == len(v) and float(np.ptp(f.values[at])) == 0.0:
            return True
    return False


def _still_tail(x: np.ndarray, tol: float = 0.0) -> int:
    """How many of the last values of ``x`` are within ``tol`` (relative) of the last one."""
    still = np.abs(x[::-1] - x[-1]) <= tol * abs(float(x[-1]))
    return len(x) if bool(np.all(still)) else int(np.argmin(still))


def _gradients_flow(ctx: Context, steps: np.ndarray, at_least: int) -> bool:
    """Whether the gradient norm is finite and non-zero at every one of ``steps`` it was logged at (at
    least ``at_least`` of them): a loss whose value is 0 by construction while its gradient is not, such
    as a policy-gradient surrogate at its first iteration (TRL's GRPO loss: the importance ratio is 1 and
    the advantages are centred, https://github.com/huggingface/trl/issues/3452)."""
    g = ctx.series("grad_norm")
    if g is None:
        return False
    at = g.values[np.isin(g.steps, steps)]
    return at.size >= at_least and bool(np.all(np.isfinite(at) & (at > 0)))


def _fell_below_print(x: np.ndarray, i: int) -> bool:
    """Whether the zeros from ``x[i]`` on are a small loss printed to two decimals or fewer ("0.00" in spaCy's
    training table): every value a whole number of hundredths, and the loss came down to them, the point
    before the first zero at half its highest before it or less, that highest 1 or more. Such a zero is a
    loss below 0.005, which a model fitting a small training set reaches; a loss cut to 0 by masking drops
    there from where it was."""
    f = x[np.isfinite(x)]
    if i < 2 or not f.size or not bool(np.all(np.abs(f * 100 - np.round(f * 100)) < 1e-6)):
        return False
    top = float(np.max(x[:i]))
    return top >= 1.0 and float(x[i - 1]) <= 0.5 * top


class ZeroLossOrGrad(Rule):
    """Detects a training loss or gradient norm that is exactly 0 for several logged steps.

    Why: an exact 0 is not a converged model; it is a masked-out loss (all labels ignored,
    -100 everywhere), a loss computed on nothing, skipped fp16 steps reported as 0, or a graph
    detached from the parameters.

    Fix: check label masking / padding, the loss reduction, that gradients reach the weights;
    with DeepSpeed fp16, check for skipped steps (TA104).

    Example: ``{'loss': 0.0, 'grad_norm': nan, ...}`` repeated.

    A loss of exactly 0 while the gradient norm logged at the same steps is finite and non-zero is
    a loss whose value is 0 by construction (a policy-gradient surrogate such as TRL's GRPO loss):
    gradients flow, nothing is masked out. Nor is a loss printed to two decimals that came down to "0.00"
    (below 0.005: a small training set fitted), rather than dropping there at once.

    Thresholds: ``min_run`` consecutive exact zeros (3).
    """

    id = "TA203"
    name = "exact-zero-loss-or-grad"
    category = Category.PLATEAU
    severity = Severity.HIGH
    follows = frozenset({Category.LOSS_SCALE_COLLAPSE})
    guidance = Guidance(
        fix="Check label masking and padding (all labels ignored gives a loss of exactly 0), the loss reduction, and "
            "that gradients reach the weights; with fp16, check for skipped steps.",
        impact="A non-zero loss that decreases; gradients flow.",
        verify="Print the number of non-ignored labels in one batch and the loss of that batch.")

    class Params(Thresholds):
        min_run: int = 3

    def check(self, ctx: Context) -> list[Hit]:
        hits: list[Hit] = []
        for role in ("loss", "grad_norm"):
            s = ctx.series(role, min_points=self.p.min_run)
            if s is None or adversarial(s.name):  # a GAN player's loss at 0 is a move of the game (a hinge loss's margin met)
                continue
            z = (s.values == 0.0)
            if not z.any():
                continue
            k = self.p.min_run
            runs = np.convolve(z.astype(np.int64), np.ones(k, dtype=np.int64), mode="valid") == k
            idx = np.flatnonzero(runs)
            if idx.size == 0:
                continue
            i = int(idx[0])
            if role == "loss" and (_gradients_flow(ctx, s.steps[z], k) or _fell_below_print(s.values, i)):
                continue
            h = self.hit(f"{s.name} is exactly 0 from step {int(s.steps[i])} ({int(z.sum())} of {len(s)} logged values)",
                         0.85, metric=s.name, first_bad_step=int(s.steps[i]), last_step=int(s.steps[np.flatnonzero(z)[-1]]))
            h.point("zeros", s, i, f"{s.name} from the first exact zero", indices=np.arange(i, min(len(s), i + 10)))
            h.calc("n_zero", f"exact zeros of {s.name} in the excerpt", "count({zeros} == 0)", unit="count")
            hits.append(h)
        return hits


def _climb_start(x: np.ndarray, i: int, factor: float) -> int:
    """Where the climb that reaches ``x[i]`` starts: the first of the points up to ``i``, all of them above
    the level before (the median of the points before ``i`` plus three robust standard deviations) and
    each more than a ``factor``-th of the next (a point that far below the next one is before a jump). A
    norm that doubles every few steps is above ``factor`` times its early level only a few doublings after
    it left its level."""
    before = x[:i]
    if before.shape[0] < 3:
        return i
    med = float(np.median(before))
    top = med + 3 * 1.4826 * float(np.median(np.abs(before - med)))
    j = i
    while j > 0 and float(x[j - 1]) > max(top, float(x[j]) / factor):
        j -= 1
    return j


class ExplodingGradients(Rule):
    """Detects exploding gradients from the grad-norm series: a sustained growth of the gradient
    norm (median of the last 20% over the median of the first 5 logged points) or repeated huge values
    (many points above ``factor`` times the early median), not one outlier.

    Why: growing gradients mean the optimization is unstable (lr too high for the curvature,
    recurrent weights with spectral radius > 1, no clipping); it ends in a loss blow-up or NaN.

    Fix: gradient clipping (``clip_grad_norm_`` at about the healthy norm), lower lr, for RNNs
    LSTM/GRU or orthogonal init, normalisation layers.

    Example: grad norm 0.8, 1.1, 3.5, 27, 310, 4800 ...

    The growth starts at the first point of the climb: the points before the first one above ``factor``
    times the early level that already stand above the level before them (its median plus three robust
    standard deviations), each more than a ``factor``-th of the next.

    Thresholds: ``factor`` growth factor (10; AutoTrainer uses 70 for layer ratios),
    ``frac_high`` fraction of second-half points above ``factor`` x early median (0.2, two points at least;
    or a norm that climbs over its last 5 points or more, each above the one before, ``factor`` times over
    them), ``jump``
    a one-step jump over every earlier point that, followed by more values that large, is an
    explosion at any log length (40).
    """

    id = "TA204"
    name = "exploding-gradients"
    category = Category.GRAD_EXPLOSION
    severity = Severity.HIGH
    explains = frozenset({Category.DIVERGENCE, Category.LOSS_SPIKE, Category.NAN_INF})
    guidance = Guidance(
        fix="Clip the gradient norm (near its healthy value), lower the learning rate; for RNNs use LSTM/GRU or "
            "orthogonal init.",
        impact="Grad norm stays in its early range; the loss no longer blows up.",
        verify="Log grad norm and check its growth factor stays below 10x.")

    class Params(Thresholds):
        factor: float = 10.0
        frac_high: float = 0.2
        min_points: int = 10
        jump: float = 40.0

    grid: ClassVar[Grid] = {"factor": (5.0, 10.0, 20.0), "jump": (20.0, 40.0, 80.0)}

    def check(self, ctx: Context) -> list[Hit]:
        g = ctx.series("grad_norm", min_points=3)
        if g is None:
            return []
        jump = self._jump(g) or self._level_shift(g.finite())
        if jump:
            return jump
        g = g.finite()
        if len(g) < self.p.min_points:
            return []
        x = g.values
        k = max(3, len(g) // 5)
        # baseline: the first few points (an RNN can blow up within 20 steps, inside any "first 20%")
        early = float(np.median(x[1:6] if len(g) > 6 else x[:5]))
        if early <= 0:
            return []
        late = float(np.median(x[-k:]))
        half = x[len(g) // 2:]
        frac = float(np.mean(half > self.p.factor * early))
        growth = late / early
        # repeated: two points at least (in a 10-point paste one outlier is a fifth of the second half)
        repeated = frac >= self.p.frac_high and int(np.count_nonzero(half > self.p.factor * early)) >= 2
        # or a steady climb: each of its last 5 points or more above the one before, ``factor`` times over them
        falls = np.flatnonzero(np.diff(x) <= 0)
        r = len(x) - 2 - int(falls[-1]) if falls.size else len(x) - 1  # rises since the last fall
        climb = r >= 4 and float(x[-1]) >= self.p.factor * float(x[-1 - r])
        if growth < self.p.factor and not repeated and not climb:
            return []
        above = np.flatnonzero(x > self.p.factor * early)
        i = _climb_start(x, int(above[0]), self.p.factor) if above.size else len(g) - k
        msg = (f"{g.name} grows {growth:.3g}x (median of the first 5 points {early:.4g}, of the last 20% {late:.4g}); "
               f"{frac:.0%} of the second half is above {self.p.factor:g}x the early level")
        if climb and growth < self.p.factor and not repeated:
            i = len(x) - 1 - r
            msg += f"; it rises at each of its last {r} points, {float(x[-1]) / float(x[i]):.3g}x over them"
        h = self.hit(msg, min(0.95, 0.6 + 0.1 * math.log10(max(growth, frac * 100, 1.0))), metric=g.name,
                     first_bad_step=int(g.steps[i]), last_step=int(g.steps[-1]))
        e_idx = np.arange(1, 6) if len(g) > 6 else np.arange(0, 5)
        h.point("early", g, int(e_idx[-1]), f"{g.name} over the first logged points", indices=e_idx)
        h.point("late", g, len(g) - 1, f"{g.name} over the last 20% of logged points", indices=np.arange(len(g) - k, len(g)))
        h.point("first", g, i, f"first {g.name} of the climb")
        h.calc("growth", "growth of the gradient norm, last 20% over the first points", "median({late}) / median({early})", unit="x")
        return [h]

    def _jump(self, g: Series) -> list[Hit]:
        """A jump of ``jump`` x or more over every earlier point, followed by more huge finite
        values: one blow-up is enough to see, however short the log."""
        x = g.values
        if len(x) < 3:
            return []
        # every i at once: the largest finite value before i, the largest finite value after it
        fin = np.isfinite(x)
        xf = np.where(fin, x, -np.inf)
        n_before = np.cumsum(fin)[1:-1]  # finite values in x[:i], i = 2 .. n-1
        top_before = np.maximum.accumulate(xf)[1:-1]
        top_after = np.append(np.maximum.accumulate(xf[::-1])[::-1][3:], -np.inf)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            ratio = x[2:] / top_before
            # one outlier the norm came back from is a spike (TA103); a jump straight to NaN is
            # the NaN's story (TA101): an explosion keeps growing over logged points
            ok = (n_before >= 2) & fin[2:] & (top_before > 0) & (ratio >= self.p.jump) & \
                (top_after >= self.p.jump * top_before)
        for i in (np.flatnonzero(ok)[:1] + 2).tolist():
            prev = x[:i]
            prev = prev[np.isfinite(prev)]
            r = float(x[i]) / float(np.max(prev))
            rest = x[i + 1:]
            msg = (f"{g.name} jumps {r:.3g}x at step {int(g.steps[i])} ({float(np.max(prev)):.4g} -> {x[i]:.4g})"
                   + ("; it is non-finite later" if rest.size and np.any(~np.isfinite(rest)) else ""))
            h = self.hit(msg, 0.8, metric=g.name, first_bad_step=int(g.steps[i]), last_step=int(g.steps[-1]))
            h.point("before", g, i - 1, f"{g.name} before the jump", indices=np.arange(0, i))
            h.point("jump", g, i, f"{g.name} at the jump")
            h.calc("ratio", "jump over the largest earlier grad norm", "{jump} / max({before})", unit="x")
            return [h]
        return []

    def _level_shift(self, g: Series) -> list[Hit]:
        """A short log's plain sign: the norm steps up to ``factor`` x the median of the points
        before it and every later point stays there (at least 3 points before, 2 after)."""
        x = g.values
        if len(x) >= self.p.min_points or len(x) < 5:
            return []  # a longer series is judged by its growth above
        for i in range(3, len(x) - 1):
            base = float(np.median(x[:i]))
            if base > 0 and float(np.min(x[i:])) >= self.p.factor * base:
                msg = (f"{g.name} steps up to {float(np.min(x[i:])) / base:.3g}x its earlier median at step "
                       f"{int(g.steps[i])} and stays there for the {len(x) - i} logged points after")
                h = self.hit(msg, 0.6, metric=g.name, first_bad_step=int(g.steps[i]), last_step=int(g.steps[-1]))
                h.point("before", g, i - 1, f"{g.name} before the step", indices=np.arange(0, i))
                h.point("after", g, len(x) - 1, f"{g.name} from the step on", indices=np.arange(i, len(x)))
                h.calc("ratio", "lowest grad norm after the step over the median before it",
                       "min({after}) / median({before})", unit="x")
                return [h]
        return []


class VanishingGradients(Rule):
    """Detects vanishing gradients: a gradient norm below ``abs_min`` (SageMaker Debugger's
    VanishingGradient default 1e-7), a per-layer gradient norm ``layer_ratio`` times smaller than
    the largest layer's (AutoTrainer's 1e-3), or a total norm that decays ``decay`` times while
    the loss stops improving.

    Why: the early layers stop learning; the loss plateaus above what the model can reach.

    Fix: ReLU/GELU instead of sigmoid/tanh in deep stacks, residual connections, normalisation
    layers, He/Xavier init, a higher lr for the early layers.

    Example: a 12-layer sigmoid MLP with first-layer grad norm 3e-9 vs last layer 0.02.

    One layer's norm logged beside the total norm counts against the total (at least the largest layer's).

    A gradient profile printed once (one line per layer or parameter, as debugging scripts do)
    counts too: every gradient statistic below ``abs_min``, or the smallest ``layer_ratio`` of the
    largest.

    A total gradient norm that falls ``cut_drop`` (5) times or more in one logged interval and stays down
    while the loss jumps up by more than ``jump`` (0.2) of its level and stays above it counts too: units
    that died together (a large update pushes every ReLU of a layer below zero). Such a jump also
    explains the divergence it starts with.

    Thresholds: ``abs_min`` (1e-7), ``layer_ratio`` (1e-3), ``decay`` (1e3).
    """

    id = "TA205"
    name = "vanishing-gradients"
    category = Category.GRAD_VANISHING
    severity = Severity.HIGH
    explains = frozenset({Category.PLATEAU, Category.DIVERGENCE})
    guidance = Guidance(
        fix="Use ReLU/GELU, residual connections and normalisation layers; He/Xavier init.",
        impact="Early layers receive gradients; the loss decreases.",
        verify="Log per-layer grad norms and check the smallest is within 1e-3 of the largest.")
    needs_more_data = ("per-layer gradient norms",)

    class Params(Thresholds):
        abs_min: float = 1e-7
        layer_ratio: float = 1e-3
        decay: float = 1e3
        min_points: int = 5
        cut_drop: float = 5.0
        jump: float = 0.2

    grid: ClassVar[Grid] = {"decay": (100.0, 1000.0, 10000.0)}

    def check(self, ctx: Context) -> list[Hit]:
        dead = self._dead_units(ctx)
        if dead:
            return dead
        g = ctx.series("grad_norm", finite=True)
        if g is not None and len(g) >= self.p.min_points:
            x = g.values
            second = x[len(x) // 2:]
            med2 = float(np.median(second))
            if 0 < med2 < self.p.abs_min:
                i = int(np.flatnonzero(x < self.p.abs_min)[0])
                h = self.hit(f"{g.name} is {med2:.3g} (median of the second half), below {self.p.abs_min:g}", 0.85,
                             metric=g.name, first_bad_step=int(g.steps[i]), last_step=int(g.steps[-1]))
                h.point("second", g, len(g) - 1, f"{g.name} over the second half", indices=np.arange(len(x) // 2, len(x)))
                h.calc("median", f"median {g.name} in the second half", "median({second})")
                return [h]
            k = max(3, len(g) // 5)
            early = float(np.median(x[:k]))
            late = float(np.median(x[-k:]))
            loss = ctx.series("loss", finite=True)
            flat = False
            if loss is not None and len(loss) >= 6:
                lh, lt = _head_tail(loss.values)
                flat = lh != 0 and (lh - lt) / abs(lh) < 0.02
            if late > 0 and early / late >= self.p.decay and flat:
                i = int(np.flatnonzero(x < early / self.p.decay)[0])
                h = self.hit(f"{g.name} decays {early / late:.3g}x while the loss stops improving", 0.7, metric=g.name,
                             first_bad_step=int(g.steps[i]), last_step=int(g.steps[-1]))
                h.point("early", g, k - 1, f"{g.name} early", indices=np.arange(0, k))
                h.point("late", g, len(g) - 1, f"{g.name} late", indices=np.arange(len(g) - k, len(g)))
                h.calc("decay", "decay of the gradient norm", "median({early}) / median({late})", unit="x")
                return [h]
        profile = self._profile(ctx)
        if profile:
            return profile
        layers = [ctx.run.series[n].finite() for n in ctx.roles.layer_grad_norms]
        layers = [s for s in layers if len(s) >= self.p.min_points]
        if len(layers) == 1 and g is not None and len(g) >= self.p.min_points:
            layers.append(g)  # one layer beside the total norm, which is at least the largest layer's
        if len(layers) >= 2:
            meds = np.array([float(np.median(s.values[len(s) // 2:])) for s in layers])
            lo, hi = int(np.argmin(meds)), int(np.argmax(meds))
            if meds[hi] > 0 and meds[lo] / meds[hi] < self.p.layer_ratio:
                a, b = layers[lo], layers[hi]
                below = np.flatnonzero(a.values < meds[hi] * self.p.layer_ratio)
                i = int(below[0]) if below.size else 0
                h = self.hit(f"{a.name} is {meds[lo] / meds[hi]:.2g} of {b.name} (median of the second half): the "
                             f"gradient vanishes before it reaches the early layers", 0.85, metric=a.name,
                             first_bad_step=int(a.steps[i]), last_step=int(a.steps[-1]))
                h.point("small", a, len(a) - 1, f"{a.name}, second half", indices=np.arange(len(a) // 2, len(a)))
                h.point("large", b, len(b) - 1, f"{b.name}, second half", indices=np.arange(len(b) // 2, len(b)))
                h.calc("ratio", "smallest over largest per-layer grad norm", "median({small}) / median({large})", unit="ratio")
                return [h]
        return []


    def _dead_units(self, ctx: Context) -> list[Hit]:
        """The gradient norm cut ``cut_drop`` times at once and held down (:func:`_gradient_cut`) where the loss
        jumps up by more than ``jump`` of its level and stays above where it was to the end: the units died
        together (ReLUs pushed below zero by one large update output zero and pass no gradient), and what
        the model learnt through them is gone."""
        c = _cut_on_loss(ctx, self.p.cut_drop, ctx.series("loss", finite=True))
        if c is None or c.before <= 0 or c.after - c.before <= self.p.jump * c.before \
                or c.end - c.before <= 0.5 * self.p.jump * c.before:
            return []
        g, s, at = c.g, c.s, int(c.g.steps[c.j])
        h = self.hit(f"{g.name} dropped {c.level / float(g.values[c.j]):.3g}x at step {at} (from {c.level:.4g}) and stayed "
                     f"down while {s.name} jumped from {c.before:.4g} to {c.after:.4g} and stayed above it ({c.end:.4g} at "
                     "the end): the units died at once and pass no gradient (dead ReLUs after one large update)", 0.75,
                     metric=g.name, first_bad_step=at, last_step=int(g.steps[-1]), severity="high")
        c.points(h)
        last = min(c.i + 3, len(s))
        h.point("jump", s, last - 1, f"{s.name} after the drop", indices=np.arange(c.i, last))
        return [h]

    def _profile(self, ctx: Context) -> list[Hit]:
        allp = _grad_profile(ctx)
        if len(allp) < 2:
            return []
        # compare like with like: the same statistic of different layers ("Layer 3 mean |grad|")
        kinds: dict[str, list[Series]] = {}
        for g in allp:
            kinds.setdefault(_NUMBER_RUN.sub("#", g.name), []).append(g)
        prof = max(kinds.values(), key=len)
        everything = np.array([abs(float(g.values[-1])) for g in allp])
        last = np.array([abs(float(g.values[-1])) for g in prof])
        lo, hi = int(np.argmin(last)), int(np.argmax(last))
        if float(everything.max()) <= self.p.abs_min:
            prof, last = allp, everything
            lo, hi = int(np.argmin(last)), int(np.argmax(last))
            msg = (f"every printed gradient statistic is below {self.p.abs_min:g} ({len(prof)} of them, the largest "
                   f"{float(last[hi]):.3g} in {prof[hi].name}): the gradients have vanished")
        elif len(prof) >= 3 and float(last[hi]) > 0 and float(last[lo]) / float(last[hi]) < self.p.layer_ratio:
            msg = (f"{prof[lo].name} is {float(last[lo]):.3g}, {float(last[lo]) / float(last[hi]):.2g} of {prof[hi].name} "
                   f"({float(last[hi]):.3g}): the gradient vanishes on its way to the early layers")
        else:
            return []
        a, b = prof[lo], prof[hi]
        h = self.hit(msg, 0.75, metric=a.name, first_bad_step=int(a.steps[-1]), last_step=int(a.steps[-1]))
        h.point("small", a, len(a) - 1, f"{a.name} (smallest gradient statistic)")
        h.point("large", b, len(b) - 1, f"{b.name} (largest gradient statistic)")
        h.calc("ratio", "smallest over largest gradient statistic", "abs({small}) / abs({large})", unit="ratio")
        return [h]


def _grad_profile(ctx: Context) -> list[Series]:
    """Gradient statistics printed per layer or per parameter ("layers.0.weight has gradient mean of",
    "Layer 3: mean |grad| ="), each as its own series, without the run's total grad norm."""
    total = ctx.roles.names.get("grad_norm")
    out = []
    for name, s in ctx.run.series.items():
        n = name.lower()
        signed_mean = ("mean" in n or "average" in n or "avg" in n) and "abs" not in n
        # a signed mean of gradients is ~0 by cancellation, whatever their size: not a magnitude
        if name != total and "@rank" not in name and ("grad" in n or "dl/dw" in n) and not signed_mean:
            f = s.finite()
            if len(f):
                out.append(f)
    return out


class LearningRateJump(Rule):
    """Detects an upward jump of the learning rate outside warm-up: the lr multiplies by at least
    ``factor`` from one logged point to the next, and the increment is far larger than the
    increments before it (a linear or cosine warm-up has steady increments).

    Why: a sudden lr increase is the most common cause of a loss spike or divergence right after
    it (a mis-set schedule, a resumed run with a fresh scheduler, a config override).

    Fix: check the scheduler state on resume, the schedule's milestones and units (steps vs
    epochs), and any lr override in the launch config.

    Example: lr 3.0e-4, 3.0e-4, 3.0e-3 at step 500, and the loss jumps at step 501.

    A jump with no other after it, taken calmly by the training loss (its next 3 points no higher than the 3
    before, and falling by a fifth or more from there), is a schedule's step, not a fault: timm's per-epoch
    warm-up holds ``warmup_lr`` for the first epoch and steps to the base lr at its end. An lr that jumps
    again and again (a StepLR with ``gamma`` 10) is reported at its first jump however the loss takes it.

    Thresholds: ``factor`` (3), ``increment_ratio`` jump vs median earlier increment (10).
    """

    id = "TA206"
    name = "lr-jump"
    category = Category.DIVERGENCE
    severity = Severity.LOW
    role = Role.PRECURSOR
    guidance = Guidance(
        fix="Restore the intended learning-rate schedule: check the scheduler state on resume, its milestones and "
            "units (steps vs epochs), and any lr override in the launch config.",
        impact="The lr follows its schedule and the symptom after the jump does not occur.",
        verify="Log the learning rate every step and check there is no jump outside warm-up.")

    class Params(Thresholds):
        factor: float = 3.0
        increment_ratio: float = 10.0
        min_history: int = 3

    def check(self, ctx: Context) -> list[Hit]:
        lr = ctx.series("lr", finite=True, min_points=self.p.min_history + 2)
        if lr is None:
            return []
        x = lr.values
        # the change per step between logged points: a warm-up seen across a gap in the log (a paste's
        # "..." between step 3 and step 2498) rises by its usual increment times the steps it spans
        d = np.diff(x) / np.maximum(np.diff(lr.steps), 1)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(x[:-1] > 0, x[1:] / x[:-1], 0.0)
        cand = np.flatnonzero(ratio >= self.p.factor) + 1
        cand = cand[cand >= self.p.min_history]
        for i in cand:
            prev = np.abs(d[max(0, i - 21): i - 1])
            prev = prev[prev > 0]
            typical = float(np.median(prev)) if prev.size else 0.0
            if (typical and d[i - 1] < self.p.increment_ratio * typical) or \
                    (i == cand[-1] and _taken_calmly(ctx, int(lr.steps[i]))):
                continue
            msg = f"{lr.name} jumps {x[i] / x[i - 1]:.3g}x at step {int(lr.steps[i])}: {x[i - 1]:.4g} -> {x[i]:.4g}"
            h = self.hit(msg, 0.9, metric=lr.name, first_bad_step=int(lr.steps[i]), last_step=int(lr.steps[i]),
                         cause=f"likely cause: {msg}")
            h.point("before", lr, i - 1, f"{lr.name} before the jump")
            h.point("after", lr, i, f"{lr.name} after the jump")
            h.calc("jump", "lr ratio after/before the jump", "{after} / {before}", unit="x")
            return [h]
        return []


def _taken_calmly(ctx: Context, step: int) -> bool:
    """Whether the training loss takes an lr jump at ``step`` calmly: the median of its 3 points from
    there no higher than that of the 3 before, and a fall of a fifth or more from there on
    (:func:`_learning_while`)."""
    loss = ctx.series("loss", finite=True)
    if loss is None:
        return False
    before, after = loss.values[loss.steps < step][-3:], loss.values[loss.steps >= step][:3]
    return before.size > 0 and after.size > 0 and float(np.median(after)) <= float(np.median(before)) \
        and _learning_while(ctx, step, 0.2)


def _learning_while(ctx: Context, step: int, drop: float) -> bool:
    """Whether the training loss falls by ``drop`` (relative) or more from ``step`` on: the median of its
    first fifth there (three points at least) against the median of its last fifth, so that batch-to-batch
    noise of a per-step loss does not pass for a fall."""
    loss = ctx.series("loss", finite=True)
    if loss is None:
        return False
    x = loss.values[loss.steps >= step]
    if x.size < 4:
        return False
    k = max(3, x.size // 5)
    first, last = float(np.median(x[:k])), float(np.median(x[-k:]))
    return first > 0 and last <= (1 - drop) * first


class LearningRateZero(Rule):
    """Detects a learning rate that is 0 for most of the run (outside the first logged point and
    the last 10%, where warm-up from 0 and decay to 0 are normal).

    Why: with lr 0 nothing trains: the loss stays flat and compute is wasted.

    Fix: check the scheduler (warm-up length longer than the run, ``min_lr``/``max_lr`` swapped,
    a schedule in epochs stepped per batch), the optimizer's param groups, lr overrides.

    Example: ``learning rate: 0.000000E+00`` on every line.

    A training loss that falls ``loss_drop`` or more over the same steps says the weights move: the lr
    is small and printed with too few digits ("train_lr": "0.000"), not 0. An excerpt from late in a
    run (more steps before its first point than it holds) whose lr is 0 throughout may be the end of
    a schedule that decays to 0 (llm.c's cosine with ``-q 0.0``, its final_learning_rate_frac): it does not
    count, unless the log prints the planned steps beside the step and the excerpt starts before the
    last 10% of them ("Step 380000/1000000").

    A point whose iterations were all skipped (Megatron's "number of skipped iterations" as many as the
    iterations since the point before) does not count: the scheduler does not step on a skipped update
    (megatron/training/training.py, ``train_step``), so an fp16 run calibrating its loss scale at the
    start of warm-up prints lr 0 there.

    Thresholds: ``zero_frac`` fraction of zero lr points (0.5), ``min_points`` (3), ``loss_drop`` (0.05).
    """

    id = "TA207"
    name = "lr-zero"
    category = Category.PLATEAU
    severity = Severity.HIGH
    explains = frozenset({Category.PLATEAU})
    guidance = Guidance(
        fix="Fix the learning-rate schedule: the lr is 0, so nothing trains (warm-up longer than the run, min/max lr "
            "swapped, a per-epoch schedule stepped per batch, param groups).",
        impact="The lr is positive after warm-up and the loss decreases.",
        verify="Print the optimizer's param_groups[*]['lr'] after a few steps: it must be > 0.")

    class Params(Thresholds):
        zero_frac: float = 0.5
        min_points: int = 3
        loss_drop: float = 0.05

    def check(self, ctx: Context) -> list[Hit]:
        lr = ctx.series("lr", finite=True, min_points=self.p.min_points)
        if lr is None:
            return []
        lr = lr.take(~_all_skipped(ctx, lr.steps))
        if len(lr) < self.p.min_points:
            return []
        end = max(2, int(len(lr) * 0.9))
        body = lr.values[1:end]
        frac = float(np.mean(body == 0)) if body.size else 0.0
        if frac < self.p.zero_frac:
            return []
        zeros = np.flatnonzero(lr.values == 0)
        i = int(zeros[0])
        total = ctx.run.meta.get(STEP_TOTAL)
        if zeros.size == len(lr) and _late_excerpt(ctx, lr) and (total is None or lr.steps[0] >= 0.9 * total):
            return []  # an excerpt from late in a run, 0 throughout: where a schedule decays to 0 (its last 10%)
        if _learning_while(ctx, int(lr.steps[i]), self.p.loss_drop):
            return []  # the loss falls, so the weights move: a small lr printed with too few digits ("0.000")
        h = self.hit(f"{lr.name} is 0 on {frac:.0%} of the logged steps: the weights do not move", 0.9, metric=lr.name,
                     first_bad_step=int(lr.steps[i]), last_step=int(lr.steps[zeros[-1]]))
        h.point("body", lr, end - 1, f"{lr.name} on the logged steps (first point and last 10% excluded)",
                indices=np.arange(1, end))
        h.calc("zero_frac", "fraction of logged lr values that are exactly 0", "count({body} == 0) / len({body})",
               unit="ratio")
        return [h]




def _all_skipped(ctx: Context, steps: np.ndarray) -> np.ndarray:
    """Which of ``steps`` close an interval whose iterations were all skipped (the log's count of skipped
    iterations at that step as large as the iterations since the logged step before it)."""
    out = np.zeros(steps.size, dtype=bool)
    sk = ctx.series("skipped", finite=True)
    if sk is None:
        return out
    at = np.searchsorted(sk.steps, steps)
    found = (at < len(sk)) & (sk.steps[np.minimum(at, len(sk) - 1)] == steps)
    span = np.diff(steps, prepend=0)
    out[found] = sk.values[at[found]] >= np.maximum(span[found], 1)
    return out


class RepeatingLoss(Rule):
    """Detects a loss that repeats exactly: the same sequence of per-step losses comes back (every
    epoch prints the values of the epoch before, to all printed digits).

    Why: with a changing model, the loss of a batch is never printed identically twice; an exact
    repeat means the weights do not change (the optimizer updates nothing: parameters not in the
    optimizer, adapters not attached, a learning rate of 0, gradients discarded).

    Fix: check that the trained parameters are in the optimizer and require grad, that the
    optimizer steps, and that the lr is above 0.

    Example: epoch 1: 0.9741, 1.3742, 1.2390, 0.9670; epoch 2: 0.9741, 1.3742, 1.2390, 0.9670.

    Thresholds: ``min_run`` values repeated in the same order (4).
    """

    id = "TA208"
    name = "repeating-loss"
    category = Category.PLATEAU
    severity = Severity.HIGH
    guidance = NOT_LEARNING

    class Params(Thresholds):
        min_run: int = 4

    def check(self, ctx: Context) -> list[Hit]:
        s = ctx.series("loss", finite=True, min_points=2 * self.p.min_run)
        if s is None:
            return []
        x = s.values
        k = self.p.min_run
        w = sliding_window_view(x, k)
        # a constant or partly constant run is a plateau's business, not a repeat: windows of k distinct values
        distinct = np.ones(len(w), dtype=bool)
        for a in range(k):
            for b in range(a + 1, k):
                distinct &= w[:, a] != w[:, b]
        idx = np.flatnonzero(distinct)
        if idx.size < 2:
            return []
        rows = np.ascontiguousarray(w[idx] + 0.0)  # + 0.0: -0.0 and 0.0 are one value, as == has them
        firsts = idx[first_equal_row(rows)]  # where each window's values first came
        again = np.flatnonzero(idx >= firsts + k)  # came back after the first time, not overlapping it
        if not again.size:
            return []
        i, j = int(idx[again[0]]), int(firsts[again[0]])
        msg = (f"{s.name} repeats exactly: the {k} values from step {int(s.steps[j])} come back in the same "
               f"order from step {int(s.steps[i])} ({', '.join(f'{v:g}' for v in x[i:i + k])}): the weights do not change")
        h = self.hit(msg, 0.85, metric=s.name, first_bad_step=int(s.steps[j]), last_step=int(s.steps[-1]))
        h.point("once", s, j + k - 1, f"{s.name} the first time", indices=np.arange(j, j + k))
        h.point("again", s, i + k - 1, f"{s.name} again", indices=np.arange(i, i + k))
        h.calc("diff", "largest difference between the two runs of values", "max(abs({again} - {once}))")
        return [h]


class RepeatedOutputs(Rule):
    """Detects mode collapse in what the model generates: the samples a log prints (``PRED 3:``,
    ``Sample:``, ``Generated:``, fairseq's ``H-12``) are the same text for different inputs, or one
    output repeats a phrase again and again.

    Why: a model that says the same sentence whatever the input (or loops on a phrase) has
    collapsed to the most likely output; the loss can look fine while it does.

    Fix: check the decoding (max length, repetition penalty), the training data (duplicates, a
    dominant target), the learning rate and the number of steps (an under-trained seq2seq model
    outputs the most frequent sentence).

    Example: ``PRED 713: ...`` and ``PRED 714: ...`` identical for two different ``SENT`` lines.

    Thresholds: ``min_samples`` (2), ``same_frac`` share of samples that are one identical text
    (0.6), ``min_repeat`` consecutive repetitions of a phrase in one sample (4).
    """

    id = "TA209"
    name = "repeated-outputs"
    category = Category.MODE_COLLAPSE
    severity = Severity.HIGH
    guidance = Guidance(
        fix="Check decoding (length limits, repetition penalty), duplicated or dominant targets in the data, and "
            "whether the model trained long enough at a sound learning rate.",
        impact="Different inputs give different, input-dependent outputs.",
        verify="Generate for a handful of varied inputs and check the outputs differ and follow the input.")

    class Params(Thresholds):
        min_samples: int = 2
        same_frac: float = 0.6
        min_repeat: int = 4

    def check(self, ctx: Context) -> list[Hit]:
        for e in ctx.events(EventKind.SAMPLES):
            n, same, reps = e.data.get("samples", 0), e.data.get("most_repeated_output", 0), e.data.get("repeat", 1)
            if n >= self.p.min_samples and same >= 2 and same / n >= self.p.same_frac:
                msg = f"{same} of {n} generated samples are the same text: the model says the same thing whatever the input"
            elif reps >= self.p.min_repeat:
                msg = f"a generated sample repeats {e.data.get('phrase', '')[:60]!r} {reps} times in a row: the model loops"
            else:
                continue
            counted = ctx.run.meta.get("steps_are_line_counts")  # a generation log has no training step
            h = self.hit(msg, 0.8, first_bad_step=None if counted else ctx.step_of(e))
            h.ev("samples", e, "the generated samples")
            return [h]
        return []


# a metric named as a cross-entropy (OpenNMT-py's "xent", DETR's "loss_ce", MXNet's "cross-entropy") or a
# perplexity; "nll" is left out: the negative log-likelihood of a continuous density (GaussianNLLLoss, a
# normalising flow) is below 0 whenever the density is above 1, so a negative NLL can be healthy
_CROSS_ENTROPY = re.compile(r"(?:^|[^a-z])(?:xent|ce|cross[ _-]?entropy)(?:[^a-z]|$)")
_PERPLEXITY = re.compile(r"(?:^|[^a-z])(?:ppl|perplexity)(?:[^a-z]|$)")


class ImpossibleLoss(Rule):
    """Detects a cross-entropy below 0 or a perplexity below 1: values no cross-entropy of
    probabilities can take, so the loss is not computed on log-probabilities.

    Why: a cross-entropy ``-log p(target)`` of probabilities is at least 0 and its perplexity at
    least 1. Below that, the loss is fed something else: ``nn.NLLLoss`` on raw logits instead of
    ``log_softmax`` output (NLLLoss expects log-probabilities,
    https://pytorch.org/docs/stable/generated/torch.nn.NLLLoss.html), so it rewards growing logits
    without bound and the loss falls to minus infinity while the model learns nothing.

    Fix: apply ``log_softmax`` before ``NLLLoss``, or use ``CrossEntropyLoss`` on the raw logits
    (it applies log_softmax itself); check the logged value is the loss, not a logit or score.

    Example: ``{"step": 50, "xent": -9.48, "ppl": 8e-05}``.

    Thresholds: a cross-entropy below ``ce_below`` (-0.01) or a perplexity below ``ppl_below``
    (0.99) on at least ``min_points`` (2) logged values; the margins absorb printed rounding.
    """

    id = "TA210"
    name = "impossible-loss"
    category = Category.PLATEAU
    severity = Severity.HIGH
    guidance = Guidance(
        fix="Give the loss log-probabilities: apply log_softmax before NLLLoss, or use CrossEntropyLoss on the raw "
            "logits; check that the logged value is the loss itself.",
        impact="The loss starts near ln(number of classes) and stays at or above 0 (perplexity at or above 1).",
        verify="On one batch, check torch.exp(log_probs).sum(-1) is 1 for every row and the loss is >= 0.")

    class Params(Thresholds):
        ce_below: float = -0.01
        ppl_below: float = 0.99
        min_points: int = 2

    def check(self, ctx: Context) -> list[Hit]:
        found: list[tuple[int, Series, int, float, str]] = []
        for name, s in ctx.run.series.items():
            low = name.lower()
            bound, floor = (self.p.ppl_below, "1") if _PERPLEXITY.search(low) else \
                (self.p.ce_below, "0") if _CROSS_ENTROPY.search(low) else (None, "")
            if bound is None:
                continue
            below = np.flatnonzero(np.isfinite(s.values) & (s.values < bound))
            if below.size >= self.p.min_points:
                found.append((int(s.steps[below[0]]), s, int(below[0]), bound, floor))
        if not found:
            return []
        step, s, i, bound, floor = min(found, key=lambda f: (f[0], f[4], f[1].name))  # the loss before its perplexity
        n = int(np.sum(np.isfinite(s.values) & (s.values < bound)))
        kind = "perplexity" if floor == "1" else "cross-entropy"
        h = self.hit(f"{s.name} is {s.values[i]:.4g} at step {step}, below {floor} ({n} of {len(s)} logged values): "
                     f"no {kind} of probabilities goes below {floor}, so the loss is not computed on "
                     "log-probabilities (NLLLoss on raw logits?)", 0.9, metric=s.name, first_bad_step=step,
                     last_step=int(s.steps[-1]))
        h.point("first", s, i, f"the first {s.name} below {floor}")
        h.point("values", s, len(s) - 1, f"{s.name} on every logged step", indices=np.arange(len(s)))
        h.calc("n_below", f"logged values of {s.name} below {bound:g}", f"count({{values}} < {bound!r})", unit="count")
        return [h]


class WorseThanUniform(Rule):
    """Detects a language model worse than a uniform guess over any vocabulary: a perplexity above
    ``max_ppl`` (1e6) from some logged point to the end of the log.

    Why: a uniform guess over V tokens has perplexity V, and vocabularies stay below a million
    tokens (GPT-2 50,257; Llama 3 128,256; Gemma 256,000). A model whose perplexity ends above that
    predicts worse than chance: its updates have thrown the weights far off (a learning rate far
    too high, no clipping), and it does not come back by itself.

    Fix: lower the learning rate (an RNN LM trained with SGD at lr 20 needs an LSTM or clipping; a
    GRU at SGD lr 1.0 needs 0.1), clip the gradient norm, and restart from the last checkpoint
    whose perplexity was sane.

    Example: ``Epoch 1 ; Iteration 7012/7012 ; Optim SGD LR 1.0000 ; ... ; Perplexity 16063139.21``.

    A huge perplexity in the first ``min_step`` (10) steps does not count: the first updates from
    initialisation pass through such values in healthy runs (fairseq's 13B FSDP example prints 3.9e7
    at update 3, 1.9e5 at update 10).

    Thresholds: ``max_ppl`` (1e6), ``min_step`` (10).
    """

    id = "TA213"
    name = "worse-than-uniform"
    category = Category.DIVERGENCE
    severity = Severity.HIGH
    guidance = Guidance(
        fix="Lower the learning rate (by 10x to start), clip the gradient norm, and restart from the last checkpoint "
            "whose perplexity was below the vocabulary size.",
        impact="The perplexity falls below the vocabulary size within the first epoch and keeps falling.",
        verify="Re-run the first epoch with the lower learning rate; the perplexity ends below the vocabulary size.")

    class Params(Thresholds):
        max_ppl: float = 1e6
        min_step: int = 10

    def check(self, ctx: Context) -> list[Hit]:
        found: list[tuple[int, Series, int]] = []
        for name, s in sorted(ctx.run.series.items()):
            if "@rank" in name or not _PERPLEXITY.search(name.lower()):
                continue
            ok = np.isfinite(s.values)
            v, idx = s.values[ok], np.flatnonzero(ok)
            if not v.size or float(v[-1]) <= self.p.max_ppl or int(s.steps[idx[-1]]) <= self.p.min_step:
                continue
            below = np.flatnonzero(v <= self.p.max_ppl)
            k = int(below[-1]) + 1 if below.size else 0  # from here to the end, above max_ppl
            found.append((int(s.steps[idx[k]]), s, int(idx[k])))
        if not found:
            return []
        step, s, i = min(found, key=lambda f: (f[0], f[1].name))
        last = float(s.values[np.flatnonzero(np.isfinite(s.values))[-1]])
        h = self.hit(f"{s.name} is {float(s.values[i]):.4g} at step {step} and ends at {last:.4g}: above "
                     f"{self.p.max_ppl:.0e}, worse than a uniform guess over any vocabulary; the weights have diverged",
                     0.85, metric=s.name, first_bad_step=step, last_step=int(s.steps[-1]))
        h.point("first", s, i, f"the first {s.name} of the stretch above {self.p.max_ppl:.0e} that lasts to the end")
        h.point("values", s, len(s) - 1, f"{s.name} from there on", indices=np.arange(i, len(s)))
        return [h]


# a metric that counts how varied the generated samples are: modes covered (the mixture-of-Gaussians
# benchmark of Metz et al., "Unrolled GANs", https://arxiv.org/abs/1611.02163, section 3.1), distinct-n
# (Li et al., https://arxiv.org/abs/1510.03055), or a diversity / unique-samples count
_DIVERSITY = re.compile(r"(?:^|[^a-z])(?:modes|modes_covered|num_modes|n_modes|distinct(?:_?\d)?|diversity|"
                        r"unique_(?:samples|outputs|images|preds|predictions))(?:[^a-z]|$)")


class DiversityCollapse(Rule):
    """Detects mode collapse in a logged diversity metric: the number of modes the generator
    covers (or distinct-n, a diversity score, unique samples) falls to a small share of the level
    it had reached, and stays there to the end of the log.

    Why: a generator that covered the modes and then maps every noise vector to one or two
    outputs has collapsed; a GAN's losses often look normal while it does (the discriminator and
    the generator keep trading), so the diversity metric is the evidence.

    Fix: look at what changed at the first bad step (the noise fed to the generator, its
    temperature, the learning rates of the two networks); minibatch discrimination, unrolled or
    Wasserstein losses, and a lower generator lr counter collapse.

    Example: ``step   600/800 | d_loss 1.2102 | g_loss 0.8884 | modes_covered 0`` after
    ``modes_covered 8`` on every step before.

    Thresholds: the last ``min_tail`` (3) or more logged values all at or below ``drop_frac``
    (0.25) of the highest level reached before them (a centred median of 3 points, so one lucky
    batch is not a level).
    """

    id = "TA211"
    name = "diversity-collapse"
    category = Category.MODE_COLLAPSE
    severity = Severity.HIGH
    guidance = Guidance(
        fix="Check what changed at the first bad step (the generator's noise input, its temperature, the lrs of the "
            "two networks); counter collapse with a lower generator lr, minibatch discrimination or a Wasserstein loss.",
        impact="The diversity metric returns to the level it had reached and stays there.",
        verify="Log the diversity metric (modes covered, distinct-n) and look at a grid of samples at the same steps.")

    class Params(Thresholds):
        min_tail: int = 3
        drop_frac: float = 0.25

    def check(self, ctx: Context) -> list[Hit]:
        for name in sorted(ctx.run.series):
            if "@rank" in name or not _DIVERSITY.search(norm(name)):
                continue
            s = ctx.run.series[name]
            ok = np.isfinite(s.values)
            v, steps = s.values[ok], s.steps[ok]
            n = v.size
            if n < self.p.min_tail + 2:
                continue
            level = rolling_median(v, 3)
            peak = np.concatenate([[0.0], np.maximum.accumulate(level)[:-1]])  # highest level before each point
            tail_max = np.maximum.accumulate(v[::-1])[::-1]  # highest value from each point on
            hit_at = np.flatnonzero((peak > 0) & (tail_max <= self.p.drop_frac * peak)
                                    & (np.arange(n) <= n - self.p.min_tail))
            if not hit_at.size:
                continue
            i = int(hit_at[0])
            top = int(np.argmax(level[:i]))
            idx = np.flatnonzero(ok)
            h = self.hit(f"{name} fell from {level[top]:g} (step {int(steps[top])}) to {v[i]:g} at step {int(steps[i])} "
                         f"and stays at or below {v[i:].max():g} for the last {n - i} logged values: the generated "
                         "samples collapsed onto a few modes", 0.8, metric=name, first_bad_step=int(steps[i]),
                         last_step=int(steps[-1]))
            h.point("before", s, int(idx[top]), f"{name} at the level it had reached")
            h.point("first", s, int(idx[i]), f"{name} at the first collapsed step")
            h.point("tail", s, int(idx[-1]), f"{name} over the collapsed stretch", indices=idx[i:])
            return [h]
        return []


def _flat_from(x: np.ndarray) -> int | None:
    """Where a loss that does not learn went flat: the first point within three times its point-to-point
    noise (0.01% of the level at least) of the last half's median from which at most a tenth of the points stray from that band, when
    the points before it fell to there from more than twice the band (a few early updates, then frozen
    weights) and the flat stretch is most of the log and level; None when it is flat from its start,
    flattens only late, or keeps going down (a slow learner)."""
    n = x.shape[0]
    half = x[n // 2:]
    level = float(np.median(half))
    noise = float(np.median(np.abs(np.diff(half)))) if half.shape[0] > 1 else 0.0
    band = max(3.0 * noise, 1e-4 * abs(level))  # a loss at ln(10) printed to 14 digits wiggles by 1e-5
    out = np.abs(x - level) > band
    if float(x[0]) - level <= 2 * band:
        return None
    stray_after = np.cumsum(out[::-1])[::-1]  # points out of the band from each point on
    ok = np.flatnonzero(~out & (stray_after <= 0.1 * (n - np.arange(n))))
    if not ok.shape[0] or int(ok[0]) > n // 2:
        return None
    j = int(ok[0])
    rest = x[j:]
    k = rest.shape[0] // 2
    if abs(float(np.median(rest[:k])) - float(np.median(rest[k:]))) > band / 2:
        return None  # still going down (a slow learner): no flat stretch to start from
    return j


# the spread of a Siamese network's l2-normalised output, logged per dimension ("z_std", "emb_std",
# "output_std"): SimSiam (Chen and He, https://arxiv.org/abs/2011.10566, section 4.1 and figure 2) monitors
# it: about 1/sqrt(d) while the network learns, falling to 0 when every input maps to one vector
_OUTPUT_STD = re.compile(r"(?:^|_)(?:z|p|h|emb|embed|embedding|feat|feature|repr|rep|representation|proj|projection|"
                         r"out|output)s?_std(?:_|$)|(?:^|_)std_(?:z|p|emb|embedding|feat|feature|repr|proj|out|output)s?(?:_|$)")


class RepresentationCollapse(Rule):
    """Detects a collapsed Siamese (self-supervised) network: a negative-cosine loss at its floor
    of -1 while the spread of the normalised output, when logged, keeps falling.

    Why: SimSiam's and BYOL's loss is the negative cosine similarity of two views' outputs; it is
    -1 exactly when both outputs are the same vector, which every input can give when the network
    outputs a constant. SimSiam's paper (https://arxiv.org/abs/2011.10566, figure 2) shows it: with
    the stop-gradient removed the loss goes to -1 and the output's per-dimension std to 0, while a
    learning run stays above -1 with its std near 1/sqrt(d).

    Fix: restore the stop-gradient on the target branch (``z.detach()``), keep the predictor
    head, check the augmentations differ between the two views, and lower the predictor's lr.

    Example: ``train_loss=-.998, z_std=0.011`` after ``train_loss=-.975, z_std=0.029``.

    Thresholds: every logged loss within [-1, 0] (a negative cosine) and the last ``min_tail`` (3)
    within ``floor_margin`` (0.01) of -1; an output std, when logged, lower at its end than at its start.
    """

    id = "TA212"
    name = "representation-collapse"
    category = Category.MODE_COLLAPSE
    severity = Severity.HIGH
    guidance = Guidance(
        fix="Restore the stop-gradient on the target branch (z.detach()), keep the predictor head, check that the two "
            "views get different augmentations, and lower the predictor's learning rate.",
        impact="The loss stays above -1 and the output's per-dimension std stays near 1/sqrt(d).",
        verify="Log the per-dimension std of the l2-normalised output each epoch; a k-NN accuracy on held-out data "
               "rises above chance.")

    class Params(Thresholds):
        min_tail: int = 3
        floor_margin: float = 0.01

    def check(self, ctx: Context) -> list[Hit]:
        s = ctx.series("loss", finite=True, min_points=self.p.min_tail)
        if s is None:
            return []
        x = s.values
        at_floor = bool(np.all(x[-self.p.min_tail:] <= -1.0 + self.p.floor_margin))
        if not (float(x.min()) >= -1.0 - 1e-6 and float(x.max()) <= 0.0 and at_floor):
            return []
        std = next((v.finite() for n, v in sorted(ctx.run.series.items()) if "@rank" not in n
                    and _OUTPUT_STD.search(norm(n)) and int(np.isfinite(v.values).sum()) >= 2), None)
        if std is not None and float(std.values[-1]) >= float(std.values[0]):
            return []  # the outputs keep their spread: the views agree without collapsing
        i = int(np.argmax(x <= -1.0 + 5 * self.p.floor_margin))  # where the loss reached the floor's neighbourhood
        msg = (f"{s.name} ends at {float(x[-1]):.4g}, at the floor -1 of a negative cosine similarity on its last "
               f"{self.p.min_tail} logged points: the two views' outputs are the same vector")
        if std is not None:
            msg += (f", and {std.name} falls from {float(std.values[0]):.3g} to {float(std.values[-1]):.3g}: every "
                    "input maps to one output (a collapsed Siamese network)")
        else:
            msg += " (a collapsed Siamese network, or a task the model solved outright: log the output's std to tell)"
        h = self.hit(msg, 0.8 if std is not None else 0.5, metric=s.name, first_bad_step=int(s.steps[i]),
                     last_step=int(s.steps[-1]), needs=[] if std is not None else
                     ["the per-dimension std of the l2-normalised output (SimSiam's collapse monitor)"])
        h.point("floor", s, len(s) - 1, f"{s.name} at the floor", indices=np.arange(i, len(s)))
        if std is not None:
            h.point("std", std, len(std) - 1, f"{std.name} over the run", indices=np.arange(len(std)))
        return [h]
