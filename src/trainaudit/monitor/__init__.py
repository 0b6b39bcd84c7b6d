"""Live monitoring of a PyTorch training loop (and HF / Lightning callbacks): per-step and per-layer
statistics, the first NaN's origin, and the diagnose rules evaluated online with alerts and actions.

``trainaudit.monitor(model, optimizer, log_dir="runs/x")`` attaches a :class:`Monitor`. This package
imports torch (``pip install 'trainaudit[torch]'``); ``import trainaudit`` alone does not.
"""

from __future__ import annotations

import sys
import types
from typing import Any

from trainaudit.answer.schema import Finding
from trainaudit.live.online import LiveRun, OnlineRules, TrainingStopped
from trainaudit.monitor.core import Monitor


def monitor(model: Any, optimizer: Any = None, log_dir: str = "trainaudit-monitor", **options: Any) -> Monitor:
    """Attach a :class:`~trainaudit.monitor.core.Monitor` to ``model`` (and ``optimizer``); see
    its docstring for ``options`` (every, rules_every, warn, on_alert, save_batch_on, stop_on,
    nan_origin, tensorboard, config)."""
    return Monitor(model, optimizer, log_dir, **options)


class _CallableModule(types.ModuleType):
    """``trainaudit.monitor`` is both this package and the attach function: importing the
    subpackage rebinds the ``trainaudit.monitor`` attribute to the module, so the module itself
    is made callable (``trainaudit.monitor(model, opt, log_dir=...)``)."""

    def __call__(self, model: Any, optimizer: Any = None, log_dir: str = "trainaudit-monitor",
                 **options: Any) -> Monitor:
        return monitor(model, optimizer, log_dir, **options)


sys.modules[__name__].__class__ = _CallableModule

__all__ = ["Finding", "LiveRun", "Monitor", "OnlineRules", "TrainingStopped", "monitor"]
