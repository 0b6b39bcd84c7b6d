"""``trainaudit watch LOG``: follow a growing training log and print alerts as problems appear."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from types import FrameType

import click
from rich.text import Text

from trainaudit.commands.common import console, exit_code, fail_on_option
from trainaudit.live.follow import Watcher
from trainaudit.answer.schema import SEVERITY_ORDER, Finding
from trainaudit.rules import load_config
from trainaudit.errors import InputError
from trainaudit.redact import mask_secrets
from trainaudit.render.terminal import rated


class _Stop(Exception):
    pass


def _on_term(_sig: int, _frame: FrameType | None) -> None:
    raise _Stop


def _line(where: str, a: Finding) -> Text:
    """``step 45: TA101 [critical] since step 36: lm loss is NaN ...``, as a finding reads."""
    since = f"since step {a.first_bad_step}: " if a.first_bad_step is not None else ""
    return rated(where, a.rule, a.severity, since + a.message)


def _echo(a: Finding) -> None:
    console().print(_line(f"step {a.last_step}", a), soft_wrap=True)


@click.command()
@click.argument("log", type=click.Path(path_type=Path))
@click.option("--format", "fmt", metavar="NAME", help="Force a format instead of detecting it.")
@fail_on_option("an alert above info was raised; with a severity, watch ends at the first alert at or above it "
                "(a watchdog for scripts)")
@click.option("--interval", type=float, default=0.5, show_default=True, help="Seconds between polls of the file.")
@click.option("--idle-timeout", type=float, default=None,
              help="End when the file has not grown for this many seconds (default: wait for the completion "
                   "marker or Ctrl-C).")
@click.option("--config", "config", type=click.Path(dir_okay=False, path_type=Path),
              help="pyproject.toml / trainaudit.toml with [tool.trainaudit] rule settings.")
def watch(log: Path, fmt: str | None, fail_on: str | None, interval: float, idle_timeout: float | None,
          config: Path | None) -> int:
    """Follow a growing training log (like tail -F: survives rotation and truncation), run the
    diagnose rules on it as it grows and print each alert once, with the step it started at.
    Ends with a summary at the run's completion marker, on Ctrl-C / SIGTERM, or after
    --idle-timeout seconds without growth.

    \b
    Example:
      trainaudit watch train.log
      trainaudit watch runs/x/trainaudit-monitor.jsonl --fail-on critical
    """
    if log.is_dir():
        raise InputError(f"{log}: is a directory (watch follows one log file)")
    watcher = Watcher(log, fmt=fmt, config=load_config(config))
    limit = SEVERITY_ORDER[fail_on] if fail_on not in (None, "never") else None
    old = signal.signal(signal.SIGTERM, _on_term)
    status, failed = "interrupted", False
    last_growth = time.monotonic()
    if not log.exists():
        click.echo(f"trainaudit: waiting for {log} to appear", err=True)
    try:
        while True:
            n_before = watcher.live.n_values + len(watcher.live.recorded)
            pos_before = watcher.follower.position
            for a in watcher.poll(time.monotonic()):
                _echo(a)
                if limit is not None and SEVERITY_ORDER[a.severity] >= limit:
                    failed = True
            if watcher.live.n_values + len(watcher.live.recorded) != n_before or watcher.follower.position != pos_before:
                last_growth = time.monotonic()
            if failed:
                status = f"alert at or above {fail_on}"
                break
            if watcher.completed:
                status = "run ended"
                break
            if idle_timeout is not None and time.monotonic() - last_growth >= idle_timeout:
                status = f"no growth for {idle_timeout:g} s"
                break
            if not watcher.follower.behind:  # a backlog is read at once, a poll's worth at a time
                time.sleep(interval)
    except (KeyboardInterrupt, _Stop):
        status = "interrupted"
    finally:
        signal.signal(signal.SIGTERM, old)
    for a in watcher.finish():
        _echo(a)
    _summary(watcher, status)
    return exit_code(watcher.rules.alerts, fail_on, any(a.severity != "info" for a in watcher.rules.alerts))


def _summary(w: Watcher, status: str) -> None:
    live = w.live
    alerts = w.rules.alerts
    fmt = w.reader.name if w.reader else "unknown"
    con = console()
    last = f"last step {live.last_step}" if live.last_step is not None else "no step logged yet"
    con.print(Text(mask_secrets(f"-- {w.path}: {status}; format {fmt}; {last}; {len(live.bufs)} metrics; "
                                f"{w.follower.rotations} rotation(s), {w.follower.truncations} truncation(s)")),
              soft_wrap=True)
    if not alerts:
        con.print("-- no alerts")
        return
    worst = max(alerts, key=lambda a: SEVERITY_ORDER[a.severity])
    con.print(f"-- {len(alerts)} alert(s), worst {worst.severity}:")
    for a in sorted(alerts, key=lambda a: (-SEVERITY_ORDER[a.severity], a.first_bad_step if a.first_bad_step is not None else a.last_step)):
        con.print(_line(f"   step {a.last_step}", a), soft_wrap=True)
