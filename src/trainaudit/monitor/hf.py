"""The monitor as an HF ``TrainerCallback``.

    from trainaudit.monitor.hf import TrainAuditCallback
    trainer = Trainer(model=model, args=args, train_dataset=ds,
                      callbacks=[TrainAuditCallback(log_dir="runs/x", stop_on="critical")])

Per optimizer step it records what the plain-loop monitor records (``trainaudit.monitor.core``):
the loss (the mean over the step's micro-batches of the ``loss`` the model returned, read by a
forward hook: HF's logged loss hides NaN behind ``logging_nan_inf_filter``), the lr the update
used, the grad norm, per-module statistics, the first NaN/Inf origin, memory; then the online
rules and the actions. A ``stop`` action sets ``control.should_training_stop``: the Trainer ends
after the current step as it does for its own early stopping.

Grad norm: on logging steps, HF's own ``grad_norm`` (the norm *before* clipping, which no
callback can see earlier: clipping happens before ``on_pre_optimizer_step``); on other steps
(``logging_steps > 1``) the norm the optimizer sees, after any clipping. The Trainer zeroes the
gradients before ``on_step_end``, so ``nonfinite_grads`` is only counted on sampled steps.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from trainaudit.monitor.core import Monitor
from trainaudit.live.online import TrainingStopped


def _loss_of(out: Any) -> Any:
    loss = out.get("loss") if isinstance(out, Mapping) else getattr(out, "loss", None)
    return loss if loss is not None and hasattr(loss, "detach") else None


class TrainAuditCallback(TrainerCallback):
    """``log_dir`` and ``options`` are those of :class:`~trainaudit.monitor.core.Monitor` (every,
    rules_every, warn, on_alert, save_batch_on, stop_on, nan_origin, tensorboard, config...).
    The monitor is created at ``on_train_begin`` (the Trainer builds its optimizer in ``train()``)
    and is available as ``.monitor``."""

    def __init__(self, log_dir: str = "trainaudit-monitor", **options: Any) -> None:
        self.log_dir = log_dir
        self.options = options
        self.monitor: Monitor | None = None
        self._losses: list[Any] = []
        self._lr: float | None = None
        self._pending: int | None = None  # a logged step waiting for on_log's grad_norm
        self._hook: Any = None
        self._batch: Any = None
        self._opt_gn: torch.Tensor | float | None = None

    # -- lifecycle --------------------------------------------------------------------------
    def on_train_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                       model: Any = None, optimizer: Any = None, **kwargs: Any) -> None:
        opt = getattr(optimizer, "optimizer", optimizer)  # accelerate wraps the torch optimizer
        meta = {"framework": "hf", "max_steps": state.max_steps, "logging_steps": args.logging_steps,
                "max_grad_norm": args.max_grad_norm, "gradient_accumulation_steps": args.gradient_accumulation_steps}
        self.monitor = Monitor(model, opt, self.log_dir, **{"meta": meta, **self.options})
        self._hook = model.register_forward_hook(self._capture, with_kwargs=True)

    def _capture(self, module: Any, args: Any, kwargs: dict[str, Any], out: Any) -> None:
        if module.training:
            loss = _loss_of(out)
            if loss is not None:
                self._losses.append(loss.detach())
            self._batch = kwargs or args  # the Trainer calls model(**inputs): the batch, for save_batch_on

    def on_pre_optimizer_step(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                              **kwargs: Any) -> None:
        # fallback for steps HF does not log: the norm the optimizer sees (after clipping); read
        # here because the Trainer zeroes the gradients before on_step_end
        mon = self.monitor
        if mon is None:
            return
        grads = [p.grad.detach() for p in mon.model.parameters() if p.grad is not None]
        with torch.no_grad():  # a tensor: the monitor reads it with its batch of steps, no sync here
            self._opt_gn = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads))) if grads else 0.0
        mon.grad_norm_ahead(self._opt_gn)  # the optimizer's pre-hook screens it with the gradients

    def on_optimizer_step(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                          optimizer: Any = None, **kwargs: Any) -> None:
        # the lr this update used (the scheduler steps right after this event)
        if self.monitor is not None and self.monitor.optimizer is not None:
            self._lr = float(self.monitor.optimizer.param_groups[0]["lr"])

    def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                    **kwargs: Any) -> TrainerControl:
        if self._pending is not None:  # on_log did not come for the previous step
            self._record(self._pending, None, control)
        if control.should_log:  # DefaultFlowCallback (first in the list) decided: wait for the logs
            self._pending = state.global_step
        else:
            self._record(state.global_step, None, control)
        return control

    def on_log(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
               logs: dict[str, Any] | None = None, **kwargs: Any) -> TrainerControl:
        if self._pending is not None and logs is not None and "loss" in logs:
            gn = logs.get("grad_norm")
            try:
                value = float(gn) if gn is not None else None
            except (TypeError, ValueError):
                value = None
            step, self._pending = self._pending, None
            self._record(step, value, control)
        return control

    def on_train_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                     **kwargs: Any) -> None:
        if self._pending is not None:
            self._record(self._pending, None, control)
        self.close("completed")

    def close(self, status: str = "completed", error: str | None = None) -> None:
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        if self.monitor is not None:
            self.monitor.close(status, error)

    # -- one optimizer step -----------------------------------------------------------------
    def _record(self, step: int, grad_norm: torch.Tensor | float | None, control: TrainerControl) -> None:
        self._pending = None
        mon = self.monitor
        if mon is None or mon.closed:
            return
        losses, self._losses = self._losses, []
        loss: torch.Tensor | None = None
        if losses:  # the mean stays on the device (read with the monitor's batch of steps)
            loss = torch.stack([x.float() for x in losses]).mean()
        if grad_norm is None:
            grad_norm = self._opt_gn
        try:
            mon.step(loss, batch=self._batch, step=step, lr=self._lr, grad_norm=grad_norm)
        except TrainingStopped:
            control.should_training_stop = True


__all__ = ["TrainAuditCallback"]
