"""Tiny real torch training runs (CPU, one thread, fixed seeds) for the rules that the synth
catalogue does not cover yet. Each writes a ``metrics.jsonl`` the generic reader reads, so the
rules see a real file through the real ingest path. Every value comes from an actual training
step (losses, grad norms, process RSS) except the step times: those are on a modelled clock
(synth.runlog.ModelClock), so that the timing rules judge the same series on a fast idle machine
and on a busy CI host. The injected fault is documented."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from synth.runlog import ModelClock
from torch import nn

torch.set_num_threads(1)


def _write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _blobs(n: int, seed: int, classes: int = 4, dim: int = 16, noise: float = 2.0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    centers = torch.randn(classes, dim, generator=torch.Generator().manual_seed(0)) * 2
    y = torch.randint(0, classes, (n,), generator=g)
    return centers[y] + noise * torch.randn(n, dim, generator=g), y


def _grad_norm(model: nn.Module) -> float:
    norms = [p.grad.detach().norm() for p in model.parameters() if p.grad is not None]
    return float(torch.linalg.vector_norm(torch.stack(norms))) if norms else 0.0


def classifier_run(path: Path, *, steps: int = 300, batch: int = 16, lr_at: Callable[[int], float] = lambda s: 3e-3,
                   freeze: bool = False, seed: int = 1, val_every: int = 25, restart_at: tuple[int, int] | None = None
                   ) -> Path:
    """MLP on Gaussian blobs with Adam. ``restart_at=(saved, crashed)``: the run is resumed from
    the checkpoint of step ``saved`` after reaching ``crashed``, and re-logs those steps."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4))
    if freeze:  # the classic bug: the model is frozen (e.g. a backbone freeze applied to everything)
        for p in model.parameters():
            p.requires_grad_(False)
    trainable = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.Adam(trainable or [nn.Parameter(torch.zeros(1))], lr=lr_at(1))
    xv, yv = _blobs(512, 999)
    clock = ModelClock(0.01, seed=seed)  # a 10 ms step (the device's share of it, not this tiny MLP's)
    rows: list[dict[str, Any]] = []
    ckpt = None
    step = 1
    resumed = False
    while step <= steps:
        if restart_at and step == restart_at[0] + 1 and ckpt is None:
            ckpt = ({k: v.clone() for k, v in model.state_dict().items()}, opt.state_dict())
        if restart_at and step == restart_at[1] and not resumed:
            resumed = True
            model.load_state_dict(ckpt[0])  # type: ignore[index]
            opt.load_state_dict(ckpt[1])  # type: ignore[index]
            step = restart_at[0] + 1
            continue
        x, y = _blobs(batch, seed * 100000 + step + (50000 if resumed else 0))
        for gr in opt.param_groups:
            gr["lr"] = lr_at(step)
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        if loss.requires_grad:
            loss.backward()
        gn = _grad_norm(model)
        opt.step()
        row: dict[str, Any] = {"step": step, "loss": loss.item(), "grad_norm": gn, "lr": lr_at(step),
                               "step_time": clock.step()}
        if val_every and step % val_every == 0:
            with torch.no_grad():
                row["val_loss"] = float(nn.functional.cross_entropy(model(xv), yv))
        rows.append(row)
        step += 1
    return _write(path, rows)


def overfit_run(path: Path, epochs: int = 60) -> Path:
    """32 noisy training samples, a wide MLP, many epochs: validation loss turns up."""
    torch.manual_seed(3)
    x, y = _blobs(32, 5, noise=2.5)
    xv, yv = _blobs(512, 6, noise=2.5)  # same distribution as training
    model = nn.Sequential(nn.Linear(16, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 4))
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    rows = []
    for ep in range(1, epochs + 1):
        for i in range(0, 32, 8):
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x[i:i + 8]), y[i:i + 8])
            loss.backward()
            opt.step()
        with torch.no_grad():
            rows.append({"epoch": ep, "loss": float(nn.functional.cross_entropy(model(x), y)),
                         "val_loss": float(nn.functional.cross_entropy(model(xv), yv))})
    return _write(path, rows)


