"""The package's layers, checked from the source with ``ast``: imports only go down, no cycles, and
no import of trainaudit inside a function (which is how a cycle gets hidden). The one exception is
an import guarded by ``try: ... except ImportError`` for a module that needs an optional extra
(torch for ``inspect``): that is about a missing dependency, not about layering.

Layers, bottom first. A module may import modules of a lower layer, and modules of its own
package; two packages on the same layer do not import each other.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "trainaudit"

LAYERS: list[set[str]] = [
    {"errors", "model", "redact", "__init__"},  # the data model
    {"safeio", "outdir"},  # reading untrusted files, writing outputs: confinement and limits
    {"answer"},  # the answer contract
    {"ingest", "fetch"},
    {"series"},
    {"rules"},
    {"diagnosis", "compare", "live", "inspect"},
    {"history", "monitor"},
    {"audit"},
    {"batch"},
    {"render"},
    {"llm"},
    {"post"},
    {"mcp"},
    {"commands", "cli"},
    {"__main__"},
]
RANK = {pkg: i for i, layer in enumerate(LAYERS) for pkg in layer}


def _modules() -> dict[str, Path]:
    out = {}
    for p in SRC.rglob("*.py"):
        rel = p.relative_to(SRC).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__" and len(parts) > 1:
            parts = parts[:-1]
        out[".".join(["trainaudit", *parts])] = p
    return out


MODULES = _modules()


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _imports(path: Path, module: str) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    """(top-level imports of trainaudit modules, imports of trainaudit inside functions)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nested: set[int] = set()
    guarded: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            nested.update(id(n) for n in ast.walk(node) if n is not node)
        if isinstance(node, ast.Try) and any(
                isinstance(h.type, ast.Name) and h.type.id in ("ImportError", "ModuleNotFoundError")
                for h in node.handlers):
            guarded.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    top: list[tuple[int, str]] = []
    inner: list[tuple[int, str]] = []
    is_pkg = path.name == "__init__.py"
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")[: len(module.split(".")) - node.level + (1 if is_pkg else 0)]
                names = [".".join(base + ([node.module] if node.module else []))]
            else:
                names = [node.module or ""]
            # ``from trainaudit.x import y`` where y is a module counts as importing trainaudit.x.y
            names = [f"{names[0]}.{a.name}" if f"{names[0]}.{a.name}" in MODULES else names[0] for a in node.names]
        for n in names:
            if n == "trainaudit" or n.startswith("trainaudit."):
                (inner if id(node) in nested and id(node) not in guarded else top).append((node.lineno, n))
    return top, inner


def _resolve(name: str) -> str:
    while name not in MODULES and "." in name:
        name = name.rsplit(".", 1)[0]
    return name


def test_every_package_has_a_layer() -> None:
    missing = sorted({_package(m) for m in MODULES} - set(RANK))
    assert not missing, f"packages without a layer in tests/test_layers.py: {missing}"


def test_imports_only_go_down() -> None:
    bad = []
    for mod, path in MODULES.items():
        src = _package(mod)
        top, _ = _imports(path, mod)
        for line, name in top:
            if name == "trainaudit":
                continue  # ``from trainaudit import __version__``: the root package holds only the version
            dst = _package(_resolve(name))
            if dst == src:
                continue
            if RANK[dst] >= RANK[src]:
                bad.append(f"{path.relative_to(SRC.parent)}:{line}: {src} (layer {RANK[src]}) imports {name} "
                           f"(layer {RANK[dst]})")
    assert not bad, "upward or sideways imports:\n" + "\n".join(bad)


def test_no_trainaudit_import_inside_a_function() -> None:
    bad = []
    for mod, path in MODULES.items():
        _, inner = _imports(path, mod)
        bad += [f"{path.relative_to(SRC.parent)}:{line}: {name}" for line, name in inner]
    assert not bad, "function-level imports of trainaudit (import at the top; fix the layering instead):\n" + \
        "\n".join(bad)


def test_no_import_cycle_between_modules() -> None:
    graph = {m: {_resolve(n) for _, n in _imports(p, m)[0]} - {m} for m, p in MODULES.items()}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for n in sorted(graph.get(m, ())):
            if n not in MODULES or n == "trainaudit":
                continue
            if state.get(n) == 1:
                return stack[stack.index(n):] + [n]
            if n not in state and (cycle := visit(n)):
                return cycle
        state[m] = 2
        stack.pop()
        return None

    for m in sorted(MODULES):
        if m not in state and (cycle := visit(m)):
            pytest.fail("import cycle: " + " -> ".join(cycle))
