"""Follow a growing log like ``tail -F`` and run the online rules on it (``trainaudit watch``).

:class:`Follower` returns the complete lines appended since the last poll. It survives rotation
(the path now names another file: the rest of the old file is read first, then the new file
from its start) and truncation (the file got shorter than what was read: read again from 0).
:class:`Watcher` detects the format once there is text, feeds lines to that reader's ``feed``
(line formats) or re-reads the file on change (whole-file formats such as CSV), and evaluates
the rules on the live run. The run ends at a completion marker (an event with
``data["completed"]``, e.g. the monitor's end record, HF's "Training completed", Megatron's
"exiting program").
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainaudit.errors import InputError
from trainaudit.ingest.base import LineReader, Reader, Sample, looks_like_text
from trainaudit.ingest.formats import all_readers, best_reader, reader_by_name
from trainaudit.ingest.signatures import SignatureScanner
from trainaudit.ingest.sources import InputFile
from trainaudit.ingest.text import split_line
from trainaudit.answer.schema import Finding
from trainaudit.model import EventKind, Source
from trainaudit.live.online import LiveRun, OnlineRules
from trainaudit.rules import Config
from trainaudit.safeio import LIMITS, LineCutter, open_input

POLL_BYTES = 8 << 20  # read at most this much per poll: memory stays bounded however fast the log grows


class Follower:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None
        self._ino: tuple[int, int] | None = None
        self._pos = 0
        self._partial = b""
        self._cutter = LineCutter(LIMITS.line_bytes)
        self.behind = False  # the last poll stopped at POLL_BYTES: more is already there
        self.head = b""  # the first bytes of the file, before lines are cut (format and binary checks)
        self.line_no = 0  # physical lines returned so far (restarts at rotation/truncation)
        self.rotations = 0
        self.truncations = 0

    def _open(self) -> bool:
        try:
            # O_NONBLOCK: opening a FIFO would otherwise wait for a writer (fifo(7)).
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            return False
        except IsADirectoryError:
            raise InputError(f"{self.path}: is a directory (watch follows one log file)") from None
        except OSError as exc:
            raise InputError(f"{self.path}: cannot open ({exc.strerror})") from None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise InputError(f"{self.path}: not a regular file")
        self._fd, self._ino, self._pos, self.line_no = fd, (st.st_dev, st.st_ino), 0, 0
        self._restart()
        return True

    def _restart(self) -> None:
        self._partial, self._cutter, self.head = b"", LineCutter(LIMITS.line_bytes), b""

    def _read_some(self) -> bytes:
        """What was appended, at most POLL_BYTES (a log that grows faster is read over several polls)."""
        assert self._fd is not None
        chunks: list[bytes] = []
        got = 0
        while got < POLL_BYTES:
            b = os.pread(self._fd, min(1 << 20, POLL_BYTES - got), self._pos)
            if not b:
                break
            self._pos += len(b)
            got += len(b)
            chunks.append(b)
        self.behind = got >= POLL_BYTES
        data = b"".join(chunks)
        if len(self.head) < 8192:
            self.head += data[:8192 - len(self.head)]
        return self._cutter.cut(data)

    def _split(self, data: bytes, final: bool = False) -> list[bytes]:
        # Lines arrive cut to LIMITS.line_bytes, so the partial line stays under that too.
        data = self._partial + data
        lines = data.split(b"\n")
        self._partial = lines.pop()
        if final and self._partial:
            lines.append(self._partial)
            self._partial = b""
        return lines

    def poll(self) -> tuple[list[bytes], bool]:
        """(new complete lines, whether the file was replaced or truncated since the last poll:
        the caller starts line numbers and multi-line state afresh)."""
        restarted = False
        if self._fd is None:
            if not self._open():
                return [], False
            restarted = True
        out: list[bytes] = []
        try:
            st = os.stat(self.path)
            now_ino: tuple[int, int] | None = (st.st_dev, st.st_ino)
        except FileNotFoundError:
            now_ino = None
        if now_ino is not None and now_ino != self._ino:
            # rotated: finish the old file (the writer may have added lines before the rename)
            out += self._split(self._read_some(), final=True)
            os.close(self._fd)  # type: ignore[arg-type]
            self._fd = None
            self.rotations += 1
            if not self._open():
                return out, True
            restarted = True
        elif os.fstat(self._fd).st_size < self._pos:  # type: ignore[arg-type]
            self.truncations += 1
            self._pos, self.line_no = 0, 0
            self._restart()
            restarted = True
        out += self._split(self._read_some())
        return out, restarted

    @property
    def position(self) -> int:
        return self._pos

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _pick_reader(name: str, head: bytes) -> Reader | None:
    best, score = best_reader(Sample.from_head(name, head), all_readers())
    return best if score > 0.05 else None


@dataclass
class Watcher:
    """One followed file; call :meth:`poll` repeatedly. ``alerts`` collects all alerts."""

    path: Path
    fmt: str | None = None
    config: Config | None = None
    every_s: float = 1.0  # routine rule evaluations at most this often
    rules: OnlineRules = field(init=False)
    follower: Follower = field(init=False)
    reader: Reader | None = None
    completed: bool = False
    status: str = ""
    _state: dict[str, Any] = field(default_factory=dict)
    _scanner: SignatureScanner | None = None
    _head: bytes = b""
    _pending: list[bytes] = field(default_factory=list)
    _last_eval: float = -1e18
    _dirty: bool = False
    _urgent: bool = False
    _n_events: int = 0

    def __post_init__(self) -> None:
        self.rules = OnlineRules(config=self.config, every=1, budget=0.0, min_points=1)
        self.follower = Follower(self.path)
        if self.fmt:
            self.reader = reader_by_name(self.fmt)
            if self.reader is None:
                raise InputError(f"--format {self.fmt}: unknown format")

    @property
    def live(self) -> LiveRun:
        return self.rules.live

    def _source(self) -> Source:
        assert self.reader is not None
        return Source(str(self.path), self.reader.name, self.reader.kind)

    def poll(self, now: float) -> list[Finding]:
        lines, restarted = self.follower.poll()
        if self.reader is None:
            self._pending += lines
            self._head = b"\n".join(self._pending)
            head = self.follower.head
            if len(head) >= 8192 and not looks_like_text(head) and not self.fmt:
                raise InputError(f"{self.path}: binary data, not a log (use --format NAME to read it anyway)")
            if not self._head.strip() or (len(self._pending) < 3 and len(self._head) < 4096 and not self._urgent_head()):
                return []
            self.reader = _pick_reader(self.path.name, self._head[:65536] + b"\n")
            if self.reader is None:
                if len(self._pending) < 50:
                    return []
                raise InputError(f"{self.path}: no supported log format recognised in the first lines "
                                 "(use --format NAME)")
            lines, self._pending, restarted = self._pending, [], True
        if isinstance(self.reader, LineReader):
            self._feed_lines(lines, restarted)
        elif lines or restarted:
            self._reread()
        return self._maybe_evaluate(now)

    def _urgent_head(self) -> bool:
        return b"Traceback" in self._head or b"Error" in self._head

    def _feed_lines(self, lines: list[bytes], restarted: bool) -> None:
        assert isinstance(self.reader, LineReader)
        if restarted or self._scanner is None:
            if self._scanner is not None:
                self._finish_file()
            self.live.begin(self._source())
            self._state = self.reader.new_state()
            self._scanner = SignatureScanner(str(self.path))
            self.follower.line_no = 0
        for braw in lines:
            self.follower.line_no += 1
            for line in split_line(self.follower.line_no, braw + b"\n"):
                self.reader.feed(line, self.live, self._state)
                for ev in self._scanner.feed(line):
                    self.live.event(ev)
        if lines:
            self._dirty = True

    def _finish_file(self) -> None:
        if self._scanner is not None and isinstance(self.reader, LineReader):
            for ev in self._scanner.finish():
                self.live.event(ev)
            self.reader.finish(self.live, self._state)

    def _reread(self) -> None:
        """Whole-file formats: read the file again into a fresh live run (alerts stay fired)."""
        assert self.reader is not None
        live = LiveRun()
        inp = InputFile(str(self.path), self.path.name, self.path.stat().st_size, lambda: open_input(self.path),
                        self.path)
        live.begin(self._source())
        try:
            self.reader.read(inp, live)
        except InputError:
            return  # a half-written file: try again on the next change
        self.rules.live = live
        self._n_events = 0
        self._dirty = True

    def _maybe_evaluate(self, now: float) -> list[Finding]:
        events = self.live.recorded[self._n_events:]
        self._n_events = len(self.live.recorded)
        if any(e.data.get("completed") or (e.kind == EventKind.PHASE and e.data.get("status")) for e in events):
            self.completed = True
        urgent = self._urgent or self.completed or any(e.kind != EventKind.PHASE for e in events)
        if not self._dirty or not (urgent or now - self._last_eval >= self.every_s):
            return []
        self._dirty = self._urgent = False
        self._last_eval = now
        return self.rules.evaluate(self.live.last_step or 0, final=self.completed)

    def finish(self) -> list[Finding]:
        """At exit: flush multi-line state and evaluate once more."""
        self._finish_file()
        self.follower.close()
        self._dirty = True
        return self.rules.evaluate(self.live.last_step or 0, final=self.completed)
