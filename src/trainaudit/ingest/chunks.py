"""A log read a chunk of whole lines at a time, and worker processes that read chunks ahead of the
reader that consumes them (shared by the bulk readers: Megatron's and the generic text reader's).

A file on disk is cut into newline-aligned byte ranges that a worker can read by itself, so no
chunk crosses a pipe; a stream (compressed, standard input, an archive member) is read in chunks
by the one process. Lines longer than the input's line limit are cut in a range exactly as the
bounded stream cuts them (:class:`trainaudit.safeio.LineCutter`)."""

from __future__ import annotations

import contextlib
import mmap
import multiprocessing as mp
import os
import pickle
import queue
import threading
from collections import deque
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection
from typing import Any, BinaryIO, Generic, TypeVar

from trainaudit.errors import InputError
from trainaudit.safeio import LineCutter, open_input

POOL_MIN_SIZE = 96 << 20  # below this worker processes cost more than they save
MAX_PENDING = 3  # chunks in flight per worker: bounds memory whatever the file size

Req = TypeVar("Req")
Res = TypeVar("Res")


def usable_cpus() -> int:
    """CPUs this process may run on (the affinity mask on Linux; macOS and Windows have no
    ``os.sched_getaffinity``)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def read_range(path: str, offset: int, length: int) -> bytes:
    """``length`` bytes of the file from ``offset``; fewer (the file was cut short since its ranges
    were taken) is an input error."""
    with open_input(path) as f:  # (as the input was opened: a path swapped since is checked again)
        f.seek(offset)
        data = f.read(length)
    if len(data) < length:
        raise InputError(f"{path}: the file changed while it was read (cut short)")
    return data


def cut_long_lines(data: bytes, line_bytes: int | None) -> tuple[bytes, int]:
    """``data`` (whole lines from a line start) with lines longer than ``line_bytes`` cut as the
    stream of every other line reader cuts them (``safeio.LineCutter``), and how many were cut."""
    if line_bytes is None or len(data) <= line_bytes:  # no line can be longer: nothing to scan
        return data, 0
    cutter = LineCutter(line_bytes)
    return cutter.cut(data), cutter.cut_lines


def count_lines(data: bytes) -> int:
    """Lines in ``data`` (the last one may lack its newline)."""
    return data.count(b"\n") + (bool(data) and not data.endswith(b"\n"))


def reread_range(path: str, offset: int, length: int, line_bytes: int | None, lines: int, shown: str) -> bytes:
    """A range read again (its lines cut as the first time), which must still hold the ``lines``
    lines it held then: a file rewritten meanwhile is an input error."""
    data = cut_long_lines(read_range(path, offset, length), line_bytes)[0]
    if count_lines(data) != lines:
        raise InputError(f"{shown}: the file changed while it was read")
    return data


def file_ranges(path: str, size: int, chunk_size: int, line_bytes: int | None = None
                ) -> Iterator[tuple[int, int]]:
    """Newline-aligned (offset, length) ranges covering the file. A line that runs on for more
    than ``line_bytes`` past a range's end closes the range there, and its rest (which the reader
    cuts anyway) is skipped without being read into memory: no range is longer than
    ``chunk_size + 2 * line_bytes``."""
    step = min(1 << 20, line_bytes) if line_bytes else 1 << 20
    with open_input(path) as f:
        pos = 0
        while pos < size:
            end = pos + chunk_size
            nxt = None
            if end >= size:
                end = size
            else:
                f.seek(end)
                run = 0
                while True:
                    piece = f.readline(step)
                    run += len(piece)
                    if not piece or piece.endswith(b"\n"):
                        end = f.tell()
                        break
                    if line_bytes is not None and run > line_bytes:
                        end = f.tell()
                        while piece and not piece.endswith(b"\n"):  # the rest of the line: skipped
                            piece = f.readline(step)
                        nxt = f.tell()
                        break
            yield pos, end - pos
            pos = end if nxt is None else nxt


def stream_chunks(stream: BinaryIO, chunk_size: int) -> Iterator[bytes]:
    """Newline-aligned chunks of a stream (the last one may lack its newline)."""
    carry = b""
    while True:
        block = stream.read(chunk_size)
        if not block:
            if carry:
                yield carry
            return
        data = carry + block
        cut = data.rfind(b"\n") + 1
        if cut == 0:
            carry = data
            continue
        carry = data[cut:]
        yield data[:cut]


class _Slots:
    """A worker's shared memory for its results: ``depth`` slots of ``size`` bytes, mapped before
    the fork, so both processes see them. A result's large buffers (numpy arrays, by pickle
    protocol 5) are copied into the slot of its request and only the rest of its pickle crosses
    the pipe: pickled whole, a result of some MB costs several times the copy (a socket's small
    writes, on both sides). The consumer copies a result out when it takes it, and a worker holds
    at most ``depth`` requests not yet taken, so a slot is free again when its next request comes."""

    def __init__(self, depth: int, size: int) -> None:
        self.depth, self.size = depth, size
        self.mem = mmap.mmap(-1, depth * size)  # anonymous and shared: pages are taken when touched

    def put(self, k: int, value: Any) -> tuple[str, bytes, int, list[int]] | None:
        """Result ``k`` of the worker into its slot: the message that says where, or None if it
        does not fit (then it is pickled whole)."""
        bufs: list[pickle.PickleBuffer] = []
        head = pickle.dumps(value, protocol=5, buffer_callback=bufs.append)
        try:
            views = [b.raw() for b in bufs]
        except BufferError:  # not contiguous
            return None
        if sum(v.nbytes for v in views) > self.size:
            return None
        at = (k % self.depth) * self.size
        for v in views:
            self.mem[at:at + v.nbytes] = v
            at += v.nbytes
        return ("slot", head, k % self.depth, [v.nbytes for v in views])

    def take(self, head: bytes, slot: int, sizes: list[int]) -> Any:
        at = slot * self.size
        bufs = []
        with memoryview(self.mem) as mem:
            for n in sizes:
                bufs.append(bytearray(mem[at:at + n]))  # a copy: the slot is the worker's again
                at += n
        return pickle.loads(head, buffers=bufs)


def _serve(conn: Connection, make: Callable[[int], Callable[[Any], Any]], index: int, slots: _Slots) -> None:
    """A worker's loop. Its results are sent by a thread of their own: a result waits in the pipe
    until the consumer takes it, and the worker meanwhile works on its next request."""
    work = make(index)
    out: queue.Queue[tuple[bool, Any] | None] = queue.Queue()

    def send() -> None:
        k = 0
        while (got := out.get()) is not None:
            try:
                conn.send((got[0] and slots.put(k, got[1])) or got)
            except Exception as exc:  # a result or an error that does not pickle: the error's text
                what = exc if got[0] else got[1]
                conn.send((False, RuntimeError(f"{type(what).__name__}: {what}")))
            k += 1

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    while (req := conn.recv()) is not None:
        try:
            out.put((True, work(req)))
        except Exception as exc:  # the consumer raises it, in its request's place
            out.put((False, exc))
    out.put(None)
    sender.join()


class OrderedWorkers(Generic[Req, Res]):
    """Forked worker processes, each with the state its ``make(index)`` function builds, serving
    requests round-robin; results come back in the order of the requests. A worker's requests
    reach it in order, so its state (what it has seen of a file so far) follows the file. At most
    ``depth`` requests a worker wait for their results (:attr:`full`); a result's arrays up to
    ``slot_bytes`` come back through shared memory.

    A worker's error is raised by :meth:`result` in the place of its request's result. ``close``
    (or leaving the ``with`` block) stops the workers, also when the consumer stopped early."""

    def __init__(self, make: Callable[[int], Callable[[Req], Res]], n: int, *, depth: int = MAX_PENDING,
                 slot_bytes: int = 64 << 20) -> None:
        ctx = mp.get_context("fork")
        self.depth = depth
        self._conns: list[Connection] = []
        self._procs: list[Any] = []
        self._slots: list[_Slots] = []
        for i in range(n):
            mine, theirs = ctx.Pipe()
            slots = _Slots(depth, slot_bytes)
            proc = ctx.Process(target=_serve, args=(theirs, make, i, slots), daemon=True)
            proc.start()
            theirs.close()
            self._conns.append(mine)
            self._procs.append(proc)
            self._slots.append(slots)
        self._sent = 0
        self._order: deque[int] = deque()  # the worker of each request not yet answered

    @property
    def pending(self) -> int:
        return len(self._order)

    @property
    def full(self) -> bool:
        """Whether a request more would leave a worker more than ``depth`` results behind
        (requests go round-robin: any ``n * depth`` in a row are ``depth`` a worker)."""
        return len(self._order) >= len(self._conns) * self.depth

    def submit(self, req: Req) -> None:
        assert not self.full
        w = self._sent % len(self._conns)
        self._conns[w].send(req)
        self._order.append(w)
        self._sent += 1

    def result(self) -> Res:
        """The result of the oldest request not yet answered."""
        w = self._order.popleft()
        msg = self._conns[w].recv()
        if msg[0] == "slot":
            return self._slots[w].take(*msg[1:])  # type: ignore[no-any-return]
        ok, got = msg
        if not ok:
            raise got
        return got  # type: ignore[no-any-return]

    def close(self) -> None:
        for conn in self._conns:
            with contextlib.suppress(OSError):  # a worker already gone
                conn.send(None)
        for proc, conn in zip(self._procs, self._conns):
            proc.join(timeout=1 if not self._order else 0)
            if proc.is_alive():
                proc.terminate()
                proc.join()
            conn.close()
        for slots in self._slots:
            slots.mem.close()
        self._conns, self._procs, self._slots = [], [], []

    def __enter__(self) -> OrderedWorkers[Req, Res]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def in_order(pool: OrderedWorkers[Req, Res], requests: Iterator[Req]) -> Iterator[tuple[Req, Res]]:
    """Each of ``requests`` with its result, in order, the pool kept as busy as it may be (at most
    ``depth`` requests a worker in flight)."""
    ahead: deque[Req] = deque()
    while True:
        while not pool.full and (nxt := next(requests, None)) is not None:
            pool.submit(nxt)
            ahead.append(nxt)
        if not ahead:
            return
        yield ahead.popleft(), pool.result()

