"""Detection rules: one class per rule, a registry by stable id, Ruff-style configuration.

    hits = run_rules(run, load_config())
"""

from __future__ import annotations

from trainaudit.model import Run
from trainaudit.rules.base import CalcSpec, Context, EventRef, Hit, PointRef, Rule
from trainaudit.rules.config import Config, load_config
from trainaudit.rules.registry import ALL_RULES, FAMILIES, RULE_CLASSES, rule_class


def active_rules(config: Config | None = None) -> list[Rule]:
    config = config or Config()
    return [cls.with_overrides(config.rules.get(cls.id, {})) for cls in RULE_CLASSES if config.enabled(cls.id)]


def run_rules(run: Run, config: Config | None = None) -> list[Hit]:
    ctx = Context.of(run)
    hits: list[Hit] = []
    for rule in active_rules(config):
        hits.extend(rule.check(ctx))
    return hits


__all__ = [
    "ALL_RULES",
    "FAMILIES",
    "RULE_CLASSES",
    "CalcSpec",
    "Config",
    "Context",
    "EventRef",
    "Hit",
    "PointRef",
    "Rule",
    "active_rules",
    "load_config",
    "rule_class",
    "run_rules",
]
