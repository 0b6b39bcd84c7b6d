"""A tiny, safe evaluator for the ``formula`` of a calculation, so every calculation in
answer.json can be recomputed from its inputs by anyone (and by our own validation).

Formulas are Python-like expressions over input ids (``F3``, ``C2``), numbers, ``+ - * / **``,
comparisons, and a fixed set of numpy-backed functions. A fact id evaluates to its ``value``, or to
its ``values`` array when the fact quotes a series; a calculation id to its ``result``.

    (F2 - F1) / abs(F1)
    max(abs(F6 - F5) / abs(F5))
    median(F9)

Hand-written rather than ``eval``: the input is a report that may come from anywhere (or from an
LLM), and an AST walk with an allow-list cannot execute anything else.
"""

from __future__ import annotations

import ast
import math
import operator
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

Value = float | np.ndarray


def moving_average(values: np.ndarray, window: int) -> np.ndarray:
    """Trailing moving average over the last ``window`` points, finite values only (the first
    points average what they have): a value depends on its step and the steps before, never on a
    later one. A NaN/Inf stays at its own step."""
    if window <= 1 or values.size < 2:
        return values.astype(float)
    ok = np.isfinite(values)
    num = np.cumsum(np.where(ok, values, 0.0))
    den = np.cumsum(ok.astype(float))
    num[window:] = num[window:] - num[:-window].copy()
    den[window:] = den[window:] - den[:-window].copy()
    with np.errstate(invalid="ignore", divide="ignore"):
        out = num / den
    out[~ok] = values[~ok]
    return out


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "abs": np.abs,
    "max": lambda *a: np.max(np.concatenate([np.atleast_1d(x) for x in a])),
    "min": lambda *a: np.min(np.concatenate([np.atleast_1d(x) for x in a])),
    "mean": lambda *a: np.mean(np.concatenate([np.atleast_1d(x) for x in a])),
    "median": lambda *a: np.median(np.concatenate([np.atleast_1d(x) for x in a])),
    "sum": lambda *a: np.sum(np.concatenate([np.atleast_1d(x) for x in a])),
    "nanmax": lambda *a: np.nanmax(np.concatenate([np.atleast_1d(x) for x in a])),
    "nanmin": lambda *a: np.nanmin(np.concatenate([np.atleast_1d(x) for x in a])),
    "nanmean": lambda *a: np.nanmean(np.concatenate([np.atleast_1d(x) for x in a])),
    "nanmedian": lambda *a: np.nanmedian(np.concatenate([np.atleast_1d(x) for x in a])),
    "isfinite": lambda x: np.isfinite(x).astype(float),
    "count": lambda x: float(np.count_nonzero(x)),
    "len": lambda x: float(np.size(x)),
    "log": np.log,
    "ln": np.log,
    "exp": np.exp,
    "sqrt": np.sqrt,
    "floor": np.floor,
    "ceil": np.ceil,
    "isclose": lambda a, g, rtol, atol=0.0: np.isclose(a, g, rtol=rtol, atol=atol),
    "where": np.where,
    "std": lambda *a: np.std(np.concatenate([np.atleast_1d(x) for x in a])),
    "quantile": lambda x, q: np.quantile(x, q),
    "slope": lambda x, y: float(np.polyfit(np.asarray(x, float), np.asarray(y, float), 1)[0]),
    "movavg": lambda x, w: moving_average(np.atleast_1d(np.asarray(x, float)), int(w)),
    "first": lambda x: np.atleast_1d(x)[0],
    "last": lambda x: np.atleast_1d(x)[-1],
}
CONSTANTS = {"inf": math.inf, "nan": math.nan, "pi": math.pi}
_BIN: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: lambda a, b: np.divide(a, b),
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_CMP: dict[type, Callable[[Any, Any], Any]] = {
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
}


class FormulaError(ValueError):
    pass


def names_in(formula: str) -> set[str]:
    try:
        tree = ast.parse(formula, mode="eval")
    except SyntaxError as exc:
        raise FormulaError(f"cannot parse formula {formula!r}: {exc.msg}") from None
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id not in FUNCTIONS
            and n.id not in CONSTANTS}


def evaluate(formula: str, env: Mapping[str, Value]) -> float:
    """Evaluate ``formula`` with ``env`` (id -> number or array); the result must be a scalar."""
    try:
        tree = ast.parse(formula, mode="eval")
    except SyntaxError as exc:
        raise FormulaError(f"cannot parse formula {formula!r}: {exc.msg}") from None
    # NaN inputs are legitimate (a NaN loss is evidence); numpy's All-NaN warnings are noise here.
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        out = _eval(tree.body, env)
    arr = np.asarray(out, dtype=float)
    if arr.size != 1:
        raise FormulaError(f"formula {formula!r} gives {arr.size} values, not one")
    return float(arr.reshape(()))


def _eval(node: ast.AST, env: Mapping[str, Value]) -> Any:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return float(node.value)
    if isinstance(node, ast.Name):
        if node.id in env:
            return env[node.id]
        if node.id in CONSTANTS:
            return CONSTANTS[node.id]
        raise FormulaError(f"unknown name {node.id!r}")
    if isinstance(node, ast.BinOp) and type(node.op) in _BIN:
        return _BIN[type(node.op)](_eval(node.left, env), _eval(node.right, env))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = _eval(node.operand, env)
        return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _CMP:
        res = _CMP[type(node.ops[0])](_eval(node.left, env), _eval(node.comparators[0], env))
        return np.asarray(res, dtype=float)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in FUNCTIONS and not node.keywords:
        return FUNCTIONS[node.func.id](*[_eval(a, env) for a in node.args])
    if isinstance(node, ast.Subscript):
        base = np.atleast_1d(_eval(node.value, env))
        idx = _eval(node.slice, env)
        return base[int(idx)]
    raise FormulaError(f"unsupported expression: {ast.dump(node)[:80]}")


def results_match(a: float | None, b: float | None, rel: float = 1e-9) -> bool:
    """Recomputed vs stored result: equal, both NaN/None, or within a tiny relative error
    (JSON round trips of floats are exact, so this only absorbs order-of-operations noise)."""
    if a is None or b is None:
        return a is None and b is None
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    if math.isinf(a) or math.isinf(b):
        return a == b
    return abs(a - b) <= rel * max(1.0, abs(a), abs(b))
