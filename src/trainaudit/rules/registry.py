"""The rule registry: every rule class by stable id.

Ids are stable (``TA1xx`` numerics, ``TA2xx`` optimisation, ``TA3xx`` generalisation,
``TA4xx`` resources and infrastructure, ``MONxxx`` the live monitor, ``INSxxx`` ``inspect``); a
removed rule's id is never reused.
"""

from __future__ import annotations

from trainaudit.rules import gate, generalisation, inspection, messages, monitor, numerics, optimisation, resources
from trainaudit.rules.base import Rule, Scope

# Every rule class registers itself when its family module is defined (imported above); the
# registry orders them by id.
ALL_RULES: list[type[Rule]] = sorted(Rule.registered, key=lambda c: (c.id[:2] != "TA", c.id))
_BY_ID: dict[str, type[Rule]] = {cls.id: cls for cls in ALL_RULES}
assert len(_BY_ID) == len(ALL_RULES), "duplicate rule id"
assert {m.__name__ for m in (gate, generalisation, inspection, messages, monitor, numerics, optimisation,
                             resources)} <= \
    {c.__module__ for c in ALL_RULES}, "a family module without rules"
# the rules that check a Run (diagnose, watch, the monitor's online rules); the monitor's rules
# read what the monitor recorded in its file
RULE_CLASSES: list[type[Rule]] = [c for c in ALL_RULES if c.scope in (Scope.RUN, Scope.MONITOR)]

FAMILIES: dict[str, str] = {"TA1": "numerics", "TA2": "optimisation", "TA3": "generalisation",
                            "TA4": "resources and infrastructure", "TA5": "messages with a known meaning",
                            "TA8": "golden-value gate and run comparison",
                            "MON": "live monitor", "INS": "model inspection"}


def rule_class(ident: str) -> type[Rule] | None:
    """By id (``TA101``) or name (``non-finite-metric``)."""
    key = ident.strip()
    if key.upper() in _BY_ID:
        return _BY_ID[key.upper()]
    return next((c for c in ALL_RULES if c.name == key.lower()), None)
