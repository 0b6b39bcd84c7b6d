"""``trainaudit rules [ID]``: list the rules, or print one rule's documentation."""

from __future__ import annotations

import sys

import click
from rich.console import Console
from rich.table import Table

from trainaudit.errors import UsageError
from trainaudit.rules import rule_class
from trainaudit.rules.registry import ALL_RULES
from trainaudit.rules.docs import rule_doc, thresholds


@click.command("rules")
@click.argument("rule_id", required=False, metavar="[ID]")
def rules(rule_id: str | None) -> int:
    """List the rules (id, name, category, thresholds), or show one rule's documentation.

    \b
    Example:
      trainaudit rules
      trainaudit rules TA101
      trainaudit rules loss-spike
    """
    if rule_id:
        cls = rule_class(rule_id)
        if cls is None:
            raise UsageError(f"{rule_id}: unknown rule (see `trainaudit rules`)")
        click.echo(rule_doc(cls))
        return 0
    console = Console(file=sys.stdout, soft_wrap=True)
    t = Table(title="trainaudit rules")
    for col in ("id", "name", "category", "severity", "thresholds"):
        t.add_column(col, overflow="fold")
    for cls in ALL_RULES:
        t.add_row(cls.id, cls.name, cls.category, cls.severity, thresholds(cls))
    console.print(t)
    return 0
