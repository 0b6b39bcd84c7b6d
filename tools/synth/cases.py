"""The labelled cases: each really trains a tiny model and says what went wrong, and from when.

A case is a :class:`Case`: ``train()`` returns the :class:`RunLog` of the run; ``truth(log)``
derives the label from the data itself and raises :class:`GroundTruthError` if the run did not
show what the case claims (so a label can never silently be false). Step numbers below are
1-based global steps (epochs for the epoch-logged case).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from synth.runlog import ModelClock, RunLog

K = 120  # the step most faults are injected at
STEPS = 200

# Modelled durations (see synth.runlog.ModelClock), about what these steps took on one core of a
# 2-core x86 machine with torch 2.13 when they were measured once: the values only need to be
# plausible, what matters is that they are the same everywhere.
STEP_S = 0.001  # one step of the 64-wide MLPs (classifier and language model), batch 64
EVAL_BATCH_S = 0.001  # one validation batch of 256 sequences, forward only


class GroundTruthError(AssertionError):
    """The produced run does not show what its label says."""


def require(cond: bool, what: str) -> None:
    if not cond:
        raise GroundTruthError(what)


@dataclass(frozen=True, slots=True)
class Truth:
    first_bad_step: int | None
    window: tuple[int, int] | None  # first-bad-step values a diagnosis may answer and be right
    fault_step: int | None = None  # where the fault was injected (may precede the symptom)
    facts: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Case:
    name: str
    category: str  # a category of docs/answer.md
    style: str  # stdout log style: "megatron" | "hf" | "hf-trainer" | "lightning"
    description: str
    train: Callable[[], RunLog]
    truth: Callable[[RunLog], Truth]
    also_acceptable: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()  # "framework" marks cases that need transformers / lightning

    @property
    def healthy(self) -> bool:
        return self.category == "healthy"


def arr(log: RunLog, metric: str) -> tuple[np.ndarray, np.ndarray]:
    steps, values = log.series(metric)
    return np.asarray(steps, dtype=np.int64), np.asarray(values, dtype=np.float64)


def at(log: RunLog, metric: str, lo: int, hi: int) -> np.ndarray:
    """Values of ``metric`` for steps in [lo, hi] (first occurrence order kept)."""
    s, v = arr(log, metric)
    return v[(s >= lo) & (s <= hi)]


def healthy_truth(log: RunLog) -> Truth:
    _, loss = arr(log, "loss")
    require(bool(np.isfinite(loss).all()), "healthy run has a non-finite loss")
    n = max(5, len(loss) // 10)
    require(float(np.median(loss[-n:])) < 0.8 * float(np.median(loss[:n])), "healthy run did not learn")
    return Truth(None, None, facts={"loss_first": float(loss[0]), "loss_last": float(loss[-1])})


# --- classifier cases ---------------------------------------------------------------------------

def _classifier(seed: int, *, steps: int = STEPS, lr: float = 1e-3, batch: int = 64, clip: float | None = 1.0,
                opt: str = "adam", faults: Any = None, track_rss: bool = False, hidden: int = 64,
                depth: int = 2, act: str = "relu", layer_norms: dict[str, str] | None = None,
                labels: str = "true", lr_at: Callable[[int], float] | None = None, catch: bool = False,
                step_s: float = STEP_S, n_train: int = 4096, label_noise: float = 0.0, eval_every: int = 0) -> RunLog:
    """An MLP on a gaussian mixture of ``n_train`` points; with ``eval_every`` the loss and accuracy on
    1024 held-out points are logged every that many steps (``val_loss``, ``val_acc``)."""
    import torch
    from torch import nn

    from synth import tasks
    from synth.loop import Faults, run_steps

    gen = tasks.setup(seed)
    data = tasks.mixture(n_train, seed, label_noise=label_noise) if n_train != 4096 or label_noise else tasks.mixture(4096, seed)
    if labels == "shuffled":
        data.y = data.y[torch.randperm(len(data.y), generator=gen)]
    model = tasks.perturb(tasks.mlp(20, hidden, data.num_classes, depth=depth,
                                    act=nn.Sigmoid if act == "sigmoid" else nn.ReLU))
    optim = (torch.optim.Adam(model.parameters(), lr=lr) if opt == "adam"
             else torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9 if opt == "sgdm" else 0.0))
    log = RunLog(total_steps=steps, batch_size=batch, clock=ModelClock(step_s, seed=seed),
                 config={"model": f"mlp{depth}x{hidden}-{act}", "optimizer": opt, "lr": lr, "batch_size": batch,
                         "num_classes": data.num_classes, "clip_grad": clip or 0.0, "train_iters": steps})
    f = faults or Faults()
    if layer_norms:
        f.layer_norms = layer_norms
    val = tasks.mixture(1024, seed + 500) if eval_every else None

    def evaluate(step: int) -> None:
        if val is not None and step % eval_every == 0:
            with torch.no_grad():
                model.eval()
                out = model(val.x)
                model.train()
            log.clock.advance(4 * EVAL_BATCH_S)
            log.log_eval(step, val_loss=float(nn.functional.cross_entropy(out, val.y)),
                         val_acc=float((out.argmax(-1) == val.y).float().mean()))

    try:
        run_steps(log, model, optim, range(1, steps + 1), lambda _s: data.batch(gen, batch), clip=clip, faults=f,
                  track_rss=track_rss, lr_at=lr_at, evaluate=evaluate if eval_every else None)
    except RuntimeError as exc:
        if not catch:
            raise
        log.crashed(exc)
    return log


def train_corrupt_spike(seed: int = 11, k: int = K) -> RunLog:
    from synth.loop import Faults

    def corrupt(step: int, b: tuple) -> tuple:
        return (b[0] * 1e6, b[1]) if step == k else b

    return _classifier(seed, faults=Faults(corrupt=corrupt))


def truth_corrupt_spike_at(k: int) -> Callable[[RunLog], Truth]:
    """The check of ``truth_corrupt_spike`` for a fault injected at step ``k``."""

    def truth(log: RunLog) -> Truth:
        pre = float(np.median(at(log, "loss", k - 30, k - 1)))
        spike = float(at(log, "loss", k, k)[0])
        post = float(np.median(at(log, "loss", k + 10, k + 40)))
        require(spike > 100 * pre, f"loss at {k} ({spike:.3g}) is not a spike over {pre:.3g}")
        require(post < 1.5 * pre, f"loss did not recover after the spike ({post:.3g} vs {pre:.3g})")
        require(float(at(log, "grad_norm", k, k)[0]) > 100 * float(np.median(at(log, "grad_norm", k - 30, k - 1))),
                "grad norm did not spike with the loss")
        require(bool(np.all(at(log, "loss", 1, k - 1) < 10 * pre)), "a spike before the injected one")
        return Truth(k, (k, k), k, {"loss_before": pre, "loss_at_spike": spike, "loss_after": post})
    return truth


truth_corrupt_spike = truth_corrupt_spike_at(K)


def train_nan_batch(seed: int = 12, k: int = K) -> RunLog:
    import torch

    from synth.loop import Faults

    def corrupt(step: int, b: tuple) -> tuple:
        if step != k:
            return b
        x = b[0].clone()
        x[3, 5] = torch.nan  # one bad feature of one sample is enough
        return (x, b[1])

    return _classifier(seed, faults=Faults(corrupt=corrupt))


def truth_nan_from(k: int) -> Callable[[RunLog], Truth]:
    def truth(log: RunLog) -> Truth:
        s, loss = arr(log, "loss")
        require(bool(np.isfinite(loss[s < k]).all()), f"loss is not finite before step {k}")
        require(bool(np.isnan(loss[s >= k]).all()), f"loss is not NaN at every step from {k}")
        return Truth(k, (k, k), k, {"last_finite_loss": float(loss[s < k][-1])})
    return truth


def train_slow(seed: int = 21, k: int = K) -> RunLog:
    from synth.loop import Faults

    return _lm(seed, faults=Faults(slow_from=k, slow_s=0.02))


def truth_slow_at(k: int) -> Callable[[RunLog], Truth]:
    """The check of ``truth_slow`` for a fault injected at step ``k``."""

    def truth(log: RunLog) -> Truth:
        before = float(np.median(at(log, "step_time", 10, k - 1)))
        after = at(log, "step_time", k, STEPS)
        require(float(after.min()) >= 0.02, "a step after the slowdown took less than the injected 20 ms")
        require(float(np.median(after)) > before + 0.015, "step time did not rise at the injected step")
        require(float(np.percentile(at(log, "step_time", 10, k - 1), 95)) < float(np.median(after)),
                "steps before the slowdown were already as slow")
        return Truth(k, (k, k + 2), k, {"median_step_time_before_s": before, "median_step_time_after_s": float(np.median(after))})
    return truth


truth_slow = truth_slow_at(K)


# --- language-model cases -----------------------------------------------------------------------

def _lm(seed: int, *, steps: int = STEPS, lr: float = 3e-3, batch: int = 64, clip: float | None = 1.0,
        opt: str = "adam", faults: Any = None, lr_at: Callable[[int], float] | None = None,
        targets: str = "true", eval_every: int = 0, eval_batches: int = 8, act: str = "tanh") -> RunLog:
    import torch

    from synth import tasks
    from synth.loop import Faults, mean_loss, run_steps

    gen = tasks.setup(seed)
    train_tok = tasks.corpus(40_000, seed=7)
    val_tok = tasks.corpus(8_000, seed=8)
    model = tasks.perturb(tasks.MlpLM(act=act))
    optim = (torch.optim.Adam(model.parameters(), lr=lr) if opt == "adam"
             else torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9))
    log = RunLog(total_steps=steps, batch_size=batch, clock=ModelClock(STEP_S, seed=seed),
                 config={"model": f"mlp-lm-{act}", "optimizer": opt, "lr": lr, "batch_size": batch, "vocab_size": tasks.VOCAB,
                         "seq_length": tasks.CONTEXT, "clip_grad": clip or 0.0, "train_iters": steps,
                         "eval_interval": eval_every})

    def batch_fn(_step: int) -> tuple:
        x, y = tasks.lm_batch(train_tok, gen, batch)
        if targets == "random":  # labels shuffled: targets independent of the input
            y = torch.randint(0, tasks.VOCAB, y.shape, generator=gen)
        return x, y

    val_gen = torch.Generator().manual_seed(99)
    val = [tasks.lm_batch(val_tok, val_gen, 256) for _ in range(eval_batches)]

    def evaluate(step: int) -> None:
        if eval_every and step % eval_every == 0:
            log.clock.advance(len(val) * EVAL_BATCH_S)
            log.log_eval(step, val_loss=mean_loss(model, val))

    run_steps(log, model, optim, range(1, steps + 1), batch_fn, clip=clip, faults=faults or Faults(), lr_at=lr_at,
              evaluate=evaluate if eval_every else None)
    return log


def warmup_cosine(peak: float, warmup: int, total: int, floor: float = 0.1) -> Callable[[int], float]:
    def lr(step: int) -> float:
        if step <= warmup:
            return peak * step / warmup
        frac = (step - warmup) / max(1, total - warmup)
        return peak * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * frac)))
    return lr


def train_warmup_cosine() -> RunLog:
    return _lm(31, steps=300, lr_at=warmup_cosine(3e-3, 30, 300), eval_every=100)


def train_nan_after_lr_jump(seed: int = 41, k: int = K) -> RunLog:
    # SGD with momentum, no clipping: an lr jump x1000 blows the weights up within a few steps.
    return _lm(seed, opt="sgdm", lr=0.05, clip=None, act="relu", lr_at=lambda s: 0.05 if s < k else 50.0)


def truth_nan_after_lr_jump_at(k: int) -> Callable[[RunLog], Truth]:
    """The check of ``truth_nan_after_lr_jump`` for a fault injected at step ``k``."""

    def truth(log: RunLog) -> Truth:
        s, lr = arr(log, "lr")
        require(float(lr[s == k][0]) / float(lr[s == k - 1][0]) >= 100, f"no lr jump at step {k}")
        _, loss = arr(log, "loss")
        nan_steps = s[np.isnan(loss)]
        require(len(nan_steps) > 0, "loss never became NaN")
        first_nan = int(nan_steps[0])
        require(k < first_nan <= k + 10, f"first NaN at {first_nan}, not within 10 steps after the lr jump at {k}")
        require(bool(np.isnan(loss[s >= first_nan]).all()), "loss is not NaN at every step after the first NaN")
        require(bool(np.isfinite(loss[s <= k]).all()), "loss not finite up to the lr jump")
        pre = float(np.median(loss[(s >= k - 20) & (s < k)]))
        peak = float(np.max(loss[(s > k) & (s < first_nan)])) if first_nan > k + 1 else math.nan
        return Truth(k, (k, first_nan), k, {"lr_before": float(lr[s == k - 1][0]), "lr_after": float(lr[s == k][0]),
                                            "first_nan_step": first_nan, "loss_before": pre, "loss_peak_before_nan": peak})
    return truth


truth_nan_after_lr_jump = truth_nan_after_lr_jump_at(K)


def train_shuffled_labels() -> RunLog:
    return _lm(51, targets="random")


def truth_plateau_ln(n_classes: int, key: str) -> Callable[[RunLog], Truth]:
    def truth(log: RunLog) -> Truth:
        _, loss = arr(log, "loss")
        ln = math.log(n_classes)
        tail = float(np.median(loss[20:]))
        require(abs(tail - ln) < 0.05 * ln, f"loss median {tail:.4f} is not near ln({n_classes}) = {ln:.4f}")
        require(float(np.median(loss[-50:])) > 0.97 * ln, "loss kept falling: not a plateau")
        return Truth(1, (1, 50), 1, {key: n_classes, "ln_classes": ln, "median_loss": tail})
    return truth


# --- more faults --------------------------------------------------------------------------------

def smooth(v: np.ndarray, w: int = 9) -> np.ndarray:
    """Trailing rolling median (robust to single noisy steps)."""
    return np.array([np.median(v[max(0, i - w + 1):i + 1]) for i in range(len(v))])


def train_lr_too_high(seed: int = 13) -> RunLog:
    # Linear warm-up to a peak lr of 1.0 for SGD+momentum: fine while the lr is small, then it diverges.
    return _classifier(seed, opt="sgdm", lr=1.0, clip=None, lr_at=lambda s: 1.0 * min(1.0, s / 100))


def centred_median(v: np.ndarray, w: int = 5) -> np.ndarray:
    """Centred rolling median: no lag, so a turn of the curve stays where it happened."""
    h = w // 2
    return np.array([np.median(v[max(0, i - h):i + h + 1]) for i in range(len(v))])


def truth_divergence(log: RunLog) -> Truth:
    s, loss = arr(log, "loss")
    require(bool(np.isfinite(loss).all()), "divergence case has non-finite loss (that would be nan_inf)")
    # The onset, not the moment the rise got large: the first step after the run's best from which
    # the loss never comes back near that best. (A trailing median vs "2x its running best" marked
    # the step ~35 steps later where the rise had doubled a lag-inflated best.)
    cm = centred_median(loss)
    b = int(np.argmin(cm))
    best = float(cm[b])
    above = cm > 1.3 * best
    stays = np.flatnonzero(above & np.logical_and.accumulate(above[::-1])[::-1])
    stays = stays[stays > b]
    require(stays.size > 0, "loss never rose above 1.3x its best and stayed up")
    first = int(stays[0])
    step = int(s[first])
    tail = float(np.median(loss[-30:]))
    require(tail > 2 * best, "loss at the end is not far above its best")
    return Truth(step, (max(int(s[b]) + 1, step - 15), step + 15), 1,
                 {"best_smoothed_loss": best, "best_step": int(s[b]), "median_loss_last_30": tail,
                  "definition": "first step after the minimum of the centred rolling median (5) of the loss from "
                                "which that median stays above 1.3x the minimum to the end"})


def train_lr_jump(seed: int = 42, k: int = K) -> RunLog:
    # Adam lr 2e-3 -> 0.2 at step k (a schedule bug); the loss jumps and stays up.
    return _lm(seed, lr=2e-3, clip=1.0, lr_at=lambda s: 2e-3 if s < k else 0.2)


def truth_lr_jump_at(k: int) -> Callable[[RunLog], Truth]:
    """The check of ``truth_lr_jump`` for a fault injected at step ``k``."""

    def truth(log: RunLog) -> Truth:
        s, lr = arr(log, "lr")
        require(float(lr[s == k][0]) / float(lr[s == k - 1][0]) >= 50, f"no lr jump at {k}")
        pre = float(np.median(at(log, "loss", k - 20, k - 1)))
        post = float(np.median(at(log, "loss", k + 1, k + 30)))
        tail = float(np.median(at(log, "loss", STEPS - 20, STEPS)))
        require(bool(np.isfinite(arr(log, "loss")[1]).all()), "loss became non-finite")
        require(post > 1.3 * pre and tail > 1.3 * pre, f"loss did not rise and stay up after the jump ({pre:.3f} -> {post:.3f}, {tail:.3f})")
        return Truth(k, (k, k + 5), k, {"lr_before": float(lr[s == k - 1][0]), "lr_after": float(lr[s == k][0]),
                                        "loss_before": pre, "loss_after": post, "loss_end": tail})
    return truth


truth_lr_jump = truth_lr_jump_at(K)


def train_zero_grad_bug(seed: int = 17) -> RunLog:
    from synth.loop import Faults

    return _classifier(seed, faults=Faults(zero_grad_after_backward=True))


def truth_zero_grad(log: RunLog) -> Truth:
    _, g = arr(log, "grad_norm")
    _, loss = arr(log, "loss")
    require(bool(np.all(g == 0.0)), "grad norm is not exactly 0 at every step")
    require(abs(float(np.median(loss[-30:])) / float(np.median(loss[:30])) - 1) < 0.05, "loss moved")
    return Truth(1, (1, 50), 1, {"grad_norm": 0.0, "median_loss": float(np.median(loss)), "num_classes": 8,
                                 "ln_classes": math.log(8)})


LR_ZERO_FROM = 30  # the step from which the misconfigured schedule gives lr 0


def train_lr_zero() -> RunLog:
    # The decay length is set to 20 steps instead of the run length: after a 10-step warm-up the lr
    # is exactly 0 from step 30 to the end, 90% of the run: far above the share of zero lr points
    # (50%) that decides the rule, not just past it.
    def lr(step: int) -> float:
        peak = 3e-3
        if step <= 10:
            return peak * step / 10
        return peak * max(0.0, 1 - (step - 10) / 20)
    return _lm(43, steps=300, lr_at=lr)


def truth_lr_zero(log: RunLog) -> Truth:
    s, lr = arr(log, "lr")
    z = LR_ZERO_FROM
    zero_from = int(s[np.argmax(lr == 0.0)])
    require(zero_from == z and bool(np.all(lr[s >= z] == 0.0)) and bool(np.all(lr[s < z] > 0)),
            f"lr is not exactly 0 from step {z}")
    after = at(log, "loss", 100, 300)
    require(abs(float(np.median(after[-50:])) / float(np.median(after[:50])) - 1) < 0.03, "loss still moving at lr 0")
    return Truth(z, (z, z + 20), z, {"lr_zero_from": z, "median_loss_lr0": float(np.median(after))})


def train_vanishing(seed: int = 14) -> RunLog:
    return _classifier(seed, opt="sgd", lr=0.1, depth=16, hidden=32, act="sigmoid", clip=None,
                       layer_norms={"grad_norm_first_layer": "0.weight", "grad_norm_last_layer": "32.weight"})


def truth_vanishing(log: RunLog) -> Truth:
    _, first = arr(log, "grad_norm_first_layer")
    _, last = arr(log, "grad_norm_last_layer")
    _, loss = arr(log, "loss")
    require(bool(np.all(first < 1e-7)), "first-layer grad norm is not below 1e-7 everywhere")
    require(bool(np.all(last / np.maximum(first, 1e-300) > 1e6)), "first/last layer ratio is not > 1e6")
    require(abs(float(np.median(loss[-30:])) - math.log(8)) < 0.1, "loss is not stuck near ln(8)")
    return Truth(1, (1, 50), 1, {"max_first_layer_grad_norm": float(first.max()),
                                 "median_last_layer_grad_norm": float(np.median(last)), "depth": 16,
                                 "activation": "sigmoid"})


RNN_GAIN = 3.0  # std of the recurrent weights times sqrt(hidden): spectral radius about 3
RNN_SEQ = (10, 100)  # backprop-through-time length before and from step K


def train_rnn_exploding(seed: int = 16, k: int = K) -> RunLog:
    import torch
    from torch import nn

    from synth import tasks
    from synth.loop import run_steps

    # A vanilla tanh RNN whose recurrent weights have a spectral radius of about 3, far above the
    # 1 that Pascanu, Mikolov and Bengio name as the condition for exploding gradients ("On the
    # difficulty of training recurrent neural networks", ICML 2013): the gradient through t steps
    # of the recurrence grows like e^(lambda t). At step k the backprop-through-time length goes
    # from 10 to 100 tokens (a sequence-length curriculum stage), and the grad norm rises by 5 to
    # 10 orders of magnitude: a designed, not a chaotic, explosion, far past any threshold on any
    # seed or CPU. Adam at a small lr keeps the weights (and so the explosion) where they are.
    gen = tasks.setup(seed)
    tok = tasks.corpus(40_000)
    model = tasks.RnnLM(hidden=64)
    with torch.no_grad():
        nn.init.normal_(model.rnn.weight_hh_l0, std=RNN_GAIN / 64 ** 0.5)
    model = tasks.perturb(model)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    log = RunLog(total_steps=STEPS, batch_size=16, clock=ModelClock(0.003, seed=seed),
                 config={"model": "rnn-tanh-64", "optimizer": "adam", "lr": 1e-3, "clip_grad": 0.0,
                         "seq_length": RNN_SEQ[0], "vocab_size": tasks.VOCAB, "train_iters": STEPS})
    run_steps(log, model, opt, range(1, STEPS + 1),
              lambda s: tasks.seq_batch(tok, gen, 16, RNN_SEQ[0] if s < k else RNN_SEQ[1]))
    return log


def truth_exploding_at(k: int) -> Callable[[RunLog], Truth]:
    """The check of ``truth_exploding`` for a fault injected at step ``k``."""

    def truth(log: RunLog) -> Truth:
        s, g = arr(log, "grad_norm")
        base = float(g[0])
        first = next((i for i in range(len(g)) if g[i] >= 10 * base and np.median(g[i:]) >= 10 * base), None)
        require(first is not None, "grad norm never rose to 10x its initial value for good")
        require(float(np.max(g)) > 1000 * base, "grad norm never reached 1000x its initial value")
        step = int(s[first])
        require(step == k, f"the explosion starts at step {step}, not where the sequence length grows ({k})")
        # the design is 5+ orders of magnitude: 1000x leaves room for any seed, not just this one
        require(float(np.median(g[first:])) >= 1000 * base, "grad norm after the switch is not 1000x its start")
        return Truth(step, (max(1, step - 5), step + 15), k,
                     {"initial_grad_norm": base, "max_grad_norm": float(np.max(g)),
                      "median_grad_norm_after": float(np.median(g[first:])),
                      "definition": "first step where grad norm >= 10x the step-1 value and its median from there "
                                    "to the end is >= 10x"})
    return truth


truth_exploding = truth_exploding_at(K)


def train_loss_scale_collapse(seed: int = 18, k: int | None = K, *, growth_interval: int = 50,
                              steps: int = STEPS, deepspeed_guard: bool = False) -> RunLog:
    """fp16 autocast with a dynamic loss scaler; with ``k=None`` no fault: the scale grows every
    ``growth_interval`` clean steps and halves on the occasional overflow (the normal sawtooth).
    The run aborts at the minimum scale with fairseq's guard (1e-4), or with ``deepspeed_guard``
    DeepSpeed's (its default ``min_loss_scale`` 1)."""
    import torch
    from torch import nn

    from synth import tasks
    from synth.loop import grad_norm

    gen = tasks.setup(seed)
    data = tasks.mixture(4096, 18)
    model = tasks.perturb(tasks.mlp(20, 64, data.num_classes))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16, growth_interval=growth_interval)
    log = RunLog(total_steps=steps, batch_size=64, clock=ModelClock(STEP_S, seed=seed),
                 config={"model": "mlp2x64-relu", "optimizer": "adam", "lr": 1e-3, "fp16": True, "clip_grad": 1.0,
                         "train_iters": steps, "min_loss_scale": 1e-4})
    try:
        for step in range(1, steps + 1):
            x, y = data.batch(gen, 64)
            if k is not None and step >= k:  # an un-normalised feature shard: fp16 activations overflow from here on
                x = x * 1e5
            with torch.autocast("cpu", dtype=torch.float16):
                out = model(x)
            loss = nn.functional.cross_entropy(out.float(), y)
            opt.zero_grad()
            scaler.scale(loss).backward()
            scaler.unscale_(opt)
            gn = grad_norm(model, 1.0)
            before = scaler.get_scale()
            scaler.step(opt)
            scaler.update()
            scale = scaler.get_scale()
            if deepspeed_guard and scale < before and before <= 1:
                # DeepSpeed's DynamicLossScaler.update_scale: an overflow at the minimum scale (1) raises a bare
                # Exception (https://github.com/deepspeedai/DeepSpeed/blob/master/deepspeed/runtime/fp16/loss_scaler.py)
                raise Exception(
                    "Current loss scale already at minimum - cannot decrease scale anymore. Exiting run.")
            log.log(step, loss=loss.item(), grad_norm=gn, lr=1e-3, loss_scale=scale, skipped=float(scale < before),
                    step_time=log.clock.step())
            if scale < 1e-4:  # the same guard (and message) as fairseq's DynamicLossScaler
                raise FloatingPointError(
                    "Minimum loss scale reached (0.0001). Your loss is probably exploding. Try lowering the learning "
                    "rate, using gradient clipping or increasing the batch size.")
    except Exception as exc:
        log.crashed(exc)
    return log


