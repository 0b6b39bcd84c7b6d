"""Training scenarios for the run corpus (``synth.corpus``): one real tiny run per (scenario, seed),
each with the fault of its category injected at a step that moves with the seed, or none.

A scenario returns the :class:`~synth.runlog.RunLog` of the run and its :class:`~synth.cases.Truth`,
derived from the run's own numbers by the checks of ``synth.cases`` (a run that does not show
its fault raises :class:`~synth.cases.GroundTruthError`). Steps are 1-based optimizer steps;
the epoch scenarios (``steps_per_epoch`` in the log's config) also say where each epoch ends.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
import numpy as np

from synth import cases
from synth.cases import STEPS, GroundTruthError, Truth, arr, at, require
from synth.runlog import RunLog


@dataclass(frozen=True, slots=True)
class Outcome:
    log: RunLog
    truth: Truth
    cause: str


def fault_step(seed: int, lo: int = 80, hi: int = 150) -> int:
    """The step a seed injects its fault at: spread over [lo, hi) so no detector can learn one step."""
    return lo + (seed * 37) % (hi - lo)


# --- healthy runs -------------------------------------------------------------------------------

def healthy_classifier(seed: int) -> Outcome:
    batch = (8, 16, 32, 64)[seed % 4]  # small batches: a noisy but healthy curve
    lr = (1e-3, 3e-3, 5e-4)[seed % 3]
    log = cases._classifier(seed, batch=batch, lr=lr, steps=240)
    return Outcome(log, cases.healthy_truth(log),
                   f"healthy: MLP classifier, Adam lr {lr:g}, batch {batch} (noise from the small batch)")


def healthy_lm_cosine(seed: int) -> Outcome:
    warm = (20, 30, 50)[seed % 3]
    log = cases._lm(seed, steps=300, lr_at=cases.warmup_cosine(3e-3, warm, 300), eval_every=100)
    return Outcome(log, cases.healthy_truth(log),
                   f"healthy: MLP language model, {warm}-step linear warm-up then cosine decay, eval every 100 steps")


def healthy_slow(seed: int) -> Outcome:
    """A run that learns slowly but steadily (a small lr): not a plateau."""
    log = cases._classifier(seed, lr=2e-4, steps=300, batch=32)
    _, loss = arr(log, "loss")
    n = len(loss) // 10
    require(float(np.median(loss[-n:])) < 0.8 * float(np.median(loss[:n])), "slow run did not learn")
    require(float(np.median(loss[-n:])) > 0.8, "slow run learned fast (not a slow learner)")
    return Outcome(log, cases.healthy_truth(log), "healthy: MLP classifier at a small lr (2e-4): slow, steady learning")


def healthy_fp16(seed: int) -> Outcome:
    """fp16 with a dynamic loss scaler whose scale grows every 10 clean steps and halves on an
    overflow: a few skipped steps, a sawtooth scale, a healthy run."""
    log = cases.train_loss_scale_collapse(seed, None, growth_interval=10, steps=240)
    s, skipped = arr(log, "skipped")
    require(log.traceback is None and 0 < skipped.sum() < 0.2 * len(s), "fp16 scale did not oscillate normally")
    return Outcome(log, cases.healthy_truth(log),
                   "healthy: fp16 autocast with a dynamic loss scaler (growth interval 10): the scale grows and "
                   "halves on occasional overflows, a few steps skipped, as designed")


def healthy_epochs(seed: int) -> Outcome:
    """An epoch-logged classifier on enough data: train and validation loss fall together."""
    per = 16
    log = cases._classifier(seed, steps=per * 12, batch=64, lr=(1e-3, 5e-4)[seed % 2], eval_every=per)
    log.config["steps_per_epoch"] = per
    _, val = np.array([e["step"] for e in log.evals]), np.array([e["val_loss"] for e in log.evals])
    require(float(val[-1]) < float(val[0]), "validation loss did not fall")
    return Outcome(log, cases.healthy_truth(log), "healthy: MLP classifier, 12 epochs, validation loss falls")


def healthy_loader(seed: int) -> Outcome:
    """Data time logged and small: a healthy run with the loader's time in its log."""
    from synth.loop import Faults

    log = cases._classifier(seed, steps=200, faults=Faults(data_time=True, memory=True))
    return Outcome(log, cases.healthy_truth(log),
                   "healthy: MLP classifier with data time and allocated memory logged, both flat")


