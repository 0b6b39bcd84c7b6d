"""Writing output files without following links.

An output folder often comes from an unpacked CI artifact, where any name can be a symbolic link
planted to redirect a write (CWE-59, https://cwe.mitre.org/data/definitions/59.html): a
``report.html`` that points at a user's ``~/.bashrc``, a ``plots/`` that points at another folder
whose PNGs would be cleared. So every file the program writes goes through an ``OutDir``:

- the folder is opened once, as a descriptor, with ``O_NOFOLLOW``: a folder that is a link is
  refused, and a link swapped in after the folder was opened cannot redirect anything, since every
  later name is resolved against the descriptor (``openat``/``renameat``, see open(2));
- a file is created under a fresh name with ``O_CREAT | O_EXCL | O_NOFOLLOW`` and renamed over its
  final name: a hard link elsewhere keeps its content, and an existing link or non-regular file at
  that name is refused rather than replaced, so a report never overwrites what it did not write;
- files are removed only when they are regular files (an old report's plots), never through a
  link.

Only the folder's own parent path is the user's, and is followed as given.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import IO, Literal, Self

from trainaudit.errors import InputError

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
_NEW_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def _check_name(name: str) -> None:
    if not name or name in (".", "..") or "/" in name or "\0" in name:
        raise ValueError(f"not a plain file name: {name!r}")


class OutDir:
    """A folder this program writes into, held open by a descriptor that did not follow a link."""

    def __init__(self, fd: int, shown: str) -> None:
        self._fd = fd
        self.shown = shown  # the folder as the user gave it, for messages and returned paths

    # -- opening -------------------------------------------------------------------------------
    @classmethod
    def open(cls, path: Path, *, create: bool = True) -> OutDir:
        """``path`` as a folder to write into; created (with its parents) when missing."""
        parent = path.parent
        if create:
            try:
                parent.mkdir(parents=True, exist_ok=True)
            except FileExistsError:
                raise InputError(f"{parent}: exists and is not a folder") from None
            except OSError as exc:
                raise InputError(f"{parent}: cannot create the output folder ({exc.strerror})") from None
        try:
            pfd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
        except FileNotFoundError:
            raise InputError(f"{parent}: no such folder") from None
        except OSError as exc:
            raise InputError(f"{parent}: cannot open the output folder ({exc.strerror})") from None
        try:
            return cls(_open_sub(pfd, path.name or ".", str(path), create), str(path))
        finally:
            os.close(pfd)

    def sub(self, name: str, *, create: bool = True) -> OutDir:
        """A folder inside this one (``plots``), opened relative to this one's descriptor."""
        _check_name(name)
        return OutDir(_open_sub(self._fd, name, self.display(name), create), self.display(name))

    # -- what is there -------------------------------------------------------------------------
    def display(self, name: str) -> str:
        return str(Path(self.shown) / name)

    def path(self, name: str) -> Path:
        return Path(self.shown) / name

    def names(self) -> list[str]:
        return sorted(os.listdir(self._fd))

    def kind(self, name: str) -> Literal["missing", "file", "dir", "other"]:
        """What ``name`` is, without following a link (a link is ``other``)."""
        try:
            st = os.stat(name, dir_fd=self._fd, follow_symlinks=False)
        except FileNotFoundError:
            return "missing"
        if stat.S_ISREG(st.st_mode):
            return "file"
        if stat.S_ISDIR(st.st_mode):
            return "dir"
        return "other"

    def real_path(self) -> Path:
        """Where the opened folder really is (for a confinement check after opening): the
        kernel's name of the descriptor, which no later swap of a link can change."""
        link = f"/proc/self/fd/{self._fd}"
        if os.path.exists(link):
            return Path(os.readlink(link))
        return Path(os.path.realpath(self.shown))  # no /proc (macOS): the best available

    # -- writing -------------------------------------------------------------------------------
    @contextlib.contextmanager
    def create(self, name: str) -> Iterator[IO[bytes]]:
        """A new file to stream into; it takes its name only when the block ends without error."""
        _check_name(name)
        self._refuse_foreign(name)
        tmp = f".{name}.{secrets.token_hex(6)}.tmp"
        fd = os.open(tmp, _NEW_FLAGS, 0o644, dir_fd=self._fd)
        try:
            with os.fdopen(fd, "wb") as fh:
                yield fh
            os.replace(tmp, name, src_dir_fd=self._fd, dst_dir_fd=self._fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=self._fd)
            raise

    def write_bytes(self, name: str, data: bytes) -> Path:
        with self.create(name) as fh:
            fh.write(data)
        return self.path(name)

    def write_text(self, name: str, text: str) -> Path:
        return self.write_bytes(name, text.encode("utf-8"))

    def remove(self, name: str) -> bool:
        """Remove ``name`` when it is a regular file; True when it was there. A link or folder at
        that name is refused (a report only replaces what a report wrote)."""
        _check_name(name)
        kind = self.kind(name)
        if kind == "missing":
            return False
        self._refuse_foreign(name)
        os.unlink(name, dir_fd=self._fd)
        return True

    def _refuse_foreign(self, name: str) -> None:
        if self.kind(name) not in ("missing", "file"):
            raise InputError(f"{self.display(name)}: a link or folder is in the way; trainaudit writes only "
                             "regular files and never through a link (remove it or choose another folder)")

    # -- lifetime ------------------------------------------------------------------------------
    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> Self:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()


def _open_sub(pfd: int, name: str, shown: str, create: bool) -> int:
    if create and name != ".":
        try:
            os.mkdir(name, 0o755, dir_fd=pfd)
        except FileExistsError:
            pass
        except OSError as exc:
            raise InputError(f"{shown}: cannot create the output folder ({exc.strerror})") from None
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=pfd)
    except FileNotFoundError:
        raise InputError(f"{shown}: no such folder") from None
    except OSError as exc:
        # With O_NOFOLLOW | O_DIRECTORY a link answers ENOTDIR (or ELOOP): tell it apart by lstat.
        if stat.S_ISLNK(os.stat(name, dir_fd=pfd, follow_symlinks=False).st_mode):
            raise InputError(f"{shown}: is a symbolic link; trainaudit does not write through links "
                             "(give the folder itself)") from None
        if isinstance(exc, NotADirectoryError):
            raise InputError(f"{shown}: exists and is not a folder") from None
        raise InputError(f"{shown}: cannot open the output folder ({exc.strerror})") from None


def write_file(path: Path, data: bytes) -> Path:
    """One file at ``path`` (its folder created when missing), written as ``OutDir`` writes."""
    with OutDir.open(path.parent) as folder:
        folder.write_bytes(path.name, data)
    return path