def truth_loss_scale_at(k: int) -> Callable[[RunLog], Truth]:
    """The check of ``truth_loss_scale`` for a fault injected at step ``k``."""

    def truth(log: RunLog) -> Truth:
        s, scale = arr(log, "loss_scale")
        _, skipped = arr(log, "skipped")
        require(bool(np.all(skipped[s < k] == 0)) and bool(np.all(skipped[s >= k] == 1)), f"steps not skipped exactly from {k}")
        after = scale[s >= k]
        require(bool(np.all(after[1:] == after[:-1] / 2)), "loss scale does not halve at every step after the fault")
        require(log.traceback is not None and ("Minimum loss scale reached" in log.traceback
                                               or "Current loss scale already at minimum" in log.traceback),
                "no minimum-scale crash")
        return Truth(k, (k, k + 3), k, {"scale_before": float(scale[s == k - 1][0]), "scale_last": float(scale[-1]),
                                        "last_step": int(s[-1]), "crashed": True})
    return truth


truth_loss_scale = truth_loss_scale_at(K)


def train_memory_growth() -> RunLog:
    from synth.loop import Faults

    return _classifier(15, hidden=512, batch=256, faults=Faults(leak_from=50), track_rss=True, step_s=0.01)


def truth_memory(log: RunLog) -> Truth:
    s, rss = arr(log, "rss_mb")
    before = rss[(s >= 10) & (s < 50)]
    after = rss[s >= 50]
    require(float(before.max() - before.min()) < 15, "RSS not flat before the leak")
    require(float(after[-1] - after[0]) > 100, "RSS did not grow by 100 MiB after the leak started")
    slope = float(np.polyfit(s[s >= 50], after, 1)[0])
    require(slope > 0.5, "RSS slope after the leak is below 0.5 MiB/step")
    return Truth(50, (50, 80), 50, {"rss_mb_at_start": float(rss[0]), "rss_mb_at_end": float(rss[-1]),
                                    "slope_mb_per_step": slope})


