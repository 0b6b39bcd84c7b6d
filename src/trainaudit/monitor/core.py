"""The live monitor for a PyTorch training loop (torch is imported by the caller's model already).

    mon = trainaudit.monitor(model, optimizer, log_dir="runs/x")
    with mon:
        for batch in data:
            loss = ...; loss.backward(); optimizer.step(); optimizer.zero_grad()
            mon.step(loss, batch=batch)

Per step (cheap): loss, lr, global grad norm, number of parameter tensors with non-finite
gradients, step time; every ``mem_every`` steps process RSS / CUDA memory. Every ``every`` steps:
per-module grad norms and update-to-weight ratios. When the output or the gradients turn
non-finite, the module where the first NaN/Inf appeared, found by replaying the step with the
parameters it ran with (``trainaudit.monitor.origin``). Online rules (the diagnose rules) every
``rules_every`` steps, at once on a non-finite value or an lr change.

No read from the device on a healthy step: ``step()`` keeps the step's tensors (loss, grad norm,
the gradient check's flag) as they are, with the step's other raw numbers, in a list. Every
``flush_every`` steps (at most ``rules_every``), every ``flush_s`` seconds and on ``close()`` the
batch's tensors are stacked and copied to the host: on CUDA without waiting (pinned memory and
an event that later steps query), elsewhere in one read. When the values are there, the JSONL
records are built, written and fed to the online rules, and a non-finite step among them is
located. What the host already knows is acted on at once (a non-finite value passed as a float
or read by the check before the update, an lr change above 2x, a sampled per-layer step): the
batch is then read waiting, evaluated, and training can stop at that very step.

The gradient check before the update (``nan_origin``) stays on the device with an optimizer that
takes GradScaler's ``found_inf`` (``fused=True`` Adam, AdamW, SGD, Adagrad): its flag makes the
optimizer skip the update from the first non-finite step until the flag is read with the batch,
so the parameters are those that step ran with and its replay is exact. Other optimizers cannot
skip an update on the device: the flag is read before each update (one device sync per step on
a GPU) to keep the origin exact; ``nan_origin=False`` reads nothing per step whatever the
optimizer.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import logging
import math
import operator
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any, NamedTuple, Self

import torch
from torch import nn

from trainaudit.live.online import OnlineRules, TrainingStopped, alert
from trainaudit.monitor.origin import MAX_HELD_BYTES, NanOrigin
from trainaudit.monitor.writer import JsonlWriter, TensorBoardWriter
from trainaudit.answer.schema import SEVERITY_ORDER, Finding
from trainaudit.rules import Config
from trainaudit.rules.monitor import FirstNonFinite, FrozenParams, ParamsNotInOptimizer, ParamsWithoutGrad

log = logging.getLogger("trainaudit.monitor")

SEVERITIES = tuple(SEVERITY_ORDER)
# record fields that are not series the rules read
_NOT_FOR_RULES = frozenset({"type", "step", "nonfinite_grads"})


def _inert(*_args: Any) -> None:
    """What the monitor's module hooks become in a copy of the model."""


class _Hook(functools.partial):  # type: ignore[type-arg]
    """A module hook that a copy of the model does not take along: ``copy.deepcopy(model)`` (EMA
    and SWA models) and ``torch.save(model)`` copy the hooks with the model, and the monitor they
    point to (open files) cannot be copied. The copy gets a no-op instead; the original keeps
    its hooks. A partial, so that a call still runs no Python frame of its own."""

    def __reduce__(self) -> tuple[Any, ...]:
        return _inert_hook, ()


def _inert_hook() -> Callable[..., None]:
    return _inert


class _Pending(NamedTuple):
    """What ``step()`` keeps of one step until the batch is read (raw numbers, no record)."""

    step: int
    loss: Any  # float, None, or a detached tensor read with the batch (no read per step)
    grad_norm: Any  # float, or a norm tensor (the caller's or the monitor's) read with the batch
    nonfinite: Any  # int, or a tensor (the monitor's count on the device) read with the batch
    lr: float | None
    t: float  # the monitor's clock at step()
    rss: float | None
    cuda: tuple[float, float] | None
    metrics: dict[str, float] | None
    per: list[float | None] | None  # per-tensor grad norms, sampled steps only
    ratios: dict[str, float] | None
    before: dict[str, Any] | None  # a record written just before this step's (the NaN origin)
    flag: Any  # None, or the device check's flag after this step (1: the update was held back)
    batch: Any  # the batch passed to step(), kept only when save_batch_on asks for it


# the _Pending fields that may hold tensors (read with the batch)
_READ = tuple(_Pending._fields.index(f) for f in ("loss", "grad_norm", "nonfinite", "flag"))
_COUNT = _Pending._fields.index("nonfinite")


