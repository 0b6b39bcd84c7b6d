"""Model inspection (``trainaudit inspect``): where the parameters are, what trains, and, with a
sample batch, whether gradients flow. torch is imported lazily by :mod:`.model`."""

from __future__ import annotations

from trainaudit.inspect.result import Inspection, observed

__all__ = ["Inspection", "observed"]
