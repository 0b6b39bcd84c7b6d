"""Generated real training runs for tests, cached per session.

Any test can ask for it (``tests/conftest.py`` registers it)::

    def test_nan_rule(synth_runs):
        case = synth_runs.get("nan-batch")       # trains it once per session, on first use
        case.dir                                  # Path of the run's files
        case.label["category"], case.label["first_bad_step"], case.label["first_bad_step_window"]
        case.file("metrics.jsonl")                # Path of one produced file

Cases are generated lazily and one by one, so a test that needs two cases pays for two.
``synth_runs.names`` lists every case; ``synth_runs.healthy`` the healthy ones.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest


def generate_cases(tmp_dir: Path, names: Sequence[str] | None = None) -> dict[str, Any]:
    """Train ``names`` (all cases if None) into ``tmp_dir``; returns the manifest."""
    from synth import generate

    return generate(tmp_dir, names)


@dataclass(frozen=True)
class SynthCase:
    name: str
    dir: Path
    label: dict[str, Any]

    def file(self, rel: str) -> Path:
        return self.dir / rel

    def files(self, fmt: str) -> list[Path]:
        return [self.dir.parent / f["path"] for f in self.label["files"] if f["format"] == fmt]


@dataclass
class SynthRuns:
    root: Path
    _cache: dict[str, SynthCase] = field(default_factory=dict)

    @property
    def names(self) -> list[str]:
        from synth import catalogue

        return list(catalogue())

    @property
    def healthy(self) -> list[str]:
        from synth import catalogue

        return [c.name for c in catalogue().values() if c.healthy]

    def get(self, name: str) -> SynthCase:
        if name not in self._cache:
            out = self.root / name  # one folder per case, so each manifest has one entry
            # The test workers of one session share the runs: the first to ask trains the case while
            # the others wait on its lock, then read its manifest.
            with open(self.root / f"{name}.lock", "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                done = out / "manifest.json"
                manifest = json.loads(done.read_text(encoding="utf-8")) if done.is_file() else \
                    generate_cases(out, [name])
            (label,) = manifest["cases"]
            self._cache[name] = SynthCase(name, out / name, label)
        return self._cache[name]


@pytest.fixture(scope="session")
def synth_runs(tmp_path_factory: pytest.TempPathFactory) -> SynthRuns:
    base = tmp_path_factory.getbasetemp()
    # under pytest-xdist each worker has its own base below the session's: share the session's
    root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "synth-shared"
    root.mkdir(exist_ok=True)
    return SynthRuns(root)