def train_crash(seed: int = 19, k: int = K) -> RunLog:
    from synth.loop import Faults

    def corrupt(step: int, b: tuple) -> tuple:
        return (b[0][:, :19], b[1]) if step == k else b  # a batch from a shard with a dropped column

    return _classifier(seed, faults=Faults(corrupt=corrupt), catch=True)


def truth_crash_at(k: int) -> Callable[[RunLog], Truth]:
    """The check of ``truth_crash`` for a fault injected at step ``k``."""

    def truth(log: RunLog) -> Truth:
        s, _ = arr(log, "loss")
        require(int(s[-1]) == k - 1, f"the run did not stop right before step {k}")
        require(log.traceback is not None and "mat1 and mat2 shapes cannot be multiplied" in log.traceback,
                "no shape-mismatch traceback")
        return Truth(k, (k - 1, k), k, {"last_logged_step": k - 1, "exception": "RuntimeError"})
    return truth


truth_crash = truth_crash_at(K)


def train_healthy_noisy() -> RunLog:
    return _classifier(61, batch=8, steps=300)


def train_eval_pause() -> RunLog:
    # Eval every 50 steps over 100 batches: a pause in wall time (timestamps), not in step time.
    return _lm(62, steps=250, lr=3e-3, eval_every=50, eval_batches=100)