# --- faults -------------------------------------------------------------------------------------

def nan_batch(seed: int) -> Outcome:
    k = fault_step(seed)
    log = cases.train_nan_batch(seed, k)
    return Outcome(log, cases.truth_nan_from(k)(log),
                   f"one NaN feature in the batch of step {k} (a corrupt record): loss and weights NaN from there")


def nan_lr_jump(seed: int) -> Outcome:
    k = fault_step(seed)
    log = cases.train_nan_after_lr_jump(seed, k)
    return Outcome(log, cases.truth_nan_after_lr_jump_at(k)(log),
                   f"the lr jumps x1000 at step {k} (SGD+momentum, no clipping): the loss blows up and is NaN a few "
                   "steps later")


def lr_too_high(seed: int) -> Outcome:
    log = cases.train_lr_too_high(seed)
    return Outcome(log, cases.truth_divergence(log),
                   "linear lr warm-up to a peak of 1.0 for SGD+momentum (far too high): learns while the lr is small, "
                   "then the loss climbs back to chance level and stays there")


def lr_jump(seed: int) -> Outcome:
    k = fault_step(seed)
    log = cases.train_lr_jump(seed, k)
    return Outcome(log, cases.truth_lr_jump_at(k)(log),
                   f"the lr jumps from 2e-3 to 0.2 at step {k} (a schedule bug): the loss jumps and stays up, finite")


def spike(seed: int) -> Outcome:
    k = fault_step(seed)
    log = cases.train_corrupt_spike(seed, k)
    return Outcome(log, cases.truth_corrupt_spike_at(k)(log),
                   f"the inputs of step {k} are scaled by 1e6 (one corrupt batch): loss and grad norm spike at that "
                   "step only, then training recovers")


def loss_scale(seed: int) -> Outcome:
    k = fault_step(seed)
    log = cases.train_loss_scale_collapse(seed, k)
    return Outcome(log, cases.truth_loss_scale_at(k)(log),
                   f"fp16: from step {k} un-normalised inputs (x1e5) overflow every step; each step is skipped and the "
                   "dynamic loss scale halves until the minimum is reached and the run aborts")


def lr_too_low(seed: int) -> Outcome:
    log = cases._classifier(seed, lr=(1e-7, 3e-8)[seed % 2], steps=200)
    _, loss = arr(log, "loss")
    require(abs(float(np.median(loss[-40:])) / float(np.median(loss[:40])) - 1) < 0.03, "loss moved at a tiny lr")
    return Outcome(log, Truth(1, (1, 50), 1, {"median_loss": float(np.median(loss))}),
                   "learning rate far too low (1e-7 for Adam, a typo in the exponent): the loss never moves from its "
                   "initial value")


def zero_grad(seed: int) -> Outcome:
    log = cases.train_zero_grad_bug(seed)
    return Outcome(log, cases.truth_zero_grad(log),
                   "the loop calls zero_grad() between backward() and step(): no update, grad norm 0, the loss stays "
                   "at ln(8)")


def shuffled_targets(seed: int) -> Outcome:
    from synth import tasks

    log = cases._lm(seed, targets="random")
    return Outcome(log, cases.truth_plateau_ln(tasks.VOCAB, "vocab_size")(log),
                   f"targets drawn at random (a data bug: labels do not depend on inputs): the loss stays at "
                   f"ln({tasks.VOCAB})")


