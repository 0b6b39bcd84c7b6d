"""Turn what the user named (files, directories, archives, gzip files) into readable inputs.

Each input is an :class:`InputFile` with a display path exactly as the user gave it (archive
members as ``archive.zip!member``) and an opener that yields a fresh, decompressed binary stream.
Nothing is extracted to disk; archive members are streamed. ``-`` is standard input where the
command allows it (:func:`reading_stdin`): it is copied once to a private temporary file, because
detection and the readers open an input more than once.

Inputs are untrusted (``trainaudit.safeio``): only regular files are opened, every stream is a
:class:`~trainaudit.safeio.BoundedStream` (decompressed data within a budget set by its compressed
size, so an archive bomb stops early), an archive is opened once for all its members and may hold
at most ``LIMITS.members`` of them.
"""

from __future__ import annotations

import atexit
import contextlib
import gzip
import io
import os
import shutil
import sys
import tarfile
import tempfile
import zipfile
import zlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, cast

from trainaudit.errors import InputError
from trainaudit.safeio import LIMITS, BoundedStream, budget, open_input

GZIP_MAGIC = b"\x1f\x8b"
ZIP_MAGIC = b"PK\x03\x04"
EMPTY_ZIP_MAGIC = b"PK\x05\x06"
# Errors a stream raises when its bytes are corrupt or cut short.
STREAM_ERRORS = (EOFError, zlib.error, gzip.BadGzipFile, zipfile.BadZipFile, tarfile.TarError)

Opener = Callable[[], BinaryIO]


@dataclass(slots=True)
class InputFile:
    """One file-like input. ``name`` is the base name used for sniffing (``.gz`` removed)."""

    display: str
    name: str
    size: int
    opener: Opener
    fs_path: Path | None = None  # set for plain files on disk, so readers may re-open or seek
    compressed: bool = False
    max_bytes: int | None = None  # decompressed budget (compressed inputs only)
    line_bytes: int | None = None  # set by the driver for line readers: longer lines are cut
    cut_lines: int = 0  # lines cut by the streams opened so far (the most any one stream cut)
    skip: str | None = None  # why a file found in a directory is not read (``detect`` notes it)

    def open(self) -> BinaryIO:
        return cast(BinaryIO, _Counted(self, self.opener()))


class _Counted(BoundedStream):
    """The bounded stream of one open, reporting how many lines it cut back to its input."""

    def __init__(self, inp: InputFile, inner: BinaryIO) -> None:
        super().__init__(inner, inp.display, max_bytes=inp.max_bytes, line_bytes=inp.line_bytes)
        self._inp = inp

    def close(self) -> None:
        self._inp.cut_lines = max(self._inp.cut_lines, self.cut_lines)
        super().close()


def _is_tar(head: bytes) -> bool:
    return len(head) >= 262 and head[257:262] == b"ustar"


def _gzip_head(path: Path, n: int = 512) -> bytes:
    try:
        with gzip.open(open_input(path), "rb") as f:
            return f.read(n)
    except STREAM_ERRORS as exc:
        raise InputError(f"{path}: corrupt or truncated gzip file ({exc})") from None


STDIN = "-"  # the input path that names standard input (POSIX utility convention, XBD 12.2 guideline 13)
_STDIN_OK: ContextVar[bool] = ContextVar("trainaudit_stdin", default=False)
_STDIN_COPY: list[Path] = []  # standard input can be read once: its copy, once made


@contextlib.contextmanager
def reading_stdin() -> Iterator[None]:
    """Within this block ``-`` is standard input. Only the commands that read logs turn it on: the
    MCP server's standard input is its protocol, and there ``-`` stays an ordinary (missing) name."""
    token = _STDIN_OK.set(True)
    try:
        yield
    finally:
        _STDIN_OK.reset(token)


