"""``trainaudit rules [ID]``: list the rules, or print one rule's documentation."""

from __future__ import annotations


import click
from rich.text import Text

from trainaudit.commands.common import console
from trainaudit.errors import UsageError
from trainaudit.render.terminal import SEVERITY_STYLE
from trainaudit.rules import rule_class
from trainaudit.rules.docs import rule_doc, rule_info, thresholds
from trainaudit.rules.registry import ALL_RULES
from trainaudit.redact import json_text


@click.command("rules")
@click.argument("rule_id", required=False, metavar="[ID]")
@click.option("--json", "as_json", is_flag=True, help="The rules (or one rule with its docs) as JSON.")
@click.option("-v", "--verbose", "verbose", is_flag=True, help="Also each rule's default thresholds.")
def rules(rule_id: str | None, as_json: bool, verbose: bool) -> int:
    """List the rules (id, severity, category, name), or show one rule's documentation.

    \b
    Example:
      trainaudit rules
      trainaudit rules TA101
      trainaudit rules loss-spike
      trainaudit rules --json
    """
    if rule_id:
        cls = rule_class(rule_id)
        if cls is None:
            raise UsageError(f"{rule_id}: unknown rule (see `trainaudit rules`)")
        if as_json:
            click.echo(json_text(rule_info(cls, doc=True), indent=2))
        else:
            console().print(Text(rule_doc(cls)))  # wrapped at the terminal's width
        return 0
    if as_json:
        click.echo(json_text([rule_info(cls) for cls in ALL_RULES], indent=2))
        return 0
    con = console()
    for cls in ALL_RULES:
        line = Text(f"{cls.id:<7}", style="bold")
        line.append(f"{cls.severity_range():<16}", style=SEVERITY_STYLE[cls.severity])
        line.append(f"{cls.category:<22}{cls.name}")
        con.print(line, soft_wrap=True)
        if verbose:
            con.print(Text(f"       {thresholds(cls)}", style="dim"))
    con.print(f"{len(ALL_RULES)} rules; `trainaudit rules ID` shows one rule's docs and thresholds")
    return 0
