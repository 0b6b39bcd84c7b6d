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

from trainaudit.synth.runlog import RunLog

K = 120  # the step most faults are injected at
STEPS = 200


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
    category: str  # SPEC.md section 3
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
    s, loss = arr(log, "loss")
    require(bool(np.isfinite(loss).all()), "healthy run has a non-finite loss")
    n = max(5, len(loss) // 10)
    require(float(np.median(loss[-n:])) < 0.8 * float(np.median(loss[:n])), "healthy run did not learn")
    return Truth(None, None, facts={"loss_first": float(loss[0]), "loss_last": float(loss[-1])})


# --- classifier cases ---------------------------------------------------------------------------

def _classifier(seed: int, *, steps: int = STEPS, lr: float = 1e-3, batch: int = 64, clip: float | None = 1.0,
                opt: str = "adam", faults: Any = None, track_rss: bool = False, hidden: int = 64,
                depth: int = 2, act: str = "relu", layer_norms: tuple[str, ...] = (),
                labels: str = "true", lr_at: Callable[[int], float] | None = None) -> RunLog:
    import torch
    from torch import nn

    from trainaudit.synth import tasks
    from trainaudit.synth.loop import Faults, run_steps

    gen = tasks.setup(seed)
    data = tasks.mixture(4096, seed)
    if labels == "shuffled":
        data.y = data.y[torch.randperm(len(data.y), generator=gen)]
    model = tasks.mlp(20, hidden, data.num_classes, depth=depth, act=nn.Sigmoid if act == "sigmoid" else nn.ReLU)
    optim = (torch.optim.Adam(model.parameters(), lr=lr) if opt == "adam"
             else torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9 if opt == "sgdm" else 0.0))
    log = RunLog(total_steps=steps, batch_size=batch,
                 config={"model": f"mlp{depth}x{hidden}-{act}", "optimizer": opt, "lr": lr, "batch_size": batch,
                         "num_classes": data.num_classes, "clip_grad": clip or 0.0, "train_iters": steps})
    f = faults or Faults()
    if layer_norms:
        f.layer_norms = layer_norms
    run_steps(log, model, optim, range(1, steps + 1), lambda _s: data.batch(gen, batch), clip=clip, faults=f,
              track_rss=track_rss, lr_at=lr_at)
    return log


def train_corrupt_spike() -> RunLog:
    from trainaudit.synth.loop import Faults

    def corrupt(step: int, b: tuple) -> tuple:
        return (b[0] * 1e6, b[1]) if step == K else b

    return _classifier(11, faults=Faults(corrupt=corrupt))


def truth_corrupt_spike(log: RunLog) -> Truth:
    pre = float(np.median(at(log, "loss", K - 30, K - 1)))
    spike = float(at(log, "loss", K, K)[0])
    post = float(np.median(at(log, "loss", K + 10, K + 40)))
    require(spike > 100 * pre, f"loss at {K} ({spike:.3g}) is not a spike over {pre:.3g}")
    require(post < 1.5 * pre, f"loss did not recover after the spike ({post:.3g} vs {pre:.3g})")
    require(float(at(log, "grad_norm", K, K)[0]) > 100 * float(np.median(at(log, "grad_norm", K - 30, K - 1))),
            "grad norm did not spike with the loss")
    require(bool(np.all(at(log, "loss", 1, K - 1) < 10 * pre)), "a spike before the injected one")
    return Truth(K, (K, K), K, {"loss_before": pre, "loss_at_spike": spike, "loss_after": post})


def train_nan_batch() -> RunLog:
    import torch

    from trainaudit.synth.loop import Faults

    def corrupt(step: int, b: tuple) -> tuple:
        if step != K:
            return b
        x = b[0].clone()
        x[3, 5] = torch.nan  # one bad feature of one sample is enough
        return (x, b[1])

    return _classifier(12, faults=Faults(corrupt=corrupt))


def truth_nan_from(k: int) -> Callable[[RunLog], Truth]:
    def truth(log: RunLog) -> Truth:
        s, loss = arr(log, "loss")
        require(bool(np.isfinite(loss[s < k]).all()), f"loss is not finite before step {k}")
        require(bool(np.isnan(loss[s >= k]).all()), f"loss is not NaN at every step from {k}")
        return Truth(k, (k, k), k, {"last_finite_loss": float(loss[s < k][-1])})
    return truth


