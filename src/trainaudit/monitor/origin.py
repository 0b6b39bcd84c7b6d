"""Where the first NaN/Inf of a training step appeared, found by replaying that step.

A healthy step pays for one forward pre-hook on the model, whatever the model's size: it keeps a
reference to the call's inputs with the RNG and autocast state. Before the optimizer changes the
parameters (its step pre-hook, or :meth:`Monitor.before_update`), the monitor checks that the
gradients are finite: read at once, or left on the device with an optimizer that skips its
update while the check's flag is set (then the monitor keeps the calls, :meth:`NanOrigin.take`,
until the flag is read with its batch of steps, and the parameters are still the step's). Only
when they are not finite is the step replayed, micro-batch by micro-batch with gradient
accumulation:

- forward: the model's forward runs again on the same inputs, parameters, RNG and autocast state,
  with a hook on every module; the first module (in the order modules finish) whose output is
  non-finite is the origin, and its input tells whether the NaN came in (a bad batch) or was made
  there;
- backward, when the forward is clean: ``torch.autograd.grad`` from the output to every leaf
  module's output (no ``.grad`` is touched); the last leaf in forward order whose output gradient
  is non-finite tells where the backward went bad, and the module after it (whose backward
  produced that gradient) is the origin. The gradient fed in at the output is 1, which is exact
  when the output is the loss (HF models given labels, a LightningModule's ``training_step``);
  for other outputs (logits) the loss's gradient is not known to the monitor, and ones stand in
  for it: whether a backward makes a NaN/Inf rarely depends on the values that come in, and when
  the replayed backward stays finite while the real gradients were not, the NaN/Inf came in
  with the gradient at the output, which is what the origin then says (the loss or its backward).

Hooking every module on every step instead costs a Python call per module call (a few percent of
a small model's step, more for models of hundreds of modules). What a replay cannot restore, it
says: a forward that depends on state other than its inputs, parameters, buffers, RNG and
autocast (a Python counter in a module) may not go non-finite again, and the origin then says so.
Buffers changed by the replay (BatchNorm statistics) are put back.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from torch import nn

log = logging.getLogger("trainaudit.monitor")

# inputs of the micro-batches of one optimizer step are held until the update up to this many
# bytes (the last micro-batch's always): beyond it the oldest are dropped
MAX_HELD_BYTES = 256 << 20


def first_tensor(x: Any) -> torch.Tensor | None:
    """The first tensor of a module's output or input (tuples, lists, dicts, HF ModelOutput)."""
    if isinstance(x, torch.Tensor):
        return x
    if isinstance(x, (tuple, list)):
        for item in x:
            t = first_tensor(item)
            if t is not None:
                return t
    if isinstance(x, dict):
        for item in x.values():
            t = first_tensor(item)
            if t is not None:
                return t
    return None


def finite(t: torch.Tensor) -> bool:
    if not (t.is_floating_point() or t.is_complex()):
        return True
    return bool(torch.isfinite(t).all())


def _nbytes(args: Any, kwargs: dict[str, Any]) -> int:
    """Bytes of the tensors passed directly (top level, and one level of dicts/sequences)."""
    n = 0
    for x in (*args, *kwargs.values()):
        items = x.values() if isinstance(x, dict) else x if isinstance(x, (tuple, list)) else (x,)
        n += sum(t.numel() * t.element_size() for t in items if isinstance(t, torch.Tensor))
    return n


def _autocast_state() -> list[tuple[str, torch.dtype]]:
    return [(dev, torch.get_autocast_dtype(dev)) for dev in ("cuda", "cpu", "xpu", "mps")
            if torch.is_autocast_enabled(dev)]


class _Capture(NamedTuple):
    """One training call as it was made: what the replay needs to make it again (held as a
    plain tuple: building a NamedTuple costs a Python call on every step)."""

    fn: Callable[..., Any] | None  # None: the model's forward
    args: Any
    kwargs: dict[str, Any]
    rng: torch.Tensor
    rng_cuda: torch.Tensor | None
    amp: list[tuple[str, torch.dtype]] | None


_STEP = "<the step function>"  # the explicit step function's result in a replay (a loss)


class _Call(NamedTuple):
    """One module call seen by the replay."""

    name: str
    leaf: bool
    inp: Any
    out: torch.Tensor


def _record(calls: list[_Call], name: str, leaf: bool, _mod: nn.Module, inp: Any, out: Any) -> None:
    t = first_tensor(out)
    if t is not None:
        calls.append(_Call(name, leaf, inp, t))


