"""Run one hostile case in this process within the suite's budgets: exit 0, 1 or 2, at most 10 s and
500 MB of resident memory more than before, and nothing written outside the case's output folder.

In-process keeps the suite fast (no interpreter start-up per case). The time budget is CPU time,
the process's own (a SIGPROF timer: a busy shared machine does not spend it), with a wall-clock
timer ten times longer for a case that would wait forever without computing (the ``re`` engine
checks for signals while it matches, so a runaway regex is stopped too);
the memory budget is the peak resident set (``VmHWM`` in proc(5)), reset before each case by
writing 5 to ``/proc/self/clear_refs``.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from trainaudit.cli import main

TIME_BUDGET_S = 10.0  # CPU seconds
HANG_FACTOR = 10  # wall seconds per CPU second of budget: a case blocked without computing
RSS_BUDGET_MB = 500.0


class Overtime(Exception):
    pass


@dataclass
class Outcome:
    code: int
    stdout: str
    stderr: str
    seconds: float
    rss_mb: float


def _status(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


@contextlib.contextmanager
def budget(seconds: float = TIME_BUDGET_S) -> Iterator[dict[str, float]]:
    """Fail with :class:`Overtime` after ``seconds`` of CPU time (or ten times that of waiting);
    report the CPU time and the peak RSS growth."""
    got: dict[str, float] = {}

    def over(signum: int, frame: object) -> None:
        raise Overtime(f"over {seconds} s of CPU" if signum == signal.SIGPROF
                       else f"over {HANG_FACTOR * seconds} s of waiting")

    old = {sig: signal.signal(sig, over) for sig in (signal.SIGPROF, signal.SIGALRM)}
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")
    base = _status("VmRSS")
    t0 = time.process_time()
    signal.setitimer(signal.ITIMER_PROF, seconds)
    signal.setitimer(signal.ITIMER_REAL, HANG_FACTOR * seconds)
    try:
        yield got
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.setitimer(signal.ITIMER_REAL, 0)
        for sig, handler in old.items():
            signal.signal(sig, handler)
        got["seconds"] = time.process_time() - t0
        got["rss_mb"] = _status("VmHWM") - base


def files_under(path: Path) -> dict[str, float]:
    return {str(p): p.lstat().st_mtime for p in path.rglob("*")} if path.exists() else {}


def run(args: list[str], cwd: Path, *, env: dict[str, str] | None = None) -> Outcome:
    """``trainaudit ARGS`` in ``cwd``; asserts the budgets and the exit code."""
    out, err = io.StringIO(), io.StringIO()
    old_cwd = os.getcwd()
    saved = {k: os.environ.get(k) for k in (env or {})}
    code = -1
    os.chdir(cwd)
    os.environ.update(env or {})
    try:
        with budget() as got, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main(args)
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    finally:
        os.chdir(old_cwd)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    o = Outcome(code, out.getvalue(), err.getvalue(), got["seconds"], got["rss_mb"])
    assert o.code in (0, 1, 2), f"exit {o.code}: {o.stderr[-2000:]}"
    assert o.seconds < TIME_BUDGET_S
    assert o.rss_mb < RSS_BUDGET_MB, f"{o.rss_mb:.0f} MB"
    if o.code == 2:
        assert o.stderr.count("\n") == 1 and "Traceback" not in o.stderr, o.stderr
    return o
