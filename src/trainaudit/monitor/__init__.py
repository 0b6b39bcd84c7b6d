"""Live monitoring of a training run: the monitor for PyTorch loops (and HF / Lightning
callbacks), the diagnose rules evaluated online, and alerts with actions.

``import trainaudit.monitor`` does not import torch; :func:`monitor` and :class:`Monitor` do
(``pip install trainaudit[torch]``).
"""

from __future__ import annotations

import sys
import types
from typing import TYPE_CHECKING, Any

from trainaudit.monitor.online import Alert, LiveRun, OnlineRules, TrainingStopped

if TYPE_CHECKING:
    from trainaudit.monitor.core import Monitor


def monitor(model: Any, optimizer: Any = None, log_dir: str = "trainaudit-monitor", **options: Any) -> Monitor:
    """Attach a :class:`~trainaudit.monitor.core.Monitor` to ``model`` (and ``optimizer``); see
    its docstring for ``options`` (every, rules_every, warn, on_alert, save_batch_on, stop_on,
    nan_origin, tensorboard, config)."""
    from trainaudit.monitor.core import Monitor

    return Monitor(model, optimizer, log_dir, **options)


def __getattr__(name: str) -> Any:
    if name == "Monitor":
        from trainaudit.monitor.core import Monitor

        return Monitor
    raise AttributeError(name)


class _CallableModule(types.ModuleType):
    """``trainaudit.monitor`` is both this package and the attach function: importing the
    subpackage rebinds the ``trainaudit.monitor`` attribute to the module, so the module itself
    is made callable (``trainaudit.monitor(model, opt, log_dir=...)``)."""

    def __call__(self, model: Any, optimizer: Any = None, log_dir: str = "trainaudit-monitor",
                 **options: Any) -> Monitor:
        return monitor(model, optimizer, log_dir, **options)


sys.modules[__name__].__class__ = _CallableModule

__all__ = ["Alert", "LiveRun", "Monitor", "OnlineRules", "TrainingStopped", "monitor"]