def overfit_epochs(seed: int) -> Outcome:
    """64 noisy training points, a wide MLP, many epochs: validation loss turns up while train
    loss keeps falling. Truth in epochs (validation runs once per epoch)."""
    per = 4  # 64 points, batch 16
    epochs = 30
    log = cases._classifier(seed, n_train=64, label_noise=0.3, hidden=256, batch=16, lr=3e-3, steps=per * epochs,
                            eval_every=per, clip=None)
    log.config["steps_per_epoch"] = per
    ep = np.array([int(e["step"]) // per for e in log.evals])
    v = np.array([e["val_loss"] for e in log.evals])
    sm = cases.smooth(v, 3)
    j = int(np.argmin(sm))
    require(len(v) - 1 - j >= 5, "validation loss has no rising tail")
    vmin = float(v[max(0, j - 1): j + 2].min())
    rise = float(np.median(v[-3:])) / vmin - 1
    require(rise >= 0.3, f"validation loss rose only {rise:.0%} above its minimum")
    ts, loss = arr(log, "loss")
    at_min = float(np.median(loss[(ts > (j + 1) * per - per) & (ts <= (j + 1) * per)]))
    require(float(np.median(loss[-per * 2:])) < 0.7 * at_min, "training loss did not keep falling")
    first = int(ep[j + 1])
    return Outcome(log, Truth(first, (max(1, first - 2), first + 2), None,
                              {"val_min_epoch": int(ep[j]), "val_min": vmin, "rise": rise, "steps_per_epoch": per,
                               "step_unit": "epoch"}),
                   "64 noisy training points, a 256-wide MLP, 30 epochs: validation loss reaches its minimum early, "
                   "then rises while training loss keeps falling")


def lr_too_high_epochs(seed: int) -> Outcome:
    """The divergence of :func:`lr_too_high` on an epoch-logged run."""
    per = 20
    log = cases._classifier(seed, opt="sgdm", lr=1.0, clip=None, lr_at=lambda s: min(1.0, s / 100), steps=per * 10,
                            eval_every=per)
    log.config["steps_per_epoch"] = per
    t = cases.truth_divergence(log)
    assert t.first_bad_step is not None and t.window is not None
    e = lambda s: math.ceil(s / per)  # noqa: E731
    return Outcome(log, Truth(e(t.first_bad_step), (e(t.window[0]), e(t.window[1])), None, {**t.facts, "step_unit": "epoch"}),
                   "lr warm-up to 1.0 for SGD+momentum (far too high): learns in the first epochs, then the loss "
                   "climbs back to chance level")


def exploding(seed: int) -> Outcome:
    k = fault_step(seed)
    log = cases.train_rnn_exploding(seed, k)
    return Outcome(log, cases.truth_exploding_at(k)(log),
                   f"vanilla tanh RNN (recurrent spectral radius ~3, no clipping); at step {k} backprop-through-time "
                   "grows from 10 to 100 tokens and the gradient norm explodes by orders of magnitude")


def vanishing(seed: int) -> Outcome:
    log = cases.train_vanishing(seed)
    return Outcome(log, cases.truth_vanishing(log),
                   "16-layer sigmoid MLP with plain SGD: the first layer's gradient norm is ~1e-14 and the loss stays "
                   "near ln(8)")


def memory_leak(seed: int) -> Outcome:
    from synth.loop import Faults

    k = fault_step(seed, 40, 100)
    log = cases._classifier(seed, hidden=256, batch=128, faults=Faults(leak_from=k, memory=True), steps=200)
    s, mem = arr(log, "mem_allocated_mb")
    require(float(np.ptp(mem[(s >= 5) & (s < k)])) < 1e-6, "allocated memory not flat before the leak")
    require(bool(np.all(np.diff(mem[s >= k]) > 0)), "allocated memory does not grow at every step after the leak")
    require(float(mem[-1]) > 2 * float(mem[s == k - 1][0]), "allocated memory did not double")
    return Outcome(log, Truth(k, (k, k + 10), k, {"mem_mb_before": float(mem[s == k - 1][0]), "mem_mb_end": float(mem[-1])}),
                   f"from step {k} a forward hook appends every activation to a list (debugging code left on): "
                   "allocated memory grows every step")


def slow_steps(seed: int) -> Outcome:
    k = fault_step(seed)
    log = cases.train_slow(seed, k)
    return Outcome(log, cases.truth_slow_at(k)(log),
                   f"from step {k} every step takes 20 ms longer (a blocking sync added to the step): throughput drops "
                   "about 20x")


def slow_loader(seed: int) -> Outcome:
    from synth.loop import Faults

    k = fault_step(seed)
    log = cases._classifier(seed, steps=200, faults=Faults(data_time=True, data_slow_from=k, data_slow_s=0.01))
    s, d = arr(log, "data_time")
    _, t = arr(log, "step_time")
    share = d / t
    require(bool(np.all(share[s < k] < 0.3)) and bool(np.all(share[s >= k] > 0.8)), "data time does not dominate from k")
    return Outcome(log, Truth(k, (k, k + 2), k, {"data_share_before": float(np.median(share[s < k])),
                                                 "data_share_after": float(np.median(share[s >= k]))}),
                   f"from step {k} the loader reads from a slow mount (10 ms per batch): data time is >80% of the "
                   "step time")


def crash(seed: int) -> Outcome:
    k = fault_step(seed)
    log = cases.train_crash(seed, k)
    return Outcome(log, cases.truth_crash_at(k)(log),
                   f"the batch of step {k} has 19 features instead of 20 (a shard with a dropped column): RuntimeError "
                   "in the first Linear layer")


def oom(seed: int) -> Outcome:
    """A batch whose corrupt length field makes the collate pad it to 2**36 rows: the allocator
    refuses it (the real CPU allocator's error; on a GPU it would be CUDA out of memory)."""
    from synth.loop import Faults

    k = fault_step(seed)

    def corrupt(step: int, b: tuple) -> tuple:
        if step != k:
            return b
        return (b[0].new_zeros((2**36, b[0].shape[1])), b[1])

    log = cases._classifier(seed, faults=Faults(corrupt=corrupt), catch=True)
    s, _ = arr(log, "loss")
    require(int(s[-1]) == k - 1, f"the run did not stop right before step {k}")
    require(log.traceback is not None and "can't allocate memory" in log.traceback, "no allocation failure")
    return Outcome(log, Truth(k, (k - 1, k), k, {"last_logged_step": k - 1}),
                   f"the batch of step {k} is padded to 2**36 rows (a corrupt length field): the allocator cannot "
                   "allocate it and the run dies")


SCENARIOS: dict[str, tuple[str, Callable[[int], Outcome]]] = {
    "healthy-classifier": ("healthy", healthy_classifier),
    "healthy-lm-cosine": ("healthy", healthy_lm_cosine),
    "healthy-slow": ("healthy", healthy_slow),
    "healthy-fp16": ("healthy", healthy_fp16),
    "healthy-epochs": ("healthy", healthy_epochs),
    "healthy-loader": ("healthy", healthy_loader),
    "nan-batch": ("nan_inf", nan_batch),
    "nan-lr-jump": ("nan_inf", nan_lr_jump),
    "lr-too-high": ("divergence", lr_too_high),
    "lr-too-high-epochs": ("divergence", lr_too_high_epochs),
    "lr-jump": ("divergence", lr_jump),
    "spike": ("loss_spike", spike),
    "loss-scale": ("loss_scale_collapse", loss_scale),
    "lr-too-low": ("plateau", lr_too_low),
    "zero-grad": ("plateau", zero_grad),
    "shuffled-targets": ("plateau", shuffled_targets),
    "overfit-epochs": ("overfitting", overfit_epochs),
    "exploding": ("grad_explosion", exploding),
    "vanishing": ("grad_vanishing", vanishing),
    "memory-leak": ("memory_growth", memory_leak),
    "slow-steps": ("throughput_regression", slow_steps),
    "slow-loader": ("data_pipeline", slow_loader),
    "crash": ("crash", crash),
    "oom": ("oom", oom),
}


def run(name: str, seed: int) -> Outcome:
    _category, fn = SCENARIOS[name]
    try:
        return fn(seed)
    except GroundTruthError as exc:
        raise GroundTruthError(f"scenario {name} seed {seed}: {exc}") from None


__all__ = ["SCENARIOS", "STEPS", "Outcome", "at", "fault_step", "run"]
