"""Run-corpus families trained through the real HF Trainer and Lightning Trainer."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def families() -> list[Any]:
    return []


def render_family(fam: Any, out: Path) -> list[dict[str, Any]]:
    raise NotImplementedError
