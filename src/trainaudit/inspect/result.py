"""What an inspection found, independent of torch (so the command can print it)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(slots=True)
class Observation:
    check: str  # "imbalance" | "frozen" | "dtype_mix" | "no_grad" | "zero_grad" | "nonfinite_grad" | "dead_relu" | "saturated"
    severity: str  # "high" | "medium" | "low" | "info"
    message: str
    where: list[str] = field(default_factory=list)
    value: float | None = None


@dataclass
class Inspection:
    target: str
    total_params: int = 0
    trainable_params: int = 0
    dtypes: dict[str, int] = field(default_factory=dict)
    by_kind: dict[str, int] = field(default_factory=dict)  # embedding / blocks / norm / head / other
    by_module: dict[str, int] = field(default_factory=dict)  # top-level children
    grad_norms: dict[str, float] = field(default_factory=dict)
    activations: dict[str, dict[str, float]] = field(default_factory=dict)
    peak_mem_mb: float | None = None
    peak_mem_kind: str = ""
    loss: float | None = None
    findings: list[Observation] = field(default_factory=list)

    def share(self, kind: str) -> float:
        return self.by_kind.get(kind, 0) / self.total_params if self.total_params else 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
