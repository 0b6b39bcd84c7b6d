"""What an inspection found, independent of torch (so the command can print it)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from trainaudit.answer.schema import Finding, Severity
from trainaudit.rules.base import Rule


def observed(rule: type[Rule], message: str, *, severity: Severity | None = None, where: list[str] | None = None,
             module: str | None = None, value: float | None = None) -> Finding:
    """A finding of ``inspect``: ``rule``'s, about the whole model or one ``module`` (its metric);
    ``data`` holds the parameters or modules it names (``where``) and the share it measured."""
    data: dict[str, Any] = {"where": where or []}
    if value is not None:
        data["value"] = value
    return Finding(id=Finding.named(rule.id, module), rule=rule.id, category=rule.category,
                   severity=severity or rule.severity, metric=module, message=message, confidence=1.0, data=data)


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
    findings: list[Finding] = field(default_factory=list)

    def share(self, kind: str) -> float:
        return self.by_kind.get(kind, 0) / self.total_params if self.total_params else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "findings": [f.model_dump(mode="json") for f in self.findings]}