def _stdin_copy() -> Path:
    """Standard input copied to a file in a private temporary folder (removed at exit), at most
    ``LIMITS.stdin_bytes``."""
    if _STDIN_COPY:
        return _STDIN_COPY[0]
    stream = getattr(sys.stdin, "buffer", None)
    if stream is None:
        raise InputError(f"{STDIN}: no standard input to read")
    if stream.isatty():
        raise InputError(f"{STDIN}: standard input is a terminal; pipe a log in (trainaudit parse - < train.log)")
    folder = Path(tempfile.mkdtemp(prefix="trainaudit-stdin-"))  # mode 0700
    atexit.register(shutil.rmtree, folder, True)
    path = folder / "stdin"
    total = 0
    with open(path, "wb") as f:
        while block := stream.read(1 << 20):
            total += len(block)
            if total > LIMITS.stdin_bytes:
                raise InputError(f"{STDIN}: standard input holds more than {LIMITS.stdin_bytes >> 30} GiB; "
                                 "give the file's path instead")
            f.write(block)
    _STDIN_COPY.append(path)
    return path


def expand_inputs(paths: list[str]) -> list[InputFile]:
    """Expand user-given paths. A missing path or an unreadable archive is an :class:`InputError`.
    ``-`` is standard input inside :func:`reading_stdin` (a file named ``-`` is then ``./-``)."""
    out: list[InputFile] = []
    for given in paths:
        if given == STDIN and _STDIN_OK.get():
            out.extend(_expand_file(_stdin_copy(), STDIN, in_directory=False))
            continue
        p = Path(given)
        if not p.exists():
            raise InputError(f"{given}: no such file or directory")
        if p.is_dir():
            files = sorted(f for f in p.rglob("*") if f.is_file() and not _hidden(f.relative_to(p)))
            if not files:
                raise InputError(f"{given}: directory contains no files (hidden ones are skipped): give the folder "
                                 "the run wrote its logs, metrics or TensorBoard events to")
            for f in files:
                rel = f.relative_to(p).as_posix()
                out.extend(_expand_file(f, f"{given.rstrip('/')}/{rel}", in_directory=True))
        else:
            out.extend(_expand_file(p, given, in_directory=False))
    return out


def _hidden(rel: Path) -> bool:
    # Skip VCS and tool caches inside run folders (.git, .ipynb_checkpoints, ...).
    return any(part.startswith(".") for part in rel.parts)


def _expand_file(path: Path, display: str, *, in_directory: bool) -> Iterator[InputFile]:
    try:
        with open_input(path, display) as f:
            head = f.read(512)
            size = os.fstat(f.fileno()).st_size
    except OSError as exc:
        raise InputError(f"{display}: cannot read ({exc.strerror or exc})") from None
    lower = path.name.lower()
    if head.startswith((ZIP_MAGIC, EMPTY_ZIP_MAGIC)) or lower.endswith(".zip"):
        office = _office_document(path, display)
        if office is not None:
            what = f"an office document ({office}), not a log or an archive of logs"
            if not in_directory:
                raise InputError(f"{display}: {what}; give the training logs themselves")
            yield InputFile(display, path.name, size, lambda: open_input(path, display), fs_path=path, skip=what)
            return
        yield from _zip_members(path, display)
        return
    if head.startswith(GZIP_MAGIC):
        inner = _gzip_head(path)
        if _is_tar(inner) or lower.endswith((".tar.gz", ".tgz")):
            yield from _tar_members(path, display)
            return
        name = path.name[:-3] if lower.endswith(".gz") else path.name
        yield InputFile(display, name, size, lambda: cast(BinaryIO, gzip.open(open_input(path, display), "rb")),
                        fs_path=path, compressed=True, max_bytes=budget(size))
        return
    if _is_tar(head) or lower.endswith(".tar"):
        yield from _tar_members(path, display)
        return
    yield InputFile(display, path.name, size, lambda: open_input(path, display), fs_path=path)


# Office Open XML (ECMA-376 Part 2, Open Packaging Conventions: every package has a
# "[Content_Types].xml" part) and OpenDocument (OASIS ODF 1.2 Part 3, 3.3: a "mimetype" member
# naming the document's media type) files are zip packages of one document's XML.
_OOXML_KINDS = {"word/": "Word document", "xl/": "Excel workbook", "ppt/": "PowerPoint presentation"}


