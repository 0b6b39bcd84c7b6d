"""The rule registry: every rule class by stable id, and running a configured selection.

    hits = run_rules(run, load_config())

Ids are stable (``TA1xx`` numerics, ``TA2xx`` optimisation, ``TA3xx`` generalisation,
``TA4xx`` resources and infrastructure); a removed rule's id is never reused.
"""

from __future__ import annotations

from trainaudit.model import Run
from trainaudit.rules import generalisation, numerics, optimisation, resources
from trainaudit.rules.base import CalcSpec, Context, EventRef, Hit, PointRef, Rule
from trainaudit.rules.config import Config, load_config

RULE_CLASSES: list[type[Rule]] = [*numerics.RULES, *optimisation.RULES, *generalisation.RULES, *resources.RULES]
_BY_ID: dict[str, type[Rule]] = {cls.id: cls for cls in RULE_CLASSES}
assert len(_BY_ID) == len(RULE_CLASSES), "duplicate rule id"

FAMILIES: dict[str, str] = {"TA1": "numerics", "TA2": "optimisation", "TA3": "generalisation",
                            "TA4": "resources and infrastructure"}


def rule_class(ident: str) -> type[Rule] | None:
    """By id (``TA101``) or name (``non-finite-metric``)."""
    key = ident.strip()
    if key.upper() in _BY_ID:
        return _BY_ID[key.upper()]
    return next((c for c in RULE_CLASSES if c.name == key.lower()), None)


def active_rules(config: Config | None = None) -> list[Rule]:
    config = config or Config()
    out: list[Rule] = []
    for cls in RULE_CLASSES:
        if not config.enabled(cls.id):
            continue
        out.append(cls.with_overrides(config.rules.get(cls.id, {})))
    return out


def run_rules(run: Run, config: Config | None = None) -> list[Hit]:
    ctx = Context.of(run)
    hits: list[Hit] = []
    for rule in active_rules(config):
        hits.extend(rule.check(ctx))
    return hits


__all__ = ["RULE_CLASSES", "FAMILIES", "CalcSpec", "Config", "Context", "EventRef", "Hit", "PointRef", "Rule",
           "active_rules", "load_config", "rule_class", "run_rules"]
