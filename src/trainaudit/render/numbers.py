"""Numbers as every rendering shows them (answer.md, the HTML page, the terminal): one rule, so a
value reads the same everywhere."""

from __future__ import annotations

from trainaudit.answer.schema import Coverage, Decision


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


def decision_line(d: Decision | None) -> str | None:
    """``Decided by the fitted model: nan_inf 0.93 over loss_spike 0.03 (from ...); confidence 0.91.``"""
    if d is None:
        return None
    why = ", ".join(f"{r.feature} {r.log_odds:+.1f}" for r in d.reasons)
    return (f"Decided by the fitted model: {d.category} {d.probability:.2f} over {d.runner_up} "
            f"{d.runner_up_probability:.2f}" + (f" (log-odds from {why})" if why else "")
            + f"; confidence {d.confidence:.2f}.")


def coverage_line(c: Coverage | None, limit: int = 4) -> str | None:
    """``Checked: loss 120 points (steps 1-1200), lr 120 points; 3 events; 21 rules ran, 4 could not
    (TA301: no val_loss metric; ...)``: what a diagnosis looked at, in one line."""
    if c is None:
        return None
    metrics = sorted(c.metrics.items(), key=lambda kv: -kv[1].points)
    parts = [f"{name} {m.points} point{'s' if m.points != 1 else ''}"
             + (f" (steps {m.first_step}-{m.last_step})" if m.first_step is not None and m.points > 1 else "")
             + (f" thinned from {m.read_points} read" if m.read_points is not None else "")
             for name, m in metrics[:limit]]
    if len(metrics) > limit:
        parts.append(f"{len(metrics) - limit} more metric(s)")
    seen = ", ".join(parts) if parts else "no metric"
    skipped = "; ".join(f"{r}: {why}" for r, why in list(c.rules_skipped.items())[:3])
    more = "; ..." if len(c.rules_skipped) > 3 else ""
    could_not = f", {len(c.rules_skipped)} could not ({skipped}{more})" if c.rules_skipped else ""
    skimmed = (f"; {len(c.skimmed)} source(s) skimmed for errors, timeouts, non-finite values and their last step "
               "(their descriptions say what was read)") if c.skimmed else ""
    return f"Checked: {seen}; {c.events} event(s); {len(c.rules_run)} rules ran{could_not}{skimmed}."


MAX_VALUES = 12  # values of an excerpt listed inline; answer.json has all


def values_in_words(values: list[float | str | None], steps: list[int] | None) -> str:
    """``10 values at steps 119–128: 2.636, 2.188, nan, ...``: an excerpt said with its values (its
    quote is one line; a bare count beside it would read as if that line held them all)."""
    shown = ", ".join(number(v) if isinstance(v, float | int) else str(v) for v in values[:MAX_VALUES])
    more = f" and {len(values) - MAX_VALUES} more (in answer.json)" if len(values) > MAX_VALUES else ""
    at = f" at steps {steps[0]}–{steps[-1]}" if steps else ""
    return f"{len(values)} values{at}: {shown}{more}"
