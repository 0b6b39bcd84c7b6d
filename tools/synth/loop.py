"""The one training loop most cases share, with the fault hooks the cases switch on.

Logging convention (as in Megatron and the HF Trainer): the values logged at step ``s`` are the
loss of the forward pass of step ``s``, the gradient norm of that backward pass (before
clipping), the learning rate used by that update, and the time of the whole step on the run's
modelled clock (:class:`synth.runlog.ModelClock`: the step is really computed, its duration is not
measured).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

from synth.runlog import RunLog, rss_mb

Batch = tuple[torch.Tensor, torch.Tensor]
LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def cross_entropy(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]).float(), y.reshape(-1))


@dataclass
class Faults:
    """Switches for the injected faults; every one defaults to off."""

    corrupt: Callable[[int, Batch], Batch] | None = None  # rewrite the batch of a step
    slow_from: int | None = None  # every step from this one takes slow_s longer (on the run's clock)
    slow_s: float = 0.0
    leak_from: int | None = None  # keep every activation tensor alive from this step (a debugging list)
    zero_grad_after_backward: bool = False  # the classic bug: grads wiped before the update
    layer_norms: dict[str, str] = field(default_factory=dict)  # metric name -> parameter logged on its own
    leak: list[torch.Tensor] = field(default_factory=list)
    data_time: bool = False  # log the loader's time per step (``data_time``, part of ``step_time``)
    data_slow_from: int | None = None  # from this step the loader takes data_slow_s longer per batch
    data_slow_s: float = 0.0
    memory: bool = False  # log ``mem_allocated_mb``: bytes held by parameters, gradients, optimizer state, leak


def grad_norm(model: nn.Module, clip: float | None) -> float:
    return float(nn.utils.clip_grad_norm_(model.parameters(), clip if clip else math.inf))


def run_steps(log: RunLog, model: nn.Module, opt: torch.optim.Optimizer, steps: range,
              batch: Callable[[int], Batch], *, loss_fn: LossFn = cross_entropy,
              lr_at: Callable[[int], float] | None = None, clip: float | None = None,
              faults: Faults | None = None, evaluate: Callable[[int], None] | None = None,
              track_rss: bool = False) -> None:
    """Train over ``steps`` (1-based global steps), logging every step into ``log``."""
    faults = faults or Faults()
    named = dict(model.named_parameters())
    leaking = [False]
    if faults.leak_from is not None:
        # the bug: a forward hook that "saves activations for later analysis" and never clears them
        for mod in model.modules():
            if not list(mod.children()) and not list(mod.parameters()):
                mod.register_forward_hook(lambda _m, _i, out: faults.leak.append(out.detach()) if leaking[0] else None)
    for step in steps:
        leaking[0] = faults.leak_from is not None and step >= faults.leak_from
        if lr_at is not None:
            for group in opt.param_groups:
                group["lr"] = lr_at(step)
        x, y = batch(step)
        if faults.corrupt is not None:
            x, y = faults.corrupt(step, (x, y))
        opt.zero_grad(set_to_none=False)
        loss = loss_fn(model(x), y)
        loss.backward()
        if faults.zero_grad_after_backward:
            opt.zero_grad(set_to_none=False)
        extra = {metric: float(named[p].grad.norm()) for metric, p in faults.layer_norms.items()}
        gn = grad_norm(model, clip)
        opt.step()
        slow = faults.slow_from is not None and step >= faults.slow_from
        metrics = {"loss": loss.item(), "grad_norm": gn, "lr": opt.param_groups[0]["lr"], **extra}
        if track_rss:
            metrics["rss_mb"] = rss_mb()
        if faults.memory:
            metrics["mem_allocated_mb"] = held_mb(model, opt, faults.leak)
        extra_s = faults.slow_s if slow else 0.0
        if faults.data_time:
            data_slow = faults.data_slow_from is not None and step >= faults.data_slow_from
            metrics["data_time"] = log.clock.data(faults.data_slow_s if data_slow else 0.0)
            extra_s += metrics["data_time"]
        metrics["step_time"] = log.clock.step(extra_s)
        log.log(step, **metrics)
        if evaluate is not None:
            evaluate(step)


def held_mb(model: nn.Module, opt: torch.optim.Optimizer, leak: list[torch.Tensor]) -> float:
    """MiB held by tensors the run keeps alive (what ``torch.cuda.memory_allocated`` counts on a GPU),
    summed from the tensors themselves: the same on every machine, unlike the process RSS."""
    tensors = [*model.parameters(), *(p.grad for p in model.parameters() if p.grad is not None), *leak,
               *(v for state in opt.state.values() for v in state.values() if isinstance(v, torch.Tensor))]
    return sum(t.numel() * t.element_size() for t in tensors) / 2**20


@torch.no_grad()
def mean_loss(model: nn.Module, batches: list[Batch], loss_fn: LossFn = cross_entropy) -> float:
    model.eval()
    try:
        return sum(float(loss_fn(model(x), y)) for x, y in batches) / len(batches)
    finally:
        model.train()
