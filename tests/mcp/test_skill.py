"""The agent skill shipped in the package: Agent Skills front matter, and it names the commands,
MCP tools and verdicts that actually exist."""

from __future__ import annotations

import asyncio
import re
from importlib.resources import files

import yaml

from trainaudit.cli import COMMANDS
from trainaudit.mcp.roots import Roots
from trainaudit.mcp.server import build_server
from trainaudit.answer.schema import VERDICTS


def _skill() -> tuple[dict, str]:
    text = (files("trainaudit") / "skills" / "trainaudit" / "SKILL.md").read_text(encoding="utf-8")
    m = re.match(r"^---\n(.*?)\n---\n(.*)$", text, re.S)
    assert m, "SKILL.md must start with YAML front matter between --- lines"
    return yaml.safe_load(m.group(1)), m.group(2)


def test_front_matter_follows_the_agent_skills_format() -> None:
    meta, body = _skill()
    assert set(meta) == {"name", "description"}
    assert meta["name"] == "trainaudit" and re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", meta["name"])
    assert 50 < len(meta["description"]) <= 1024 and "Use when" in meta["description"]
    assert body.lstrip().startswith("# trainaudit")


def test_skill_names_what_exists(tmp_path) -> None:  # type: ignore[no-untyped-def]
    _, body = _skill()
    for cmd in ("parse", "diagnose", "compare", "audit", "rules"):
        assert cmd in COMMANDS and f"`trainaudit {cmd}" in body, cmd
    tools = asyncio.run(build_server(Roots.of([str(tmp_path)])).list_tools())
    for t in tools:
        assert f"`{t.name}`" in body, t.name
    for v in VERDICTS:
        assert f"`{v}`" in body, v
