"""The monitor as a PyTorch Lightning ``Callback``.

    from trainaudit.monitor.lightning import TrainAuditCallback
    trainer = L.Trainer(callbacks=[TrainAuditCallback(log_dir="runs/x", stop_on="critical")])

Per optimizer step it records what the plain-loop monitor records (``trainaudit.monitor.core``):
the loss ``training_step`` returned, the lr the update used and the global grad norm *before*
clipping (both read in ``on_before_optimizer_step``, which Lightning calls after the gradients
are accumulated and before it clips them), per-module statistics, the first NaN/Inf origin,
memory; then the online rules and the actions. A ``stop`` action sets ``trainer.should_stop``:
Lightning ends the fit as it does for ``EarlyStopping``. Steps are ``trainer.global_step``
(1-based after the first update), so with gradient accumulation one record per optimizer step.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from lightning.pytorch import Callback, LightningModule, Trainer

from trainaudit.monitor.core import Monitor
from trainaudit.live.online import TrainingStopped


def _ignore(*_args: Any, **_kwargs: Any) -> None:
    return None


def _quiet_training_step(pl_module: LightningModule, batch: Any, batch_idx: int) -> Any:
    """``training_step`` for a replay: its ``self.log`` calls are dropped (instance attributes
    shadow the methods for the call), so the replayed step logs nothing twice."""
    pl_module.log = pl_module.log_dict = _ignore  # type: ignore[method-assign]
    try:
        return pl_module.training_step(batch, batch_idx)
    finally:
        del pl_module.log, pl_module.log_dict


class TrainAuditCallback(Callback):
    """``log_dir`` and ``options`` are those of :class:`~trainaudit.monitor.core.Monitor`. The
    monitor is created at ``on_train_start`` (the optimizers exist then) and is ``.monitor``."""

    def __init__(self, log_dir: str = "trainaudit-monitor", **options: Any) -> None:
        self.log_dir = log_dir
        self.options = options
        self.monitor: Monitor | None = None
        self._lr: float | None = None
        self._gn: torch.Tensor | float | None = None
        self._last_step = -1

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        opt = trainer.optimizers[0] if trainer.optimizers else None
        meta = {"framework": "lightning", "max_epochs": trainer.max_epochs, "max_steps": trainer.max_steps,
                "gradient_clip_val": trainer.gradient_clip_val,
                "accumulate_grad_batches": trainer.accumulate_grad_batches}
        self.monitor = Monitor(pl_module, opt, self.log_dir, **{"meta": meta, **self.options})
        self._last_step = trainer.global_step

    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int) -> None:
        # training_step calls submodules, not the LightningModule's forward: the step the NaN
        # origin replays is training_step itself (not with manual optimization: it steps optimizers)
        if self.monitor is not None and pl_module.automatic_optimization:
            self.monitor.begin(_quiet_training_step, pl_module, batch, batch_idx)

    def on_before_optimizer_step(self, trainer: Trainer, pl_module: LightningModule, optimizer: Any) -> None:
        grads = [p.grad.detach() for p in pl_module.parameters() if p.grad is not None]
        with torch.no_grad():  # a tensor: the monitor reads it with its batch of steps, no sync here
            self._gn = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads))) if grads else 0.0
        if self.monitor is not None:
            # Lightning's optimizer step takes a closure (forward and backward run inside it,
            # after the optimizer's pre-hooks): the check before the update is called here, and
            # screens the norm with the gradients
            self.monitor.grad_norm_ahead(self._gn)
            self.monitor.before_update()
        self._lr = float(optimizer.param_groups[0]["lr"])

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        mon = self.monitor
        if mon is None or mon.closed or trainer.global_step == self._last_step:
            return  # accumulating gradients: no optimizer step in this batch
        self._last_step = trainer.global_step
        loss = outputs.get("loss") if isinstance(outputs, Mapping) else outputs
        try:
            mon.step(loss if isinstance(loss, torch.Tensor) else None, batch=batch, step=trainer.global_step,
                     lr=self._lr, grad_norm=self._gn)
        except TrainingStopped:
            trainer.should_stop = True

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self.monitor is not None:
            self.monitor.close("completed")

    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        if self.monitor is not None:
            self.monitor.close("crashed", error=f"{type(exception).__name__}: {exception}"[:500])


__all__ = ["TrainAuditCallback"]