def _office_document(path: Path, display: str) -> str | None:
    """What office document a zip file is (read from its member names), or None for a plain zip."""
    try:
        with zipfile.ZipFile(open_input(path, display)) as zf:
            names = zf.namelist()
            if "mimetype" in names:
                info = zf.getinfo("mimetype")
                mime = zf.read(info).decode("ascii", "replace").strip() if info.file_size <= 200 else ""
                if mime.startswith("application/vnd.oasis.opendocument."):
                    return f"OpenDocument {mime.rsplit('.', 1)[-1]}"
    except (zipfile.BadZipFile, OSError, EOFError, zlib.error, NotImplementedError):
        return None  # not readable as a zip: the archive reader says what is wrong with it
    if "[Content_Types].xml" not in names:
        return None
    kind = next((k for prefix, k in _OOXML_KINDS.items() if any(n.startswith(prefix) for n in names)), None)
    return kind or "Office Open XML package"


# Files of a project or run folder that are its context, not its logs: source code, documents
# and configuration. Read as logs they give numbers that are no metrics ("lr jumps 49.5x" from two
# lines of train.py, table columns from a README).
_CONTEXT_SUFFIXES = {
    "source code": (".py", ".pyi", ".pyx", ".ipynb", ".sh", ".bash", ".zsh", ".fish", ".ps1", ".bat", ".c", ".cc",
                    ".cpp", ".cxx", ".h", ".hh", ".hpp", ".cu", ".cuh", ".js", ".mjs", ".ts", ".java", ".kt",
                    ".scala", ".go", ".rs", ".rb", ".pl", ".lua", ".r", ".jl", ".swift", ".m", ".cmake", ".mk"),
    "documentation": (".md", ".markdown", ".rst", ".adoc", ".tex", ".html", ".htm", ".org"),
    "configuration": (".yaml", ".yml", ".toml", ".ini", ".cfg", ".conf", ".json", ".xml", ".properties"),
}
_CONTEXT_NAMES = {
    "source code": ("makefile", "dockerfile", "cmakelists.txt", "setup.py", "requirements.txt"),
    "documentation": ("readme", "license", "licence", "copying", "notice", "authors", "changelog", "citation.cff"),
}


def context_file(name: str) -> str | None:
    """What a file is when its name says it is a project's code, documents or configuration (None:
    it may be a log). A format's own reader may still claim such a file (a W&B ``config.yaml``)."""
    lower = name.lower()
    for what, names in _CONTEXT_NAMES.items():
        if lower in names or lower.rsplit(".", 1)[0] in names:
            return what
    if lower.startswith("requirements") and lower.endswith(".txt"):
        return "source code"
    return next((what for what, suffixes in _CONTEXT_SUFFIXES.items() if lower.endswith(suffixes)), None)


def _zip_members(path: Path, display: str) -> Iterator[InputFile]:
    try:
        zf = zipfile.ZipFile(open_input(path, display))  # one handle shared by all members
        infos = [i for i in zf.infolist() if not i.is_dir()]
    except (zipfile.BadZipFile, OSError, EOFError, zlib.error) as exc:
        raise InputError(f"{display}: corrupt or truncated zip archive ({exc})") from None
    if not infos:
        raise InputError(f"{display}: zip archive is empty")
    _check_count(display, len(infos))
    total = sum(i.file_size for i in infos)
    if total > budget(path.stat().st_size):
        raise InputError(f"{display}: members add up to {total >> 20} MiB, over {LIMITS.ratio}x the archive's "
                         "size; refused as an archive bomb")
    # The CRC check reads every member: only when the declared sizes (which bound what reading a
    # member yields, zipfile.ZipExtFile) are within the budget checked above.
    try:
        bad = zf.testzip()
    except (zipfile.BadZipFile, OSError, EOFError, zlib.error, NotImplementedError) as exc:
        raise InputError(f"{display}: corrupt or truncated zip archive ({exc})") from None
    if bad is not None:
        raise InputError(f"{display}: corrupt zip archive (bad CRC in member {bad})")
    for info in infos:
        if _hidden(Path(info.filename)):
            continue
        yield from _member(display, info.filename, info.file_size, _zip_opener(zf, info))


def _check_count(display: str, n: int) -> None:
    if n > LIMITS.members:
        raise InputError(f"{display}: more than {LIMITS.members} members ({n}); unpack the part to read")


def _zip_opener(zf: zipfile.ZipFile, info: zipfile.ZipInfo) -> Opener:
    def opener() -> BinaryIO:
        return cast(BinaryIO, zf.open(info))

    return opener


