"""Every compiled regular expression in trainaudit, and the hostile lines to feed each one.

The patterns are collected, not listed: every module of the package is imported and its module-level
objects are walked (patterns, and patterns inside tuples, lists, dicts, dataclass instances such as
the catalogue's entries, and classes), so a pattern added tomorrow is fuzzed without anyone
remembering to add it here. ``tests/hostile/test_hostile_regex.py`` also checks, from the source,
that no pattern is built inside a function, where this walk could not see it.

The lines are derived from each pattern's own syntax tree (``re._parser``, the parser ``re.compile``
itself uses): long runs of every character a quantifier accepts, the literal phrases it looks for,
and near-matches (a prefix of a matching string, repeated, or followed by a long run), each with an
ending that makes the match fail. These are the shapes that make a backtracking engine revisit the
same text from every start position (https://www.regular-expressions.info/catastrophic.html).
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
import re
import re._constants as C
import re._parser as P
from typing import Any

import trainaudit

# Generic shapes every pattern also gets: separators, numbers, keys, quotes, escapes, URLs.
GENERIC_UNITS = ["1", " ", "a", "a ", "1 ", "1.", ".", "-", "_", "=", "a=", "a: ", ": 1 ", "1%", "1/", "%|", "|",
                 "\t", "'a': ", "{", "\x1b[", "://", "@", "a" * 39 + " "]
ENDINGS = ["", "\x00"]  # a line that ends in a match, and one whose last character fails it
# Representatives of the classes \d \D \s \S \w \W, and the pool a negated class picks from.
_CATEGORY = {C.CATEGORY_DIGIT: "1", C.CATEGORY_NOT_DIGIT: "a", C.CATEGORY_SPACE: " ", C.CATEGORY_NOT_SPACE: "a",
             C.CATEGORY_WORD: "a", C.CATEGORY_NOT_WORD: " "}
_POOL = "a1 _-.:=/|\t,'\"x{}()[]%A\x1b@#;"
_REPEATS = (C.MAX_REPEAT, C.MIN_REPEAT, C.POSSESSIVE_REPEAT)
_SINGLE = (C.LITERAL, C.NOT_LITERAL, C.IN, C.ANY)


# -- collecting -----------------------------------------------------------------------------------
def _walk(obj: Any, name: str, found: dict[int, tuple[str, re.Pattern[Any]]], depth: int = 0) -> None:
    if isinstance(obj, re.Pattern):
        found.setdefault(id(obj), (name, obj))
        return
    if depth > 4:
        return
    if isinstance(obj, dict):
        for k, v in obj.items():
            _walk(v, f"{name}[{k!r}]", found, depth + 1)
    elif isinstance(obj, (list, tuple, set, frozenset)):
        for i, v in enumerate(obj):
            _walk(v, f"{name}[{i}]", found, depth + 1)
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            _walk(getattr(obj, f.name), f"{name}.{f.name}", found, depth + 1)
    elif isinstance(obj, type):
        for k, v in vars(obj).items():
            _walk(v, f"{name}.{k}", found, depth + 1)


def collect_patterns() -> dict[str, re.Pattern[Any]]:
    """Every compiled pattern reachable from a module-level name of a trainaudit module, by the
    shortest dotted name that reaches it."""
    found: dict[int, tuple[str, re.Pattern[Any]]] = {}
    for info in pkgutil.walk_packages(trainaudit.__path__, "trainaudit."):
        if info.name.endswith(".__main__"):
            continue  # runs the CLI when imported
        module = importlib.import_module(info.name)
        for attr, value in vars(module).items():
            if isinstance(value, type) and value.__module__ != module.__name__:
                continue  # a class imported from elsewhere is walked in its own module
            if hasattr(value, "__module__") and not isinstance(value, (type, re.Pattern)) \
                    and not dataclasses.is_dataclass(value):
                continue  # functions and imported objects
            _walk(value, f"{module.__name__.removeprefix('trainaudit.')}.{attr}", found)
    return dict(sorted(found.values(), key=lambda t: t[0]))


# -- deriving hostile lines -----------------------------------------------------------------------
def _in_set(items: list[tuple[Any, Any]], c: str) -> bool:
    o = ord(c)
    for op, av in items:
        if (op is C.LITERAL and av == o) or (op is C.RANGE and av[0] <= o <= av[1]):
            return True
        if op is C.CATEGORY and {
            C.CATEGORY_DIGIT: c.isdigit(), C.CATEGORY_NOT_DIGIT: not c.isdigit(),
            C.CATEGORY_SPACE: c.isspace(), C.CATEGORY_NOT_SPACE: not c.isspace(),
            C.CATEGORY_WORD: c.isalnum() or c == "_", C.CATEGORY_NOT_WORD: not (c.isalnum() or c == "_"),
        }.get(av, False):
            return True
    return False


def _chars(op: Any, av: Any) -> list[str]:
    """Characters one single-character item accepts (a few representatives)."""
    if op is C.LITERAL:
        return [chr(av)]
    if op is C.NOT_LITERAL:
        return [c for c in "a ." if ord(c) != av][:2]
    if op is C.ANY:
        return ["a", " "]
    if op is C.IN:
        items = [(o, a) for o, a in av if o is not C.NEGATE]
        if len(items) < len(av):  # negated: what the pool has that the class lists not
            return [c for c in _POOL if not _in_set(items, c)][:4]
        out: list[str] = []
        for o, a in items:
            if o is C.LITERAL:
                out.append(chr(a))
            elif o is C.RANGE:
                out += [chr(a[0]), chr(a[1])]
            elif o is C.CATEGORY:
                out.append(_CATEGORY.get(a, "a"))
        return out
    return []


def _sample(items: list[tuple[Any, Any]]) -> str:
    """One string that (nearly) matches ``items``: first branches, minimal repeats of at least one."""
    out: list[str] = []
    for op, av in items:
        if op in _SINGLE:
            out.append((_chars(op, av) or ["a"])[0])
        elif op in _REPEATS:
            lo, hi, sub = av
            out.append(_sample(list(sub)) * max(lo, 1 if hi else 0))
        elif op is C.SUBPATTERN:
            out.append(_sample(list(av[3])))
        elif op is C.ATOMIC_GROUP:
            out.append(_sample(list(av)))
        elif op is C.BRANCH:
            out.append(_sample(list(av[1][0])))
        elif op is C.GROUPREF_EXISTS:
            out.append(_sample(list(av[1])))
    return "".join(out)


def _leading(items: list[tuple[Any, Any]]) -> set[str]:
    """Characters a quantifier at the start of ``items`` repeats: what a long run after a prefix is
    made of."""
    out: set[str] = set()
    for op, av in items:
        if op in _REPEATS:
            sub = list(av[2])
            out |= set(_chars(*sub[0])) if len(sub) == 1 and sub[0][0] in _SINGLE else _leading(sub)
            if av[0] > 0:
                return out
        elif op is C.SUBPATTERN:
            return out | _leading(list(av[3]))
        elif op is C.ATOMIC_GROUP:
            return out | _leading(list(av))
        elif op is C.BRANCH:
            return out.union(*(_leading(list(b)) for b in av[1]))
        elif op not in (C.AT, C.ASSERT, C.ASSERT_NOT):
            return out
    return out


class _Shapes:
    def __init__(self) -> None:
        self.units: set[str] = set()  # repeated to the line length
        self.near: dict[str, set[str]] = {}  # a near-match, and the characters of runs that may follow it

    def walk(self, items: list[tuple[Any, Any]], context: str) -> None:
        """Literal phrases and sub-matches (units), and every prefix of every sequence with the
        text before it (near-matches) and the runs that may follow it."""
        literal: list[str] = []
        for i, (op, av) in enumerate(items):
            here = context + _sample(items[:i])
            self.near.setdefault(here, set()).update(_leading(items[i:]))
            if op is C.LITERAL:
                literal.append(chr(av))
                continue
            if len(literal) >= 2:
                self.units.add("".join(literal))
            literal.clear()
            if op in _REPEATS:
                sub = list(av[2])
                if len(sub) == 1 and sub[0][0] in _SINGLE:
                    self.units.update(_chars(*sub[0]))
                else:
                    self.units.add(_sample(sub))
                    self.walk(sub, here)
            elif op is C.SUBPATTERN:
                self.walk(list(av[3]), here)
            elif op is C.ATOMIC_GROUP:
                self.walk(list(av), here)
            elif op is C.BRANCH:
                for branch in av[1]:
                    self.units.add(_sample(list(branch)))
                    self.walk(list(branch), here)
            elif op in (C.ASSERT, C.ASSERT_NOT):
                self.walk(list(av[1]), here)
            elif op is C.GROUPREF_EXISTS:
                self.walk(list(av[1]), here)
                if av[2]:
                    self.walk(list(av[2]), here)
        if len(literal) >= 2:
            self.units.add("".join(literal))
        self.near.setdefault(context + _sample(items), set())


def _tree(pattern: re.Pattern[Any]) -> list[tuple[Any, Any]]:
    source = pattern.pattern
    if isinstance(source, bytes):
        return list(P.parse(source.decode("latin-1"), pattern.flags & ~re.UNICODE))
    return list(P.parse(source, pattern.flags))


Shape = tuple[str, str, str]  # a head, a unit repeated after it to the line length, an ending


def hostile_shapes(pattern: re.Pattern[Any]) -> list[Shape]:
    """The shapes of line that make a backtracking pattern slow: a unit repeated (a run of one
    character, a phrase, a near-match: each start position then redoes the work of the one before),
    and a near-match followed by a long run of what may follow it; each with every ending."""
    shapes = _Shapes()
    shapes.walk(_tree(pattern), "")
    units = set(GENERIC_UNITS) | shapes.units
    for near in shapes.near:
        units |= {near, near[:-1]}
    units.discard("")
    out = {("", u, end) for u in units for end in ENDINGS}
    out |= {(near, c, ENDINGS[-1]) for near, runs in shapes.near.items() for c in runs}
    return sorted(out)


def render(shape: Shape, length: int) -> str:
    """``shape`` as a line of ``length`` characters before its ending."""
    head, unit, end = shape
    n = max(0, length - len(head))
    return head + (unit * (n // len(unit) + 1))[:n] + end


def hostile_lines(pattern: re.Pattern[Any], length: int) -> list[str]:
    """Every shape of ``hostile_shapes`` as a line of ``length`` characters (plus its ending)."""
    return sorted({render(s, length) for s in hostile_shapes(pattern)})
