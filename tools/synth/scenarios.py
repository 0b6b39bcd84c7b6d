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


def loss_scale(seed: int, deepspeed_guard: bool = False) -> Outcome:
    k = fault_step(seed)
    log = cases.train_loss_scale_collapse(seed, k, deepspeed_guard=deepspeed_guard)
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


def memory_leak(seed: int, large: bool = False) -> Outcome:
    """``large``: 4 MiB kept per step from late in the run, so that the growth shows in a printer
    that rounds memory to 10 MiB (DeepSpeed's GB with two decimals) while the leak stays small."""
    from synth.loop import Faults

    k = fault_step(seed, 140, 170) if large else fault_step(seed, 40, 100)
    hidden, batch = (1024, 512) if large else (256, 128)
    log = cases._classifier(seed, hidden=hidden, batch=batch, faults=Faults(leak_from=k, memory=True), steps=200)
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
    "loss-scale-ds": ("loss_scale_collapse", lambda seed: loss_scale(seed, deepspeed_guard=True)),
    "lr-too-low": ("plateau", lr_too_low),
    "zero-grad": ("plateau", zero_grad),
    "shuffled-targets": ("plateau", shuffled_targets),
    "overfit-epochs": ("overfitting", overfit_epochs),
    "exploding": ("grad_explosion", exploding),
    "vanishing": ("grad_vanishing", vanishing),
    "memory-leak": ("memory_growth", memory_leak),
    "memory-leak-large": ("memory_growth", lambda seed: memory_leak(seed, large=True)),
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


# --- distributed ----------------------------------------------------------------------------------

