"""Read files that strangers wrote: regular files only, confined below a root when asked, bounded.

trainaudit reads CI artifacts, pasted logs, downloaded archives and other people's repositories.
Every byte of them is untrusted, so the limits are part of the design instead of patches per
format:

- :func:`open_input` opens regular files only (a FIFO blocks forever, a device never ends) unless
  the caller asks for another kind, and under :func:`confined` (the MCP server's roots) checks
  where the *opened* file really is, so a path swapped for a symlink between a check and the open
  cannot lead outside; hard links to a file outside cannot be told apart from the file, so files
  with more than one link are refused there unless allowed.
- :class:`BoundedStream` cuts lines longer than :data:`LIMITS.line_bytes` (and counts them, so the
  report can say so) and stops decompressed data that exceeds its budget (an archive bomb).
- :func:`load_json` and :func:`load_yaml` bound nesting depth, number size and YAML aliases.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import stat
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import yaml

from trainaudit.errors import InputError, PathRefused


@dataclass(frozen=True, slots=True)
class Limits:
    line_bytes: int = 1 << 20  # longer lines are cut to this (real log lines are under 100 KB)
    ratio: int = 200  # decompressed/compressed beyond this (and beyond the floor) is a bomb
    ratio_floor: int = 256 << 20  # small archives may expand this much whatever their ratio
    members: int = 2_000  # archive members, links included (each is sniffed and becomes a source)
    json_depth: int = 64  # golden values, trainer_state.json and answer.json nest 5 levels or so
    number_digits: int = 400  # a JSON integer longer than this is read as a float (inf)
    yaml_nodes: int = 100_000  # YAML nodes after alias expansion (the "billion laughs" bomb)
    stdin_bytes: int = 8 << 30  # standard input is copied to a temporary file (read more than once)


LIMITS = Limits()


def budget(compressed_size: int) -> int:
    """How many decompressed bytes an input of ``compressed_size`` may produce."""
    return max(LIMITS.ratio_floor, LIMITS.ratio * compressed_size)


# -- where files may be read from ---------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Confinement:
    roots: tuple[Path, ...]
    allow_hardlinks: bool = False

    def inside(self, real: Path) -> bool:
        return any(real == r or real.is_relative_to(r) for r in self.roots)


_CONFINED: ContextVar[Confinement | None] = ContextVar("trainaudit_confined", default=None)


@contextlib.contextmanager
def confined(roots: tuple[Path, ...], *, allow_hardlinks: bool = False) -> Iterator[None]:
    """Within this block (this thread or task), files open only when their real location is below
    ``roots`` (resolved folders)."""
    token = _CONFINED.set(Confinement(roots, allow_hardlinks))
    try:
        yield
    finally:
        _CONFINED.reset(token)


def check_location(real: Path, what: str) -> None:
    """Refuse a resolved path outside the current confinement (for paths handed to other programs,
    such as a repository's git directory, which cannot be checked at open time)."""
    conf = _CONFINED.get()
    if conf is not None and not conf.inside(real):
        raise PathRefused(f"{what}: outside the allowed roots")


def confinement() -> Confinement | None:
    """The confinement in force (an MCP server's roots), or None."""
    return _CONFINED.get()


def may_read(path: Path) -> bool:
    """Whether ``path`` (resolved) is inside the current confinement; always, when there is none.
    For searches that walk up from a folder (the nearest pyproject.toml): they stop at the roots."""
    conf = _CONFINED.get()
    return conf is None or conf.inside(path.resolve())


_KINDS = {stat.S_IFIFO: "a FIFO", stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
          stat.S_IFSOCK: "a socket", stat.S_IFDIR: "a directory"}


def _opened_location(fd: int, fallback: str) -> Path:
    # The kernel's name for the open file (proc(5), /proc/self/fd): a swap after open changes nothing.
    try:
        return Path(os.readlink(f"/proc/self/fd/{fd}"))
    except OSError:
        return Path(os.path.realpath(fallback))


def open_input(path: str | os.PathLike[str], shown: str | None = None, *, special: bool = False) -> BinaryIO:
    """Open a file for reading as data. Non-regular files are refused unless ``special`` (the
    caller asked for them, e.g. ``-`` for stdin); under :func:`confined` the opened file must be
    below a root and, unless allowed, have one link."""
    where = shown if shown is not None else os.fspath(path)
    flags = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0)  # no wait on a FIFO
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise InputError(f"{where}: no such file") from None
    except IsADirectoryError:
        raise InputError(f"{where}: is a directory, expected a file") from None
    except OSError as exc:
        raise InputError(f"{where}: cannot read ({exc.strerror or exc.__class__.__name__})") from None
    try:
        st = os.fstat(fd)
        kind = stat.S_IFMT(st.st_mode)
        if kind != stat.S_IFREG and not special:
            raise InputError(f"{where}: not a regular file ({_KINDS.get(kind, 'special file')})")
        conf = _CONFINED.get()
        if conf is not None:
            if not conf.inside(_opened_location(fd, os.fspath(path))):
                raise PathRefused(f"{where}: leads outside the allowed roots")
            if kind == stat.S_IFREG and st.st_nlink > 1 and not conf.allow_hardlinks:
                raise PathRefused(f"{where}: a hard link (its other names may be outside the allowed roots; "
                                  "start the server with --allow-hardlinks to read it)")
        if hasattr(os, "O_NONBLOCK"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_text(path: str | os.PathLike[str], shown: str | None = None) -> str:
    """A whole UTF-8 text file, or an :class:`InputError` naming ``shown`` (the path as the user
    gave it) when it is missing, unreadable or not a regular file."""
    where = shown if shown is not None else os.fspath(path)
    with open_input(path, where) as f:
        data = f.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{where}: cannot read ({exc.__class__.__name__})") from None


# -- bounded streams ----------------------------------------------------------------------------
class LineCutter:
    """Cuts lines longer than ``limit`` bytes in a byte stream fed block by block (the rest of a cut
    line, up to its newline, is dropped; ``cut_lines`` counts them)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.since_nl = 0  # bytes of the current line already passed on
        self.dropping = False  # inside a cut line: skip up to its newline
        self.cut_lines = 0

    def cut(self, block: bytes) -> bytes:
        """``block`` with over-long lines cut. Linear: each window search covers new bytes only, and
        a block without long lines costs about len(block) / limit searches."""
        limit = self.limit
        out: list[bytes] = []
        pos, n, changed = 0, len(block), False
        while pos < n:
            if self.dropping:
                nl = block.find(b"\n", pos)
                changed = True
                if nl < 0:
                    break
                out.append(b"\n")
                self.dropping, self.since_nl, pos = False, 0, nl + 1
                continue
            room = limit - self.since_nl
            nl = block.rfind(b"\n", pos, pos + room + 1)
            if nl >= 0:
                out.append(block[pos:nl + 1])
                self.since_nl, pos = 0, nl + 1
            elif pos + room >= n:
                out.append(block[pos:])
                self.since_nl += n - pos
                pos = n
            else:
                out.append(block[pos:pos + room])
                self.cut_lines += 1
                self.dropping, changed, pos = True, True, pos + room
        return b"".join(out) if changed else block


class BoundedStream(io.BufferedIOBase):
    """A read-only view of ``inner`` that raises :class:`InputError` once more than ``max_bytes``
    came out of it, and, with ``line_bytes``, cuts every longer line to its first ``line_bytes``
    bytes (the rest up to the newline is skipped; ``cut_lines`` counts them)."""

    def __init__(self, inner: BinaryIO, shown: str, *, max_bytes: int | None = None,
                 line_bytes: int | None = None) -> None:
        super().__init__()
        self._inner = inner
        self._shown = shown
        self._max = max_bytes
        self._total = 0
        self._cutter = LineCutter(line_bytes) if line_bytes is not None else None

    @property
    def cut_lines(self) -> int:
        return self._cutter.cut_lines if self._cutter is not None else 0

    def _cut(self, block: bytes) -> bytes:
        return self._cutter.cut(block) if self._cutter is not None else block

    def readable(self) -> bool:
        return True

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._inner.close()
        super().close()

    def _count(self, data: bytes) -> bytes:
        self._total += len(data)
        if self._max is not None and self._total > self._max:
            raise InputError(f"{self._shown}: decompresses to more than {self._max >> 20} MiB "
                             f"(over {LIMITS.ratio}x its compressed size); refused as an archive bomb")
        return data

    def read(self, size: int | None = -1) -> bytes:
        if size is None or size < 0:
            chunks = []
            while chunk := self.read(1 << 20):
                chunks.append(chunk)
            return b"".join(chunks)
        while True:
            raw = self._inner.read(size)
            if not raw:
                return b""
            out = self._cut(self._count(raw))
            if out:
                return out

    def read1(self, size: int = -1) -> bytes:
        return self.read(size if size and size > 0 else 1 << 16)

    def readline(self, size: int | None = -1) -> bytes:
        cutter = self._cutter
        if cutter is None:
            return self._count(self._inner.readline(size if size is not None else -1))
        parts: list[bytes] = []
        while True:
            # At most the rest of an allowed line; the rest of a cut line in 64 KiB pieces.
            want = 1 << 16 if cutter.dropping else max(1, cutter.limit - cutter.since_nl + 1)
            raw = self._inner.readline(want)
            if not raw:
                return b"".join(parts)
            part = cutter.cut(self._count(raw))
            parts.append(part)
            if part.endswith(b"\n"):
                return b"".join(parts)

    def __iter__(self) -> Iterator[bytes]:  # type: ignore[override]
        """Lines, split in bulk from cut blocks (a readline per line costs 25x more)."""
        carry = b""
        while block := self.read(1 << 18):
            parts = (carry + block).split(b"\n")
            carry = parts.pop()
            for line in parts:
                yield line + b"\n"
        if carry:
            yield carry


# -- bounded parsers ----------------------------------------------------------------------------
def _bounded_int(digits: str) -> int | float:
    # int() refuses more than 4300 digits with ValueError (sys.set_int_max_str_digits); a float
    # reads any length in linear time.
    return int(digits) if len(digits) <= LIMITS.number_digits else float(digits)


def _depth_ok(data: Any, limit: int) -> bool:
    stack: list[tuple[Any, int]] = [(data, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            node = node.values()
        elif not isinstance(node, list):
            continue
        if depth >= limit:
            return False
        stack.extend((child, depth + 1) for child in node if isinstance(child, (dict, list)))
    return True


def load_json(text: str | bytes, where: str, *, invalid: str = "not valid JSON",
              nonfinite: Callable[[float], Any] | None = None) -> Any:
    """``json.loads`` with nesting and number size bounded; errors are one-line input errors.
    ``nonfinite``: what a NaN, Infinity or overflowing number (``1e999``) becomes, for data that
    goes on to a JSON writer that refuses them."""
    hooks: dict[str, Any] = {}
    if nonfinite is not None:
        def as_float(text: str) -> Any:
            v = float(text)
            return v if math.isfinite(v) else nonfinite(v)

        hooks = {"parse_float": as_float, "parse_constant": lambda c: nonfinite(float(c))}
    try:
        data = json.loads(text, parse_int=_bounded_int, **hooks)
    except json.JSONDecodeError as exc:
        raise InputError(f"{where}: {invalid} ({exc.msg} at line {exc.lineno})") from None
    except RecursionError:
        raise InputError(f"{where}: JSON nested too deeply") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise InputError(f"{where}: {invalid} ({str(exc).splitlines()[0][:200]})") from None
    if not _depth_ok(data, LIMITS.json_depth):
        raise InputError(f"{where}: JSON nested more than {LIMITS.json_depth} levels deep")
    return data


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader that refuses documents whose aliases expand to too many nodes (an alias
    is shared by the parser but copied by whoever walks the result: nine nested levels of ten
    aliases are a billion nodes, https://en.wikipedia.org/wiki/Billion_laughs_attack)."""

    def construct_document(self, node: yaml.Node) -> Any:
        sizes: dict[int, int] = {}

        def size(n: yaml.Node, depth: int) -> int:
            if id(n) in sizes:
                return sizes[id(n)]
            if depth > LIMITS.json_depth:
                raise yaml.YAMLError(f"nested more than {LIMITS.json_depth} levels deep")
            total = 1
            if isinstance(n, yaml.SequenceNode):
                total += sum(size(c, depth + 1) for c in n.value)
            elif isinstance(n, yaml.MappingNode):
                total += sum(size(k, depth + 1) + size(v, depth + 1) for k, v in n.value)
            if total > LIMITS.yaml_nodes:
                raise yaml.YAMLError(f"more than {LIMITS.yaml_nodes} nodes once its aliases are expanded")
            sizes[id(n)] = total
            return total

        size(node, 0)
        return super().construct_document(node)


def load_yaml(text: str, where: str, *, invalid: str = "not valid YAML") -> Any:
    """``yaml.safe_load`` with alias expansion and depth bounded; errors are one-line input errors."""
    try:
        return yaml.load(text, Loader=_BoundedLoader)
    except yaml.YAMLError as exc:
        first = str(exc).splitlines()[0] if str(exc) else "syntax error"
        raise InputError(f"{where}: {invalid} ({first})") from None
    except RecursionError:
        raise InputError(f"{where}: YAML nested too deeply") from None

