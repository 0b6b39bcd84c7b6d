"""Stage the artifacts of a failing and a passing run and sort them by what they are.

Every input (path, directory, archive member, downloaded file) becomes an :class:`Item` with a
local file and the display name the user knows it by (``archive.zip!member``, the URL without
credentials, ...). Roles, decided by content:

- ``values``: a Megatron golden/actual-values JSON (in the artifacts it is the run's actual values);
- ``ci_log``: a text log that carries the golden-value gate's own output (it is also a run log:
  CI job logs hold the training output too);
- ``run``: anything else a reader may take (training logs, TensorBoard files, metric files).

Run files are linked (or, for archive members, extracted) into one staging folder per side, so
the diagnosis reads them as one run; :meth:`Staging.display` maps any local spelling back.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from trainaudit.compare.cilog import looks_like_ci_log
from trainaudit.ingest.golden import looks_like_golden
from trainaudit.ingest.base import Sample
from trainaudit.ingest.sources import InputFile, expand_inputs, read_head
from trainaudit.answer.paths import display_path

CI_SCAN_BYTES = 256 * 1024 * 1024  # gate lines sit at the end of long job logs; stop somewhere
# The gate's lines as compare/cilog.py reads them (metric names bounded there too, for linear time).
_CI_MARKERS = re.compile(rb"comparison of .{1,200}?: FAILED|test for metric .{1,200}?: PASSED|"
                         rb"The following metrics failed|not found in Tensorboard logs!|"
                         rb"Running pytest checks against golden values|"
                         rb"Training failed\. Aborting\.")
_UNSAFE_RUN = re.compile(r"[^A-Za-z0-9._+-]+")  # characters not kept in a file name


@dataclass(slots=True)
class Item:
    local: Path
    display: str
    role: str  # values | ci_log | run
    size: int = 0


@dataclass
class Side:
    name: str  # failing | passing
    items: list[Item] = field(default_factory=list)
    run_dir: Path | None = None

    def of(self, role: str) -> list[Item]:
        return [i for i in self.items if i.role == role]

    @property
    def displays(self) -> list[str]:
        return [i.display for i in self.items]


class Staging:
    def __init__(self, root: Path) -> None:
        self.root = root
        self._n = 0
        self._map: dict[str, str] = {}  # local spelling -> display name

    def remember(self, local: Path, display: str) -> None:
        """Show ``local`` (a staged or derived file) as ``display`` in every report text."""
        s = str(local)
        self._map[s] = display
        self._map[display_path(s)] = display

    def display(self, text: str) -> str:
        """``text`` with every staged local path replaced by its display name (longest first)."""
        if text in self._map:
            return self._map[text]
        for k in sorted(self._map, key=len, reverse=True):
            if k in text:
                text = text.replace(k, self._map[k])
        return text

    def stage(self, side_name: str, paths: list[str], names: dict[str, str] | None = None) -> Side:
        names = names or {}
        run_dir = self.root / f"{side_name}-run"
        side = Side(side_name, run_dir=run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        for given in paths:
            # an absolute path under the working directory is shown relative, as everywhere else
            shown = names.get(given) or display_path(given)
            for inp in expand_inputs([given]):
                display = shown + inp.display[len(given):] if inp.display.startswith(given) else inp.display
                side.items.append(self._stage_one(side, inp, display))
        return side

    def _stage_one(self, side: Side, inp: InputFile, display: str) -> Item:
        self._n += 1
        head = read_head(inp)
        sample = Sample.from_head(inp.name, head)
        role = "run"
        if sample.is_text and looks_like_golden(head.decode("utf-8", "replace")):
            role = "values"
        elif sample.is_text and _has_gate_output(inp, head):
            role = "ci_log"
        safe = _UNSAFE_RUN.sub("_", inp.name)[:100] or "file"
        assert side.run_dir is not None
        target_dir = side.run_dir if role != "values" else self.root / f"{side.name}-values"
        target_dir.mkdir(parents=True, exist_ok=True)
        target = target_dir / f"{self._n:03d}_{safe}"
        if inp.fs_path is not None and not inp.compressed:
            try:
                os.symlink(os.path.abspath(inp.fs_path), target)
            except OSError:  # no symlinks on this filesystem: copy
                shutil.copyfile(inp.fs_path, target)
        else:
            with inp.open() as src, open(target, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
        self.remember(target, display)
        return Item(target, display, role, inp.size)


def _has_gate_output(inp: InputFile, head: bytes) -> bool:
    if looks_like_ci_log(head.decode("utf-8", "replace")):
        return True
    if len(head) < 65536:
        return False  # the head was the whole file
    seen = 0
    tail = b""
    with inp.open() as f:
        while seen < CI_SCAN_BYTES:
            chunk = f.read(1 << 20)
            if not chunk:
                return False
            seen += len(chunk)
            if _CI_MARKERS.search(tail + chunk):
                return True
            tail = chunk[-200:]
    return False
