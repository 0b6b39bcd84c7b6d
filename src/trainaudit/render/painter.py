"""PNG plots drawn in a second process, started before the run is read.

Importing matplotlib costs about 0.3-0.5 s of CPU and drawing a plot 0.1-0.2 s: as much as reading
a 10 MB log. A :class:`Painter` forks a child as a command starts; the child imports matplotlib
while the parent reads the run and applies the rules, then draws the plot specs it is sent while
the parent writes answer.json, answer.md and the chart data. The child returns PNG bytes only (the
parent writes every file, through :class:`~trainaudit.outdir.OutDir`), drawn by the same
:func:`~trainaudit.render.plots.render` as in process, so the files are the same bytes.

The child is a plain ``os.fork`` (https://docs.python.org/3/library/os.html#os.fork), made only
where that is safe and useful: Linux (on macOS, forking a process that loaded system frameworks can
crash, which is why multiprocessing spawns there, https://docs.python.org/3/library/multiprocessing.html#contexts-and-start-methods),
more than one CPU, matplotlib installed, and no other thread running in the process (a fork copies only the calling thread: a lock another thread
held would stay held in the child). Otherwise, and whenever the child fails, the plots are drawn in
process as before.
"""

from __future__ import annotations

import contextlib
import io
import os
import pickle
import signal
import struct
import sys
import threading
from collections.abc import Sequence
from typing import Self

from trainaudit.answer.charts import PlotSpec
from trainaudit.render.plots import png_available, render

_SIZE = struct.Struct("<q")  # a message's length; -1: the child failed


def _read_exact(fd: int, n: int) -> bytes | None:
    parts: list[bytes] = []
    while n > 0:
        chunk = os.read(fd, min(n, 1 << 20))
        if not chunk:
            return None
        parts.append(chunk)
        n -= len(chunk)
    return b"".join(parts)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _read_message(fd: int) -> bytes | None:
    head = _read_exact(fd, _SIZE.size)
    if head is None:
        return None
    (n,) = _SIZE.unpack(head)
    return None if n < 0 else _read_exact(fd, n)


def _message(data: bytes) -> bytes:
    return _SIZE.pack(len(data)) + data


class Painter:
    """A forked child that draws plot specs into PNG bytes (see the module's docstring)."""

    def __init__(self, pid: int, to_child: int, from_child: int) -> None:
        self._pid = pid
        self._to_child: int | None = to_child
        self._from_child: int | None = from_child
        self._sender: threading.Thread | None = None
        self._specs: tuple[PlotSpec, ...] | None = None
        self._count = 0
        self._received = False

    @classmethod
    def start(cls) -> Painter | None:
        """A started painter, or None where plots are better drawn in process."""
        if (not sys.platform.startswith("linux") or (os.cpu_count() or 1) < 2 or threading.active_count() > 1
                or not png_available()):
            return None
        down_r, down_w = os.pipe()
        up_r, up_w = os.pipe()
        try:
            pid = os.fork()
        except OSError:
            for fd in (down_r, down_w, up_r, up_w):
                os.close(fd)
            return None
        if pid == 0:  # the child: never returns
            os.close(down_w)
            os.close(up_r)
            _child(down_r, up_w)
        os.close(down_r)
        os.close(up_w)
        return cls(pid, down_w, up_r)

    @property
    def sent(self) -> tuple[PlotSpec, ...] | None:
        """The specs handed to the child, None before :meth:`send`."""
        return self._specs

    def send(self, specs: Sequence[PlotSpec]) -> None:
        """Hand the specs to the child (from a thread: the child may still be importing matplotlib,
        and the parent has answer.json to write meanwhile)."""
        fd = self._to_child
        if fd is None or self._sender is not None:
            raise RuntimeError("a painter draws one set of plots")
        data = _message(pickle.dumps(list(specs), protocol=pickle.HIGHEST_PROTOCOL))
        self._specs = tuple(specs)
        self._count = len(specs)

        def send() -> None:
            with contextlib.suppress(OSError):  # the child is gone: receive() says so, drawn in process
                _write_all(fd, data)

        self._sender = threading.Thread(target=send, name="trainaudit-painter", daemon=True)
        self._sender.start()

    def receive(self) -> list[bytes] | None:
        """The PNGs of the specs sent, in their order; None when the child failed."""
        if self._sender is None or self._from_child is None:
            return None
        self._sender.join()
        pngs: list[bytes] = []
        try:
            for _ in range(self._count):
                png = _read_message(self._from_child)
                if png is None:
                    return None
                pngs.append(png)
        except OSError:
            return None
        finally:
            self._received = True
            self.close()
        return pngs

    def close(self) -> None:
        """End the child and reap it: a child whose plots were not all received is killed (it may
        be drawing plots nobody will read)."""
        for name in ("_to_child", "_from_child"):
            fd = getattr(self, name)
            if fd is not None:
                setattr(self, name, None)
                os.close(fd)
        if self._pid:
            pid, self._pid = self._pid, 0
            if not self._received:
                os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _png(spec: PlotSpec) -> bytes:
    buf = io.BytesIO()
    render(spec, buf)
    return buf.getvalue()


def _draw_all(specs: list[PlotSpec], inherited: tuple[int, ...]) -> list[bytes]:
    """The specs' PNGs, in order. With two or more, a second child (forked here, matplotlib already
    imported) draws every other one: the parent has sent its specs and has little left to do, so
    both CPUs draw. Whatever that child does not send back is drawn here."""
    if len(specs) < 2:
        return [_png(s) for s in specs]
    r, w = os.pipe()
    try:
        pid = os.fork()
    except OSError:
        os.close(r)
        os.close(w)
        return [_png(s) for s in specs]
    if pid == 0:  # the second child: draws, hands its PNGs over at once, exits
        code = 0
        try:
            for fd in (r, *inherited):
                os.close(fd)
            drawn = b"".join(_message(_png(s)) for s in specs[1::2])
            _write_all(w, drawn)
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    os.close(w)
    pngs: list[bytes | None] = [None] * len(specs)
    try:
        for i in range(0, len(specs), 2):
            pngs[i] = _png(specs[i])
        for i in range(1, len(specs), 2):
            got = _read_message(r)
            if got is None:
                break
            pngs[i] = got
    finally:
        os.close(r)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
    return [p if p is not None else _png(s) for p, s in zip(pngs, specs, strict=True)]


def _child(down: int, up: int) -> None:
    """Import matplotlib, wait for the specs, send back one PNG each, exit without running the
    parent's exit handlers or flushing its buffers (``os._exit``)."""
    code = 0
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's: the child ends with its pipe
        import matplotlib

        matplotlib.use("Agg", force=True)
        import matplotlib.pyplot  # importing it is the work done ahead

        data = _read_message(down)
        if data is not None:
            for png in _draw_all(pickle.loads(data), (down, up)):
                _write_all(up, _message(png))
    except BaseException:
        code = 1
        with contextlib.suppress(OSError):
            _write_all(up, _SIZE.pack(-1))
    finally:
        os._exit(code)


_early: list[Painter | None] = [None]  # the painter a command line started before its command loaded


def start_early() -> None:
    """Start the painter of the command about to run, before its imports (``cli``): the child
    imports matplotlib while the parent imports the rest. One at a time: an earlier one not taken
    (its command failed before drawing) is reused."""
    if _early[0] is None:
        _early[0] = Painter.start()


def take() -> Painter | None:
    """The painter started early for this command, else a new one (None: draw in process)."""
    p, _early[0] = _early[0], None
    return p if p is not None else Painter.start()