class _Read:
    """One batch of steps whose tensors are being copied to the host: on CUDA a non-blocking
    copy into pinned memory and an event that later steps query, never wait on; elsewhere the
    values are read at once, one read for the whole batch."""

    __slots__ = ("event", "host", "pending", "slots")

    def __init__(self, pending: list[tuple[Any, ...]]) -> None:
        self.pending = pending
        self.slots: list[tuple[int, int]] = []
        self.event: Any = None
        tensors: list[torch.Tensor] = []
        for i, p in enumerate(pending):
            for f in _READ:
                if isinstance(p[f], torch.Tensor):
                    self.slots.append((i, f))
                    tensors.append(p[f])
        self.host: Any = []
        if not tensors:
            return
        try:
            stacked = torch.stack([t.reshape(()).to(torch.float32) for t in tensors])
        except RuntimeError:  # tensors on several devices (model parallel): read one by one
            self.host = [float(t.item()) for t in tensors]
            return
        if stacked.device.type == "cuda":
            # https://pytorch.org/docs/stable/notes/cuda.html#asynchronous-execution: a copy to
            # pinned memory with non_blocking=True returns at once; the event says when it landed
            self.host = torch.empty(stacked.shape, dtype=torch.float32, pin_memory=True)
            self.host.copy_(stacked, non_blocking=True)
            self.event = torch.cuda.Event()
            self.event.record()
        else:
            self.host = stacked.tolist()

    def ready(self) -> bool:
        return self.event is None or bool(self.event.query())

    def rows(self) -> list[tuple[Any, ...]]:
        """The batch's steps with every tensor replaced by its value (waits for the copy)."""
        if self.event is not None:
            self.event.synchronize()
        values = self.host.tolist() if isinstance(self.host, torch.Tensor) else self.host
        rows = [list(p) for p in self.pending]
        for (i, f), v in zip(self.slots, values):
            rows[i][f] = int(v) if f == _COUNT else v
        return [tuple(r) for r in rows]


_grad_of = operator.attrgetter("grad")