def _ddp_worker(rank: int, world: int, port: int, k: int, mode: str, out: str, seed: int) -> None:
    """One rank of a 2-process DDP run over gloo on 127.0.0.1. At step ``k`` rank 1 dies
    (``exit``: the process is killed) or stops answering (``hang``: stuck outside the collective
    for longer than the process group's 5 s timeout); rank 0 writes its run to ``out``."""
    import json
    import os
    import time
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    from synth import tasks
    from synth.loop import Faults, run_steps
    from synth.runlog import ModelClock

    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timedelta(seconds=5))
    gen = tasks.setup(seed + rank)
    data = tasks.mixture(4096, seed)
    model = torch.nn.parallel.DistributedDataParallel(tasks.mlp(20, 64, data.num_classes))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    log = RunLog(total_steps=STEPS, batch_size=64 * world, clock=ModelClock(cases.STEP_S, seed=seed),
                 config={"model": "mlp2x64-relu-ddp", "optimizer": "adam", "lr": 1e-3, "world_size": world,
                         "train_iters": STEPS})

    def fault(step: int, b: tuple) -> tuple:
        if rank == 1 and step == k:
            if mode == "exit":
                os._exit(1)
            time.sleep(8)
            os._exit(1)
        return b

    try:
        run_steps(log, model, opt, range(1, STEPS + 1), lambda _s: data.batch(gen, 64), clip=1.0,
                  faults=Faults(corrupt=fault))
    except RuntimeError as exc:
        log.crashed(exc)
    if rank == 0:
        with open(out, "w", encoding="utf-8") as fh:
            json.dump({"records": log.records, "traceback": log.traceback, "config": log.config}, fh)
    os._exit(0)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def distributed(seed: int, mode: str) -> Outcome:
    import json
    import tempfile

    import torch.multiprocessing as mp

    k = fault_step(seed)
    with tempfile.TemporaryDirectory() as tmp:
        out = f"{tmp}/rank0.json"
        port = _free_port()
        procs = [mp.get_context("spawn").Process(target=_ddp_worker, args=(rank, 2, port, k, mode, out, seed))
                 for rank in range(2)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(60)
            if p.is_alive():
                p.kill()
        with open(out, encoding="utf-8") as fh:
            saved = json.load(fh)
    log = RunLog(total_steps=STEPS, batch_size=128, config=saved["config"], records=saved["records"],
                 traceback=saved["traceback"], completed=False)
    s, _ = arr(log, "loss")
    require(int(s[-1]) == k - 1, f"rank 0 did not stop right before step {k}")
    # gloo says "closed" or "reset" by peer, as the dead rank's socket is seen first
    needles = ("Connection closed by peer", "Connection reset by peer") if mode == "exit" else ("Timed out",)
    require(log.traceback is not None and any(n in log.traceback for n in needles), f"no {needles} from gloo")
    what = ("is killed (the process exits)" if mode == "exit"
            else "stops answering (stuck outside the collective past the 5 s process-group timeout)")
    return Outcome(log, Truth(k, (k - 1, k), k, {"last_logged_step": k - 1}),
                   f"2-rank DDP over gloo: at step {k} rank 1 {what}; rank 0's all-reduce fails")


SCENARIOS["rank-exit"] = ("distributed_failure", lambda seed: distributed(seed, "exit"))
SCENARIOS["rank-hang"] = ("distributed_failure", lambda seed: distributed(seed, "hang"))


# --- a GAN ------------------------------------------------------------------------------------------

GAN_STEPS = 800
GAN_MODES = 8


def gan(seed: int, collapse: bool) -> Outcome:
    """A vanilla GAN on 8 gaussians on a ring (a classic small test of mode coverage). Logged: the
    discriminator and generator losses, and ``modes_covered``: of 512 samples, how many of the 8
    modes get at least 10 samples within 0.5 of their centre (measured every 10 steps). A healthy
    GAN's losses do not fall (they balance); its coverage reaches 8. With ``collapse`` the latent
    noise is multiplied by 0 from step k (a temperature of 0 in a changed config): the generator
    outputs one point and coverage drops to at most 1."""
    import torch
    from torch import nn

    from synth import tasks
    from synth.runlog import ModelClock

    k = fault_step(seed, 450, 600) if collapse else None
    gen = tasks.setup(seed)
    ang = torch.arange(GAN_MODES) * 2 * math.pi / GAN_MODES
    centres = torch.stack([2 * torch.cos(ang), 2 * torch.sin(ang)], 1)
    g_net = tasks.perturb(nn.Sequential(nn.Linear(2, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 2)))
    d_net = tasks.perturb(nn.Sequential(nn.Linear(2, 64), nn.LeakyReLU(0.2), nn.Linear(64, 64), nn.LeakyReLU(0.2),
                                        nn.Linear(64, 1)))
    og = torch.optim.Adam(g_net.parameters(), lr=1e-3, betas=(0.5, 0.999))
    od = torch.optim.Adam(d_net.parameters(), lr=1e-3, betas=(0.5, 0.999))
    bce = nn.BCEWithLogitsLoss()
    ones, zeros = torch.ones(128, 1), torch.zeros(128, 1)
    log = RunLog(total_steps=GAN_STEPS, batch_size=128, clock=ModelClock(0.002, seed=seed),
                 config={"model": "gan-mlp-64", "optimizer": "adam", "lr": 1e-3, "train_iters": GAN_STEPS})
    modes = 0
    for step in range(1, GAN_STEPS + 1):
        temp = 0.0 if k is not None and step >= k else 1.0
        real = centres[torch.randint(0, GAN_MODES, (128,), generator=gen)] + 0.05 * torch.randn(128, 2, generator=gen)
        fake = g_net(temp * torch.randn(128, 2, generator=gen))
        od.zero_grad()
        d_loss = bce(d_net(real), ones) + bce(d_net(fake.detach()), zeros)
        d_loss.backward()
        od.step()
        og.zero_grad()
        g_loss = bce(d_net(fake), ones)
        g_loss.backward()
        og.step()
        if step % 10 == 0:
            with torch.no_grad():
                dist = torch.cdist(g_net(temp * torch.randn(512, 2, generator=gen)), centres)
                near = dist.argmin(1)[dist.min(1).values < 0.5]
                modes = int((torch.bincount(near, minlength=GAN_MODES) >= 10).sum())
        log.log(step, d_loss=d_loss.item(), g_loss=g_loss.item(), modes_covered=float(modes), lr=1e-3,
                step_time=log.clock.step())
    s, m = arr(log, "modes_covered")
    if k is None:
        require(float(np.median(m[-100:])) >= 7, "the healthy GAN does not cover the modes at the end")
        return Outcome(log, Truth(None, None, facts={"modes_end": int(m[-1])}),
                       "healthy: a vanilla GAN on 8 gaussians; its losses balance instead of falling and it ends "
                       "covering all 8 modes")
    logged = s[(s >= k) & (s % 10 == 0)]
    first = int(logged[0])
    require(bool(np.all(m[s >= first] <= 1)), "coverage did not collapse to at most 1 mode")
    require(float(np.median(m[(s >= k - 100) & (s < k)])) >= 6, "coverage was already low before the fault")
    return Outcome(log, Truth(first, (k, first + 20), k, {"modes_before": int(m[s == k - 1][0])}),
                   f"from step {k} the generator's latent noise is multiplied by 0 (a temperature of 0 in a changed "
                   "config): every sample is the same point, mode coverage drops from 8 to at most 1")


SCENARIOS["healthy-gan"] = ("healthy", lambda seed: gan(seed, False))
SCENARIOS["gan-collapse"] = ("mode_collapse", lambda seed: gan(seed, True))
