"""Every regular expression of trainaudit stays linear on hostile lines, checked automatically.

``regex_inputs.collect_patterns`` finds every compiled pattern of the package (so a pattern added
later is checked without anyone listing it) and ``regex_inputs.hostile_shapes`` derives, from each
pattern's syntax tree, the lines that make a backtracking engine slow. For each pattern the slowest
shapes on a short line are timed again at two lengths, 8x apart: a linear pattern takes about 8x as
long on the longer line, a quadratic one 64x. The bound is the growth (16x, plus a fixed slack for a
busy machine), not an absolute time, so a slow CI runner does not fail it; a quadratic pattern fails
it by far (it also takes seconds at the 1 MiB lines the readers allow, ``safeio.LIMITS.line_bytes``).
Times are the thread's CPU time (``time.thread_time``), not wall time: on a shared machine the time
the test waits for a core is not the pattern's.

A pattern built inside a function would escape the collection: ``test_no_pattern_is_built_in_a_function``
reads the source and refuses that.
"""

from __future__ import annotations

import ast
import re
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from regex_inputs import Shape, collect_patterns, hostile_shapes, render

import trainaudit
from trainaudit import redact

PATTERNS = collect_patterns()
SCREEN = 2_000  # every shape is timed once at this length to find a pattern's slowest ones
SMALL, LARGE = 8_000, 64_000  # the slowest shapes are timed at both: linear means about 8x
GROWTH = 16.0  # linear: 8x; quadratic: 64x
SLACK_S = 0.03  # scheduling noise on a shared machine, added to the allowed time of the long line
WORST = 2  # shapes re-timed per pattern
REPEATS = 3  # the fastest of these runs is the pattern's time (the others include interruptions)

# Functions of the re module that compile their pattern argument (re.escape does not).
_COMPILING = {"compile", "search", "match", "fullmatch", "sub", "subn", "findall", "finditer", "split"}
# Patterns built inside a function, with the reason that is safe. Empty: every pattern is a module-level
# name that the collection sees.
BUILT_IN_FUNCTIONS: dict[tuple[str, str], str] = {}


def _time(p: re.Pattern[Any], line: str, repeats: int = REPEATS) -> float:
    subject: str | bytes = line.encode("utf-8", "replace") if isinstance(p.pattern, bytes) else line
    best = float("inf")
    for _ in range(repeats):
        t0 = time.thread_time()
        for _m in p.finditer(subject):  # type: ignore[arg-type]
            pass
        best = min(best, time.thread_time() - t0)
    return best


def test_the_collection_finds_the_package_patterns() -> None:
    # A sanity floor: the walk reaches readers, signatures, history, redaction and compare.
    assert len(PATTERNS) > 200
    for name in ("ingest.formats.hf.DICT_RE", "ingest.signatures.OOM_RE", "history.classify.CI_FILE_RE",
                 "redact._PATTERNS[0][0]", "compare.cilog._PYTEST"):
        assert name in PATTERNS, name


@pytest.mark.parametrize("name", sorted(PATTERNS))
def test_pattern_is_linear_on_hostile_lines(name: str) -> None:
    p = PATTERNS[name]
    shapes = hostile_shapes(p)
    assert shapes, name
    slowest: list[Shape] = sorted(shapes, key=lambda s: _time(p, render(s, SCREEN), 1), reverse=True)[:WORST]
    for shape in slowest:
        small = _time(p, render(shape, SMALL))
        # a linear pattern takes about a millisecond here; a quadratic one could take minutes at LARGE
        assert small < 0.25, f"{name}: {small:.2f} s on {SMALL} characters of {shape!r:.120}"
        large = _time(p, render(shape, LARGE))
        assert large <= GROWTH * small + SLACK_S, (
            f"{name} grows faster than linearly: {small * 1e3:.1f} ms at {SMALL} characters, "
            f"{large * 1e3:.1f} ms at {LARGE}, on head {shape[0][:60]!r} + {shape[1][:40]!r} * n + {shape[2]!r}")