def _peak_rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class Monitor:
    """See the module docstring. Actions, each with the lowest severity that triggers it
    (``None`` = never): ``warn`` (a ``logging`` warning on ``trainaudit.monitor``), ``callback``
    (``on_alert(alert)``), ``save_batch`` (``torch.save`` of the batch passed to :meth:`step`
    into ``log_dir/batches/``), ``stop`` (:class:`TrainingStopped` after the current step)."""

    origin_class: type[NanOrigin] = NanOrigin  # what captures and replays steps (a subclass in the benchmark)

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer | None = None,
                 log_dir: str | os.PathLike[str] = "trainaudit-monitor", *, every: int = 100, rules_every: int = 25,
                 window: int = 2000, rules_budget: float = 0.001, mem_every: int = 10, warn: str | None = "low", on_alert: Callable[[Finding], None] | None = None,
                 callback_on: str = "low", save_batch_on: str | None = None, stop_on: str | None = None,
                 nan_origin: bool = True, tensorboard: bool = False, config: Config | None = None,
                 filename: str = "trainaudit-monitor.jsonl", meta: dict[str, Any] | None = None,
                 flush_every: int = 32, flush_s: float = 0.5, clock: Callable[[], float] = time.perf_counter) -> None:
        for name, sev in (("warn", warn), ("callback_on", callback_on), ("save_batch_on", save_batch_on),
                          ("stop_on", stop_on)):
            if sev is not None and sev not in SEVERITY_ORDER:
                raise ValueError(f"{name}={sev!r}: expected one of {', '.join(SEVERITIES)} or None")
        if every < 1 or rules_every < 1:
            raise ValueError("every and rules_every must be >= 1")
        self.model = model
        self.optimizer = optimizer
        self.log_dir = Path(log_dir)
        self.every = every
        self.mem_every = max(1, mem_every)
        self.warn_on, self.callback_on, self.save_batch_on, self.stop_on = warn, callback_on, save_batch_on, stop_on
        self.on_alert = on_alert
        # a batch never spans a routine rule evaluation: rules_every keeps its meaning
        self.flush_every = max(1, min(flush_every, rules_every))
        self.flush_s = flush_s
        self._pending: list[tuple[Any, ...]] = []  # _Pending fields (a plain tuple: no Python call per step)
        # the time source (seconds): step times, the flush interval and the rules' budget are on it;
        # a test or a replay passes its own, so that step times are what it decides, not what the
        # machine's load made of them
        self._now = clock
        self._paused_s = 0.0  # time spent in paused() blocks
        self._t_flush = self._clock()
        self.rules = OnlineRules(config=config, every=rules_every, window=window, budget=rules_budget, clock=self._clock)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.log_dir / filename
        self.writer = JsonlWriter(self.path)
        self.tb = TensorBoardWriter(self.log_dir / "tb") if tensorboard else None
        self.step_no = 0
        self.stopped: Finding | None = None
        self.closed = False
        self.origin: dict[str, Any] | None = None
        self._handles: list[Any] = []
        self.origin_finder = self.origin_class(model) if nan_origin else None
        self._found: dict[str, Any] | None = None  # the origin found before this step's update
        self._grads_bad: bool | None = None  # what the check before this step's update found (None: no check)
        self._ahead: list[torch.Tensor] = []  # a grad norm the next check screens with the gradients
        self._guarded = False  # this step's update was made conditional on the device check (see before_update)
        self._inflight: collections.deque[_Read] = collections.deque()  # batches being read, oldest first
        # the held calls of the steps whose device check is not read yet: (step, calls, bytes)
        self._windows: collections.deque[tuple[int, list[tuple[Any, ...]], int]] = collections.deque()
        self._window_bytes = 0
        self._origin_batch: Any = None  # the batch of the first non-finite step found by a read
        self._closure_steps = False  # the optimizer takes a closure: its pre-hook comes before the backward
        self._opt_handles: list[Any] = [None, None]  # the optimizer's step pre-hook and post-hook
        self._t_last: float | None = None
        self._prev_lr: float | None = None
        self._snap: dict[str, torch.Tensor] | None = None
        self._ratios: dict[str, float] = {}
        self._gstats: tuple[Any, Any, list[float | None]] | None = None  # _grad_stats()
        self._checked_params = False
        self._user_gn = False
        self._cuda = torch.cuda.is_available()  # once: the query is not free
        self._statm: int | None = None
        with contextlib.suppress(OSError):  # not Linux: no RSS samples
            self._statm = os.open("/proc/self/statm", os.O_RDONLY)
        self._page_mb = os.sysconf("SC_PAGE_SIZE") / 2**20 if hasattr(os, "sysconf") else 4096 / 2**20
        self._named = [(n, p) for n, p in model.named_parameters()]
        self._params = [p for _, p in self._named]
        trainable = [p for p in self._params if p.requires_grad]
        self._screened = [p for p in trainable if p.dim() <= 1] or trainable
        # the check's flag and scale, on the gradients' device (0-dim, as GradScaler's: a fused
        # optimizer takes the flag as its found_inf)
        dev = self._screened[0].device if self._screened else None
        self._found_inf, self._one = torch.zeros((), device=dev), torch.ones((), device=dev)
        self._module_of = [n.rsplit(".", 1)[0] if "." in n else n for n, _ in self._named]
        self._attach()
        self.writer.write({"trainaudit_monitor": 1, "type": "start", "time": time.time(),
                           "every": every, "rules_every": rules_every, **self._model_summary(), **(meta or {})})

    # -- hooks ------------------------------------------------------------------------------
    def _attach(self) -> None:
        if self.origin_finder is not None:
            self._handles += self.origin_finder.hooks(_Hook)
        self._arm_optimizer(self.step_no + 1)

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Record nothing inside the block (hooks detached): forwards and steps there are not
        the monitor's, and its duration is left out of the next step time."""
        t0 = self._now()
        # the block's updates are not held back: whatever the device check holds is read first
        late = self._flush(wait=True)
        if late:
            self._act(late, None, stop=False)
        self._unguard()
        for h in self._handles:
            h.remove()
        self._handles.clear()
        self._arm_optimizer(None)
        try:
            yield
        finally:
            if self.origin_finder is not None:
                self.origin_finder.release()
            self._gstats = self._grads_bad = None
            self._ahead = []
            self._guarded = False
            self._paused_s += self._now() - t0
            if not self.closed:
                self._attach()

    def begin(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        """For loops whose step is not ``model(...)`` (a LightningModule's ``training_step``
        calling submodules): call before it with the function and its arguments. The NaN/Inf
        origin replays ``fn(*args, **kwargs)`` on a non-finite step."""
        if self.origin_finder is not None:
            self.origin_finder.begin(fn, *args, **kwargs)

    def grad_norm_ahead(self, grad_norm: torch.Tensor | float | None) -> None:
        """A grad norm known before the update (a callback's own, ``clip_grad_norm_``'s result):
        the check before the update screens it with the gradients, on the device. Finite gradients
        whose norm overflows (a sum of squares past float32's range) are then caught at their
        step without reading the norm."""
        if isinstance(grad_norm, torch.Tensor):
            self._ahead = [grad_norm.detach().float().reshape(1).clone()]  # the check scales it in place

    def _screened_grads(self) -> list[torch.Tensor]:
        grads = [g for g in map(_grad_of, self._screened) if g is not None]
        return [*grads, *self._ahead] if grads else grads

    def before_update(self) -> None:
        """Check the gradients before the parameters change, and replay the step if they are
        non-finite. The optimizer's step pre-hook calls it; call it yourself (after backward,
        before the update) when the monitor has no optimizer or the optimizer takes a closure
        (the closure runs the backward after the pre-hook)."""
        try:
            self._check_before_update()
        finally:
            self._ahead = []

    def _check_before_update(self) -> None:
        finder = self.origin_finder
        if finder is None or not finder.captured:
            return
        if self.origin is not None:  # the first NaN/Inf is located: nothing more to replay
            finder.release()
            return
        if self._guard():
            return  # the held calls stay with the step until its check is read
        try:
            gstats = self._gstats
            # without them (the caller passes grad_norm, which comes after the update) a screen;
            # a finite sum of squares proves every gradient finite
            grads_bad = self._grads_bad = (
                not math.isfinite(float(gstats[0])) if gstats else not self._screen_finite())
            if grads_bad and self._found is None:
                self._found = self._locate(params_intact=True)
        except Exception as exc:
            log.warning("trainaudit: NaN/Inf origin check failed: %s: %s", type(exc).__name__, exc)
        finally:
            finder.release()

    def _guard(self) -> bool:
        """Check the gradients on the device without reading the result, and make the update
        conditional on it: an optimizer that takes GradScaler's ``found_inf`` (fused Adam, AdamW,
        SGD, Adagrad) skips its update while the flag is set, as for a step with inf gradients
        under GradScaler (https://pytorch.org/docs/stable/amp.html#gradient-scaling). The flag
        stays set from the first non-finite step until the monitor reads it with the step's batch,
        so the parameters are still those that step ran with and its replay is exact. False
        (nothing done) for other optimizers or a GradScaler that set its own flag. With a closure
        this runs inside it (``before_update`` after the backward), before the update reads the
        flag."""
        opt = self.optimizer
        if opt is None or not getattr(opt, "_step_supports_amp_scaling", False):
            return False
        if opt.__dict__.get("found_inf", self._found_inf) is not self._found_inf:
            return False  # GradScaler's step: it skips an inf step itself, its flag is left alone
        grads = self._screened_grads()
        if not grads or not self._screen(grads):
            return False
        opt.found_inf = self._found_inf  # type: ignore[attr-defined]  # may have moved with the model
        self._guarded = True
        return True

    def _unguard(self) -> None:
        """The optimizer's updates no longer wait on the monitor's flag."""
        opt = self.optimizer
        if opt is not None and opt.__dict__.get("found_inf") is self._found_inf:
            del opt.found_inf  # type: ignore[attr-defined]

    def _locate(self, **kw: Any) -> dict[str, Any] | None:
        """The origin finder's replay; its time is left out of the step times (as a paused()
        block): a slower step caused by the monitor's own replay is no finding."""
        assert self.origin_finder is not None
        t0 = self._now()
        try:
            return self.origin_finder.locate(self._named, **kw)
        finally:
            self._paused_s += self._now() - t0

    def _arm_optimizer(self, step: int | None) -> None:
        """The optimizer hooks ``step`` needs (None: none), as an idle hook still costs a cold
        Python call per step: the pre-hook for the check before the update (nan_origin), for the
        gradient statistics when the caller does not pass grad_norm, and on sampled steps; the
        post-hook on sampled steps (update ratios)."""
        opt = self.optimizer
        if opt is None:
            return
        sampled = step is not None and self._sampling(step)
        want = (step is not None and (self.origin_finder is not None or sampled or not self._user_gn), sampled)
        have = self._opt_handles
        if want == (have[0] is not None, have[1] is not None):
            return
        for i, (on, register, hook) in enumerate(zip(want, (opt.register_step_pre_hook, opt.register_step_post_hook),
                                                     (self._on_opt_pre, self._on_opt_post))):
            if on and have[i] is None:
                have[i] = register(hook)
            elif not on and have[i] is not None:
                have[i].remove()
                have[i] = None

    def _clock(self) -> float:
        """Seconds, paused() blocks left out (step times, the rules' budget)."""
        return self._now() - self._paused_s

    def _sampling(self, step: int) -> bool:
        return step == 1 or step % self.every == 0

    def _on_opt_pre(self, _opt: Any, args: Any, kw: Any) -> None:
        sampling = self._sampling(self.step_no + 1)
        # a closure computes the gradients after this hook: the caller checks them (Lightning)
        if (args[1] if len(args) > 1 else kw.get("closure")) is not None:  # args: (optimizer, *step's args)
            self._closure_steps = True
        else:
            # grads as the optimizer sees them; skipped when the caller passes grad_norm (then a
            # finite norm proves every grad finite, and per-layer norms are only needed when sampling)
            if sampling or not self._user_gn:
                self._gstats = self._grad_stats(sampling)
            self.before_update()
        if sampling:
            self._snap = {n: p.detach().clone() for n, p in self._named if p.grad is not None}

    def _on_opt_post(self, _opt: Any, _args: Any, _kw: Any) -> None:
        if self._snap is None:
            return
        upd: dict[str, list[float]] = {}
        keep = [(p, mod, self._snap[n]) for (n, p), mod in zip(self._named, self._module_of) if n in self._snap]
        if keep:
            with torch.no_grad():
                new, old = [p.detach() for p, _, _ in keep], [o for _, _, o in keep]
                # fused: two norm passes and an in-place subtraction (the snapshot is ours: no
                # new memory), one sync
                w_norms = torch._foreach_norm(old)
                torch._foreach_sub_(old, new)
                norms = w_norms + torch._foreach_norm(old)
                try:
                    both = torch.stack(norms).tolist()
                except RuntimeError:  # parameters on several devices (model parallel)
                    both = [t.item() for t in norms]
            n = len(keep)
            for (_, mod, _), w, d in zip(keep, both[:n], both[n:]):
                acc = upd.setdefault(mod, [0.0, 0.0])
                acc[0] += d * d
                acc[1] += w * w
        self._ratios = {m: math.sqrt(a) / math.sqrt(b) if b > 0 else (0.0 if a == 0 else math.inf)
                        for m, (a, b) in upd.items()}
        self._snap = None

    def _grad_stats(self, per_tensor: bool) -> tuple[Any, Any, list[float | None]]:
        """(global L2 norm, tensors with non-finite grads, per-tensor norms in named order) read
        now when ``per_tensor``; otherwise the norm and the count as 0-dim tensors left on the
        device and no per-tensor list."""
        grads = [g for g in map(_grad_of, self._params) if g is not None]
        if not grads:
            return 0.0, 0, []
        with torch.no_grad():
            norms = list(torch._foreach_norm(grads))  # one fused pass over all grads, one result each
            try:
                stacked = torch.stack([n.to(torch.float32) for n in norms])
            except RuntimeError:  # several devices
                stacked = torch.stack([n.float().cpu() for n in norms])
            total_t = torch.linalg.vector_norm(stacked)
            if not per_tensor:
                # on the device: read with the step's batch, not now
                return total_t, torch.isfinite(stacked).logical_not_().sum(), []
            total = float(total_t)  # a sampled step: read now
            per = stacked.tolist()
        bad = sum(1 for v in per if not math.isfinite(v))
        full = iter(per)
        return total, bad, [next(full) if p.grad is not None else None for p in self._params]

    def _screen_finite(self) -> bool:
        """Whether the gradients of the 1-D parameters (biases, norm weights) are finite. Each is
        a sum over the batch of the gradient at its module's output, so a NaN/Inf there, or
        anywhere downstream in the backward (it flows upstream), shows in it: the check reads
        a small share of the gradients. All gradients when the model has no 1-D parameters."""
        grads = self._screened_grads()
        if not grads:
            return True
        if not self._screen(grads):
            return all(math.isfinite(x.item()) for x in torch._foreach_norm(grads, 1))  # several devices
        found = self._found_inf
        if found.item() == 0:
            return True
        found.zero_()
        return False

    def _screen(self, grads: list[torch.Tensor]) -> bool:
        """GradScaler's fused non-finite check of ``grads`` into the flag, scaling by 1 (values
        unchanged), one call per dtype: kernels only, nothing read. False when the gradients are
        on several devices (the flag is on one)."""
        found = self._found_inf
        if found.device != grads[0].device:  # the model moved: the flag follows
            self._found_inf, self._one = torch.zeros((), device=grads[0].device), torch.ones((), device=grads[0].device)
            found = self._found_inf
        try:
            torch._amp_foreach_non_finite_check_and_unscale_(grads, found, self._one)
        except RuntimeError:
            by_type: dict[tuple[torch.device, torch.dtype], list[torch.Tensor]] = {}
            for g in grads:
                by_type.setdefault((g.device, g.dtype), []).append(g)
            if any(dev != found.device for dev, _ in by_type):
                return False
            for same in by_type.values():
                torch._amp_foreach_non_finite_check_and_unscale_(same, found, self._one)
        return True

    def _rss_mb(self) -> float:
        """Current RSS from a kept-open /proc/self/statm (pread: no open per step)."""
        if self._statm is not None:
            try:
                return int(os.pread(self._statm, 128, 0).split()[1]) * self._page_mb
            except (OSError, ValueError, IndexError):
                pass
        return _peak_rss_mb()

    # -- model facts ------------------------------------------------------------------------
    def _model_summary(self) -> dict[str, Any]:
        total = sum(p.numel() for _, p in self._named)
        trainable = sum(p.numel() for _, p in self._named if p.requires_grad)
        dtypes: dict[str, int] = {}
        for _, p in self._named:
            dtypes[str(p.dtype).removeprefix("torch.")] = dtypes.get(str(p.dtype).removeprefix("torch."), 0) + p.numel()
        return {"model": type(self.model).__name__, "params": total, "trainable_params": trainable,
                "param_dtypes": dtypes}

    def _check_params(self) -> list[Finding]:
        """Once, after the first backward: trainable parameters the optimizer does not update,
        parameters that got no gradient, and a mostly frozen model."""
        out: list[Finding] = []
        s = self.step_no
        if self.optimizer is not None:
            in_opt = {id(p) for g in self.optimizer.param_groups for p in g["params"]}
            missing = [n for n, p in self._named if p.requires_grad and id(p) not in in_opt]
            if missing:
                n = sum(p.numel() for nm, p in self._named if nm in set(missing))
                out.append(alert(ParamsNotInOptimizer.id, ParamsNotInOptimizer.category, "high",
                                 f"{len(missing)} trainable parameter tensors ({n} values) are not in the optimizer and "
                                 f"will never change: {', '.join(missing[:5])}", s, s, data={"params": missing}))
        nograd = [n for n, p in self._named if p.requires_grad and p.grad is None]
        if nograd and len(nograd) < len(self._named):
            out.append(alert(ParamsWithoutGrad.id, ParamsWithoutGrad.category, "medium",
                             f"{len(nograd)} trainable parameter tensors received no gradient (unused in the forward, "
                             f"or the graph was detached): {', '.join(nograd[:5])}", s, s, data={"params": nograd}))
        total = sum(p.numel() for _, p in self._named)
        frozen = [n for n, p in self._named if not p.requires_grad]
        share = sum(p.numel() for _, p in self._named if not p.requires_grad) / total if total else 0.0
        if frozen:
            out.append(alert(FrozenParams.id, FrozenParams.category, FrozenParams().severity_for(share),
                             f"{share:.0%} of the parameters are frozen (requires_grad=False): {', '.join(frozen[:5])}",
                             s, s, data={"frozen_share": share, "params": frozen}))
        return out

    # -- the per-step call ------------------------------------------------------------------
    def step(self, loss: torch.Tensor | float | None = None, *, batch: Any = None, step: int | None = None,
             lr: float | None = None, grad_norm: torch.Tensor | float | None = None, **metrics: float) -> list[Finding]:
        """Record one optimizer step (call it after ``optimizer.step()``). ``grad_norm``: pass what
        ``clip_grad_norm_`` returned (the norm before clipping, a tensor or a float); the monitor
        then needs no norm of its own on most steps. Tensors are not read here: they are read
        with the batch of steps (see the module docstring). Returns new alerts (found when a
        batch of steps is read); raises :class:`TrainingStopped` (after recording the step) when
        an alert's action is stop."""
        now = self._clock()
        self.step_no = s = int(step) if step is not None else self.step_no + 1
        sampling = self._sampling(s)
        loss_v: Any = loss.detach() if isinstance(loss, torch.Tensor) else None if loss is None else float(loss)
        checked, self._grads_bad = self._grads_bad, None
        guarded, self._guarded = self._guarded, False
        gn_v: Any = grad_norm
        if isinstance(grad_norm, torch.Tensor):
            gn_v = grad_norm.detach()
        elif grad_norm is not None:
            gn_v = float(grad_norm)
        self._user_gn = grad_norm is not None
        gstats = self._gstats
        self._gstats = None
        gn_bad = bool(checked) or (type(gn_v) is float and not math.isfinite(gn_v))
        if gstats is None and (grad_norm is None or gn_bad or sampling):
            gstats = self._grad_stats(sampling or gn_bad)  # read now only when sampled or known bad
        gn, n_bad, per = gstats if gstats is not None else (0.0, 0, [])
        if grad_norm is not None:
            gn = gn_v
        if lr is None and self.optimizer is not None and self.optimizer.param_groups:
            lr = float(self.optimizer.param_groups[0]["lr"])
        rss = cuda = None
        if s % self.mem_every == 0 or s == 1:  # reading /proc costs ~15 us, the allocator's counters a few
            rss = self._rss_mb()
            if self._cuda and torch.cuda.is_initialized():
                cuda = (torch.cuda.memory_allocated() / 2**20, torch.cuda.max_memory_allocated() / 2**20)
        ratios = None
        if sampling:
            ratios, self._ratios = self._ratios, {}

        new: list[Finding] = []
        if not self._checked_params:
            self._checked_params = True
            new += [a for a in self._check_params() if self.rules.record(a)]
        # what is known bad on the host now: the check read before the update, or floats passed
        loss_finite = type(loss_v) is not float or math.isfinite(loss_v)
        urgent = (not loss_finite or gn_bad or (type(n_bad) is int and n_bad > 0)
                  or (type(gn) is float and not math.isfinite(gn)))
        before = None
        finder = self.origin_finder
        if urgent and not guarded and self.origin is None and finder is not None:
            # found before the update; else now, by a replay if the held calls were not updated
            # (no optimizer step ran: the monitor's optimizer pre-hook releases them)
            intact = self.optimizer is not None and not self._closure_steps
            origin = self._found or self._locate(params_intact=intact, loss_finite=loss_finite)
            if origin is not None:
                before, a = self._nonfinite(s, origin)
                if a is not None:
                    new.append(a)
        prev = self._prev_lr
        if lr is not None and prev is not None and lr > 0 and prev > 0 and not 0.5 <= lr / prev <= 2.0:
            urgent = True
        self._prev_lr = lr
        flag = None
        held_over = False
        if finder is not None:
            if guarded:  # the calls are replayed if this step's flag reads set
                flag = self._found_inf.clone()
                held_over = self._hold(s, *finder.take())
            else:
                finder.release()
        self._arm_optimizer(s + 1)
        self._found = None
        self._pending.append((s, loss_v, gn, n_bad, lr, now, rss, cuda, metrics or None,  # _Pending's fields
                              per if sampling and per else None, ratios, before, flag,
                              batch if self.save_batch_on is not None else None))
        if self._inflight and self._inflight[0].ready():
            new += self._drain(wait=False)
        if urgent or held_over:  # read now, waiting
            new += self._flush(urgent, wait=True)
        elif sampling or new or len(self._pending) >= self.flush_every or now - self._t_flush >= self.flush_s:
            new += self._flush()
        if new:
            self._act(new, batch)
        return new

    def _hold(self, step: int, calls: list[tuple[Any, ...]], nbytes: int) -> bool:
        """Keep a step's calls until its check is read. True when the held inputs of several
        steps pass the budget: the batch is then read at once (waiting) rather than an input
        dropped, which could be the first non-finite step's: big inputs make reads more frequent,
        never the origin inexact."""
        self._windows.append((step, calls, nbytes))
        self._window_bytes += nbytes
        return len(self._windows) > 1 and self._window_bytes > MAX_HELD_BYTES

    def _nonfinite(self, step: int, origin: dict[str, Any]) -> tuple[dict[str, Any], Finding | None]:
        """The first NaN/Inf's record and alert (None if already known); the alert's last step is
        the step at which it is known (later than ``step`` when found by reading a batch)."""
        self.origin = {"step": step, **origin}
        before = {"type": "nonfinite", "step": step, **origin}
        a = alert(FirstNonFinite.id, FirstNonFinite.category, "critical", f"first NaN/Inf at step {step} ({origin['phase']}): "
                  f"{origin['detail']}", self.step_no, step, origin.get("module"), data=dict(origin))
        return before, a if self.rules.record(a) else None

    def _flush(self, urgent: bool = False, *, wait: bool | None = None) -> list[Finding]:
        """Start reading the pending steps' tensors (one batch), then build, write and feed to
        the online rules the records of every batch whose values have arrived (all of them,
        waiting, when ``urgent``/``wait``); evaluate the rules when due. Returns their new alerts
        (the caller acts on them)."""
        pending, self._pending = self._pending, []
        self._t_flush = self._clock()
        if pending:
            self._inflight.append(_Read(pending))
        return self._drain(wait=urgent if wait is None else wait, urgent=urgent)

    def _drain(self, *, wait: bool, urgent: bool = False) -> list[Finding]:
        new: list[Finding] = []
        while self._inflight and (wait or self._inflight[0].ready()):
            new += self._records(self._inflight.popleft().rows(), urgent)
        return new

    def _first_nonfinite(self, p: _Pending) -> tuple[dict[str, Any], Finding | None] | None:
        """A step found non-finite only when its batch was read: its origin. When the check
        held the update back (its flag is set), the parameters are still those the step ran
        with and its held calls are replayed; otherwise the update went through and the origin
        says what is known without a replay."""
        flagged = p.flag is not None and p.flag > 0
        loss_finite = p.loss is None or math.isfinite(p.loss)
        if not flagged and loss_finite:
            return None  # at most a norm is non-finite (it may overflow from finite values): the rules report it
        held: list[tuple[Any, ...]] = next((c for st, c, _ in self._windows if st == p.step), []) if flagged else []
        origin = self._locate(params_intact=flagged, loss_finite=loss_finite, held=held, grads_current=False)
        # the updates go on (zeroing the flag is a kernel, nothing is read); nothing more to replay
        self._found_inf.zero_()
        self._unguard()
        self._windows.clear()
        self._window_bytes = 0
        if origin is None:
            return None
        self._origin_batch = p.batch
        return self._nonfinite(p.step, origin)

    def _records(self, pending: list[tuple[Any, ...]], urgent: bool) -> list[Finding]:
        """Build, write and feed to the online rules the records of steps whose values are read."""
        if not pending:
            return []
        out: list[dict[str, Any]] = []
        new: list[Finding] = []
        add_row = self.rules.live.add_row
        for p in map(_Pending._make, pending):
            if self.origin is None and self.origin_finder is not None and p.before is None:
                found = self._first_nonfinite(p)
                if found is not None:
                    p = p._replace(before=found[0])
                    urgent = True
                    if found[1] is not None:
                        new.append(found[1])
            rec: dict[str, Any] = {"type": "step", "step": p.step}
            if p.loss is not None:
                rec["loss"] = p.loss
            rec["grad_norm"] = p.grad_norm
            rec["nonfinite_grads"] = p.nonfinite
            if p.lr is not None:
                rec["lr"] = p.lr
            if self._t_last is not None:
                rec["step_time"] = p.t - self._t_last
            self._t_last = p.t
            if p.rss is not None:
                rec["cpu_mem_rss_mb"] = p.rss
            if p.cuda is not None:
                rec["cuda_mem_allocated_mb"], rec["cuda_mem_max_allocated_mb"] = p.cuda
            if p.metrics:
                for k, v in p.metrics.items():
                    rec[k] = float(v)
            if p.per is not None:
                by_mod: dict[str, float] = {}
                for norm, mod in zip(p.per, self._module_of):
                    if norm is not None:  # None: that parameter has no gradient
                        by_mod[mod] = by_mod.get(mod, 0.0) + norm * norm
                for mod, sq in by_mod.items():
                    rec[f"grad_norm/{mod}"] = math.sqrt(sq)
            if p.ratios:
                for mod, r in p.ratios.items():
                    rec[f"update_ratio/{mod}"] = r
            if p.before is not None:
                out.append(p.before)
            out.append(rec)
            add_row(p.step, rec, _NOT_FOR_RULES)
            if self.tb is not None:
                self.tb.write(p.step, rec)
        self.writer.write_many(out)
        # the steps read so far need their held calls no more
        while self._windows and self._windows[0][0] <= p.step:
            self._window_bytes -= self._windows.popleft()[2]
        last = pending[-1][0]  # its step
        if self.rules.due(last, urgent):
            new += self.rules.evaluate(last)
        return new

    def _act(self, alerts: list[Finding], batch: Any, stop: bool = True) -> None:
        stopping: Finding | None = None
        for a in alerts:
            self.writer.write({"type": "alert", "step": a.last_step, **a.model_dump(exclude={"evidence"})})
            if self.warn_on is not None and a.at_least(self.warn_on):
                log.warning("trainaudit: step %d: %s", a.last_step, a.text())
            if self.on_alert is not None and a.at_least(self.callback_on):
                self.on_alert(a)
            b, at = batch, a.last_step
            if a.rule == FirstNonFinite.id and self._origin_batch is not None:  # found by a later read
                b, at = self._origin_batch, a.first_bad_step or at
            if self.save_batch_on is not None and b is not None and a.at_least(self.save_batch_on):
                d = self.log_dir / "batches"
                d.mkdir(exist_ok=True)
                target = d / f"step{at}.pt"
                if not target.exists():
                    torch.save(b, target)
                    self.writer.write({"type": "batch_saved", "step": at, "path": f"batches/{target.name}"})
            if stop and stopping is None and self.stop_on is not None and a.at_least(self.stop_on):
                stopping = a
        if stopping is not None:
            self.stopped = stopping
            self.close(status="stopped")
            raise TrainingStopped(stopping)

    # -- lifecycle --------------------------------------------------------------------------
    @property
    def alerts(self) -> list[Finding]:
        return self.rules.alerts

    def close(self, status: str = "completed", error: str | None = None) -> None:
        """Detach the hooks and write the end record (the completion marker ``watch`` waits for)."""
        if self.closed:
            return
        self.closed = True
        if self._pending or self._inflight:  # the steps not read yet, their rules and actions (no stop: it ends anyway)
            late = self._flush(wait=True)
            if late:
                self._act(late, None, stop=False)
        for h in self._handles:
            h.remove()
        self._handles.clear()
        self._arm_optimizer(None)
        self._unguard()
        if self.origin_finder is not None:
            self.origin_finder.release()
        if self._statm is not None:
            os.close(self._statm)
            self._statm = None
        end: dict[str, Any] = {"type": "end", "step": self.step_no, "status": status, "completed": status == "completed",
                               "alerts": len(self.alerts)}
        if self.stopped is not None:
            end["stopped_by"] = self.stopped.rule
        if error:
            end["error"] = error
        self.writer.write(end)
        self.writer.close()
        if self.tb is not None:
            self.tb.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 _tb: TracebackType | None) -> bool:
        if exc is None:
            self.close("completed")
            return False
        if isinstance(exc, TrainingStopped):
            self.close("stopped")
            return True  # the clean stop the user asked for
        self.close("crashed", error=f"{type(exc).__name__}: {exc}"[:500])
        return False
