"""``trainaudit watch LOG``: follow a growing training log and print alerts as problems appear."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from types import FrameType

import click

from trainaudit.redact import mask_secrets
from trainaudit.live.follow import Watcher
from trainaudit.live.online import Alert
from trainaudit.answer.schema import SEVERITY_ORDER
from trainaudit.rules import load_config
from trainaudit.errors import InputError


class _Stop(Exception):
    pass


def _on_term(_sig: int, _frame: FrameType | None) -> None:
    raise _Stop


def _echo(a: Alert) -> None:
    click.echo(mask_secrets(f"step {a.step}: {a.text()}"), color=False)


@click.command()
@click.argument("log", type=click.Path(path_type=Path))
@click.option("--format", "fmt", metavar="NAME", help="Force a format instead of detecting it.")
@click.option("--fail-on", type=click.Choice(["critical", "high", "medium", "low"]),
              help="Exit 1 as soon as an alert at or above this severity appears (a watchdog for scripts).")
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
    limit = SEVERITY_ORDER[fail_on] if fail_on else None
    old = signal.signal(signal.SIGTERM, _on_term)
    status, failed = "interrupted", False
    last_growth = time.monotonic()
    if not log.exists():
        click.echo(f"trainaudit: waiting for {log} to appear", err=True)
    try:
        while True:
            n_before = watcher.live.n_values + len(watcher.live.events)
            pos_before = watcher.follower.position
            for a in watcher.poll(time.monotonic()):
                _echo(a)
                if limit is not None and SEVERITY_ORDER[a.severity] >= limit:
                    failed = True
            if watcher.live.n_values + len(watcher.live.events) != n_before or watcher.follower.position != pos_before:
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
        if limit is not None and SEVERITY_ORDER[a.severity] >= limit:
            failed = True
    _summary(watcher, status)
    return 1 if failed else 0


def _summary(w: Watcher, status: str) -> None:
    live = w.live
    alerts = w.rules.alerts
    fmt = w.reader.name if w.reader else "unknown"
    click.echo(mask_secrets(f"-- {w.path}: {status}; format {fmt}; last step {live.last_step}; {len(live.bufs)} "
                            f"metrics; {w.follower.rotations} rotation(s), {w.follower.truncations} truncation(s)"))
    if not alerts:
        click.echo("-- no alerts")
        return
    worst = max(alerts, key=lambda a: SEVERITY_ORDER[a.severity])
    click.echo(f"-- {len(alerts)} alert(s), worst {worst.severity}:")
    for a in sorted(alerts, key=lambda a: (-SEVERITY_ORDER[a.severity], a.since if a.since is not None else a.step)):
        since = f"since step {a.since}" if a.since is not None else f"at step {a.step}"
        click.echo(mask_secrets(f"   {a.severity:8s} {a.rule} {a.category} {since}: {a.message}"))
