"""The live monitor for a PyTorch training loop (torch is imported by the caller's model already).

    mon = trainaudit.monitor(model, optimizer, log_dir="runs/x")
    with mon:
        for batch in data:
            loss = ...; loss.backward(); optimizer.step(); optimizer.zero_grad()
            mon.step(loss, batch=batch)

Per step (cheap): loss, lr, global grad norm, number of parameter tensors with non-finite
gradients, step time, process RSS / CUDA memory. Every ``every`` steps: per-module grad norms and
update-to-weight ratios. When the loss or the gradients turn non-finite, the module where the
first NaN/Inf appeared (forward: outputs kept by forward hooks for the current step; backward:
the gradient at each module's output, read from the module's own parameter gradients when it
has trainable parameters and is called once per step, else seen by a pre-hook on the autograd
node that made the output). Online rules (the
diagnose rules) every ``rules_every`` steps, at once on a non-finite value or an lr change.

Batching: ``step()`` only checks what must be known at that step (is anything non-finite, did
the lr jump) and appends the step's raw numbers to a list; the JSONL records are built, written
and fed to the online rules every ``flush_every`` steps (at most ``rules_every``), every
``flush_s`` seconds, and at once on an urgent step (non-finite loss or gradients, an lr change
above 2x, a sampled per-layer step) and on ``close()``. Work done in one tight loop once per batch
costs a fraction of the same work done cold after every backward/optimizer step, and an urgent
step is still flushed, evaluated and stopped at that very step.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import operator
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import torch
from torch import nn

from trainaudit.monitor.online import Alert, OnlineRules, TrainingStopped
from trainaudit.monitor.writer import JsonlWriter, TensorBoardWriter
from trainaudit.report.schema import SEVERITY_ORDER
from trainaudit.rules import Config

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


def _grad_sum(sums: dict[int, torch.Tensor], i: int, k: int, grads: tuple[torch.Tensor | None, ...]) -> None:
    """Backward pre-hook: the float32 sum of the gradient at output ``k`` of a node (non-finite
    exactly when a value is; float32 so that a half-precision sum does not overflow), kept
    instead of the gradient, which the backward frees as without the monitor. A 0-d tensor:
    no device sync in the backward."""
    g = grads[k]
    if g is not None:
        sums[i] = g.detach().sum(dtype=torch.float32)


class _Pending(NamedTuple):
    """What ``step()`` keeps of one step until the batch is flushed (raw numbers, no record)."""

    step: int
    loss: Any  # float, None, or a detached accelerator tensor read at the flush (no sync per step)
    grad_norm: float
    nonfinite: int
    lr: float | None
    t: float  # perf_counter at step()
    rss: float | None
    cuda: tuple[float, float] | None
    metrics: dict[str, float] | None
    per: list[float | None] | None  # per-tensor grad norms, sampled steps only
    ratios: dict[str, float] | None
    before: dict[str, Any] | None  # a record written just before this step's (the NaN origin)


def _first_tensor(x: Any) -> torch.Tensor | None:
    if isinstance(x, torch.Tensor):
        return x
    if isinstance(x, (tuple, list)):
        for item in x:
            t = _first_tensor(item)
            if t is not None:
                return t
    if isinstance(x, dict):
        for item in x.values():
            t = _first_tensor(item)
            if t is not None:
                return t
    loss = getattr(x, "logits", None)  # HF ModelOutput
    return loss if isinstance(loss, torch.Tensor) else None


def _finite(t: torch.Tensor) -> bool:
    if not (t.is_floating_point() or t.is_complex()):
        return True
    return bool(torch.isfinite(t).all())


_grad_of = operator.attrgetter("grad")


def _peak_rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class Monitor:
    """See the module docstring. Actions, each with the lowest severity that triggers it
    (``None`` = never): ``warn`` (a ``logging`` warning on ``trainaudit.monitor``), ``callback``
    (``on_alert(alert)``), ``save_batch`` (``torch.save`` of the batch passed to :meth:`step`
    into ``log_dir/batches/``), ``stop`` (:class:`TrainingStopped` after the current step)."""

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer | None = None,
                 log_dir: str | os.PathLike[str] = "trainaudit-monitor", *, every: int = 50, rules_every: int = 25,
                 window: int = 2000, rules_budget: float = 0.0025, mem_every: int = 10, warn: str | None = "low", on_alert: Callable[[Alert], None] | None = None,
                 callback_on: str = "low", save_batch_on: str | None = None, stop_on: str | None = None,
                 nan_origin: bool = True, tensorboard: bool = False, config: Config | None = None,
                 filename: str = "trainaudit-monitor.jsonl", meta: dict[str, Any] | None = None,
                 flush_every: int = 32, flush_s: float = 0.5) -> None:
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
        self.nan_origin = nan_origin
        # a batch never spans a routine rule evaluation: rules_every keeps its meaning
        self.flush_every = max(1, min(flush_every, rules_every))
        self.flush_s = flush_s
        self._pending: list[_Pending] = []
        self._t_flush = time.perf_counter()
        self.rules = OnlineRules(config=config, every=rules_every, window=window, budget=rules_budget)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.log_dir / filename
        self.writer = JsonlWriter(self.path)
        self.tb = TensorBoardWriter(self.log_dir / "tb") if tensorboard else None
        self.step_no = 0
        self.stopped: Alert | None = None
        self.closed = False
        self.origin: dict[str, Any] | None = None
        self._handles: list[Any] = []
        self._fw: list[tuple[str, Any, torch.Tensor]] = []  # (leaf, input, output) of this step's calls
        self._bw: dict[int, torch.Tensor] = {}  # index in _fw -> sum of the gradient at that output
        self._fw_cap = 0
        self._n_armed = 0  # entries of _fw already seen by forward_done()
        self._opt_handles: list[Any] = []
        self._t_last: float | None = None
        self._paused_s = 0.0  # time spent in paused() blocks
        self._prev_lr: float | None = None
        self._snap: dict[str, torch.Tensor] | None = None
        self._ratios: dict[str, float] = {}
        self._gstats: tuple[float, int, list[float | None]] | None = None
        self._checked_params = False
        self._user_gn = False
        self._cuda = torch.cuda.is_available()  # once: the query is not free
        self._statm: int | None = None
        try:
            self._statm = os.open("/proc/self/statm", os.O_RDONLY)
        except OSError:
            pass
        self._page_mb = os.sysconf("SC_PAGE_SIZE") / 2**20 if hasattr(os, "sysconf") else 4096 / 2**20
        self._named = [(n, p) for n, p in model.named_parameters()]
        self._params = [p for _, p in self._named]
        self._module_of = [n.rsplit(".", 1)[0] if "." in n else n for n, _ in self._named]
        self._leaf_params: dict[str, list[nn.Parameter]] = {}
        self._attach()
        self.writer.write({"trainaudit_monitor": 1, "type": "start", "time": time.time(),
                           "every": every, "rules_every": rules_every, **self._model_summary(), **(meta or {})})

    # -- hooks ------------------------------------------------------------------------------
    def _attach(self) -> None:
        if self.nan_origin:
            leaves = [(n, m) for n, m in self.model.named_modules() if not any(True for _ in m.children())]
            self._fw_cap = 8 * max(1, len(leaves))
            # the gradient at the output of a module with trainable parameters shows in their
            # gradients (weight.grad of a Linear is g^T x: a NaN in g spreads to a whole row)
            self._leaf_params = {n: ps for n, m in leaves
                                 if (ps := [p for p in m.parameters() if p.requires_grad])}
            for name, mod in leaves:
                self._handles.append(mod.register_forward_hook(_Hook(self._on_forward, name)))
            # after the leaves' hooks (registered first when the model is itself a leaf)
            self._handles.append(self.model.register_forward_hook(_Hook(self._on_model_forward)))
        self._arm_optimizer(self._sampling(self.step_no + 1) or not self._user_gn)

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Record nothing inside the block (hooks detached): forwards and steps there are not
        the monitor's, and its duration is left out of the next step time."""
        t0 = time.perf_counter()
        for h in self._handles:
            h.remove()
        self._handles.clear()
        self._arm_optimizer(False)
        try:
            yield
        finally:
            self._fw.clear()
            self._bw.clear()
            self._n_armed = 0
            self._paused_s += time.perf_counter() - t0
            if not self.closed:
                self._attach()

    def _arm_optimizer(self, on: bool) -> None:
        """Optimizer hooks only for steps that need them (sampled steps; every step when the
        caller does not pass grad_norm): an idle hook still costs a cold Python call per step."""
        if self.optimizer is None or on == bool(self._opt_handles):
            return
        if on:
            self._opt_handles = [self.optimizer.register_step_pre_hook(self._on_opt_pre),
                                 self.optimizer.register_step_post_hook(self._on_opt_post)]
        else:
            for h in self._opt_handles:
                h.remove()
            self._opt_handles = []

    def _on_forward(self, name: str, _mod: nn.Module, inp: Any, out: Any) -> None:
        # only a reference (input, output) for this step; the backward hooks are added in one
        # pass by _on_model_forward, a warm loop instead of work in every leaf's hook. A forward
        # without autograd (evaluation under no_grad) is not a training step's.
        t = out if type(out) is torch.Tensor else _first_tensor(out)  # the common case without a call
        if t is not None and len(self._fw) < self._fw_cap and torch.is_grad_enabled():
            self._fw.append((name, inp, t))

    def _on_model_forward(self, _mod: nn.Module, _inp: Any, _out: Any) -> None:
        self.forward_done()

    def forward_done(self) -> None:
        """End of a forward pass that did not go through ``model(...)`` (a LightningModule's
        ``training_step`` calling submodules): call it before ``backward()``, so that the
        backward's gradients are watched as after ``model(...)``."""
        fw, bw, own = self._fw, self._bw, self._leaf_params
        new = range(self._n_armed, len(fw))
        names = [fw[i][0] for i in new]
        # a module called twice in a step sums both calls' gradients into its parameters
        again = set() if len(set(names)) == len(names) else {n for n in names if names.count(n) > 1}
        for i, name in zip(new, names):
            if name in own and name not in again:
                continue  # its parameter gradients tell whether the gradient at its output was finite
            fn = fw[i][2].grad_fn
            if fn is not None:
                # a node pre-hook (registered in C++; Tensor.register_hook builds Python dicts per
                # call) keeps the sum of the gradient at this output, not the gradient: holding
                # every such gradient until step() would add them all to the backward's peak memory
                fn.register_prehook(functools.partial(_grad_sum, bw, i, fw[i][2].output_nr))
        self._n_armed = len(fw)

    def _sampling(self, step: int) -> bool:
        return step == 1 or step % self.every == 0

    def _on_opt_pre(self, _opt: Any, _args: Any, _kw: Any) -> None:
        sampling = self._sampling(self.step_no + 1)
        # grads as the optimizer sees them; skipped when the caller passes grad_norm (then a
        # finite norm proves every grad finite, and per-layer norms are only needed when sampling)
        if sampling or not self._user_gn:
            self._gstats = self._grad_stats(sampling)
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
                # fused: one subtraction and two norm passes over all tensors, one sync
                d_norms = torch._foreach_norm(torch._foreach_sub(new, old))
                w_norms = torch._foreach_norm(old)
                # float on the CPU first: parameters may differ in dtype or device (model parallel)
                both = [torch.stack([t.float().cpu() for t in d_norms]).tolist(),
                        torch.stack([t.float().cpu() for t in w_norms]).tolist()]
            for (_, mod, _), d, w in zip(keep, both[0], both[1]):
                acc = upd.setdefault(mod, [0.0, 0.0])
                acc[0] += d * d
                acc[1] += w * w
        self._ratios = {m: math.sqrt(a) / math.sqrt(b) if b > 0 else (0.0 if a == 0 else math.inf)
                        for m, (a, b) in upd.items()}
        self._snap = None

    def _grad_stats(self, per_tensor: bool) -> tuple[float, int, list[float | None]]:
        """(global L2 norm, tensors with non-finite grads, per-tensor norms in named order; the
        per-tensor list only when ``per_tensor`` or when the norm is non-finite)."""
        grads = [g for g in map(_grad_of, self._params) if g is not None]
        if not grads:
            return 0.0, 0, []
        with torch.no_grad():
            norms = torch._foreach_norm(grads)  # one fused pass over all grads, one result each
            if norms[0].device.type != "cpu":
                norms = [n.float().cpu() for n in norms]
            stacked = torch.stack(norms)
            total = float(torch.linalg.vector_norm(stacked))  # the only sync on a healthy step
            if not per_tensor and math.isfinite(total):
                return total, 0, []  # a finite sum of squares: every tensor is finite
            per = stacked.tolist()
        bad = sum(1 for v in per if not math.isfinite(v))
        full = iter(per)
        return total, bad, [next(full) if p.grad is not None else None for p in self._params]

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

    def _check_params(self) -> list[Alert]:
        """Once, after the first backward: trainable parameters the optimizer does not update,
        parameters that got no gradient, and a mostly frozen model."""
        out: list[Alert] = []
        s = self.step_no
        if self.optimizer is not None:
            in_opt = {id(p) for g in self.optimizer.param_groups for p in g["params"]}
            missing = [n for n, p in self._named if p.requires_grad and id(p) not in in_opt]
            if missing:
                n = sum(p.numel() for nm, p in self._named if nm in set(missing))
                out.append(Alert("MON201", "plateau", "high",
                                 f"{len(missing)} trainable parameter tensors ({n} values) are not in the optimizer and "
                                 f"will never change: {', '.join(missing[:5])}", s, s, None, {"params": missing}))
        nograd = [n for n, p in self._named if p.requires_grad and p.grad is None]
        if nograd and len(nograd) < len(self._named):
            out.append(Alert("MON202", "plateau", "medium",
                             f"{len(nograd)} trainable parameter tensors received no gradient (unused in the forward, "
                             f"or the graph was detached): {', '.join(nograd[:5])}", s, s, None, {"params": nograd}))
        total = sum(p.numel() for _, p in self._named)
        frozen = [n for n, p in self._named if not p.requires_grad]
        share = sum(p.numel() for _, p in self._named if not p.requires_grad) / total if total else 0.0
        if frozen:
            sev = "high" if share >= 0.999 else ("medium" if share >= 0.5 else "info")
            out.append(Alert("MON203", "plateau", sev,
                             f"{share:.0%} of the parameters are frozen (requires_grad=False): {', '.join(frozen[:5])}",
                             s, s, None, {"frozen_share": share, "params": frozen}))
        return out

    def _locate_nonfinite(self, loss_finite: bool) -> dict[str, Any] | None:
        """Where the first NaN/Inf appeared in this step: the first module (execution order) whose
        output is non-finite; if the forward was clean, the first gradient (backward order) that is."""
        if not self.nan_origin:
            return None
        with torch.no_grad():
            for i, (name, inp, out) in enumerate(self._fw):
                if not _finite(out):
                    t_in = _first_tensor(inp)
                    bad_in = t_in is not None and not _finite(t_in)
                    return {"phase": "forward", "module": name, "input_nonfinite": bad_in, "call": i,
                            "detail": (f"non-finite input entering {name}" if bad_in
                                       else f"{name} produced NaN/Inf from finite inputs")}
            if not loss_finite:
                return {"phase": "loss", "module": None, "detail": "the loss itself is non-finite (module outputs finite)"}
            order = [n for n, _, _ in self._fw]
            for i in reversed(range(len(order))):  # backward order
                if self._output_grad_finite(i) is False:
                    # the gradient at this output came from the backward of what consumed it
                    name = order[i]
                    nxt = order[i + 1] if i < len(order) - 1 else "the loss"
                    return {"phase": "backward", "module": nxt, "grad_at_output_of": name,
                            "detail": f"non-finite gradient first produced by the backward of {nxt} "
                                      f"(seen at the output of {name})"}
            bad = [n for (n, p) in self._named if p.grad is not None and not _finite(p.grad)]
            if bad:
                return {"phase": "backward", "module": bad[-1].rsplit(".", 1)[0],
                        "detail": f"non-finite parameter gradients: {', '.join(bad[:5])}"}
        return None

    def _output_grad_finite(self, i: int) -> bool | None:
        """Whether the gradient at the output of forward call ``i`` was finite (None: unknown,
        e.g. an output that needs no gradient). With a clean forward (inputs finite), a
        module's parameter gradients are non-finite exactly when the gradient at its output is."""
        name, _, out = self._fw[i]
        if i in self._bw:
            return math.isfinite(self._bw[i].item())
        if out.grad_fn is None:
            return None
        grads = [p.grad for p in self._leaf_params.get(name, ()) if p.grad is not None]
        return all(_finite(g) for g in grads) if grads else None

    # -- the per-step call ------------------------------------------------------------------
    def step(self, loss: torch.Tensor | float | None = None, *, batch: Any = None, step: int | None = None,
             lr: float | None = None, grad_norm: torch.Tensor | float | None = None, **metrics: float) -> list[Alert]:
        """Record one optimizer step (call it after ``optimizer.step()``). ``grad_norm``: pass what
        ``clip_grad_norm_`` returned (the norm before clipping, a tensor or a float); the monitor
        then needs no norm of its own on most steps. Returns new alerts
        (found when a batch of steps is flushed, see the module docstring); raises
        :class:`TrainingStopped` (after recording the step) when an alert's action is stop."""
        now = time.perf_counter() - self._paused_s  # step times leave paused() blocks out
        self.step_no = s = int(step) if step is not None else self.step_no + 1
        sampling = s == 1 or s % self.every == 0
        if isinstance(loss, torch.Tensor):
            # a CPU scalar is read now (about a microsecond); an accelerator loss is kept and read
            # at the flush, so step() adds no device sync (the grad norm, synced anyway, still
            # makes a non-finite step urgent)
            loss_v: Any = float(loss.item()) if loss.device.type == "cpu" else loss.detach()
        else:
            loss_v = None if loss is None else float(loss)
        if isinstance(grad_norm, torch.Tensor):
            grad_norm = grad_norm.item()  # a sync on an accelerator, as float() in the caller would be
        self._user_gn = grad_norm is not None
        gstats = self._gstats
        self._gstats = None
        if gstats is None and (grad_norm is None or not math.isfinite(grad_norm) or sampling):
            gstats = self._grad_stats(sampling)
        gn, n_bad, per = gstats if gstats is not None else (0.0, 0, [])
        if grad_norm is not None:
            gn = float(grad_norm)
        if lr is None and self.optimizer is not None and self.optimizer.param_groups:
            lr = float(self.optimizer.param_groups[0]["lr"])
        rss = self._rss_mb() if s % self.mem_every == 0 or s == 1 else None  # reading /proc costs ~15 us
        cuda = None
        if self._cuda and torch.cuda.is_initialized():
            cuda = (torch.cuda.memory_allocated() / 2**20, torch.cuda.max_memory_allocated() / 2**20)
        ratios = None
        if sampling:
            ratios, self._ratios = self._ratios, {}

        new: list[Alert] = []
        if not self._checked_params:
            self._checked_params = True
            new += [a for a in self._check_params() if self.rules.record(a)]
        loss_finite = not isinstance(loss_v, float) or math.isfinite(loss_v)
        urgent = not loss_finite or not math.isfinite(gn) or n_bad > 0
        before = None
        if urgent and self.origin is None:
            origin = self._locate_nonfinite(loss_finite)
            if origin is not None:
                self.origin = {"step": s, **origin}
                before = {"type": "nonfinite", "step": s, **origin}
                a = Alert("MON101", "nan_inf", "critical", f"first NaN/Inf at step {s} ({origin['phase']}): "
                          f"{origin['detail']}", s, s, origin.get("module"), dict(origin))
                if self.rules.record(a):
                    new.append(a)
        prev = self._prev_lr
        if lr is not None and prev is not None and lr > 0 and prev > 0 and not 0.5 <= lr / prev <= 2.0:
            urgent = True
        self._prev_lr = lr
        self._fw.clear()
        self._bw.clear()
        self._n_armed = 0
        self._arm_optimizer(self._sampling(s + 1) or not self._user_gn)
        self._pending.append(_Pending(s, loss_v, gn, n_bad, lr, now, rss, cuda, metrics or None,
                                      per if sampling and per else None, ratios, before))
        if urgent or sampling or new or len(self._pending) >= self.flush_every or now - self._t_flush >= self.flush_s:
            new += self._flush(urgent)
        if new:
            self._act(new, batch)
        return new

    def _flush(self, urgent: bool = False) -> list[Alert]:
        """Build, write and feed to the online rules the pending steps' records; evaluate the
        rules when due. Returns their new alerts (the caller acts on them)."""
        pending, self._pending = self._pending, []
        self._t_flush = time.perf_counter()
        if not pending:
            return []
        out: list[dict[str, Any]] = []
        add_row = self.rules.live.add_row
        for p in pending:
            rec: dict[str, Any] = {"type": "step", "step": p.step}
            loss = p.loss
            if loss is not None:
                rec["loss"] = loss if isinstance(loss, float) else float(loss.item())
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
                for v, mod in zip(p.per, self._module_of):
                    if v is not None:  # None: that parameter has no gradient
                        by_mod[mod] = by_mod.get(mod, 0.0) + v * v
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
        last = pending[-1].step
        if self.rules.due(last, urgent):
            return self.rules.evaluate(last)
        return []

    def _act(self, alerts: list[Alert], batch: Any, stop: bool = True) -> None:
        stopping: Alert | None = None
        for a in alerts:
            self.writer.write({"type": "alert", **a.to_dict()})
            if self.warn_on is not None and a.at_least(self.warn_on):
                log.warning("trainaudit: step %d: %s", a.step, a.text())
            if self.on_alert is not None and a.at_least(self.callback_on):
                self.on_alert(a)
            if self.save_batch_on is not None and batch is not None and a.at_least(self.save_batch_on):
                d = self.log_dir / "batches"
                d.mkdir(exist_ok=True)
                target = d / f"step{a.step}.pt"
                if not target.exists():
                    torch.save(batch, target)
                    self.writer.write({"type": "batch_saved", "step": a.step, "path": f"batches/{target.name}"})
            if stop and stopping is None and self.stop_on is not None and a.at_least(self.stop_on):
                stopping = a
        if stopping is not None:
            self.stopped = stopping
            self.close(status="stopped")
            raise TrainingStopped(stopping)

    # -- lifecycle --------------------------------------------------------------------------
    @property
    def alerts(self) -> list[Alert]:
        return self.rules.alerts

    def close(self, status: str = "completed", error: str | None = None) -> None:
        """Detach the hooks and write the end record (the completion marker ``watch`` waits for)."""
        if self.closed:
            return
        self.closed = True
        if self._pending:  # the steps since the last flush, their rules and actions (no stop: it ends anyway)
            late = self._flush()
            if late:
                self._act(late, None, stop=False)
        for h in self._handles:
            h.remove()
        self._handles.clear()
        self._arm_optimizer(False)
        self._fw.clear()
        self._bw.clear()
        self._n_armed = 0
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

    def __enter__(self) -> Monitor:
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, _tb: Any) -> bool:
        if exc is None:
            self.close("completed")
            return False
        if isinstance(exc, TrainingStopped):
            self.close("stopped")
            return True  # the clean stop the user asked for
        self.close("crashed", error=f"{type(exc).__name__}: {exc}"[:500])
        return False
