"""The package as the ecosystem sees it: licence, metadata, extras that never replace a user's own
torch, a core install without matplotlib, and documentation whose links stay inside the
repository."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
META = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def test_license_metadata_and_typing_marker() -> None:
    assert META["license"] == "Apache-2.0"  # an SPDX expression (PEP 639), not the deprecated {text = ...}
    assert META["license-files"] == ["LICENSE"]
    assert "Apache License" in (REPO / "LICENSE").read_text(encoding="utf-8")[:200]
    assert (REPO / "src" / "trainaudit" / "py.typed").is_file()
    assert "Typing :: Typed" in META["classifiers"]
    assert not [c for c in META["classifiers"] if c.startswith("License ::")]  # PEP 639: the expression says it
    assert META["urls"]
    vendored = REPO / "src" / "trainaudit" / "render" / "assets"
    assert "MIT License" in (vendored / "uPlot.LICENSE").read_text(encoding="utf-8")


def _names(reqs: list[str]) -> dict[str, str]:
    return {re.split(r"[<>=!~\[ ;]", r, maxsplit=1)[0].lower(): r for r in reqs}


def test_heavy_pieces_are_extras_with_ranges() -> None:
    core = _names(META["dependencies"])
    assert "matplotlib" not in core and "torch" not in core
    extras = META["optional-dependencies"]
    assert "matplotlib" in _names(extras["plots"])
    for name, reqs in extras.items():
        if name == "dev":  # the test environment: the one CPU torch installable here, pinned
            continue
        for req in reqs:
            assert "==" not in req, f"[{name}] pins {req}: a user's own version would be replaced"


def test_documentation_links_stay_in_the_repository() -> None:
    docs = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    bad = []
    for doc in docs:
        for target in re.findall(r"\]\(([^)\s]+)\)", doc.read_text(encoding="utf-8")):
            if target.startswith(("http://", "https://", "#", "mailto:")):
                continue
            path = (doc.parent / target.split("#", 1)[0]).resolve()
            if not path.is_relative_to(REPO) or not path.exists():
                bad.append(f"{doc.relative_to(REPO)}: {target}")
    assert not bad, bad


def test_readme_starts_with_pip_install_and_the_two_make_commands() -> None:
    blocks = re.findall(r"```sh\n(.*?)```", (REPO / "README.md").read_text(encoding="utf-8"), re.S)
    assert blocks[0].startswith("pip install trainaudit")
    assert "make demo" in blocks[1] and "make test" in blocks[1]
