"""CLI commands, one module each. Add a new command's click object to ``COMMANDS``."""

from __future__ import annotations

import click

from trainaudit.commands.compare import compare
from trainaudit.commands.parse import parse

COMMANDS: list[click.Command] = [compare, parse]
