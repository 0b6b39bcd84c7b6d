"""CLI commands, one module each. Add a new command's click object to ``COMMANDS``."""

from __future__ import annotations

import click

from trainaudit.commands.audit import audit
from trainaudit.commands.batch import batch
from trainaudit.commands.compare import compare
from trainaudit.commands.diagnose import diagnose
from trainaudit.commands.inspect import inspect
from trainaudit.commands.mcp import mcp
from trainaudit.commands.parse import parse
from trainaudit.commands.post import post
from trainaudit.commands.report import report
from trainaudit.commands.rules import rules
from trainaudit.commands.watch import watch

COMMANDS: list[click.Command] = [audit, batch, compare, diagnose, mcp, parse, post, report, rules, watch, inspect]