def train_restart() -> RunLog:
    """Checkpoint at 100, the job is killed after 130, a new process resumes from 100 and re-logs
    101..130 (bit-identical: model, optimizer and data-order state are restored)."""
    import copy

    import torch

    from synth import tasks
    from synth.loop import run_steps

    gen = tasks.setup(63)
    tok = tasks.corpus(40_000)
    model = tasks.perturb(tasks.MlpLM())
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    steps = 250
    log = RunLog(total_steps=steps, batch_size=64, clock=ModelClock(STEP_S, seed=63),
                 config={"model": "mlp-lm-tanh", "optimizer": "adam", "lr": 3e-3, "vocab_size": tasks.VOCAB,
                         "seq_length": tasks.CONTEXT, "clip_grad": 1.0, "train_iters": steps, "save_interval": 100})

    def batch(_s: int) -> tuple:
        return tasks.lm_batch(tok, gen, 64)

    run_steps(log, model, opt, range(1, 101), batch, clip=1.0)
    ckpt = (copy.deepcopy(model.state_dict()), copy.deepcopy(opt.state_dict()), gen.get_state())
    log.mark("save", iteration=100)
    run_steps(log, model, opt, range(101, 131), batch, clip=1.0)  # then the job is preempted
    model.load_state_dict(ckpt[0])
    opt.load_state_dict(ckpt[1])
    gen.set_state(ckpt[2])
    log.mark("restart", iteration=100)
    run_steps(log, model, opt, range(101, steps + 1), batch, clip=1.0)
    return log


