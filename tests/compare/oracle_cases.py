"""The oracle cases of tests/compare/oracle/: how each case's golden and actual JSON texts are
rebuilt from the real Megatron-LM files in oracle/data/ and a short list of edits.

A side of a case is ``{"file": "data/<blob>.json"}`` (the byte-exact upstream file), the same with
``"edits"``, or ``{"text": "..."}`` for inputs that are not JSON objects at all. Edits on the
parsed JSON run first, in order; the file is then written with ``json.dumps(indent=4)`` and the
text edits (``replace``) run on that text, which is how duplicated keys and other things a JSON
object cannot hold are made. Each case stores the sha256 of both texts so a change here that
alters a single byte is caught before any comparison runs.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

ORACLE = Path(__file__).parent / "oracle"
CASES = ORACLE / "cases.jsonl"


def load_cases(path: Path = CASES) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _steps(values: dict[str, Any], edit: dict[str, Any]) -> list[str]:
    """The step keys an edit addresses: ``steps`` (a list), ``after`` / ``before`` (exclusive
    bounds on the integer step), or every step."""
    keys = list(values)
    if "steps" in edit:
        return [str(s) for s in edit["steps"]]
    lo, hi = edit.get("after"), edit.get("before")
    return [k for k in keys if (lo is None or int(k) > lo) and (hi is None or int(k) < hi)]


def _apply(data: dict[str, Any], edit: dict[str, Any]) -> None:
    op, metric = edit["op"], edit.get("metric")
    if op == "set":
        data[metric]["values"][str(edit["step"])] = edit["value"]
    elif op == "scale":
        vals = data[metric]["values"]
        for k in _steps(vals, edit):
            v = vals[k]
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                v = v * edit["factor"]
                vals[k] = round(v, edit["round"]) if "round" in edit else v
    elif op == "fill":
        for m in ([metric] if metric != "*" else list(data)):
            vals = data[m]["values"]
            for k in _steps(vals, edit):
                vals[k] = edit["value"]
    elif op == "del_steps":
        vals = data[metric]["values"]
        for k in _steps(vals, edit):
            vals.pop(k, None)
    elif op == "del_metric":
        del data[metric]
    elif op == "set_metric":
        data[metric] = edit["body"]
    elif op == "set_field":
        data[metric][edit["field"]] = edit["value"]
    elif op == "keep_metrics":
        for m in [m for m in data if m not in edit["metrics"]]:
            del data[m]
    elif op == "rename_metric":
        data[edit["to"]] = data.pop(metric)
    else:
        raise ValueError(f"unknown edit {op!r}")


def materialize(side: dict[str, Any], root: Path = ORACLE) -> str:
    """The JSON text of one side of a case."""
    if "text" in side:
        return side["text"]
    text = (root / side["file"]).read_text(encoding="utf-8")
    edits = side.get("edits") or []
    if not edits:
        return text
    data = json.loads(text)
    for e in edits:
        if e["op"] != "replace":
            _apply(data, e)
    out = json.dumps(data, indent=4)
    for e in edits:
        if e["op"] == "replace":
            if e["old"] not in out:
                raise ValueError(f"replace: {e['old']!r} not in the text")
            out = out.replace(e["old"], e["new"], 1)
    return out
