"""The rule registry: every rule class by stable id.

Ids are stable (``TA1xx`` numerics, ``TA2xx`` optimisation, ``TA3xx`` generalisation,
``TA4xx`` resources and infrastructure); a removed rule's id is never reused.
"""

from __future__ import annotations

from trainaudit.rules import generalisation, numerics, optimisation, resources
from trainaudit.rules.base import Rule

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