def truth_restart(log: RunLog) -> Truth:
    s, loss = arr(log, "loss")
    require(len(s) == 280 and list(s[130:160]) == list(range(101, 131)), "steps 101..130 are not re-logged once")
    require(bool(np.array_equal(loss[100:130], loss[130:160])), "the resumed steps do not reproduce the first attempt")
    return healthy_truth(log)


def truth_eval_pause(log: RunLog) -> Truth:
    walls = [r["wall"] for r in log.records]
    steps = [int(r["step"]) for r in log.records]
    gaps = {steps[i]: walls[i] - walls[i - 1] for i in range(1, len(steps))}
    typical = float(np.median(list(gaps.values())))
    for e in (50, 100, 150, 200):
        require(gaps[e + 1] > 10 * typical, f"no wall-time pause after the eval at {e}")
    s, st = arr(log, "step_time")
    after_eval = st[np.isin(s, [51, 101, 151, 201])]
    require(float(np.median(after_eval)) < 5 * float(np.median(st)), "the eval time leaked into the step time")
    t = healthy_truth(log)
    return Truth(None, None, None, {**t.facts, "eval_steps": [50, 100, 150, 200, 250],
                                    "median_eval_pause_s": float(np.median([gaps[e + 1] for e in (50, 100, 150, 200)]))})


