"""Detection rules: one class per rule, a registry by stable id, Ruff-style configuration.

    hits = run_rules(run, load_config())
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trainaudit.model import Run
from trainaudit.rules.base import CalcSpec, Context, EventRef, Hit, PointRef, Rule
from trainaudit.rules.config import Config, load_config
from trainaudit.rules.fitted import fitted_thresholds
from trainaudit.rules.registry import ALL_RULES, FAMILIES, RULE_CLASSES, rule_class


def configured(cls: type[Rule], config: Config | None = None) -> Rule:
    """The rule with its fitted thresholds, then the configuration's over them."""
    over = config.rules.get(cls.id, {}) if config is not None else {}
    return cls.with_overrides({**fitted_thresholds().get(cls.id, {}), **over})


def active_rules(config: Config | None = None) -> list[Rule]:
    config = config or Config()
    return [configured(cls, config) for cls in RULE_CLASSES if config.enabled(cls.id)]


def run_rules(run: Run, config: Config | None = None) -> list[Hit]:
    return run_rules_covered(run, config).hits


@dataclass
class RulesRun:
    """The hits of every active rule, which rules could look at the run, and why the others could
    not (none of the series they ask for is there, or long enough)."""

    hits: list[Hit] = field(default_factory=list)
    ran: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)


def run_rules_covered(run: Run, config: Config | None = None) -> RulesRun:
    ctx = Context.of(run)
    out = RulesRun()
    for rule in active_rules(config):
        ctx.asked = []
        found = rule.check(ctx)
        out.hits.extend(found)
        # a rule asks for the series it is about first: without it, it could not look at the run
        missing = [why for _role, why in ctx.asked if why is not None]
        if not found and ctx.asked and ctx.asked[0][1] is not None:
            out.skipped[rule.id] = "; ".join(dict.fromkeys(missing))
        else:
            out.ran.append(rule.id)
    ctx.asked = None
    return out


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
    "RulesRun",
    "active_rules",
    "configured",
    "load_config",
    "rule_class",
    "run_rules",
    "run_rules_covered",
]
