"""The program's writers, found in its source: every function that writes to a terminal, a file, an HTTP
body or an MCP result, by what it calls (read with ``ast``, nothing imported). The taint test runs every
command under :class:`Recorder` and requires each writer found here to have run on hostile input, so a
new writer is covered by the test, or named by it.

A call is a write when it is:

- terminal: ``click.echo(...)``, ``<console>.print(...)`` (rich), ``sys.stdout.write`` / ``print(...)``,
  or any use of ``sys.__stdout__`` / ``sys.__stderr__`` (the streams without the sanitising wrapper);
- file: ``.write_text``, ``.write_bytes``, ``.create`` (``OutDir``), ``write_file``, ``.write``,
  ``open(..., "w" / "a" / "x")``;
- HTTP: ``.post`` / ``.patch`` / ``.put`` / ``.request`` with a body or headers keyword (httpx);
- MCP: a function registered with ``@<server>.tool(...)`` (its return value is the result sent).

``outdir.py`` (the file layer every file writer goes through) and ``redact.py`` (the encoders) are the
layers below the writers, not writers themselves.
"""

from __future__ import annotations

import ast
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import trainaudit

SRC = Path(trainaudit.__file__).parent
LAYERS = {"outdir.py", "redact.py"}
_FILE_CALLS = {"write_text", "write_bytes", "create", "write"}
_HTTP_CALLS = {"post", "patch", "put", "request"}
_HTTP_KEYWORDS = {"json", "content", "data", "headers", "files"}


@dataclass(frozen=True)
class Writer:
    module: str  # path below src/trainaudit
    qualname: str
    line: int  # the first line of the function, its decorators included (as a code object counts it)
    sinks: tuple[str, ...]

    @property
    def key(self) -> tuple[str, int]:
        return str(SRC / self.module), self.line

    def __str__(self) -> str:
        return f"{self.module}:{self.line} {self.qualname} ({', '.join(self.sinks)})"


def _call_sink(call: ast.Call) -> str | None:
    f = call.func
    if isinstance(f, ast.Attribute):
        if f.attr == "echo" or f.attr == "print":
            return "terminal"
        if f.attr == "write" and ast.unparse(f.value) in ("sys.stdout", "sys.stderr"):
            return "terminal"
        if f.attr in _FILE_CALLS:
            return "file"
        if f.attr in _HTTP_CALLS and any(k.arg in _HTTP_KEYWORDS for k in call.keywords):
            return "http"
    if isinstance(f, ast.Name):
        if f.id == "print":
            return "terminal"
        if f.id == "write_file":
            return "file"
        if f.id == "open":
            modes = [*call.args[1:2], *(k.value for k in call.keywords if k.arg == "mode")]
            if any(isinstance(m, ast.Constant) and isinstance(m.value, str) and set(m.value) & set("wax+")
                   for m in modes):
                return "file"
    return None


def _own_nodes(fn: ast.AST) -> Iterator[ast.AST]:
    """The nodes of a function's body, not those of the functions and classes defined inside it."""
    todo = list(ast.iter_child_nodes(fn))
    while todo:
        node = todo.pop()
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            todo.extend(ast.iter_child_nodes(node))


def _sinks_of(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    sinks: set[str] = set()
    for node in _own_nodes(fn):
        if isinstance(node, ast.Call) and (s := _call_sink(node)):
            sinks.add(s)
        if isinstance(node, ast.Attribute) and node.attr in ("__stdout__", "__stderr__"):
            sinks.add("raw terminal")
    for d in fn.decorator_list:
        if isinstance(d, ast.Call) and isinstance(d.func, ast.Attribute) and d.func.attr == "tool":
            sinks.add("mcp")
    return sinks


def find_writers() -> list[Writer]:
    found: list[Writer] = []

    def visit(node: ast.AST, prefix: str, module: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                qual = prefix + child.name
                sinks = _sinks_of(child)
                if sinks:
                    first = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                    found.append(Writer(module, qual, first, tuple(sorted(sinks))))
                visit(child, qual + ".", module)
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".", module)
            else:
                visit(child, prefix, module)

    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel not in LAYERS:
            visit(ast.parse(path.read_text(encoding="utf-8")), "", rel)
    return found


class Recorder:
    """Which of ``writers`` ran while it was active, in any thread (``sys.settrace`` on call events
    only: the trace function returns None, so no line inside a function is traced)."""

    def __init__(self, writers: list[Writer]) -> None:
        self._by_key = {w.key: w for w in writers}
        self.hit: set[Writer] = set()
        self._files = {k[0] for k in self._by_key}

    def _trace(self, frame: FrameType, event: str, arg: Any) -> None:
        code = frame.f_code
        if code.co_filename in self._files:
            w = self._by_key.get((code.co_filename, code.co_firstlineno))
            if w is not None:
                self.hit.add(w)
        return None

    @contextmanager
    def active(self) -> Iterator[None]:
        old = sys.gettrace()
        threading.settrace(self._trace)
        sys.settrace(self._trace)
        try:
            yield
        finally:
            sys.settrace(old)
            threading.settrace(old)  # type: ignore[arg-type]