def _catalogue() -> list[Case]:
    from synth import tasks

    return [
        Case("nan-after-lr-jump", "nan_inf", "megatron",
             f"Tiny MLP language model, SGD+momentum without clipping; the lr jumps x1000 (0.05 -> 50) at step {K}. "
             "The loss spikes, then is NaN at every step (Megatron omits the NaN loss from its line).",
             train_nan_after_lr_jump, truth_nan_after_lr_jump, also_acceptable=("divergence",)),
        Case("nan-batch", "nan_inf", "hf",
             f"MLP classifier (Adam, clip 1.0); the batch of step {K} carries one NaN feature. Loss and grads are "
             "NaN from that step on; the HF-style log shows loss 0.0 with grad_norm nan (logging_nan_inf_filter).",
             train_nan_batch, truth_nan_from(K)),
        Case("corrupt-batch-spike", "loss_spike", "hf",
             f"MLP classifier (Adam, clip 1.0); the inputs of step {K} are multiplied by 1e6. The loss and grad norm "
             "spike at that step only and training recovers.",
             train_corrupt_spike, truth_corrupt_spike),
        Case("slow-from-step-k", "throughput_regression", "megatron",
             f"MLP language model; from step {K} every step takes 20 ms longer (a throughput regression; step "
             "times are on the run's modelled clock, where the steps before take about 1 ms).",
             train_slow, truth_slow),
        Case("shuffled-labels", "plateau", "megatron",
             f"MLP language model trained on targets drawn uniformly at random: the loss stays at ln({tasks.VOCAB}).",
             train_shuffled_labels, truth_plateau_ln(tasks.VOCAB, "vocab_size")),
        Case("healthy-warmup-cosine", "healthy", "megatron",
             "MLP language model, Adam, 30-step linear warm-up then cosine decay to 10%, eval every 100 steps.",
             train_warmup_cosine, healthy_truth),
        Case("lr-too-high", "divergence", "hf",
             "MLP classifier, SGD+momentum, linear warm-up to a peak lr of 1.0 (far too high): it learns while the "
             "lr is small, then the loss climbs back to chance level and stays there.",
             train_lr_too_high, truth_divergence),
        Case("lr-jump", "divergence", "megatron",
             f"MLP language model, Adam; the lr jumps from 2e-3 to 0.2 at step {K} (schedule bug). The loss jumps "
             "and stays up, finite.",
             train_lr_jump, truth_lr_jump),
        Case("zero-grad-bug", "plateau", "hf",
             "MLP classifier whose loop calls zero_grad() between backward() and step(): grad norm exactly 0, "
             "the loss never moves (near ln(8)).",
             train_zero_grad_bug, truth_zero_grad),
        Case("lr-zero", "plateau", "megatron",
             f"MLP language model; the linear decay ends at step {LR_ZERO_FROM} of 300 (decay length "
             f"misconfigured): lr is exactly 0 from step {LR_ZERO_FROM} and the loss is flat from there.",
             train_lr_zero, truth_lr_zero),
        Case("vanishing-gradients", "grad_vanishing", "hf",
             "16-layer sigmoid MLP, plain SGD: first-layer grad norm ~1e-14 (logged as grad_norm_first_layer), "
             "the loss stays near ln(8).",
             train_vanishing, truth_vanishing, also_acceptable=("plateau",)),
        Case("rnn-exploding", "grad_explosion", "megatron",
             f"Vanilla tanh RNN language model with recurrent weights of spectral radius ~{RNN_GAIN:g}, Adam lr 1e-3, "
             f"no gradient clipping; at step {K} the backprop-through-time length goes from {RNN_SEQ[0]} to "
             f"{RNN_SEQ[1]} tokens and the grad norm jumps by 5+ orders of magnitude and stays there.",
             train_rnn_exploding, truth_exploding),
        Case("loss-scale-collapse", "loss_scale_collapse", "megatron",
             f"MLP classifier in fp16 autocast with torch.amp.GradScaler on CPU; from step {K} un-normalised inputs "
             "(x1e5) overflow fp16: every step is skipped, the loss scale halves each step, and the run aborts "
             "with 'Minimum loss scale reached' (stderr.log).",
             train_loss_scale_collapse, truth_loss_scale, also_acceptable=("nan_inf",)),
        Case("memory-growth", "memory_growth", "hf",
             "MLP classifier; from step 50 a forward hook keeps every activation in a list (debugging code left on): "
             "process RSS (rss_mb) grows linearly from there.",
             train_memory_growth, truth_memory),
        Case("crash-shape-error", "crash", "hf",
             f"MLP classifier; the batch of step {K} has 19 features instead of 20: RuntimeError from the first "
             "Linear layer, traceback in stderr.log, last logged step 119.",
             train_crash, truth_crash),
        Case("healthy-noisy", "healthy", "hf",
             "MLP classifier with batch size 8: a noisy but healthy loss curve.",
             train_healthy_noisy, healthy_truth),
        Case("healthy-restart", "healthy", "megatron",
             "MLP language model; checkpoint at 100, the job dies after 130, a new process resumes from 100 and "
             "re-logs 101..130 (identical values), then runs to 250.",
             train_restart, truth_restart),
        Case("healthy-eval-pause", "healthy", "megatron",
             "MLP language model with a 100-batch evaluation every 50 steps: wall-time pauses in the timestamps "
             "and validation blocks, step times unchanged.",
             train_eval_pause, truth_eval_pause),
    ]


def catalogue() -> dict[str, Case]:
    from synth import frameworks  # HF Trainer / Lightning cases, when those libraries are installed

    return {c.name: c for c in _catalogue() + frameworks.cases()}