def _tar_members(path: Path, display: str) -> Iterator[InputFile]:
    """Members of a (compressed) tar, read in ONE pass: a compressed tar has no index, so opening a
    member later means decompressing everything before it again. Small members are kept in memory
    from that pass; large ones (few, by the size budget) are read again when opened."""
    size = path.stat().st_size
    limit = budget(size)
    found: dict[str, tuple[int, bytes | None]] = {}
    seen = 0
    try:
        with tarfile.open(fileobj=open_input(path, display), mode="r:*") as tf:
            total = 0
            for m in tf:
                seen += 1
                _check_count(display, seen)
                if not m.isfile() or _hidden(Path(m.name)):
                    continue
                total += m.size
                if total > limit:
                    raise InputError(f"{display}: members add up to more than {limit >> 20} MiB, over "
                                     f"{LIMITS.ratio}x the archive's size; refused as an archive bomb")
                data = None
                if m.size <= _KEEP_BYTES:
                    f = tf.extractfile(m)
                    data = f.read() if f is not None else b""
                found[m.name] = (m.size, data)  # a later member of the same name wins, as on extraction
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        raise InputError(f"{display}: corrupt or truncated tar archive ({exc})") from None
    if not found:
        raise InputError(f"{display}: tar archive is empty")
    for name, (msize, data) in found.items():
        opener = _bytes_opener(data) if data is not None else _tar_opener(path, display, name)
        yield from _member(display, name, msize, opener)


_KEEP_BYTES = 4 << 20


def _bytes_opener(data: bytes) -> Opener:
    def opener() -> BinaryIO:
        return io.BytesIO(data)

    return opener


def _tar_opener(path: Path, display: str, member: str) -> Opener:
    def opener() -> BinaryIO:
        tf = tarfile.open(fileobj=open_input(path, display), mode="r:*")
        f = None
        for m in tf:  # the last regular member of that name, as in the listing
            if m.name == member and m.isfile():
                f = tf.extractfile(m)
        if f is None:
            raise InputError(f"{path}!{member}: not a regular file")
        return cast(BinaryIO, f)

    return opener


def _member(archive_display: str, member: str, size: int, opener: Opener) -> Iterator[InputFile]:
    """An archive member; gzip members are decompressed transparently (nested archives are not)."""
    display = f"{archive_display}!{member}"
    name = os.path.basename(member)
    if name.lower().endswith(".gz") and not name.lower().endswith(".tar.gz"):
        yield InputFile(display, name[:-3], size, lambda: cast(BinaryIO, gzip.open(opener(), "rb")), compressed=True,
                        max_bytes=budget(size))
    else:
        yield InputFile(display, name, size, opener)


def read_head(inp: InputFile, n: int = 65536) -> bytes:
    try:
        with inp.open() as f:
            return f.read(n)
    except STREAM_ERRORS as exc:
        raise InputError(f"{inp.display}: corrupt or truncated compressed data ({exc})") from None
    except OSError as exc:
        raise InputError(f"{inp.display}: cannot read ({exc})") from None


def read_lines(inp: InputFile, line_numbers: set[int]) -> dict[int, str]:
    """Return the raw text of the given 1-based physical lines (for quoting evidence)."""
    out: dict[int, str] = {}
    if not line_numbers:
        return out
    wanted = sorted(n for n in line_numbers if n >= 1)
    inp.line_bytes = LIMITS.line_bytes
    # the lines the stream's own iteration gives (cut long lines included), but only the blocks
    # that hold a wanted line are split: the newlines of the others are counted in C
    first = 1  # number of the first line in ``data``
    k = 0  # wanted[k]: the next line to find
    carry = b""
    with inp.open() as f:
        while k < len(wanted):
            block = f.read(1 << 18)
            data = carry + block
            if not block:  # the last line, without a newline
                if data and wanted[k] == first:
                    out[first] = data.decode("utf-8", "replace").rstrip("\r\n")
                break
            n = data.count(b"\n")
            if wanted[k] < first + n:
                lines = data.split(b"\n")
                while k < len(wanted) and wanted[k] < first + n:
                    out[wanted[k]] = lines[wanted[k] - first].decode("utf-8", "replace").rstrip("\r\n")
                    k += 1
            carry = data[data.rfind(b"\n") + 1:] if n else data
            first += n
    return out
