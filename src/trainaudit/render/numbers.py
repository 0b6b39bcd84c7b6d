"""Numbers as every rendering shows them (answer.md, the HTML page, the terminal): one rule, so a
value reads the same everywhere."""

from __future__ import annotations


def number(v: float | str | None, digits: int = 4, missing: str = "-") -> str:
    """``digits`` significant digits; scientific notation below 1e-3 and from 1e5 on; ints and
    strings as they are; NaN as ``nan``."""
    if v is None:
        return missing
    if isinstance(v, str):
        return v
    if isinstance(v, int):
        return str(v)
    if v != v:
        return "nan"
    if abs(v) >= 1e5 or (0 < abs(v) < 1e-3):
        return f"{v:.{digits - 1}e}"
    return f"{v:.{digits}g}"


def percent(v: float | None, missing: str = "-") -> str:
    """A ratio as a percentage with 3 significant digits (0.145 -> ``14.5 %``)."""
    return missing if v is None else f"{v * 100:.3g} %"


MAX_VALUES = 12  # values of an excerpt listed inline; answer.json has all


def values_in_words(values: list[float | str | None], steps: list[int] | None) -> str:
    """``10 values at steps 119–128: 2.636, 2.188, nan, ...``: an excerpt said with its values (its
    quote is one line; a bare count beside it would read as if that line held them all)."""
    shown = ", ".join(number(v) if isinstance(v, float | int) else str(v) for v in values[:MAX_VALUES])
    more = f" and {len(values) - MAX_VALUES} more (in answer.json)" if len(values) > MAX_VALUES else ""
    at = f" at steps {steps[0]}–{steps[-1]}" if steps else ""
    return f"{len(values)} values{at}: {shown}{more}"
