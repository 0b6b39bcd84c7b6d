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