_NAMES = sorted(PATTERNS)


@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_patterns_are_linear_on_mixed_units(data: st.DataObject) -> None:
    # Two or three of a pattern's own derived units alternating ("'a': " then '"\\'), which single-unit
    # runs do not cover; derandomized, so the suite sees the same cases on every run.
    name = data.draw(st.sampled_from(_NAMES), label="pattern")
    p = PATTERNS[name]
    units = sorted({u for _, u, _ in hostile_shapes(p)})
    pieces = data.draw(st.lists(st.sampled_from(units), min_size=2, max_size=3), label="units")
    shape: Shape = ("", "".join(pieces), data.draw(st.sampled_from(["", "\x00"]), label="ending"))
    small = _time(p, render(shape, SMALL))
    assert small < 0.25, f"{name}: {small:.2f} s on {SMALL} characters of {shape!r:.120}"
    large = _time(p, render(shape, LARGE))
    assert large <= GROWTH * small + SLACK_S, (
        f"{name}: {small * 1e3:.1f} ms at {SMALL} characters, {large * 1e3:.1f} ms at {LARGE}, on {shape!r:.160}")


def _function_level_regex_calls(path: Path) -> list[tuple[str, int, str]]:
    """(function, line, call) of every re.<compiling function> call inside a function or lambda."""
    found: list[tuple[str, int, str]] = []

    def visit(node: ast.AST, function: str | None) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            function = node.name
        elif isinstance(node, ast.Lambda):
            function = function or "<lambda>"
        if (function is not None and isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "re"
                and node.func.attr in _COMPILING):
            found.append((function, node.lineno, ast.unparse(node)[:80]))
        for child in ast.iter_child_nodes(node):
            visit(child, function)

    visit(ast.parse(path.read_text(encoding="utf-8")), None)
    return found


def _sources() -> list[Path]:
    return sorted(Path(trainaudit.__file__).parent.rglob("*.py"))


def test_no_pattern_is_built_in_a_function() -> None:
    root = Path(trainaudit.__file__).parent
    bad = []
    for path in _sources():
        module = ".".join(path.relative_to(root).with_suffix("").parts)
        for function, line, call in _function_level_regex_calls(path):
            if (module, function) not in BUILT_IN_FUNCTIONS:
                bad.append(f"{module}.{function} (line {line}): {call}")
    assert not bad, "patterns built inside functions are not fuzzed; make them module-level names:\n" + "\n".join(bad)


def test_no_module_imports_re_functions_by_name() -> None:
    # "from re import compile" would hide a call from the source check above.
    bad = [str(p) for p in _sources()
           if any(isinstance(n, ast.ImportFrom) and n.module == "re" for n in ast.walk(ast.parse(p.read_text())))]
    assert not bad


def test_every_module_level_compile_is_collected() -> None:
    # Each re.compile(...) with a literal pattern in the source is among the collected patterns: the walk
    # does not miss one hidden in a structure it does not enter.
    collected = {p.pattern for p in PATTERNS.values()}
    missing = []
    for path in _sources():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "re"
                    and node.func.attr == "compile" and node.args and isinstance(node.args[0], ast.Constant)
                    and node.args[0].value not in collected):
                missing.append(f"{path.name}:{node.lineno}")
    assert not missing, missing


def test_sanitising_a_long_hostile_line_is_linear() -> None:
    # Masking runs every secret pattern and the Markdown escapes in sequence: the whole chain on 200 KB.
    for unit in ("token=" + "a" * 10 + " ", "\x1b]0;" + "x" * 50, "https://u:" + "p@" * 20, "A" * 41 + "/"):
        s = unit * (200_000 // len(unit))
        t0 = time.thread_time()
        redact.mask_secrets(s)
        redact.md_inline(s)
        assert time.thread_time() - t0 < 0.5 + 5e-6 * len(s), unit
