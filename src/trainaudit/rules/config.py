"""Rule configuration from ``pyproject.toml`` ``[tool.trainaudit]`` (Ruff-style).

    [tool.trainaudit]
    select = ["TA1", "TA2"]          # id prefixes or full ids; default: all
    ignore = ["TA405"]
    [tool.trainaudit.rules.TA102]
    z = 6.0

The file is found by walking up from the current directory; ``--config FILE`` overrides (a
pyproject.toml or a trainaudit.toml with the same keys at top level).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainaudit.errors import InputError
from trainaudit.rules.registry import rule_class
from trainaudit.safeio import may_read, read_text


@dataclass
class Config:
    select: list[str] = field(default_factory=list)
    ignore: list[str] = field(default_factory=list)
    rules: dict[str, dict[str, Any]] = field(default_factory=dict)
    path: str | None = None

    def enabled(self, rule_id: str) -> bool:
        if self.select and not any(rule_id.startswith(p.upper()) for p in self.select):
            return False
        return not any(rule_id.startswith(p.upper()) for p in self.ignore)


def find_pyproject(start: Path) -> Path | None:
    """The nearest pyproject.toml at or above ``start``, not above the allowed roots when confined
    (an MCP server must not take rules from a file outside its roots)."""
    for d in [start, *start.parents]:
        if not may_read(d):
            return None
        p = d / "pyproject.toml"
        if p.is_file():
            return p
    return None


def load_config(path: Path | None = None, *, start: Path | None = None) -> Config:
    """Explicit ``path`` (must exist and parse), else the nearest pyproject.toml (if any)."""
    explicit = path is not None
    if path is None:
        path = find_pyproject(start or Path.cwd())
        if path is None:
            return Config()
    try:
        data = tomllib.loads(read_text(path, str(path)))
    except InputError as exc:
        if not path.exists():
            raise InputError(f"{path}: config file not found") from None
        raise InputError(f"{path}: cannot read config ({exc})") from None
    except (tomllib.TOMLDecodeError, OSError) as exc:
        raise InputError(f"{path}: cannot read config ({exc})") from None
    section = data.get("tool", {}).get("trainaudit") if "tool" in data else None
    if section is None:
        section = data if explicit and path.name != "pyproject.toml" else {}
    return _parse(section, str(path))


def _parse(section: dict[str, Any], where: str) -> Config:
    def ids(key: str) -> list[str]:
        v = section.get(key, [])
        if isinstance(v, str):
            v = [v]
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            raise InputError(f"{where}: [tool.trainaudit] {key} must be a list of rule ids or prefixes")
        return [x.upper() for x in v]

    rules: dict[str, dict[str, Any]] = {}
    for rid, over in (section.get("rules") or {}).items():
        cls = rule_class(rid)
        if cls is None:
            raise InputError(f"{where}: [tool.trainaudit.rules.{rid}]: unknown rule")
        if not isinstance(over, dict):
            raise InputError(f"{where}: [tool.trainaudit.rules.{rid}] must be a table of thresholds")
        try:
            cls.with_overrides(over)
        except (KeyError, TypeError, ValueError) as exc:
            raise InputError(f"{where}: {str(exc).strip(chr(34)).strip(chr(39))}") from None
        rules[cls.id] = dict(over)
    return Config(select=ids("select"), ignore=ids("ignore"), rules=rules, path=where)
