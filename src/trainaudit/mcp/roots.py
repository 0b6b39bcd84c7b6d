"""The allow-list of folders an MCP client may make trainaudit read or write.

A path is accepted only when its real location (every symlink resolved) is inside one of the
roots. A relative path is taken relative to the first root. For a folder, every symlink inside it
is checked too, because the ingest layer reads files through links: one link that leads outside
refuses the whole folder.

These checks give early, clear errors; they are not what keeps reads inside the roots, because a
file can be swapped for a symlink between a check and the open. That is :meth:`Roots.confined`:
every file the tools open is checked where it really is once open (``safeio.open_input``), and a
repository's git directory before git is started.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from trainaudit.errors import InputError, PathRefused
from trainaudit.outdir import OutDir
from trainaudit.safeio import confined

__all__ = ["PathRefused", "Roots"]


@dataclass(frozen=True)
class Roots:
    roots: tuple[Path, ...]
    allow_hardlinks: bool = False

    @classmethod
    def of(cls, paths: list[str] | tuple[str, ...], *, allow_hardlinks: bool = False) -> Roots:
        out: list[Path] = []
        for p in paths or (os.getcwd(),):
            real = Path(p).expanduser().resolve()
            if not real.is_dir():
                raise InputError(f"--root {p}: not a directory")
            out.append(real)
        return cls(tuple(out), allow_hardlinks)

    @contextmanager
    def confined(self) -> Iterator[None]:
        """Files opened within this block must really be below the roots."""
        with confined(self.roots, allow_hardlinks=self.allow_hardlinks):
            yield

    @property
    def primary(self) -> Path:
        return self.roots[0]

    def _inside(self, real: Path) -> bool:
        return any(real == r or real.is_relative_to(r) for r in self.roots)

    def check(self, given: str, *, what: str = "path", must_exist: bool = True) -> Path:
        """The lexical absolute path for ``given`` (symlinks kept, so reports show what was given)
        after checking that it and everything it links to stays inside the roots."""
        if not given or "\x00" in given:
            raise PathRefused(f"{what} {given!r}: empty or invalid path")
        p = Path(given).expanduser()
        lexical = Path(os.path.normpath(p if p.is_absolute() else self.primary / p))
        if not self._inside(lexical) and self._inside(lexical.resolve()):
            lexical = lexical.resolve()  # e.g. an absolute path through a symlinked prefix of the root itself
        if not self._inside(lexical):
            raise PathRefused(f"{what} {given}: outside the allowed roots (start the server with --root to allow it)")
        if must_exist and not lexical.exists():
            if lexical.is_symlink():
                raise PathRefused(f"{what} {given}: dangling symlink")
            raise InputError(f"{what} {given}: no such file or directory")
        # For a path that does not exist yet (an output folder), check its nearest existing parent.
        probe = lexical
        while not probe.exists() and probe != probe.parent:
            probe = probe.parent
        if not self._inside(probe.resolve()):
            raise PathRefused(f"{what} {given}: a symlink leads outside the allowed roots")
        if lexical.is_dir():
            self._check_tree(lexical, given, what)
        return lexical

    def open_out(self, given: str) -> OutDir:
        """The output folder ``given``, opened (created when missing) and then checked where the
        opened folder really is: a link swapped in after :meth:`check` cannot lead a write outside
        the roots, since every file is then written relative to the opened folder."""
        lexical = self.check(given, what="out", must_exist=False)
        folder = OutDir.open(lexical)
        if not self._inside(folder.real_path()):
            folder.close()
            raise PathRefused(f"out {given}: a symlink leads outside the allowed roots")
        return folder

    def _check_tree(self, top: Path, given: str, what: str) -> None:
        for dirpath, dirnames, filenames in os.walk(top, followlinks=False):
            for name in (*dirnames, *filenames):
                entry = Path(dirpath, name)
                if entry.is_symlink() and not self._inside(entry.resolve()):
                    rel = entry.relative_to(top).as_posix()
                    raise PathRefused(f"{what} {given}: {rel} is a symlink that leads outside the allowed roots")

    def arg(self, lexical: Path) -> str:
        """The path to hand to the engine: relative to the current directory when below it (the
        server runs in the first root, so reports show root-relative paths), else absolute."""
        cwd = Path.cwd()
        try:
            return lexical.relative_to(cwd).as_posix() or "."
        except ValueError:
            return str(lexical)