def train_slow() -> RunLog:
    from trainaudit.synth.loop import Faults

    return _lm(21, faults=Faults(sleep_from=K, sleep_s=0.02))


def truth_slow(log: RunLog) -> Truth:
    before = float(np.median(at(log, "step_time", 10, K - 1)))
    after = at(log, "step_time", K, STEPS)
    require(float(after.min()) >= 0.02, "a step after the slowdown took less than the injected sleep")
    require(float(np.median(after)) > before + 0.015, "step time did not rise at the injected step")
    require(float(np.max(at(log, "step_time", 10, K - 1))) < float(np.median(after)),
            "a step before the slowdown was already as slow")
    return Truth(K, (K, K + 2), K, {"median_step_time_before_s": before, "median_step_time_after_s": float(np.median(after))})


# --- language-model cases -----------------------------------------------------------------------

def _lm(seed: int, *, steps: int = STEPS, lr: float = 3e-3, batch: int = 64, clip: float | None = 1.0,
        opt: str = "adam", faults: Any = None, lr_at: Callable[[int], float] | None = None,
        targets: str = "true", eval_every: int = 0, eval_batches: int = 8, act: str = "tanh") -> RunLog:
    import torch

    from trainaudit.synth import tasks
    from trainaudit.synth.loop import Faults, mean_loss, run_steps

    gen = tasks.setup(seed)
    train_tok = tasks.corpus(40_000, seed=7)
    val_tok = tasks.corpus(8_000, seed=8)
    model = tasks.MlpLM(act=act)
    optim = (torch.optim.Adam(model.parameters(), lr=lr) if opt == "adam"
             else torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9))
    log = RunLog(total_steps=steps, batch_size=batch,
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


def train_nan_after_lr_jump() -> RunLog:
    # SGD with momentum, no clipping: an lr jump x1000 blows the weights up within a few steps.
    return _lm(41, opt="sgdm", lr=0.05, clip=None, act="relu", lr_at=lambda s: 0.05 if s < K else 50.0)


def truth_nan_after_lr_jump(log: RunLog) -> Truth:
    s, lr = arr(log, "lr")
    require(float(lr[s == K][0]) / float(lr[s == K - 1][0]) >= 100, f"no lr jump at step {K}")
    _, loss = arr(log, "loss")
    nan_steps = s[np.isnan(loss)]
    require(len(nan_steps) > 0, "loss never became NaN")
    first_nan = int(nan_steps[0])
    require(K < first_nan <= K + 10, f"first NaN at {first_nan}, not within 10 steps after the lr jump at {K}")
    require(bool(np.isnan(loss[s >= first_nan]).all()), "loss is not NaN at every step after the first NaN")
    require(bool(np.isfinite(loss[s <= K]).all()), "loss not finite up to the lr jump")
    pre = float(np.median(loss[(s >= K - 20) & (s < K)]))
    peak = float(np.max(loss[(s > K) & (s < first_nan)])) if first_nan > K + 1 else math.nan
    return Truth(K, (K, first_nan), K, {"lr_before": float(lr[s == K - 1][0]), "lr_after": float(lr[s == K][0]),
                                        "first_nan_step": first_nan, "loss_before": pre, "loss_peak_before_nan": peak})


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


def _catalogue() -> list[Case]:
    from trainaudit.synth import tasks

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
             f"MLP language model; from step {K} every step sleeps 20 ms (a throughput regression).",
             train_slow, truth_slow),
        Case("shuffled-labels", "plateau", "megatron",
             f"MLP language model trained on targets drawn uniformly at random: the loss stays at ln({tasks.VOCAB}).",
             train_shuffled_labels, truth_plateau_ln(tasks.VOCAB, "vocab_size")),
        Case("healthy-warmup-cosine", "healthy", "megatron",
             "MLP language model, Adam, 30-step linear warm-up then cosine decay to 10%, eval every 100 steps.",
             train_warmup_cosine, healthy_truth),
    ]


def catalogue() -> dict[str, Case]:
    return {c.name: c for c in _catalogue()}
