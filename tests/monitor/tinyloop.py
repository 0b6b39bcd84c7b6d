"""A tiny real training loop (CPU, one thread, fixed seed) with the monitor attached and fault
switches: every number the monitor sees comes from an actual forward/backward/update."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

import trainaudit
from trainaudit.monitor import Finding
from trainaudit.monitor.core import Monitor

torch.set_num_threads(1)


class GradBomb(nn.Module):
    """Identity in the forward; when ``armed``, its backward returns NaN (a broken custom op)."""

    def __init__(self) -> None:
        super().__init__()
        self.armed = False

    class _Fn(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
            return x.view_as(x)

        @staticmethod
        def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
            return g * float("nan")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._Fn.apply(x) if self.armed else x


class LogOfNegative(nn.Module):
    """``log(x - shift)``: finite while ``shift`` is very negative; setting ``shift`` to a big
    positive number makes this module (and only this one) produce NaN in the forward."""

    def __init__(self) -> None:
        super().__init__()
        self.shift = -1e3

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log(x - self.shift) - 6.9


def blobs(n: int, seed: int, classes: int = 4, dim: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    centers = torch.randn(classes, dim, generator=torch.Generator().manual_seed(0)) * 2
    y = torch.randint(0, classes, (n,), generator=g)
    return centers[y] + 1.5 * torch.randn(n, dim, generator=g), y


def build(kind: str = "mlp") -> nn.Sequential:
    torch.manual_seed(0)
    if kind == "bomb":
        return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), GradBomb(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 4))
    if kind == "log":
        return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), LogOfNegative(), nn.Linear(32, 4))
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 4))


@dataclass
class Result:
    monitor: Monitor
    steps_run: int
    alerts: list[Finding] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)


def train(log_dir: Path, *, steps: int = 150, model: nn.Sequential | None = None, lr: float = 3e-3,
          opt: str = "adam", lr_at: Callable[[int], float] | None = None,
          fault: Callable[[int, nn.Module, torch.Tensor], torch.Tensor] | None = None,
          optimizer_params: Callable[[nn.Module], Any] | None = None, clip: float | None = 1.0,
          norm_tensor: bool = False, **monitor_options: Any) -> Result:
    """Train ``steps`` steps (1-based); ``fault(step, model, x)`` may change the batch or the model.
    ``norm_tensor``: pass clip_grad_norm_'s result to the monitor as the tensor it is (the loop
    does not read it), else as a float."""
    model = model or build()
    params = optimizer_params(model) if optimizer_params else model.parameters()
    optim = (torch.optim.Adam(params, lr=lr) if opt == "adam" else torch.optim.Adam(params, lr=lr, fused=True)
             if opt == "adam_fused" else torch.optim.SGD(params, lr=lr, momentum=0.9))
    x_all, y_all = blobs(4096, 1)
    g = torch.Generator().manual_seed(2)
    mon = trainaudit.monitor(model, optim, log_dir=log_dir, **monitor_options)
    res = Result(mon, 0)
    with mon:
        for step in range(1, steps + 1):
            if lr_at is not None:
                for group in optim.param_groups:
                    group["lr"] = lr_at(step)
            idx = torch.randint(0, len(y_all), (32,), generator=g)
            x, y = x_all[idx], y_all[idx]
            if fault is not None:
                x = fault(step, model, x)
            optim.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            norm = nn.utils.clip_grad_norm_(model.parameters(), clip) if clip else None
            gn = norm if norm is None or norm_tensor else float(norm)
            optim.step()
            res.losses.append(loss.item())
            res.steps_run = step
            res.alerts += mon.step(loss, batch=(x, y), grad_norm=gn)
    return res


def records(log_dir: Path) -> list[dict[str, Any]]:
    import json

    return [json.loads(ln) for ln in (log_dir / "trainaudit-monitor.jsonl").read_text().splitlines()]
