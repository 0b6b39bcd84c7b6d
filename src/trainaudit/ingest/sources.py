"""Turn what the user named (files, directories, archives, gzip files) into readable inputs.

Each input is an :class:`InputFile` with a display path exactly as the user gave it (archive
members as ``archive.zip!member``) and an opener that yields a fresh, decompressed binary stream.
Nothing is extracted to disk; archive members are streamed.
"""

from __future__ import annotations

import gzip
import io
import os
import tarfile
import zipfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from trainaudit.errors import InputError

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

    def open(self) -> BinaryIO:
        return self.opener()


def _is_tar(head: bytes) -> bool:
    return len(head) >= 262 and head[257:262] == b"ustar"


def _gzip_head(path: Path, n: int = 512) -> bytes:
    try:
        with gzip.open(path, "rb") as f:
            return f.read(n)
    except STREAM_ERRORS as exc:
        raise InputError(f"{path}: corrupt or truncated gzip file ({exc})") from None


def expand_inputs(paths: list[str]) -> list[InputFile]:
    """Expand user-given paths. A missing path or an unreadable archive is an :class:`InputError`."""
    out: list[InputFile] = []
    for given in paths:
        p = Path(given)
        if not p.exists():
            raise InputError(f"{given}: no such file or directory")
        if p.is_dir():
            files = sorted(f for f in p.rglob("*") if f.is_file() and not _hidden(f.relative_to(p)))
            if not files:
                raise InputError(f"{given}: directory contains no files")
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
        with open(path, "rb") as f:
            head = f.read(512)
    except OSError as exc:
        raise InputError(f"{display}: cannot read ({exc.strerror or exc})") from None
    size = path.stat().st_size
    lower = path.name.lower()
    if head.startswith(ZIP_MAGIC) or head.startswith(EMPTY_ZIP_MAGIC) or lower.endswith(".zip"):
        yield from _zip_members(path, display)
        return
    if head.startswith(GZIP_MAGIC):
        inner = _gzip_head(path)
        if _is_tar(inner) or lower.endswith((".tar.gz", ".tgz")):
            yield from _tar_members(path, display)
            return
        name = path.name[:-3] if lower.endswith(".gz") else path.name
        yield InputFile(display, name, size, lambda: gzip.open(path, "rb"), fs_path=path, compressed=True)
        return
    if _is_tar(head) or lower.endswith(".tar"):
        yield from _tar_members(path, display)
        return
    yield InputFile(display, path.name, size, lambda: open(path, "rb"), fs_path=path)


def _zip_members(path: Path, display: str) -> Iterator[InputFile]:
    try:
        zf = zipfile.ZipFile(path)
        infos = [i for i in zf.infolist() if not i.is_dir()]
        bad = zf.testzip()
    except (zipfile.BadZipFile, OSError, EOFError, zlib.error) as exc:
        raise InputError(f"{display}: corrupt or truncated zip archive ({exc})") from None
    if bad is not None:
        raise InputError(f"{display}: corrupt zip archive (bad CRC in member {bad})")
    if not infos:
        raise InputError(f"{display}: zip archive is empty")
    for info in infos:
        if _hidden(Path(info.filename)):
            continue
        yield from _member(display, info.filename, info.file_size, _zip_opener(path, info.filename))


def _zip_opener(path: Path, member: str) -> Opener:
    def opener() -> BinaryIO:
        zf = zipfile.ZipFile(path)
        return zf.open(member)  # type: ignore[return-value]

    return opener


def _tar_members(path: Path, display: str) -> Iterator[InputFile]:
    try:
        with tarfile.open(path, "r:*") as tf:
            members = [m for m in tf.getmembers() if m.isfile()]
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        raise InputError(f"{display}: corrupt or truncated tar archive ({exc})") from None
    if not members:
        raise InputError(f"{display}: tar archive is empty")
    for m in members:
        if _hidden(Path(m.name)):
            continue
        yield from _member(display, m.name, m.size, _tar_opener(path, m.name))


def _tar_opener(path: Path, member: str) -> Opener:
    def opener() -> BinaryIO:
        tf = tarfile.open(path, "r:*")
        f = tf.extractfile(member)
        if f is None:
            raise InputError(f"{path}!{member}: not a regular file")
        return f

    return opener


def _member(archive_display: str, member: str, size: int, opener: Opener) -> Iterator[InputFile]:
    """An archive member; gzip members are decompressed transparently (nested archives are not)."""
    display = f"{archive_display}!{member}"
    name = os.path.basename(member)
    if name.lower().endswith(".gz") and not name.lower().endswith(".tar.gz"):
        yield InputFile(display, name[:-3], size, lambda: gzip.open(opener(), "rb"), compressed=True)  # type: ignore[arg-type]
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
    last = max(line_numbers)
    with inp.open() as f:
        for no, raw in enumerate(io.BufferedReader(f) if not isinstance(f, io.BufferedIOBase) else f, 1):  # type: ignore[arg-type]
            if no in line_numbers:
                out[no] = raw.decode("utf-8", "replace").rstrip("\r\n")
            if no >= last:
                break
    return out