def vanishing_run(path: Path, steps: int = 150, depth: int = 12) -> Path:
    """Deep sigmoid MLP with per-layer gradient norms logged (first and last layer)."""
    torch.manual_seed(4)
    layers: list[nn.Module] = [nn.Linear(16, 32), nn.Sigmoid()]
    for _ in range(depth - 2):
        layers += [nn.Linear(32, 32), nn.Sigmoid()]
    layers.append(nn.Linear(32, 4))
    model = nn.Sequential(*layers)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    rows = []
    for step in range(1, steps + 1):
        x, y = _blobs(32, 7000 + step)
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        rows.append({"step": step, "loss": loss.item(), "grad_norm": _grad_norm(model),
                     "grad_norm/layer_first": float(model[0].weight.grad.norm()),
                     "grad_norm/layer_last": float(model[-1].weight.grad.norm())})
        opt.step()
    return _write(path, rows)


def exploding_run(path: Path, steps: int = 120) -> Path:
    """Vanilla tanh RNN, recurrent weights scaled x3, SGD with a high lr and no clipping."""
    torch.manual_seed(5)
    rnn = nn.RNN(8, 64, batch_first=True)
    head = nn.Linear(64, 1)
    with torch.no_grad():
        rnn.weight_hh_l0.mul_(3.0)
    params = list(rnn.parameters()) + list(head.parameters())
    opt = torch.optim.SGD(params, lr=0.05)
    rows = []
    g = torch.Generator().manual_seed(8)
    for step in range(1, steps + 1):
        x = torch.randn(16, 40, 8, generator=g)
        y = x[:, :, 0].sum(dim=1, keepdim=True)
        opt.zero_grad()
        out, _ = rnn(x)
        loss = nn.functional.mse_loss(head(out[:, -1]), y)
        loss.backward()
        gn = float(torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in params])))
        opt.step()
        rows.append({"step": step, "loss": loss.item(), "grad_norm": gn})
    return _write(path, rows)


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2 ** 20


def leaking_run(path: Path, steps: int = 120) -> Path:
    """The classic leak: the loss tensor (with its graph) is appended to a list every step.

    It trains in a fresh interpreter: in a test worker that already freed memory, the allocator
    hands that memory back to the leak first, so the process RSS would hold a level and only then
    rise, however constant the leak."""
    tests = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tests / "rules"), str(tests.parent / "tools"),
                                                          os.environ.get("PYTHONPATH", "")])}
    subprocess.run([sys.executable, "-c", "import sys, pathlib, tinyruns; "
                    "tinyruns._leak(pathlib.Path(sys.argv[1]), int(sys.argv[2]))", str(path), str(steps)],
                   env=env, check=True)
    return path


def _leak(path: Path, steps: int) -> Path:
    torch.manual_seed(6)
    model = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    kept = []
    rows = []
    g = torch.Generator().manual_seed(9)
    for step in range(1, steps + 1):
        x = torch.randn(256, 256, generator=g)
        y = x[:, :4].argmax(dim=1)
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward(retain_graph=True)
        opt.step()
        kept.append(loss)  # keeps every step's graph and activations alive
        rows.append({"step": step, "loss": loss.item(), "mem_used_mb": _rss_mb()})
    del kept
    return _write(path, rows)


def stalling_run(path: Path, steps: int = 160, every: int = 4, stall_s: float = 0.03) -> Path:
    """A map-style dataset whose every ``every``-th batch is read from 'slow storage': that step
    takes ``stall_s`` longer on the run's clock (a 4 ms device step otherwise)."""
    torch.manual_seed(7)
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    clock = ModelClock(0.004, seed=7)
    rows = []
    for step in range(1, steps + 1):
        x, y = _blobs(32, 3000 + step)
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        stall = stall_s if step % every == 0 else 0.0
        rows.append({"step": step, "loss": loss.item(), "step_time": clock.step(stall)})
    return _write(path, rows)