class NanOrigin:
    """The per-call capture and the replay (see the module docstring)."""

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self._cuda = torch.cuda.is_available()
        self._explicit = False  # begin() was called: the model's hook stands aside
        self._held: list[tuple[Any, ...]] = []  # the training calls since the last update (_Capture fields)

    # -- per call ---------------------------------------------------------------------------
    def hooks(self, wrap: Callable[[Callable[..., Any]], Callable[..., Any]]) -> list[Any]:
        """Register the model's forward pre-hook (wrapped by ``wrap``); returns the handles."""
        return [self.model.register_forward_pre_hook(wrap(self._on_pre), with_kwargs=True)]

    def _on_pre(self, _mod: nn.Module, args: Any, kwargs: dict[str, Any]) -> None:
        # a forward without autograd (evaluation under no_grad) is not a training step's
        if not self._explicit and torch.is_grad_enabled():
            self._capture(None, args, kwargs)

    def begin(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        """The step's computation is ``fn(*args, **kwargs)`` (for instance a LightningModule's
        ``training_step``), not ``model(...)``: from now on the model's hook stands aside."""
        self._explicit = True
        self._capture(fn, args, kwargs)

    def _capture(self, fn: Callable[..., Any] | None, args: Any, kwargs: dict[str, Any]) -> None:
        held = self._held
        if held and sum(_nbytes(c[1], c[2]) for c in held) + _nbytes(args, kwargs) > MAX_HELD_BYTES:
            held.clear()  # gradient accumulation with big inputs: keep the newest only
        held.append((fn, args, kwargs, torch.get_rng_state(),
                     torch.cuda.get_rng_state() if self._cuda and torch.cuda.is_initialized() else None,
                     _autocast_state() if torch._C._is_any_autocast_enabled() else None))

    @property
    def captured(self) -> bool:
        """Training calls are held (from their forward to the optimizer's update)."""
        return bool(self._held)

    def release(self) -> None:
        """Drop the references to the held calls' inputs."""
        self._held.clear()

    def take(self) -> tuple[list[tuple[Any, ...]], int]:
        """The held calls (handed over, no longer held here) and the bytes of their inputs: the
        monitor keeps them past the update while the step's check is still on the device."""
        held, self._held = self._held, []
        return held, sum(_nbytes(c[1], c[2]) for c in held)

    # -- after a non-finite step ------------------------------------------------------------
    def locate(self, named: list[tuple[str, nn.Parameter]], *, params_intact: bool, loss_finite: bool = True,
               held: list[tuple[Any, ...]] | None = None, grads_current: bool = True) -> dict[str, Any] | None:
        """The origin of the NaN/Inf of a step whose gradients or loss are non-finite (None when
        nothing is). ``params_intact``: the parameters are still those of the held calls'
        forwards (no update since), so they can be replayed. ``held``: that step's calls when
        not the ones held now (see :meth:`take`); ``grads_current``: the parameters' ``.grad``
        are still that step's (False when later steps have run: they are not looked at)."""
        held = self._held if held is None else held
        if not held or not params_intact:
            if not loss_finite:  # a NaN loss spreads to every gradient: those would not say where
                return {"phase": "loss", "module": None,
                        "detail": "the loss is non-finite; the step could not be replayed to find where it came from"}
            return _from_param_grads(named) if grads_current else dict(_NOT_REPLAYED)
        several = len(held) > 1
        for k, cap in enumerate(map(_Capture._make, held)):
            try:
                origin = self._replay_one(cap, loss_finite)
            except Exception as exc:
                log.warning("trainaudit: the replay of the non-finite step failed: %s: %s", type(exc).__name__, exc)
                return {"phase": "unknown", "module": None,
                        "detail": f"the replay of the step failed ({type(exc).__name__}: {exc})"[:300]}
            if origin is not None:
                if several:
                    origin["micro_batch"] = k
                return origin
        if not loss_finite:
            return _loss_origin()
        if grads_current and _from_param_grads(named) is None:
            return None  # every gradient value is finite: only a norm of them overflowed
        return {"phase": "loss", "module": None,
                "detail": "the forward and the backward replayed finite: the NaN/Inf came in with the gradient at the "
                          "model's output (the loss or its backward made it), or the forward depends on state the "
                          "replay does not restore (a Python attribute, a global)"}

    def _replay_one(self, cap: _Capture, loss_finite: bool) -> dict[str, Any] | None:
        """The origin within one held call, or None when its forward and backward replay finite."""
        calls, out = self._forward(cap)
        with torch.no_grad():
            for i, c in enumerate(calls):
                if not finite(c.out):
                    if c.name is _STEP:  # modules all finite, the explicit step function's result not
                        return _loss_origin()
                    t_in = first_tensor(c.inp)
                    bad_in = t_in is not None and not finite(t_in)
                    return {"phase": "forward", "module": c.name, "input_nonfinite": bad_in, "call": i,
                            "detail": (f"non-finite input entering {c.name}" if bad_in
                                       else f"{c.name} produced NaN/Inf from finite inputs")}
        if not loss_finite or out is None or not out.requires_grad:
            return None
        return self._backward(calls, out)

    def _forward(self, cap: _Capture) -> tuple[list[_Call], torch.Tensor | None]:
        """The held call once more, every module's output recorded; the last entry is the
        call's own result (the model, or the explicit step function as ``_STEP``)."""
        target = self.model.module if isinstance(self.model, nn.parallel.DistributedDataParallel) else self.model
        fn = cap.fn or target.forward  # forward itself: not the model's hooks (ours, the user's)
        calls: list[_Call] = []
        names = {id(m): n for n, m in self.model.named_modules()}  # as the parameters are named (DDP: module.)
        handles = [m.register_forward_hook(functools.partial(_record, calls, names[id(m)],
                                                             not any(True for _ in m.children())))
                   for m in target.modules() if m is not target]
        saved = [(b, b.detach().clone()) for b in target.buffers()]
        devices = [torch.cuda.current_device()] if cap.rng_cuda is not None else []
        try:
            with contextlib.ExitStack() as stack:
                stack.enter_context(torch.random.fork_rng(devices=devices))
                torch.set_rng_state(cap.rng)
                if cap.rng_cuda is not None:
                    torch.cuda.set_rng_state(cap.rng_cuda)
                for dev, dtype in cap.amp or ():
                    stack.enter_context(torch.autocast(dev, dtype=dtype))
                stack.enter_context(torch.enable_grad())
                out = first_tensor(fn(*cap.args, **cap.kwargs))
        finally:
            for h in handles:
                h.remove()
            with torch.no_grad():
                for b, v in saved:
                    b.copy_(v)
        if out is not None:
            name = _STEP if cap.fn is not None else (names[id(target)] or type(target).__name__)
            calls.append(_Call(name, not any(True for _ in target.children()), cap.args, out))
        return calls, out

    def _backward(self, calls: list[_Call], out: torch.Tensor) -> dict[str, Any] | None:
        """The backward replayed from the output to every leaf module's output."""
        leaves = [c for c in calls[:-1] if c.leaf and c.out.requires_grad]
        if not leaves:
            return None
        grads = torch.autograd.grad(out, [c.out for c in leaves], torch.ones_like(out), allow_unused=True)
        with torch.no_grad():
            for i in reversed(range(len(leaves))):  # backward order
                g = grads[i]
                if g is not None and not finite(g):
                    name = leaves[i].name
                    nxt = (leaves[i + 1].name if i + 1 < len(leaves)
                           else "the loss" if calls[-1].name is _STEP else calls[-1].name)
                    origin = {"phase": "backward", "module": nxt, "grad_at_output_of": name,
                              "detail": f"non-finite gradient first produced by the backward of {nxt} "
                                        f"(seen at the output of {name})"}
                    if out.numel() > 1:
                        origin["detail"] += "; replayed with ones as the gradient at the model's output"
                    return origin
        return None


_NOT_REPLAYED = {"phase": "backward", "module": None,
                 "detail": "non-finite gradients; the step could not be replayed (its inputs were no longer held or "
                           "the parameters had changed since)"}


def _loss_origin() -> dict[str, Any]:
    return {"phase": "loss", "module": None, "detail": "the loss itself is non-finite (module outputs finite)"}


def _from_param_grads(named: list[tuple[str, nn.Parameter]]) -> dict[str, Any] | None:
    """Without a replay: the last module (in registration order) with a non-finite parameter
    gradient."""
    bad = [n for n, p in named if p.grad is not None and not finite(p.grad)]
    if not bad:
        return None
    return {"phase": "backward", "module": bad[-1].rsplit(".", 1)[0] if "." in bad[-1] else bad[-1],
            "detail": f"non-finite parameter gradients: {', '.join(bad[:5])} (the step could not be replayed)"}
